"""Reading a small file through a descriptor without trusting its size: pure os, no policy."""

from __future__ import annotations

import os


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
