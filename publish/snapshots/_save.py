"""checkpoint.pt as a save writes it: hashed while written, then verified as a reader would, in parallel."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import sys
import threading
from typing import Any

from publish.rules.snapshot_format import SnapshotError

from . import _fs, _payload
from ._payload import Fingerprint, HashPipe, _join, _pread_into, fingerprint, torch

_WRITE_CHUNK = 8 << 20
_READ_CHUNK = 4 << 20
_PARALLEL_WRITE = 1 << 20  # a write this large is hashed on the writer's second thread while it goes on
_MIN_PIECE = 256 << 10  # such a write is handed over in pieces of at least this size
_WRITEBACK = 8 << 20  # start_writeback is asked for once this much more was written
_SYNC_FILE_RANGE_WRITE = 2
_MARK = 64 << 20  # the writer keeps a copy of the SHA-256 state at each multiple of this
_MAX_PARTS = 8  # a new payload is verified in at most this many parts at once

Mark = tuple[int, Any]  # (offset, a copy of the SHA-256 state after the file's first ``offset`` bytes)


class HashingWriter:
    """A write-only file object for ``torch.save``: counts and hashes the bytes as they go to ``fd``.

    A large write is cut into chunks that a second thread hashes while the same chunks are written, so a
    save costs about the longer of writing and hashing rather than their sum.  The kernel is asked to start
    writing each completed stretch of the file to the disk while the rest is produced
    (:func:`start_writeback`), so the ``fsync`` that follows has little left to wait for.

    Every ``_MARK`` bytes, a copy of the SHA-256 state is kept in :attr:`marks` (offset, state): the
    verification uses them to check the file in parallel parts (:func:`verify_written`).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = 0
        self.sha256 = hashlib.sha256()
        self.hashed = 0
        self.marks: list[Mark] = []
        self.error: OSError | None = None
        self._submitted = 0  # bytes [0, _submitted) were handed to start_writeback
        self.pipe = HashPipe(self._hash)

    def write(self, data: Any) -> int:
        try:
            return self._write(memoryview(data).cast("B"))
        except OSError as e:
            self.error = e  # torch replaces it with its own RuntimeError on the way out
            raise

    def _write(self, view: memoryview) -> int:
        if len(view) < _PARALLEL_WRITE:
            self._hash(view)
            _fs.write_all(self.fd, view)
        else:
            # Each chunk goes to the hashing thread, then to the file: both only read it.  All of it is
            # hashed before this returns: ``view`` is torch's memory, valid only during the call.
            piece = max(_MIN_PIECE, min(_WRITE_CHUNK, len(view) // 4))
            try:
                for start in range(0, len(view), piece):
                    chunk = view[start : start + piece]
                    self.pipe.put(chunk)
                    _fs.write_all(self.fd, chunk)
                    self._writeback(self.size + start + len(chunk))
            finally:
                self.pipe.wait()
        self.size += len(view)
        self._writeback(self.size)
        return len(view)

    def _hash(self, view: memoryview) -> None:
        while view:
            part = view[: _MARK - self.hashed % _MARK]
            self.sha256.update(part)
            self.hashed += len(part)
            if self.hashed % _MARK == 0:
                self.marks.append((self.hashed, self.sha256.copy()))
            view = view[len(part) :]

    def _writeback(self, end: int) -> None:
        if end - self._submitted >= _WRITEBACK:
            start_writeback(self.fd, self._submitted, end - self._submitted)
            self._submitted = end

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """End the hashing thread (it is idle: every write waited for its chunks)."""
        self.pipe.close()


def _load_sync_file_range() -> Any:
    """libc's ``sync_file_range`` through ctypes on Linux, else None (the hint is then not given)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (ImportError, OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range: Any = False  # not looked up yet


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``[offset, offset + length)`` of ``fd`` to the disk, without waiting.

    Only a hint (``SYNC_FILE_RANGE_WRITE``; it promises nothing about durability, the ``fsync`` after the
    write does): the disk then works while the rest of the payload is serialised and hashed, instead of
    all of it waiting for the ``fsync``.  Unlike an early ``fdatasync`` it sends no request to a FUSE
    daemon, so a cloud-backed mount does not upload the file once per call.
    """
    global _sync_file_range  # noqa: PLW0603 - looked up once per process
    if _sync_file_range is False:
        _sync_file_range = _load_sync_file_range()
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def write(directory: str, name: str, payload: dict[str, Any]) -> tuple[str, int, list[Mark]]:
    """torch.save ``payload`` to ``<name>.partial`` (exclusive), fsync, rename.

    Returns the SHA-256 (hex) and size of what was written, and the writer's marks.
    """
    partial = os.path.join(directory, name + ".partial")
    fd = _fs.create_exclusive(partial)
    try:
        writer = HashingWriter(fd)
        try:
            torch().save(payload, writer)
        except Exception:
            if writer.error is not None:
                raise writer.error from None  # a full disk is an OSError(ENOSPC), not torch's message
            raise
        finally:
            writer.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, os.path.join(directory, name))
    return writer.sha256.hexdigest(), writer.size, writer.marks


def _map(fd: int) -> mmap.mmap | None:
    """The file read-only in memory, or None where it cannot be mapped (some FUSE mounts; empty)."""
    try:
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
        mapped.madvise(mmap.MADV_SEQUENTIAL)
    return mapped


def _unmap_pages(mapped: mmap.mmap, offset: int, length: int) -> None:
    """Drop ``[offset, offset + length)`` of the mapping from this process's memory once hashed: the pages
    stay in the page cache, but do not count towards the process's resident memory, so verifying a payload
    does not add its size to the save's peak."""
    if _DONTNEED is not None and offset % mmap.PAGESIZE == 0:
        with contextlib.suppress(OSError, ValueError):  # only a hint: the hash is right either way
            mapped.madvise(_DONTNEED, offset, length)


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None


class _Hasher(threading.Thread):
    """Hashes ``[start, end)`` of a file, from ``state`` on, beside the load that reads the same file.

    It hashes from the file's mapping when there is one (no copy into a buffer of our own: about 15%
    faster), else reads with ``pread``.  :attr:`size` counts the bytes hashed: fewer than ``end - start``
    when the file ends sooner.
    """

    def __init__(
        self, fd: int, mapped: mmap.mmap | None, start: int, end: int, state: Any, stop: threading.Event
    ) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.mapped = mapped
        self.start_at = start
        self.end = end
        self.sha256 = state
        self.size = 0
        self.error: OSError | None = None
        self.stop = stop

    def run(self) -> None:
        try:
            if self.mapped is not None:
                self._hash_mapped(self.mapped)
            else:
                self._hash_read()
        except OSError as e:
            self.error = e

    def _hash_mapped(self, mapped: mmap.mmap) -> None:
        with memoryview(mapped) as view:
            end = min(self.end, len(view))
            while self.start_at + self.size < end and not self.stop.is_set():
                offset = self.start_at + self.size
                chunk = view[offset : min(offset + _READ_CHUNK, end)]
                self.sha256.update(chunk)
                self.size += len(chunk)
                chunk.release()
                _unmap_pages(mapped, offset, self.size + self.start_at - offset)

    def _hash_read(self) -> None:
        buf = memoryview(bytearray(_READ_CHUNK))
        while self.start_at + self.size < self.end and not self.stop.is_set():
            want = min(_READ_CHUNK, self.end - self.start_at - self.size)
            n = _pread_into(self.fd, buf[:want], self.start_at + self.size)
            if n == 0:
                return
            self.sha256.update(buf[:n])
            self.size += n


def _parts(size: int, marks: list[Mark]) -> list[tuple[int, int, Any, Any]]:
    """The file cut at some of the writer's marks into about as many equal parts as there are CPUs.

    Each part is (start, end, SHA-256 state at start, state the writer had at end, None for the last).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    count = max(1, min(cpus, _MAX_PARTS))
    cuts: list[Mark] = []
    for k in range(1, count):
        target = size * k // count
        inside = [m for m in marks if (cuts[-1][0] if cuts else 0) < m[0] < size]
        if inside:
            best = min(inside, key=lambda m: abs(m[0] - target))
            if best not in cuts:
                cuts.append(best)
    parts: list[tuple[int, int, Any, Any]] = []
    start, state = 0, hashlib.sha256()
    for offset, mark in cuts:
        parts.append((start, offset, state, mark))
        start, state = offset, mark.copy()
    parts.append((start, size, state, None))
    return parts


def _fd_path(fd: int, path: str) -> str:
    """A name that opens exactly the file behind ``fd`` where the system has one, else ``path``."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else path


def verify_written(path: str, manifest: dict[str, Any], marks: list[Mark] | None = None) -> Fingerprint:
    """Verify a payload this process has just written, as a reader would, without keeping a second copy.

    The file is opened and read back from its start to its end by threads that hash it, while the
    weights-only unpickler runs over it with ``mmap=True``: every global it names, every storage record
    it resolves, and the loaded dict with its step are checked as a full load checks them, but the storages
    are mapped rather than copied into new memory (the bytes themselves are checked by the digest).  When
    that load raises for any reason, the snapshot is verified again with :func:`_payload.load`, so every refusal is
    the one a reader gives.  Returns the fingerprint of the file as opened.

    With the writer's ``marks``, the re-read is hashed in parts at once, one per CPU: the part from a
    mark to the next starts from the state the writer had at the first and must end in the state it had
    at the second; the last must end in the manifest's digest.  Every byte is read back and hashed, and
    the parts all agree exactly when the file read back is the file whose SHA-256 is in the manifest
    (docs/snapshots.md, "Writing").
    """
    torch_ = torch()
    fd, st = _fs.open_regular(path)
    try:
        if st.st_size != manifest["bytes"]:
            raise SnapshotError(f"{path} holds {st.st_size} bytes, the manifest says {manifest['bytes']}")
        mapped = _map(fd)
        try:
            return _verify_mapped(torch_, path, manifest, fd, st, mapped, marks or [])
        finally:
            if mapped is not None:
                mapped.close()
    finally:
        os.close(fd)


def _verify_mapped(
    torch_: Any,
    path: str,
    manifest: dict[str, Any],
    fd: int,
    st: os.stat_result,
    mapped: mmap.mmap | None,
    marks: list[Mark],
) -> Fingerprint:
    stop = threading.Event()
    parts = _parts(st.st_size, marks)
    hashers = [_Hasher(fd, mapped, start, end, state, stop) for start, end, state, _ in parts]
    assert len(hashers) == len(parts), "one hasher per part: the zips below pair them"
    for hasher in hashers:
        hasher.start()
    try:
        payload = torch_.load(_fd_path(fd, path), weights_only=True, map_location="cpu", mmap=True)
    except Exception:
        payload = None
        stop.set()
    except BaseException:
        stop.set()
        raise
    finally:
        for hasher in hashers:
            _join(hasher)
    if payload is None:
        return _payload.load(path, manifest)[1]
    try:
        now = os.fstat(fd)
        if fingerprint(os.lstat(path))[:2] != fingerprint(st)[:2] or fingerprint(now) != fingerprint(st):
            raise SnapshotError(f"{path} changed while it was being verified")
        for hasher in hashers:
            if hasher.error is not None:
                raise SnapshotError(f"{path}: {hasher.error.strerror}")
        size = sum(hasher.size for hasher in hashers)
        whole = all(h.size == end - start for h, (start, end, _, _) in zip(hashers, parts))
        agree = all(
            mark is None or h.sha256.digest() == mark.digest() for h, (_, _, _, mark) in zip(hashers, parts)
        )
        digest = hashers[-1].sha256.hexdigest() if whole and agree else ""
        _payload._check(path, manifest, size, digest, "", payload)
    finally:
        del payload  # unmap before anything removes or renames files
    return fingerprint(st)
