"""A pytest plugin: no secret value the tests hand to the command appears in anything it printed.

Tests register secrets with ``tests.support.secret_log.remember_secret`` and outputs with ``record_output``
(``run_cli`` and ``Watch`` record theirs; each test's captured output and failure text is recorded here as its
report comes in).
At the end of the session the plugin looks for every registered secret (and the test servers' fixed keys) in
every recorded output and fails the run when one is found, whatever order the tests ran in.  Under pytest-xdist
each worker checks its own and hands what it found to the controller, which fails the run.
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
    _leaks.extend(leaks())
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its secrets and outputs are its own; the controller
        workeroutput["publish_leaks"] = [list(leak) for leak in _leaks]  # reports them (below)
        return
    if _leaks and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: a worker is done; what it found counts as found here."""
    _leaks.extend(tuple(leak) for leak in getattr(node, "workeroutput", {}).get("publish_leaks", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _leaks:
        terminalreporter.section("secret check", red=True)
        terminalreporter.line(f"secret values in output: {_leaks[:10]}", red=True)
