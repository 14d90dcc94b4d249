"""publish.snapshots: how the payload is hashed while torch reads and writes it, and what a save re-reads."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import publish.snapshots as snapshots
from publish.snapshots import _payload

pytestmark = pytest.mark.torch


def payload_for(step: int) -> dict[str, Any]:
    return {"step": step, "w": torch.arange(16, dtype=torch.float32) + step}


def small_buffers() -> Any:
    """The hashing paths with sizes small enough to exercise every branch on a few KiB."""
    return mock.patch.multiple(_payload, _CHUNK=16, _WRITE_CHUNK=24, _PARALLEL_HASH=64, _GAP=32)


DATA = random.Random(7).randbytes(3000)

reads = st.lists(st.tuples(st.integers(0, len(DATA) + 50), st.integers(0, 700)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(reads)
def test_the_reader_returns_the_file_and_hashes_it_in_order_whatever_the_reads(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, int]]
) -> None:
    path = tmp_path_factory.mktemp("reader") / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    try:
        with small_buffers():
            reader = _payload._HashingReader(fd, len(DATA))
            for offset, length in ops:
                assert reader.seek(offset) == offset
                buf = bytearray(length)
                n = reader.readinto(buf)
                assert bytes(buf[:n]) == DATA[offset : offset + length]
                assert reader.tell() == offset + n
            assert reader.finish() == (hashlib.sha256(DATA).hexdigest(), len(DATA))
    finally:
        os.close(fd)


def test_the_reader_counts_what_the_file_holds_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    try:
        with small_buffers():
            reader = _payload._HashingReader(fd, len(DATA))
            reader.readinto(bytearray(500))
            with open(path, "ab") as f:  # grew after it was opened: the digest and size say so
                f.write(b"more")
            assert reader.finish() == (hashlib.sha256(DATA + b"more").hexdigest(), len(DATA) + 4)
    finally:
        os.close(fd)


def test_the_writer_hashes_exactly_what_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with small_buffers():
            writer = _payload.HashingWriter(fd)
            for part in (DATA[:10], DATA[10:2000], DATA[2000:2063], DATA[2063:]):
                assert writer.write(part) == len(part)
    finally:
        os.close(fd)
    assert path.read_bytes() == DATA
    assert (writer.sha256.hexdigest(), writer.size) == (hashlib.sha256(DATA).hexdigest(), len(DATA))


@pytest.mark.parametrize("small", [False, True])
def test_a_payload_larger_than_the_chunks_round_trips(tmp_path: Path, small: bool) -> None:
    big = torch.randn(5 << 20)  # 20 MiB: several write and read chunks at the real sizes
    payload = {"step": 3, "big": big, "small": torch.arange(7), "nested": {"x": torch.ones(3, 3)}}
    with small_buffers() if small else contextlib.nullcontext():
        directory = snapshots.save_checkpoint(tmp_path, payload)
        loaded, info = snapshots.load(directory)
    data = (directory / "checkpoint.pt").read_bytes()
    assert info["manifest"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert info["manifest"]["bytes"] == len(data)
    assert torch.equal(loaded["big"], big) and torch.equal(loaded["nested"]["x"], torch.ones(3, 3))


def test_load_hashes_through_the_reader_torch_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = snapshots.save_checkpoint(tmp_path, {"step": 1, "big": torch.randn(3 << 20)})
    seen: list[Any] = []
    real_load = torch.load

    def spy(f: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(f)
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    snapshots.load(directory)
    (reader,) = seen
    assert isinstance(reader, _payload._HashingReader)
    # torch read the storage through it, so almost nothing was left to hash afterwards.
    assert reader.hashed == (directory / "checkpoint.pt").stat().st_size


def test_a_save_verifies_with_a_mapped_load_and_a_fresh_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    real_load = torch.load

    def spy(f: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    monkeypatch.setattr(_payload, "load", lambda *a: pytest.fail("the full load is for refusals only"))
    snapshots.save_checkpoint(tmp_path, payload_for(1))
    assert calls == [{"weights_only": True, "map_location": "cpu", "mmap": True}]


def test_a_save_whose_payload_changed_before_verification_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = snapshots.save_checkpoint(tmp_path, payload_for(1))
    real_write_file = snapshots._fs.write_file

    def change_payload_then_write(directory: str, name: str, data: bytes) -> None:
        if name == "manifest.json":  # after the payload was written, hashed and fsynced
            with open(os.path.join(directory, "checkpoint.pt"), "r+b") as f:
                f.seek(os.fstat(f.fileno()).st_size // 2)  # inside the 4 MiB tensor: it still loads
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 1]))
        real_write_file(directory, name, data)

    monkeypatch.setattr(snapshots._fs, "write_file", change_payload_then_write)
    with pytest.raises(snapshots.SnapshotError, match="SHA-256 differs"):
        snapshots.save_checkpoint(tmp_path, {"step": 2, "big": torch.randn(1 << 20)})
    monkeypatch.undo()
    (failed,) = [p for p in tmp_path.iterdir() if p.name.startswith("step_000000000002_")]
    assert not (failed / "READY").exists()
    assert snapshots.list_valid(tmp_path) == [older]


def test_a_save_refused_by_weights_only_loading_gives_the_readers_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full: list[str] = []
    real = _payload.load

    def spy(path: str, manifest: dict[str, Any]) -> Any:
        full.append(path)
        return real(path, manifest)

    monkeypatch.setattr(_payload, "load", spy)
    with pytest.raises(snapshots.SnapshotError, match="weights-only loading refused it: UnpicklingError"):
        snapshots.save_checkpoint(tmp_path, {"step": 1, "x": random.Random(1)})
    assert len(full) == 1 and full[0].endswith("checkpoint.pt")


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this system")
def test_a_save_drops_the_cache_of_the_payload_it_supersedes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advised: list[str] = []
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, length, advice) == (0, 0, os.POSIX_FADV_DONTNEED)
        advised.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    one = snapshots.save_checkpoint(tmp_path, payload_for(1))
    snapshots.save_checkpoint(tmp_path, payload_for(2))
    assert advised == []
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert advised == [str(one / "checkpoint.pt")]


def test_a_failed_cache_hint_does_not_matter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", failing, raising=False)
    for step in (1, 2, 3):
        snapshots.save_checkpoint(tmp_path, payload_for(step))
    assert [int(p.name[5:17]) for p in snapshots.list_valid(tmp_path)] == [3, 2]
