"""watch's stop flag, which SIGTERM and SIGINT set from a signal handler."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from publish import cli
from publish.ops.scan import SignalStop
from publish.verbs import watch

FLOOD = """
import os, signal, subprocess, sys
from publish.ops.scan import SignalStop

stop = SignalStop()
handled = 0

def handler(signum, frame):
    global handled
    handled += 1
    stop.set()

signal.signal(signal.SIGUSR1, handler)
sender = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
for _ in range(5000):
    os.kill(int(sys.argv[1]), signal.SIGUSR1)
    time.sleep(0.0002)
''', str(os.getpid())])
while sender.poll() is None:
    stop._flag = False  # wait again and again, so that signals land everywhere inside wait()
    stop.wait(0.0001)
print("handled", handled)
"""


def test_a_flood_of_signals_while_waiting_neither_hangs_nor_breaks_signal_handling() -> None:
    """A handler that sets a threading.Event while the main thread is inside Event.wait() can wait for a
    lock its own thread holds, and under this flood breaks the interpreter's handling (the process dies of
    the signal); SignalStop takes no lock in set()."""
    r = subprocess.run([sys.executable, "-c", FLOOD], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("handled ") and int(r.stdout.split()[1]) > 0


def test_set_from_another_thread_wakes_a_wait_and_a_timeout_returns_false() -> None:
    stop = SignalStop()
    try:
        start = time.monotonic()
        assert stop.wait(0.05) is False and not stop.is_set()
        assert time.monotonic() - start >= 0.04
        threading.Timer(0.05, stop.set).start()
        assert stop.wait(30) is True and stop.is_set()
        assert stop.wait(30) is True  # stays set
    finally:
        stop.close()


def test_watch_on_the_main_thread_stops_on_a_signal_stop_and_restores_the_handlers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[SignalStop] = []

    class Stopped(SignalStop):  # set at once, as if SIGTERM came at the first wait
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

        def wait(self, timeout: float | None = None) -> bool:
            self.set()
            return super().wait(timeout)

    monkeypatch.setattr(watch, "SignalStop", Stopped)
    (tmp_path / "exec" / "A").mkdir(parents=True)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        ["watch", "-checkpoint", str(tmp_path), "-framework", "hf", "-attempt", "A"], {}, out, err
    )
    assert (code, out.getvalue(), err.getvalue()) == (0, "", "")
    assert len(made) == 1 and made[0].is_set()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
