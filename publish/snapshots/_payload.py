"""checkpoint.pt: written through a hashing writer, read back with a weights-only load (torch, lazily)."""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from typing import Any

from . import _fs
from ._format import SnapshotError, is_int

_CHUNK = 4 << 20
_PARALLEL_HASH = 8 << 20  # a write this large is hashed on a second thread while it goes to the file


def torch() -> Any:
    """torch, imported on first use; a missing torch is an ImportError, never a corrupt snapshot."""
    return importlib.import_module("torch")


class HashingWriter:
    """A write-only file object for ``torch.save``: counts and hashes the bytes as they go to ``fd``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = 0
        self.sha256 = hashlib.sha256()
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._write(memoryview(data).cast("B"))
        except OSError as e:
            self.error = e  # torch replaces it with its own RuntimeError on the way out
            raise

    def _write(self, view: memoryview) -> int:
        if len(view) >= _PARALLEL_HASH:
            # hashlib releases the GIL on large buffers: hash and write at the same time.
            hasher = threading.Thread(target=self.sha256.update, args=(view,), daemon=True)
            hasher.start()
            try:
                _fs.write_all(self.fd, view)
            finally:
                hasher.join()
        else:
            self.sha256.update(view)
            _fs.write_all(self.fd, view)
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        pass


def write(directory: str, name: str, payload: dict[str, Any]) -> tuple[str, int]:
    """torch.save ``payload`` to ``<name>.partial`` (exclusive), fsync, rename; (sha256 hex, size)."""
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
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, os.path.join(directory, name))
    return writer.sha256.hexdigest(), writer.size


class _Hasher(threading.Thread):
    """Reads a file descriptor with ``pread`` and hashes it, beside the load that reads the same file."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.error: OSError | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        try:
            while not self.stop.is_set():
                if hasattr(os, "preadv"):
                    n = os.preadv(self.fd, [buf], self.size)
                    chunk: bytes | memoryview = view[:n]
                else:
                    chunk = os.pread(self.fd, _CHUNK, self.size)
                    n = len(chunk)
                if n == 0:
                    return
                self.sha256.update(chunk)
                self.size += n
        except OSError as e:
            self.error = e


Fingerprint = tuple[int, int, int, int, int]


def fingerprint(st: os.stat_result) -> Fingerprint:
    """What changes when a file is replaced or written: device, inode, size, mtime, ctime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def load(path: str, manifest: dict[str, Any]) -> tuple[dict[str, Any], Fingerprint]:
    """The payload at ``path``, checked against the manifest: size, SHA-256, weights-only load, step.

    Also returns the fingerprint of the file as it was opened.
    """
    torch_ = torch()
    fd, st = _fs.open_regular(path)
    try:
        if st.st_size != manifest["bytes"]:
            raise SnapshotError(f"{path} holds {st.st_size} bytes, the manifest says {manifest['bytes']}")
        hasher = _Hasher(fd)
        hasher.start()
        payload: Any = None
        refused: str = ""
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                payload = torch_.load(f, weights_only=True, map_location="cpu")
        except Exception as e:  # any failure of the load is this snapshot's fault
            refused = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        except BaseException:
            hasher.stop.set()
            raise
        finally:
            hasher.join()
        if hasher.error is not None:
            raise SnapshotError(f"{path}: {hasher.error.strerror}")
        if hasher.size != manifest["bytes"]:
            raise SnapshotError(f"{path} holds {hasher.size} bytes, the manifest says {manifest['bytes']}")
        if hasher.sha256.hexdigest() != manifest["sha256"]:
            raise SnapshotError(f"{path}: SHA-256 differs from the manifest")
        if refused:
            raise SnapshotError(f"{path}: weights-only loading refused it: {refused}")
    finally:
        os.close(fd)
    if not isinstance(payload, dict):
        raise SnapshotError(f"{path} holds a {type(payload).__name__}, not a dict")
    if not is_int(payload.get("step")) or payload["step"] != manifest["step"]:
        step = payload.get("step")
        raise SnapshotError(f"{path}: step {step!r} differs from the manifest's {manifest['step']}")
    return payload, fingerprint(st)
