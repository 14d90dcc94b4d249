"""What the -framework megatron and -framework nemo tests share: a Watcher's scans and what they said, saves
put on an S3 root, and megatron-core's writer (tests/support/megatron_writer.py) run under torchrun."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.ops.scan import Watcher
from publish.rules.deadline import Deadline
from publish.stores.posix import PosixStore
from publish.stores.s3 import S3Store
from tests.conftest import REPO, need
from tests.support.servers import S3Server


class Scans:
    """A Watcher over SAVES ``exec/A`` of ``store`` with ``-framework F``, and what it said."""

    def __init__(self, store: Any, framework: str = "megatron") -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.watcher = Watcher(
            store, Say(self.out.append, self.err.append), FRAMEWORKS[framework], "exec/A", 0
        )

    def scan(self) -> list[int]:
        """One scan; the steps published so far, in the order they were."""
        self.watcher.scan(Deadline(60))
        return [int(line.split("step ")[1].split(",")[0]) for line in self.out]


def posix(tmp_path: Path, framework: str = "megatron") -> tuple[Path, Scans]:
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    saves.mkdir(parents=True, exist_ok=True)
    return saves, Scans(PosixStore(str(root)), framework)


class S3Saves:
    def __init__(self, server: S3Server, bucket: str) -> None:
        self.bucket, self.prefix = bucket, "run-" + uuid.uuid4().hex[:10]
        self.client = server.client()
        self.store = S3Store(bucket, self.prefix, server.credentials(), proxy=None, env={})

    def put(self, files: list[tuple[str, bytes]]) -> None:
        for path, data in files:
            self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/exec/A/{path}", Body=data)


def torchrun(ranks: int = 2, *, quiet: bool = False) -> list[str]:
    """torchrun of this Python on ``ranks`` ranks of this machine (``quiet``: its own warnings left out), its
    rendezvous on 127.0.0.1: torchrun advertises the host name otherwise, and where that does not resolve (a
    fresh debootstrap root's /etc/hosts lacks it) every rank waits out its timeout."""
    python = [sys.executable, "-W", "ignore"] if quiet else [sys.executable]
    return (
        python
        + ["-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1"]
        + [
            "--nproc_per_node",
            str(ranks),
        ]
    )


#: The environment variable that marks every process of a tree run_tree started (its value: one per run).
TREE_MARK = "PUBLISH_TEST_TREE"


def run_tree(cmd: list[str], log: Path, env: dict[str, str], timeout: float = 300) -> int:
    """Run ``cmd`` from the checkout (stdout and stderr to ``log``) and return its exit code.  However the wait
    ends (the command exited, ``timeout`` passed: subprocess.TimeoutExpired, or any exception), no process of
    its tree is left: the command runs in a session of its own, and every process that carries its mark in its
    environment is killed, those that left the session too (torchrun starts each rank in a session of its
    own), before the command itself is reaped."""
    mark = uuid.uuid4().hex
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**env, TREE_MARK: mark},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
            time.sleep(0.05)
    finally:
        kill_tree(proc.pid, mark)  # the command not reaped yet: its process group's id is still its own
        proc.wait()
    return proc.returncode


def marked(mark: str) -> list[int]:
    """The live processes (zombies left out) whose environment holds TREE_MARK=mark."""
    want = f"{TREE_MARK}={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone, or another user's
            pass
    return found


def kill_tree(leader: int, mark: str, limit: float = 30) -> None:
    """SIGKILL the process group of ``leader`` and every process marked ``mark``, until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGKILL)
    deadline = time.monotonic() + limit
    while True:
        left = [pid for pid in marked(mark) if pid != leader]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {left} of a test's tree outlived SIGKILL for {limit} s")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def writer(out: Path, form: str, steps: int, *extra: str) -> None:
    """tests/support/megatron_writer.py on two ranks under torchrun (gloo, CPU)."""
    need(_have("megatron.core"), "megatron-core is not installed")
    log = out.parent / f"{out.name}.log"
    code = run_tree(
        torchrun(quiet=True) + ["-m", "tests.support.megatron_writer", str(out), form, str(steps), *extra],
        log,
        {**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert code == 0, log.read_text(errors="replace")[-4000:]


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def tree(saves: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(saves)), p.read_bytes()) for p in sorted(saves.rglob("*")) if p.is_file()]
