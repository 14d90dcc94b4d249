"""``publish run`` started from an interactive terminal (a pty, publish run in its foreground process group).

COMMAND runs in a process group of its own, in the terminal's background: Ctrl-C reaches publish run only,
which passes SIGINT on once; a COMMAND that reads the terminal is stopped by SIGTTIN, unless its stdin is not
the terminal (the README's "From an interactive terminal").
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

from tests.conftest import REPO, base_env, command, record_output

# counts SIGINTs, watches half a second for a second one, then exits 130
COUNT_INT = (
    "import os, signal, sys, time\n"
    "n = []\n"
    "signal.signal(signal.SIGINT, lambda *a: n.append(1))\n"
    "print('ready', os.getpgrp() == os.tcgetpgrp(1), flush=True)\n"
    "while not n: time.sleep(0.05)\n"
    "end = time.monotonic() + 0.5\n"
    "while time.monotonic() < end: time.sleep(0.05)\n"
    "print('INT', len(n), flush=True); sys.exit(130)\n"
)
READ = "print('ready', flush=True)\nprint('read', repr(input()), os.getpid(), flush=True)\n"


class Terminal:
    """``publish run`` as the session leader of a new pty, as an interactive shell's foreground job is."""

    def __init__(self, root: Path, code: str, stdin: str = "") -> None:
        argv = [*(command() or [sys.executable, "-m", "publish"]), "run", "-checkpoint", str(root)]
        argv += ["-framework", "hf", "-attempt", "a", "--", sys.executable, "-c", "import os\n" + code]
        env = {**base_env(), "PYTHONPATH": str(REPO)}
        self.out = b""
        self.code: int | None = None
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its process group is the pty's foreground one
            if stdin:
                os.dup2(os.open(stdin, os.O_RDONLY), 0)
            os.execve(argv[0], argv, env)

    def read_until(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {text!r}: {self.out!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:  # the other side closed (EIO)
                    data = b""
                assert data, f"the terminal closed before {text!r}: {self.out!r}"
                self.out += data
        return self.out.decode(errors="replace")

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
                return self.code
            assert time.monotonic() < deadline, f"publish run did not exit: {self.out!r}"
            with_data = select.select([self.fd], [], [], 0.1)[0]
            if with_data:
                with contextlib.suppress(OSError):  # the other side closed (EIO)
                    self.out += os.read(self.fd, 4096)

    def close(self) -> None:
        record_output("run on a terminal", self.out.decode(errors="replace"))
        if self.code is None and not os.waitpid(self.pid, os.WNOHANG)[0]:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def test_ctrl_c_reaches_publish_run_only_and_command_gets_sigint_once(root: Path) -> None:
    t = Terminal(root, COUNT_INT)
    try:
        assert "ready False" in t.read_until("ready "), t.out  # COMMAND is not the terminal's foreground
        os.write(t.fd, b"\x03")  # Ctrl-C: SIGINT to the foreground process group
        assert t.exit_code() == 130
        out = t.read_until("INT ")
        assert "publish: run: passing SIGINT on to" in out
        assert "INT 1" in out, out  # once, from publish run; the terminal's own went to publish run alone
    finally:
        t.close()


def test_a_command_reading_the_terminal_is_stopped_and_one_reading_dev_null_is_not(root: Path) -> None:
    t = Terminal(root, READ)
    try:
        t.read_until("ready")
        os.write(t.fd, b"hello\n")
        command_pid = None
        deadline = time.monotonic() + 30
        while command_pid is None:  # COMMAND, stopped by SIGTTIN (state T) in its attempt to read
            assert time.monotonic() < deadline, f"COMMAND was not stopped: {t.out!r}"
            for pid in os.listdir("/proc"):
                stat = Path(f"/proc/{pid}/stat")
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[0] == "T" and int(fields[1]) == t.pid:  # state, parent
                    command_pid = int(pid)
            time.sleep(0.1)
        os.kill(command_pid, signal.SIGKILL)
        assert t.exit_code() == 128 + signal.SIGKILL
    finally:
        t.close()

    t = Terminal(root, READ, stdin="/dev/null")
    try:
        assert t.exit_code() == 1  # input() met the end of /dev/null: COMMAND went on, and failed its own way
        assert "EOFError" in t.read_until("EOFError")
    finally:
        t.close()
