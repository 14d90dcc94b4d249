"""checkpoint.pt as a reader sees it: one read that hashes while a weights-only load runs (torch, lazily)."""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Optional, Union

from publish.rules.snapshot_format import SnapshotError, is_int

from . import _fs

_CHUNK = 4 << 20
_IN_PLACE = 16 << 20  # a read this large is hashed from torch's buffer, in pieces, before it returns
_MIN_PIECE = 1 << 20  # ... in pieces of at least this size
_BLOCK = 4 << 20  # a smaller read is copied into blocks of this size for the hashing thread
_BLOCKS = 8  # ... at most this many
_GAP = 1 << 20  # a read this far past what is hashed: the gap is hashed first, so hashing stays in order


def torch() -> Any:
    """torch, imported on first use; a missing torch is an ImportError, never a corrupt snapshot."""
    return importlib.import_module("torch")


def _join(thread: threading.Thread) -> None:
    """Wait for ``thread`` to end even through KeyboardInterrupt (re-raised after): it may be using memory
    that is freed once the caller returns."""
    interrupted: BaseException | None = None
    while thread.is_alive():
        try:
            thread.join()
        except BaseException as e:  # noqa: PERF203 - KeyboardInterrupt while waiting: wait on, then re-raise
            interrupted = e
    if interrupted is not None:
        raise interrupted


_Item = Union[tuple[memoryview, Optional[Callable[[], object]]], threading.Event, None]


class HashPipe:
    """A second thread that feeds the buffers handed to it, in order, to ``update`` (a hash's, or one
    that also counts).  hashlib releases the GIL on large buffers, so hashing runs beside the reads or
    writes of the thread that hands them over.  The thread starts on first use and lives until
    :meth:`close`, so a load or save made of many tensors does not start one per tensor."""

    def __init__(self, update: Callable[[memoryview], object]) -> None:
        self.update = update
        self._queue: queue.SimpleQueue[_Item] | None = None
        self._thread: threading.Thread | None = None

    def put(self, view: memoryview, done: Callable[[], object] | None = None) -> None:
        """Hand ``view`` over; ``done`` is called on the hashing thread once it is hashed."""
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._run, args=(self._queue,), daemon=True)
            self._thread.start()
        self._queue.put((view, done))

    def _run(self, items: queue.SimpleQueue[_Item]) -> None:
        while (item := items.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
            else:
                view, done = item
                self.update(view)
                if done is not None:
                    done()

    def wait(self) -> None:
        """Return once every buffer handed over so far is hashed, even through KeyboardInterrupt (raised
        after): the buffers are the caller's memory, which it may free or reuse once this returns."""
        if self._queue is None:
            return
        done = threading.Event()
        self._queue.put(done)
        interrupted: BaseException | None = None
        while not done.is_set():
            try:
                done.wait()
            except BaseException as e:  # noqa: PERF203 - wait on, then re-raise
                interrupted = e
        if interrupted is not None:
            raise interrupted

    def close(self) -> None:
        """End the thread (idle once :meth:`wait` returned)."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            _join(self._thread)
        self._queue = self._thread = None


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``offset`` on; fewer bytes only at the end of the file."""
    got = 0
    while got < len(view):
        n = (
            os.preadv(fd, [view[got:]], offset + got)
            if hasattr(os, "preadv")
            else _pread_copy(fd, view[got:], offset + got)
        )
        if n == 0:
            break
        got += n
    return got


def _pread_copy(fd: int, view: memoryview, offset: int) -> int:
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


class _HashingReader(io.RawIOBase):
    """The file as ``torch.load`` reads it, hashed in file order from the very buffers the load fills.

    torch reads the zip's small records, then each storage with one ``readinto`` straight into the tensor's
    memory.  A read that starts at (or a little after) the end of what is hashed so far is hashed, in file
    order, on a second thread (:class:`HashPipe`):

    - a large read (from ``_IN_PLACE`` bytes) piece by piece straight from torch's buffer while the next
      piece is read, and all of it before ``readinto`` returns, so the hash never touches memory the load
      may free and no byte is copied twice;
    - a smaller one is copied into blocks of the reader's own (at most ``_BLOCKS`` of ``_BLOCK`` bytes) and
      ``readinto`` returns at once: hashing goes on while torch allocates and reads the next tensors, which
      for a state_dict of many small tensors is most of the time.  When every block is waiting to be
      hashed, the next read waits for one.

    Anything torch skips or reads out of order is hashed by :meth:`finish` with ``pread``.
    """

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self.fd = fd
        self.size = size  # as fstat said when opened; what the end of the file is for seek
        self.pos = 0
        self.hashed = 0  # bytes [0, hashed) are in sha256
        self.sha256 = hashlib.sha256()
        self.pipe = HashPipe(self.sha256.update)
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()  # blocks the hasher is done with
        self._blocks = 0  # blocks made so far
        self._block: bytearray | None = None  # the block being filled
        self._fill = 0

    def close(self) -> None:
        self.pipe.close()
        super().close()

    def _copy_to_hash(self, data: memoryview) -> None:
        """Queue ``data`` (the next bytes in file order) for hashing, as a copy in the reader's blocks."""
        while data:
            if self._block is None:
                if self._blocks < _BLOCKS and self._free.empty():
                    self._blocks += 1
                    self._block = bytearray(_BLOCK)
                else:
                    self._block = self._free.get()
                self._fill = 0
            k = min(len(data), _BLOCK - self._fill)
            self._block[self._fill : self._fill + k] = data[:k]
            self._fill += k
            data = data[k:]
            if self._fill == _BLOCK:
                self._flush()

    def _flush(self) -> None:
        """Hand the block being filled to the hashing thread (it gives the block back once hashed)."""
        block = self._block
        if block is not None:
            self.pipe.put(memoryview(block)[: self._fill], lambda: self._free.put(block))
            self._block = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(22, "Invalid argument")
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        offset = self.pos
        if offset <= self.hashed < offset + len(view) or 0 < offset - self.hashed <= _GAP:
            if offset > self.hashed:
                self._hash_to(offset)
            n = (
                self._read_hashing(view, offset)
                if offset <= self.hashed
                else _pread_into(self.fd, view, offset)
            )
        else:
            n = _pread_into(self.fd, view, offset)
        self.pos = offset + n
        return n

    def _hash_to(self, end: int) -> None:
        """Hash ``[hashed, end)`` with ``pread`` (a gap torch did not read yet, or the rest of the file)."""
        buf = memoryview(bytearray(min(_CHUNK, end - self.hashed)))
        while self.hashed < end:
            n = _pread_into(self.fd, buf[: end - self.hashed], self.hashed)
            if n == 0:
                return
            self._copy_to_hash(buf[:n])
            self.hashed += n

    def _read_hashing(self, view: memoryview, offset: int) -> int:
        """Read into ``view`` from ``offset`` (<= hashed), hashing the bytes from ``hashed`` on as they come."""
        if len(view) < _IN_PLACE:
            n = _pread_into(self.fd, view, offset)
            if offset + n > self.hashed:
                self._copy_to_hash(view[self.hashed - offset : n])
                self.hashed = offset + n
            return n
        self._flush()  # what is queued before goes first
        # In pieces (a quarter of the read, at most _CHUNK), each handed to the hashing thread once read,
        # so that hashing one piece overlaps reading the next.
        piece = max(_MIN_PIECE, min(_CHUNK, len(view) // 4))
        got = 0
        try:
            while got < len(view):
                n = _pread_into(self.fd, view[got : got + piece], offset + got)
                if offset + got + n > self.hashed:
                    self.pipe.put(view[self.hashed - offset : got + n])
                    self.hashed = offset + got + n
                got += n
                if n < piece:
                    break
        finally:
            self.pipe.wait()
        return got

    def finish(self) -> tuple[str, int]:
        """Hash whatever the load did not read, to the end of the file: (sha256 hex, bytes)."""
        while True:
            before = self.hashed
            self._hash_to(self.hashed + _CHUNK)
            if self.hashed == before:
                break
        self._flush()
        self.pipe.wait()
        return self.sha256.hexdigest(), self.hashed


Fingerprint = tuple[int, int, int, int, int]


def fingerprint(st: os.stat_result) -> Fingerprint:
    """What changes when a file is replaced or written: device, inode, size, mtime, ctime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _check(path: str, manifest: dict[str, Any], size: int, digest: str, refused: str, payload: Any) -> None:
    """A reader's verdict, in a reader's order: size, digest, then what weights-only loading said."""
    if size != manifest["bytes"]:
        raise SnapshotError(f"{path} holds {size} bytes, the manifest says {manifest['bytes']}")
    if digest != manifest["sha256"]:
        raise SnapshotError(f"{path}: SHA-256 differs from the manifest")
    if refused:
        raise SnapshotError(f"{path}: weights-only loading refused it: {refused}")
    if not isinstance(payload, dict):
        raise SnapshotError(f"{path} holds a {type(payload).__name__}, not a dict")
    if not is_int(payload.get("step")) or payload["step"] != manifest["step"]:
        step = payload.get("step")
        raise SnapshotError(f"{path}: step {step!r} differs from the manifest's {manifest['step']}")


def load(path: str, manifest: dict[str, Any]) -> tuple[dict[str, Any], Fingerprint]:
    """The payload at ``path``, checked against the manifest: size, SHA-256, weights-only load, step.

    The file is read once: the weights-only load reads it through a :class:`_HashingReader`, and nothing
    is returned before the digest and size checked.  Also returns the fingerprint of the file as opened.
    """
    torch_ = torch()
    fd, st = _fs.open_regular(path)
    try:
        if st.st_size != manifest["bytes"]:
            raise SnapshotError(f"{path} holds {st.st_size} bytes, the manifest says {manifest['bytes']}")
        reader = _HashingReader(fd, st.st_size)
        payload: Any = None
        refused = ""
        try:
            try:
                payload = torch_.load(reader, weights_only=True, map_location="cpu")
            except OSError as e:
                raise SnapshotError(f"{path}: {e.strerror}") from None
            except Exception as e:  # any failure of the load is this snapshot's fault
                refused = _first_line(e)
            try:
                digest, size = reader.finish()
            except OSError as e:
                raise SnapshotError(f"{path}: {e.strerror}") from None
        finally:
            reader.close()
        _check(path, manifest, size, digest, refused, payload)
    finally:
        os.close(fd)
    return payload, fingerprint(st)


_DIGEST_CHUNK = 1 << 20  # a digest check holds one buffer of this size, whatever the payload's size


def check_digest(path: str, manifest: dict[str, Any]) -> Fingerprint:
    """The payload at ``path`` has the manifest's size and SHA-256, read in bounded pieces and never
    deserialised; SnapshotError otherwise.  Returns the fingerprint of the file as opened."""
    fd, st = _fs.open_regular(path)
    try:
        expected = manifest["bytes"]
        if st.st_size != expected:
            raise SnapshotError(f"{path} holds {st.st_size} bytes, the manifest says {expected}")
        sha256 = hashlib.sha256()
        buf = memoryview(bytearray(_DIGEST_CHUNK))
        size = 0
        try:
            while size <= expected:  # one byte past the manifest's size tells a file that grew
                n = _pread_into(fd, buf[: min(_DIGEST_CHUNK, expected + 1 - size)], size)
                if n == 0:
                    break
                sha256.update(buf[:n])
                size += n
            now = os.fstat(fd)
        except OSError as e:
            raise SnapshotError(f"{path}: {e.strerror}") from None
        if fingerprint(now) != fingerprint(st):
            raise SnapshotError(f"{path} changed while it was being checked")
        if size != expected:
            raise SnapshotError(f"{path} holds {size} bytes, the manifest says {expected}")
        if sha256.hexdigest() != manifest["sha256"]:
            raise SnapshotError(f"{path}: SHA-256 differs from the manifest")
    finally:
        os.close(fd)
    return fingerprint(st)


def check_digests(jobs: list[tuple[str, dict[str, Any]]], threads: int) -> list[Fingerprint | Exception]:
    """:func:`check_digest` of each ``(path, manifest)``, up to ``threads`` at once (hashlib releases the
    GIL); each result is the fingerprint or the exception that check raised, in the order of ``jobs``."""
    results: list[Fingerprint | Exception | None] = [None] * len(jobs)
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(jobs)):
        todo.put(i)

    def work() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = check_digest(*jobs[i])
            except Exception as e:  # noqa: BLE001 - each check's failure is that snapshot's verdict
                results[i] = e

    workers = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(threads, len(jobs))))]
    for worker in workers:
        worker.start()
    for worker in workers:
        _join(worker)
    return [r if r is not None else SnapshotError("not checked") for r in results]
