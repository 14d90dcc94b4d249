"""Copy one save from a POSIX root to an S3 root: the interface the two-tier mirror is written against.

A plain version (one file at a time, each in one PUT); the parallel, multipart engine replaces it."""

from __future__ import annotations

import hashlib

from publish.errors import Failure
from publish.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.deadline import Deadline
    from publish.stores.base import Store

#: How much of a file one read takes.
CHUNK = 8 << 20


def upload_save(
    dl: Deadline,
    src: Store,
    save: str,
    dst: Store,
    *,
    jobs: int = 8,
    part_size: int = 64 << 20,
    expect: list[tuple[str, int, str | None]] | None = None,
) -> list[tuple[str, int, str]]:
    """Upload every regular file of the save at ``save`` (a folder or one file) from ``src`` to ``dst`` at
    the same path; the manifest rows (path relative to the save, size, SHA-256), sorted by path."""
    one = src.size(dl, save)
    files = {"": one} if one is not None else src.sizes(dl, save)
    if not files:
        raise Failure(f"save {shown(src.location(save))} holds no file")
    wanted = {p: (s, d) for p, s, d in expect} if expect is not None else None
    rows = []
    for rel in sorted(files):
        path = f"{save}/{rel}" if rel else save
        body = bytearray()
        while True:
            chunk = src.read_range(dl, path, len(body), CHUNK)
            if chunk is None:
                raise Failure(f"{shown(src.location(path))} is gone")
            body += chunk
            if len(chunk) < CHUNK:
                break
        digest = hashlib.sha256(body).hexdigest()
        if wanted is not None:
            size, want = wanted.get(rel, (-1, None))
            if size != len(body) or (want is not None and want != digest):
                raise Failure(f"{shown(src.location(path))} differs from the root's manifest")
        dst.client.put(dst.key(path), bytes(body), deadline=dl)  # type: ignore[attr-defined]
        if dst.size(dl, path) != len(body):
            raise Failure(f"{shown(dst.location(path))}: the store holds another size than was uploaded")
        rows.append((rel, len(body), digest))
    return rows
