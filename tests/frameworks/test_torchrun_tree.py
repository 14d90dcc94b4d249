"""The torchrun writers' runner (tests/support/framework_scans.run_tree) leaves no process behind: not when
the command hangs past its timeout, not when it exits and leaves children running, not for a child that left
the command's session (as torchrun starts each rank)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.framework_scans import run_tree

#: A shell that writes its own pid and those of three sleeps: two in its process group, one (setsid) in a
#: session of its own.
TREE = 'setsid sleep 100 & echo $! > "$1"; sleep 100 & echo $! >> "$1"; echo $$ >> "$1"; sleep 100 & echo $! >> "$1"'


def _alive(pid: int) -> bool:
    """True for a process that runs (a zombie, killed and waiting to be reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _left(path: Path) -> list[int]:
    """The processes named in ``path`` (4) still running once those SIGKILL reached have had 10 s to end."""
    pids = [int(line) for line in path.read_text().split()]
    assert len(pids) == 4, pids
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [pid for pid in pids if _alive(pid)]


def test_a_command_past_its_timeout_is_killed_with_its_whole_tree(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        run_tree(
            ["sh", "-c", TREE + "; wait", "sh", str(pids)], tmp_path / "log", dict(os.environ), timeout=5
        )
    assert _left(pids) == []


def test_children_a_command_leaves_behind_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    assert run_tree(["sh", "-c", TREE, "sh", str(pids)], tmp_path / "log", dict(os.environ), timeout=60) == 0
    assert _left(pids) == []
