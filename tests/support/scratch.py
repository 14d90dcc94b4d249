"""Scratch directories for tests that make and remove many files."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory in memory (/dev/shm) where there is one, else ``tmp_path``.

    Removal makes many rmdir calls; on a busy disk each can take milliseconds, in memory microseconds."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(dir=shm, prefix="publish-test-"))
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=True, timeout=120)
