"""A write to a closed stdout or stderr ends publish quietly, as Go's runtime ends a program (by SIGPIPE):
``publish status | head -1`` printed ``publish: Broken pipe`` and exited 1 (the package) or 120 with a Python
``Exception ignored ... BrokenPipeError`` (the one-file build).  Run through a real pipe whose reading end is
closed before the command starts, so every write to it fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, base_env, command


def _closed_pipe(*args: str, stream: str) -> subprocess.CompletedProcess[bytes]:
    read, write = os.pipe()
    os.close(read)
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)} if command() is None else base_env()
    try:
        files = (
            {"stdout": write, "stderr": subprocess.PIPE}
            if stream == "stdout"
            else {"stdout": subprocess.PIPE, "stderr": write}
        )
        return subprocess.run([*cmd, *args], env=env, timeout=120, check=False, **files)  # type: ignore[call-overload, no-any-return]
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "args",
    [
        ["status", "-checkpoint", "ROOT"],  # lines written as it goes
        ["version"],  # one line, written when the streams are flushed at exit
        ["help"],
    ],
)
def test_a_closed_stdout_ends_the_command_by_sigpipe_without_a_word(root: Path, args: list[str]) -> None:
    (root / "pub").mkdir()
    out = _closed_pipe(*[str(root) if a == "ROOT" else a for a in args], stream="stdout")
    assert (out.returncode, out.stderr) == (-signal.SIGPIPE, b"")


def test_a_closed_stderr_ends_the_command_by_sigpipe(root: Path) -> None:
    out = _closed_pipe("resolve", "-checkpoint", str(root / "missing"), stream="stderr")
    assert (out.returncode, out.stdout) == (-signal.SIGPIPE, b"")


def test_through_a_shell_pipe_the_status_is_141(root: Path) -> None:
    """``status | head -1`` as a user types it: the shell sees 141 (128 + SIGPIPE), as for a Go program."""
    (root / "pub").mkdir()
    for i in range(2000):  # more than a pipe holds, so status writes after head has gone
        (root / "exec" / "a" / f"junk{i:04d}").mkdir(parents=True)
    cmd = " ".join(command() or [sys.executable, "-m", "publish"])
    script = f"{cmd} status -checkpoint {root} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert (out.stdout, out.stderr) == ("141\n", "")
