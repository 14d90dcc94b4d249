"""How resolve -verify=deep and a publication read a save's files on a POSIX root: in reads of at most 1 MiB,
one buffer per thread (issue 32: 8 MiB buffers on four threads, 32 MiB, fell out of the CPU's caches and
cost 1.5x the CPU of a plain hashlib loop)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from publish.rules.deadline import Deadline
from publish.stores import posix_saves
from publish.stores.posix_root import RootDirs

MIB = 1 << 20


def test_hashing_reads_a_mib_at_a_time_into_one_buffer_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, -verify=deep: the files of a save (six of 3 MiB and a byte, one empty, one with a newline
    and a leading dash in its name) are hashed right, read at most 1 MiB at a time, into at most four
    buffers of 1 MiB in all the reading (32 MiB of buffers on the code before), and a flipped last byte is
    found."""
    save = tmp_path / "exec" / "A" / "step-1"
    save.mkdir(parents=True)
    files = {f"-shard\n{i}": os.urandom(3 * MIB + 1) for i in range(6)} | {"empty": b""}
    for name, data in files.items():
        (save / name).write_bytes(data)
    buffers: dict[int, int] = {}
    real = os.readv

    def readv(fd: int, bufs: Any) -> int:
        for b in bufs:
            buffers[id(b)] = len(b)
        return real(fd, bufs)

    monkeypatch.setattr(os, "readv", readv)
    dirs = RootDirs(str(tmp_path))
    rows = posix_saves.save_rows(dirs, Deadline(None), "exec/A/step-1")
    assert rows == sorted((n, len(d), hashlib.sha256(d).hexdigest()) for n, d in files.items())
    assert posix_saves.check_rows(dirs, Deadline(None), "exec/A/step-1", rows, deep=True) is None
    assert max(buffers.values()) <= MIB
    assert sum(buffers.values()) <= 8 * MIB  # four threads' buffers while publishing, four while checking

    flipped = bytearray(files["-shard\n3"])
    flipped[-1] ^= 1
    (save / "-shard\n3").write_bytes(flipped)
    bad = posix_saves.check_rows(dirs, Deadline(None), "exec/A/step-1", rows, deep=True)
    assert bad is not None and bad[0].endswith("/exec/A/step-1/-shard\n3") and bad[1].startswith("sha256 ")
