"""What the -framework megatron and -framework nemo tests share: a Watcher's scans and what they said, saves
put on an S3 root, and megatron-core's writer (tests/support/megatron_writer.py) run under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
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


def writer(out: Path, form: str, steps: int, *extra: str) -> None:
    """tests/support/megatron_writer.py on two ranks under torchrun (gloo, CPU)."""
    need(_have("megatron.core"), "megatron-core is not installed")
    log = out.parent / f"{out.name}.log"
    with open(log, "wb") as f:
        proc = subprocess.run(
            torchrun(quiet=True)
            + ["-m", "tests.support.megatron_writer", str(out), form, str(steps), *extra],
            cwd=REPO,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            timeout=300,
        )
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def tree(saves: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(saves)), p.read_bytes()) for p in sorted(saves.rglob("*")) if p.is_file()]
