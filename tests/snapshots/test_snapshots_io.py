"""publish.snapshots: how the payload is hashed while torch reads and writes it, and what a save re-reads."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import publish.snapshots as snapshots
from publish.snapshots import _payload, _save
from tests.conftest import need

pytestmark = pytest.mark.torch


def payload_for(step: int) -> dict[str, Any]:
    return {"step": step, "w": torch.arange(16, dtype=torch.float32) + step}


def small_buffers() -> Any:
    """The hashing paths with sizes small enough to exercise every branch on a few KiB."""
    stack = contextlib.ExitStack()
    stack.enter_context(
        mock.patch.multiple(_payload, _CHUNK=16, _IN_PLACE=64, _MIN_PIECE=8, _BLOCK=20, _BLOCKS=2, _GAP=32)
    )
    stack.enter_context(
        mock.patch.multiple(
            _save, _READ_CHUNK=16, _WRITE_CHUNK=24, _PARALLEL_WRITE=64, _MIN_PIECE=8, _WRITEBACK=100
        )
    )
    return stack


def _refuse_map(fd: int) -> None:
    return None


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
            thread = reader.pipe._thread
            reader.close()
            assert thread is None or not thread.is_alive()
    finally:
        os.close(fd)


def _held_reader(fd: int) -> tuple[Any, Any]:
    """A reader whose hashing thread waits for ``release`` before each buffer it hashes."""
    reader = _payload._HashingReader(fd, len(DATA))
    release = threading.Event()
    update = reader.pipe.update

    def held(view: memoryview) -> None:
        release.wait()
        update(view)

    reader.pipe.update = held
    return reader, release


def _in_thread(fn: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    return thread


def test_a_small_read_returns_before_it_is_hashed_and_a_large_one_after(tmp_path: Path) -> None:
    """Small reads are copied for the hashing thread and return at once (hashing goes on beside the load);
    a large read is hashed from torch's own buffer, so it returns only once hashed; the copies are bounded."""
    path = tmp_path / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    try:
        with small_buffers():  # blocks of 20 bytes, at most 2; reads from 64 bytes hashed in place
            reader, release = _held_reader(fd)
            small = _in_thread(reader.readinto, bytearray(30))  # two blocks: both may wait to be hashed
            small.join(10)
            assert not small.is_alive()
            more = _in_thread(reader.readinto, bytearray(30))  # needs a block back from the hashing thread
            more.join(0.3)
            assert more.is_alive()
            release.set()
            more.join(10)
            assert not more.is_alive()
            release.clear()
            large = _in_thread(reader.readinto, bytearray(100))
            large.join(0.3)
            assert large.is_alive()  # its bytes are torch's memory: not returned before they are hashed
            release.set()
            large.join(10)
            assert not large.is_alive()
            assert reader.finish() == (hashlib.sha256(DATA).hexdigest(), len(DATA))
            reader.close()
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
            writer = _save.HashingWriter(fd)
            for part in (DATA[:10], DATA[10:2000], DATA[2000:2063], DATA[2063:2100], DATA[2100:]):
                assert writer.write(part) == len(part)
            hasher = writer.pipe._thread
            writer.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == DATA
    assert (writer.sha256.hexdigest(), writer.size) == (hashlib.sha256(DATA).hexdigest(), len(DATA))
    assert hasher is not None and not hasher.is_alive()  # the large writes were hashed on it; it ended


def test_the_writer_asks_the_kernel_to_write_back_each_stretch_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(_save, "start_writeback", lambda fd, offset, length: ranges.append((offset, length)))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with small_buffers():
            writer = _save.HashingWriter(fd)
            for start in range(0, len(DATA), 70):  # small writes and chunked ones (over _PARALLEL_WRITE)
                writer.write(DATA[start : start + 70] if start % 140 else DATA[start : start + 30])
            writer.close()
    finally:
        os.close(fd)
    assert ranges, "no writeback was asked for"
    ends = [offset + length for offset, length in ranges]
    assert [offset for offset, _ in ranges] == [0, *ends[:-1]]  # contiguous, in order, nothing twice
    assert all(length >= 100 for _, length in ranges)  # at least _WRITEBACK at a time
    assert ends[-1] <= writer.size and writer.size - ends[-1] < 100


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_writeback_hint_reaches_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_save, "_sync_file_range", False)  # looked up again
    path = tmp_path / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_WRONLY)
    try:
        _save.start_writeback(fd, 0, len(DATA))
        function = _save._sync_file_range
        assert function is not None
        assert function(fd, 0, len(DATA), _save._SYNC_FILE_RANGE_WRITE) == 0
    finally:
        os.close(fd)


def test_without_the_writeback_hint_a_save_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_save, "_sync_file_range", None)  # not Linux, or no ctypes
    directory = snapshots.save_checkpoint(tmp_path, {"step": 4, "big": torch.randn(3 << 20)})
    assert snapshots.list_valid(tmp_path) == [directory]


@pytest.mark.parametrize("small", [False, True])
def test_a_payload_larger_than_the_chunks_round_trips(tmp_path: Path, small: bool) -> None:
    # 20 MiB: several write and read chunks at the real sizes; 12 KiB: hundreds at the small ones
    big = torch.randn(3000) if small else torch.randn(5 << 20)
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
    assert reader.closed and reader.pipe._thread is None  # its hashing thread ended with the load


def test_a_save_verifies_with_a_mapped_load_and_a_fresh_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    real_load = torch.load

    def spy(f: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_load(f, *args, **kwargs)

    mapped: list[Any] = []
    real_map = _save._map

    def map_spy(fd: int) -> Any:
        mapped.append(real_map(fd))
        return mapped[-1]

    monkeypatch.setattr(torch, "load", spy)
    monkeypatch.setattr(_save, "_map", map_spy)
    monkeypatch.setattr(_payload, "load", lambda *a: pytest.fail("the full load is for refusals only"))
    snapshots.save_checkpoint(tmp_path, payload_for(1))
    assert calls == [{"weights_only": True, "map_location": "cpu", "mmap": True}]
    assert len(mapped) == 1 and mapped[0] is not None and mapped[0].closed  # hashed from a mapping, unmapped


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)


@pytest.mark.parametrize(
    ("mappable", "cpus", "where"),
    [(True, 1, 0.5), (False, 1, 0.5), (True, 4, 0.1), (True, 4, 0.4), (True, 4, 0.9), (False, 3, 0.6)],
)
def test_a_save_whose_payload_changed_before_verification_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mappable: bool, cpus: int, where: float
) -> None:
    """A byte flipped after it was hashed is found, in whichever part of a parallel verification it lies."""
    if not mappable:  # the verification's own read then uses pread (a mount that refuses mmap)
        monkeypatch.setattr(_save, "_map", _refuse_map)
    _cpus(monkeypatch, cpus)
    monkeypatch.setattr(_save, "_MARK", 256 << 10)
    older = snapshots.save_checkpoint(tmp_path, payload_for(1))
    real_write_file = snapshots._fs.write_file
    parts: list[Any] = []
    real_parts = _save._parts
    monkeypatch.setattr(_save, "_parts", lambda *a: parts.append(real_parts(*a)) or parts[-1])

    def change_payload_then_write(directory: str, name: str, data: bytes) -> None:
        if name == "manifest.json":  # after the payload was written, hashed and fsynced
            with open(os.path.join(directory, "checkpoint.pt"), "r+b") as f:
                f.seek(int(os.fstat(f.fileno()).st_size * where))  # inside the 4 MiB tensor: it still loads
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 1]))
        real_write_file(directory, name, data)

    monkeypatch.setattr(snapshots._fs, "write_file", change_payload_then_write)
    with pytest.raises(snapshots.SnapshotError, match="SHA-256 differs"):
        snapshots.save_checkpoint(tmp_path, {"step": 2, "big": torch.randn(1 << 20)})
    monkeypatch.undo()
    assert len(parts) == 1 and len(parts[0]) == cpus  # it was verified in that many parts
    (failed,) = [p for p in tmp_path.iterdir() if p.name.startswith("step_000000000002_")]
    assert not (failed / "READY").exists()
    assert snapshots.list_valid(tmp_path) == [older]


def test_a_save_with_a_wrong_mark_fails_rather_than_trusting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's marks only say where to cut: one that does not describe the file fails the save."""
    _cpus(monkeypatch, 2)
    monkeypatch.setattr(_save, "_MARK", 256 << 10)
    real_write = _save.write

    def write_with_a_wrong_mark(*args: Any) -> Any:
        digest, size, marks = real_write(*args)
        assert marks
        return digest, size, [(offset, hashlib.sha256(b"x" * offset)) for offset, _ in marks]

    monkeypatch.setattr(_save, "write", write_with_a_wrong_mark)
    with pytest.raises(snapshots.SnapshotError, match="SHA-256 differs"):
        snapshots.save_checkpoint(tmp_path, {"step": 2, "big": torch.randn(1 << 20)})
    assert snapshots.list_valid(tmp_path) == []


def test_a_payload_that_changes_while_it_is_verified_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_load = torch.load

    def grow_then_load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("mmap"):
            with open(f, "ab") as out:
                out.write(b"more")
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", grow_then_load)
    with pytest.raises(snapshots.SnapshotError, match="changed while it was being verified"):
        snapshots.save_checkpoint(tmp_path, payload_for(1))
    assert snapshots.list_valid(tmp_path) == []


@settings(max_examples=100, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=4000),
    sizes=st.lists(st.integers(1, 900), min_size=1, max_size=20),
    cpus=st.integers(1, 10),
    flip=st.floats(0, 1, exclude_max=True) | st.none(),
)
def test_parts_agree_exactly_when_the_bytes_are_the_ones_written(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, sizes: list[int], cpus: int, flip: float | None
) -> None:
    """Cut at the writer's marks, each part continued from its start mark ends in its end mark's state
    and the last in the digest of the whole, for the bytes written; any other bytes disagree somewhere."""
    path = tmp_path_factory.mktemp("marks") / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with small_buffers(), mock.patch.object(_save, "_MARK", 200):
            writer = _save.HashingWriter(fd)
            offset = 0
            for size in sizes * (len(data) // max(1, sum(sizes)) + 1):
                if offset >= len(data):
                    break
                writer.write(data[offset : offset + size])
                offset += size
            writer.close()
    finally:
        os.close(fd)
    with mock.patch.object(os, "sched_getaffinity", lambda pid: set(range(cpus)), create=True):
        parts = _save._parts(len(data), writer.marks)
    assert [start for start, _, _, _ in parts] == [0, *[end for _, end, _, _ in parts[:-1]]]
    assert parts[-1][1] == len(data) and 1 <= len(parts) <= max(1, cpus)
    assert all(start < end for start, end, _, _ in parts[:-1])
    read = bytearray(data)
    if flip is not None and data:
        read[int(flip * len(data))] ^= 0x20
    agree = True
    for start, end, state, mark in parts:
        h = state.copy()
        h.update(read[start:end])
        expected = mark.digest() if mark is not None else hashlib.sha256(data).digest()
        agree = agree and h.digest() == expected
    assert agree == (bytes(read) == data)


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


def test_verifying_a_new_payload_does_not_add_its_size_to_the_peak_memory(tmp_path: Path) -> None:
    """The re-read hashes from a mapping whose pages are dropped from the process once hashed."""
    need(os.path.exists("/proc/self/clear_refs"), "Linux's /proc/self/clear_refs resets the peak RSS")
    script = textwrap.dedent(
        f"""
        import torch
        import publish.snapshots as snapshots
        def peak_kib():
            with open("/proc/self/status") as f:
                return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
        payload = {{"step": 1, "w": torch.full((48 << 20,), 1.5)}}  # 192 MiB, in memory before the reset
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = peak_kib()
        snapshots.save_checkpoint({str(tmp_path)!r}, payload)
        print(peak_kib() - before)
        """
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=300, check=True
    )
    grew_kib = int(out.stdout.strip())
    assert grew_kib < 48 << 10, f"peak memory grew by {grew_kib} KiB"
