"""A pytest plugin: no secret value the tests hand to the command appears in anything it printed.

Tests register secrets with ``tests.support.secret_log.remember_secret`` and outputs with ``record_output``
(``run_cli`` and ``Watch`` record theirs; each test's captured output and failure text is recorded here as its
report comes in).
At the end of the session the plugin looks for every registered secret (and the test servers' fixed keys) in
every recorded output and fails the run when one is found, whatever order the tests ran in.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.secret_log import leaks, record_output

_leaks: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: Any) -> None:
    for name, text in getattr(report, "sections", []):
        record_output(f"{report.nodeid} {name}", text)
    if report.longreprtext:
        record_output(f"{report.nodeid} failure", report.longreprtext)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _leaks[:] = leaks()
    if _leaks and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _leaks:
        terminalreporter.section("secret check", red=True)
        terminalreporter.line(f"secret values in output: {_leaks[:10]}", red=True)
