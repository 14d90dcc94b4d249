"""Reading a small file without trusting its size or its kind: pure os, no policy."""

from __future__ import annotations

import os
import stat


def read_at_most(fd: int, limit: int) -> bytes | None:
    """The rest of ``fd``'s file, or None when it holds more than ``limit`` bytes (reads at most limit + 1)."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


def read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path`` (links followed), or None: not there, not a regular file, or
    larger than ``limit``.  It is opened without blocking and checked with ``fstat`` before any read, so a
    FIFO, a socket or a device there (``/dev/zero``) is never read; at most ``limit + 1`` bytes are read,
    whatever the file claims its size is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return read_at_most(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
