"""COMMAND as ``publish run`` starts it and waits for it (publish/process/child.py).

It is started as ``subprocess.Popen(argv, env=env, process_group=0)`` started it (PATH from COMMAND's own
environment, its own process group, every other descriptor closed, SIGPIPE and SIGXFSZ at their default),
through ``os.posix_spawn`` where that reports a failed exec, and through subprocess elsewhere: both paths are
tested here. ``run`` sleeps until COMMAND exits or a signal arrives, whichever thread the signal lands on,
and looks again at once: the wait counts its wakes, and a clock that could hide a missed wake is set to an
hour. A run that starts imports no subprocess (nor re, locale, selectors).
"""

from __future__ import annotations

import io
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from publish import cli
from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.process import child
from publish.process.signals import name
from publish.process.threads import Worker
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from publish.verbs import run as run_verb
from tests.conftest import REPO, base_env, command, run_cli

# Against a binary (PUBLISH_BIN) only posix_spawn: the binary's own libc decides, and nothing in this process
# can make it take the other path (not a skip: under CI=true a skip fails).
START_PATHS = ["posix_spawn"] + ([] if os.environ.get("PUBLISH_BIN") else ["subprocess"])


@pytest.fixture(params=START_PATHS)
def start_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test twice: COMMAND started by os.posix_spawn (glibc 2.24+), and by subprocess (elsewhere)."""
    if request.param == "subprocess":
        monkeypatch.setattr(child, "spawn_reports_exec_errors", lambda: False)
    else:
        assert child.spawn_reports_exec_errors(), "this machine's glibc is 2.24 or later"
    yield request.param


def test_glibc_decides_the_path() -> None:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    assert libc.startswith("glibc ")
    assert child.spawn_reports_exec_errors() == (tuple(map(int, libc.split()[1].split(".")[:2])) >= (2, 24))


def script(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def run_command(root: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "--", *argv, env=env)
    return r.code, r.out, r.err


def test_path_is_looked_up_in_commands_environment(root: Path, tmp_path: Path, start_path: str) -> None:
    """Each directory of COMMAND's PATH in turn; the first error that is not "no such file" is the one said
    (a file without execute permission earlier on PATH), as Popen does."""
    a, b = tmp_path / "a", tmp_path / "b"
    script(a / "mycmd", '#!/bin/sh\necho from a >"$OUT"\n', mode=0o644)  # not executable
    script(b / "mycmd", '#!/bin/sh\necho from b >"$OUT"\n')
    out = tmp_path / "out"
    env = {**base_env(), "PATH": f"{a}:{b}:/usr/bin:/bin", "OUT": str(out)}
    assert run_command(root, ["mycmd"], env)[0] == 0
    assert out.read_text() == "from b\n"
    code, _, err = run_command(root, ["mycmd"], {**env, "PATH": f"{tmp_path / 'none'}:{a}:/usr/bin"})
    assert (code, err.splitlines()[-1]) == (1, "publish: cannot start mycmd: Permission denied"), err
    code, _, err = run_command(root, ["nosuchcommand"], env)
    assert (code, err.splitlines()[-1]) == (
        1,
        "publish: cannot start nosuchcommand: No such file or directory",
    )
    code, _, err = run_command(root, [str(tmp_path)], env)  # a directory
    assert (code, err.splitlines()[-1]) == (1, f"publish: cannot start {tmp_path}: Permission denied")


# What COMMAND reports of itself: is descriptor 47 open, which signals it ignores, is it a group leader
PROBE = (
    "if [ -e /proc/$$/fd/47 ]; then echo fd47 open; else echo fd47 closed; fi; "
    "grep SigIgn /proc/$$/status; "
    'set -- $(cut -d" " -f1,5 /proc/$$/stat); [ "$1" = "$2" ] && echo group leader; '
    "exit 5"
)


def test_command_gets_no_other_descriptor_default_signals_and_a_group_of_its_own(
    root: Path, tmp_path: Path, start_path: str
) -> None:
    """publish run is started with an inheritable descriptor 47, and ignores SIGPIPE and SIGXFSZ (as every
    Python program does); COMMAND gets neither, and leads a process group of its own."""
    held = tmp_path / "held"
    held.write_text("x")
    source = (
        [sys.executable, "-m", "publish"]
        if start_path == "posix_spawn"
        else [sys.executable, "-c", SUBPROCESS_PATH]
    )
    argv = [*(command() or source), "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a"]
    # bash opens descriptor 47 (inheritable) and becomes publish run: the test process's own descriptor 47
    # (a server's socket, in a full run) is never touched.
    line = f"exec 47<{shlex.quote(str(held))}; exec {shlex.join([*argv, '--', 'sh', '-c', PROBE])}"
    r = subprocess.run(
        ["bash", "-c", line],
        env={**base_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 5, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "fd47 closed" and lines[2] == "group leader", r.stdout
    ignored = int(lines[1].split()[1], 16)
    assert not ignored & ((1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))), lines[1]


# publish run from the source with COMMAND started through subprocess, as where posix_spawn is not trusted
SUBPROCESS_PATH = (
    "import sys; from publish.process import child; child.spawn_reports_exec_errors = lambda: False; "
    "sys.argv[0] = 'publish'; from publish.cli import run; sys.exit(run())"
)


class Recording(child.Waker):
    made: list[child.Waker] = []

    def __init__(self, write_fd: int) -> None:
        super().__init__(write_fd)
        Recording.made.append(self)


@pytest.fixture
def waker(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[child.Waker]]:
    """The wakers run makes, recorded; the safety clock at an hour, so only a real wake ends a wait."""
    Recording.made = []
    monkeypatch.setattr(child, "Waker", Recording)
    monkeypatch.setattr(child, "SAFETY", 3600.0)
    yield Recording.made


def run_in_process(root: Path, argv: list[str], signals: run_verb.Signals) -> tuple[int, list[str]]:
    err: list[str] = []
    settings = run_verb.Settings(PosixStore(str(root)), FRAMEWORKS["hf"], "a", 1, argv, base_env(), str(root))
    settings.interval, settings.timeout = 3600, 30
    code = run_verb.Job(settings, UNBOUNDED, Say(lambda line: None, err.append), signals).run()
    return code, err


def watchdog(signals: run_verb.Signals, after: float) -> threading.Timer:
    """Ends a run that a missed wake would leave asleep: a stop, noted as a signal handler notes one (the
    run then fails its test, by its status)."""
    timer = threading.Timer(after, signals.note, (signal.SIGTERM,))
    timer.daemon = True
    timer.start()
    return timer


@pytest.mark.parametrize("how", ["pidfd", "SIGCHLD"])
def test_run_wakes_once_when_command_exits(
    root: Path, waker: list[child.Waker], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """One wake for a COMMAND that runs half a second: its exit, seen through its pidfd, or through SIGCHLD
    where there is no pidfd_open (a kernel before 5.3) or it fails."""
    if how == "SIGCHLD":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    else:
        assert hasattr(os, "pidfd_open")
    before = signal.getsignal(signal.SIGCHLD), signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before[1])
    signals = run_verb.Signals()
    timer = watchdog(signals, 30)
    try:
        code, err = run_in_process(root, ["sh", "-c", "sleep 0.5; exit 3"], signals)
    finally:
        timer.cancel()
        signals.close()
    assert (code, signals.received) == (3, []), err
    assert len(waker) == 1 and (waker[0].via, waker[0].wakes) == (how, 1), [(w.via, w.wakes) for w in waker]
    after = signal.getsignal(signal.SIGCHLD), signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(after[1])
    assert after == before  # put back


def test_off_the_main_thread_run_looks_every_poll(root: Path, waker: list[child.Waker]) -> None:
    """No signal handler and no wakeup descriptor can be set there: the wait polls, and still ends."""
    signals = run_verb.Signals()
    got: list[tuple[int, list[str]]] = []
    worker = threading.Thread(
        target=lambda: got.append(run_in_process(root, ["sh", "-c", "exit 4"], signals))
    )
    worker.start()
    worker.join(60)
    signals.close()
    assert got and got[0][0] == 4, got
    assert (waker[0].via, waker[0].timeout) == ("", child.POLL)


def test_the_cli_off_the_main_thread_traps_nothing_and_runs(root: Path) -> None:
    """No signal handler can be set off the main thread: main sets none (the first attempt fails) and run
    goes on without, polling."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    got: list[int] = []
    args = ["run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "--", "sh", "-c", "exit 6"]
    worker = threading.Thread(
        target=lambda: got.append(cli.main(args, base_env(), io.StringIO(), io.StringIO()))
    )
    worker.start()
    worker.join(60)
    assert got == [6]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_signal_landing_on_another_thread_wakes_run(
    root: Path, tmp_path: Path, waker: list[child.Waker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may deliver SIGTERM to any thread (here: the scans' thread, on purpose); the interpreter's
    handler there writes to the wakeup descriptor, so the main thread wakes and passes SIGTERM on. Without
    that it would sleep on (an hour, here) until COMMAND gave up waiting, exiting 7."""
    ready = tmp_path / "ready"
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(20); sys.exit(7)\n"
    )

    scanners: list[run_verb._Scanner] = []

    class Recorded(run_verb._Scanner):
        def start(self) -> Worker:
            scanners.append(self)
            return super().start()

    monkeypatch.setattr(run_verb, "_Scanner", Recorded)

    def kill_the_scans_thread() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        scans = scanners[0].thread
        assert scans is not None and scans.ident is not None and scans.is_alive()
        signal.pthread_kill(scans.ident, signal.SIGTERM)

    sender = threading.Thread(target=kill_the_scans_thread, daemon=True)
    sender.start()
    out, err = (
        io.StringIO(),
        io.StringIO(),
    )  # in this process, whatever PUBLISH_BIN names: its threads are here
    args = [
        "run",
        "-checkpoint",
        str(root),
        "-framework",
        "hf",
        "-attempt",
        "a",
        "--",
        sys.executable,
        "-c",
        code,
    ]
    status = cli.main(args, base_env(), out, err)
    sender.join(30)
    assert status == 143, err.getvalue()
    assert "publish: run: passing SIGTERM on to" in err.getvalue()


CLI = "import sys; sys.argv[0] = 'publish'; from publish.cli import run; sys.exit(run())"


@pytest.mark.parametrize(
    ("command", "status"),
    [(["true"], 0), (["sh", "-c", "kill -TERM $PPID; sleep 30"], 143)],
    ids=["exit", "stop"],
)
def test_run_starts_without_subprocess_threading_or_enum(root: Path, command: list[str], status: int) -> None:
    """subprocess (with re, locale, selectors) is imported neither to start COMMAND nor for Slurm's job, whose
    commands run only after a signal or for a requeue; nor threading (functools, collections, ...) nor the
    signal module's enum, not even to name the stop signal passed on (COMMAND sends run SIGTERM itself):
    `python -X importtime`, without site (-S), whose .pth files import what they like, and without -m, whose
    runpy imports importlib.util (functools, contextlib)."""
    r = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", CLI, "run", "-checkpoint", str(root), "-framework", "hf",
         "-attempt", "a", "--", *command],
        cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == status, r.stderr
    assert (status == 143) == ("publish: run: passing SIGTERM on to sh" in r.stderr)
    imported = {
        line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")
    }
    assert {
        "publish.verbs.run",
        "publish.process.child",
        "publish.process.threads",
    } <= imported  # the listing is read right
    heavy = {"subprocess", "_posixsubprocess", "re", "locale", "selectors", "enum", "signal", "threading"}
    assert sorted(imported & (heavy | {"functools", "collections", "contextlib", "warnings"})) == []


def test_signal_names_are_the_enums() -> None:
    """publish.process.signals.name, which run prints, is signal.Signals(n).name (the alphabetically first of two
    names for one number), or "signal N" where the enum has none."""

    def enums(n: int) -> str:
        try:
            return signal.Signals(n).name
        except ValueError:
            return f"signal {n}"

    assert [name(n) for n in range(70)] == [enums(n) for n in range(70)]
    assert (name(signal.SIGIOT), name(signal.SIGTERM)) == ("SIGABRT", "SIGTERM")
