"""Shared fixtures: the command under test (in-process, or a frozen binary), and CI's no-skip rule."""

from __future__ import annotations

import io
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, settings

from publish.cli import main
from tests.support.secret_log import record_output
from tests.support.secret_log import remember_secret as remember_secret  # tests import it from here

# Session-scoped servers shared by every test module (started only when a test asks for them), and the
# session-end check that no registered secret reached an output.
pytest_plugins = ["tests.support.servers", "tests.support.vault_server", "tests.support.no_secrets"]

REPO = Path(__file__).resolve().parent.parent
CI = os.environ.get("CI") == "true"

# The stateful model of tests/promise/test_model.py: "model-ci" bounds its run in the suite (both stores together
# within a few minutes); `--hypothesis-profile=model-long` runs it longer.  Not named "ci": Hypothesis loads a
# profile of that name by itself on CI, for every property test of the suite.
_MODEL_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "model-ci", max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=_MODEL_HEALTH
)
settings.register_profile(
    "model-long", max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=_MODEL_HEALTH
)


def need(condition: bool, why: str) -> None:
    """Skip when a tool is missing; under CI=true a missing tool fails instead."""
    if not condition:
        if CI:
            pytest.fail(f"required under CI=true: {why}")
        pytest.skip(why)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {report.longrepr}"


# The fixtures that start a real server, by the marker of the tests that need one. A test that uses one (even
# through another fixture) gets that marker, so `-m "not s3 and not vault"` leaves out every test needing a
# server (./test runs the rest on other Pythons, in environments without the servers).
SERVER_FIXTURES = {
    "s3": {"weed", "moto_s3", "s3_server", "weed_bucket", "fault_proxy"},
    "vault": {"bao", "bao_tls"},
}


# ./test runs the suite with pytest-xdist (`-n 3 --dist loadfile`): most tests wait on servers, Slurm and
# child processes more than they compute.  Each worker starts its own session servers (free ports, folders of
# their own).  With loadfile a module's tests run on one worker, one after another, so what one module must not
# share with itself stays unshared: the real one-node Slurm (one cluster for the machine: tests/jobs/test_slurm.py
# is the one module that starts it), the stateful model of the promise, the module fixtures that build
# something (Go's gourl, the one files of tests/house).  (--dist loadgroup would be finer, but pytest-xdist
# 3.8 cannot set its group suffix on pytest 9's node ids: every test then runs where it lands.)  Tests whose
# signals and terminals are timed against a child get the marker `serial`: ./test runs them after the
# parallel pass, alone; so do the real DeepSpeed pipeline and MoE writers (two ranks each, two stages of
# four experts on gloo), which beside two other workers once took more than their 300 s.
SERIAL_MODULES = {
    "tests/ops/test_signal_stop.py",
    "tests/verbs/test_run_tty.py",
    "tests/frameworks/test_deepspeed_layers.py",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "serial: ./test runs it alone, after the parallel pass (tests/conftest.py)"
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[Any]) -> None:
    # The long model run takes longer than the suite's 600 s per test (an hour and more on two cores); a
    # timeout in the middle would be replayed by Hypothesis as a flaky failure, not as a finding.
    long_model = settings.get_current_profile_name() == "model-long"
    for item in items:
        if long_model and "test_model" in getattr(getattr(item, "module", None), "__name__", ""):
            item.add_marker(pytest.mark.timeout(0))
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in SERVER_FIXTURES.items():
            if used & fixtures and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.nodeid.split("::", 1)[0] in SERIAL_MODULES:
            item.add_marker("serial")


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def command() -> list[str] | None:
    """The command under test when it is not the in-process ``main``: ``PUBLISH_BIN`` (a path, or a command)."""
    value = os.environ.get("PUBLISH_BIN", "")
    if not value:
        return None
    words = shlex.split(value)
    if os.sep in words[0]:  # a relative path still names the same file from the directories tests run in
        words[0] = os.path.abspath(words[0])
    return words


def base_env() -> dict[str, str]:
    """The environment a subprocess gets before the test's own variables: enough to run, nothing that steers."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None, timeout: float = 120
) -> Result:
    """Run the command once; in-process through ``main`` unless PUBLISH_BIN names a binary."""
    env = dict(env or {})
    cmd = command()
    if cmd is None:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(args), env, out, err, cwd=str(cwd) if cwd is not None else None)
        record_output(" ".join(args[:1]), out.getvalue(), err.getvalue())
        return Result(code, out.getvalue(), err.getvalue())
    proc = subprocess.run(
        [*cmd, *args],
        env={**base_env(), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    record_output(" ".join(args[:1]), proc.stdout, proc.stderr)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def spawn(
    *args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None
) -> subprocess.Popen[str]:
    """Start the command as a real process (for watch and signals)."""
    cmd = command() or [sys.executable, "-m", "publish"]
    full_env = {**base_env(), **(env or {})}
    if command() is None:
        full_env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [*cmd, *args], env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


class Lines:
    """A running verb whose stdout lines arrive on a queue as they are flushed (``seen``: those taken)."""

    def __init__(
        self, verb: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.proc: subprocess.Popen[str] = spawn(verb, *args, env=env, cwd=cwd)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))


class Watch(Lines):
    """A running ``publish watch``."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        super().__init__("watch", *args, env=env, cwd=cwd)

    def next_line(self, timeout: float = 20) -> str:
        line = self.lines.get(timeout=timeout)
        self.seen.append(line)
        return line

    def quiet_for(self, seconds: float) -> bool:
        try:
            self.seen.append(self.lines.get(timeout=seconds))
            return False
        except queue.Empty:
            return True

    def trapping(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Wait until the watch catches ``sig`` (its handler set: Linux's SigCgt), so that a signal sent now
        stops it as a stop signal, not as the default action on a process still starting."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(f"/proc/{self.proc.pid}/status") as f:
                caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
            if caught >> (sig - 1) & 1:
                return
            time.sleep(0.01)
        raise AssertionError(f"watch {self.proc.pid} set no handler for signal {sig} within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, str]:
        self.proc.send_signal(sig)
        return self.finish(timeout)

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        time.sleep(0.05)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        record_output("watch", "\n".join(self.seen), err)
        return code, err


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    """Each test starts with no credential registered for scrubbing, as each run of the command does: the
    registry lives as long as the process, and an earlier test's short secret must not blank later messages."""
    from publish.rules import redact

    live = [(v.values, v.windows, v.short) for v in (redact._credentials, redact._cut)]
    saved = [tuple(set(s) for s in sets) for sets in live]
    yield
    for sets, kept in zip(live, saved):
        for s, k in zip(sets, kept):
            s.clear()
            s.update(k)


@pytest.fixture
def cli() -> Callable[..., Result]:
    return run_cli


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty POSIX checkpoint root."""
    r = tmp_path / "ckpt"
    r.mkdir()
    return r
