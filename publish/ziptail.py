"""Is a zip archive whole?  Its end records and central directory, read from the end: pure, no I/O.

``torch.save`` writes a zip (PyTorch's own writer, miniz): the members, then the central directory, then
(for large archives) the zip64 end record and its locator, then the end-of-central-directory record.  A
writer that is killed, or still writing, leaves a file without a consistent end: the last record is what
is written last.  So an archive is whole when its end-of-central-directory record sits at the very end of the
file, the central directory it points to lies right before the end records and holds exactly the entries
it announces, and each entry starts before the central directory.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_LOCATOR = b"PK\x06\x07"
_LOCATOR_SIZE = 20
_EOCD64 = b"PK\x06\x06"
_EOCD64_SIZE = 56
_ENTRY = b"PK\x01\x02"
_ENTRY_SIZE = 46
_MAX_COMMENT = 0xFFFF
#: A central directory over this is refused (a torch archive holds one small entry per tensor storage).
CENTRAL_LIMIT = 64 * 1024 * 1024


def tail_size(size: int) -> int:
    """How many bytes from the end of a ``size``-byte file :func:`whole` wants first."""
    return min(size, _EOCD_SIZE + _MAX_COMMENT + _LOCATOR_SIZE)


def _find_eocd(tail: bytes) -> int:
    """The offset in ``tail`` of an end record whose comment runs exactly to the end, or -1."""
    at = len(tail) - _EOCD_SIZE
    while at >= 0:
        at = tail.rfind(_EOCD, 0, at + 4)
        if at < 0:
            return -1
        (comment,) = struct.unpack_from("<H", tail, at + 20)
        if at + _EOCD_SIZE + comment == len(tail):
            return at
        at -= 1
    return -1


def whole(size: int, read: Callable[[int, int], bytes]) -> bool:
    """True when the zip archive of ``size`` bytes is whole; ``read(offset, length)`` returns file bytes.

    False otherwise: while it is being written there is no end record at its end yet, and a writer killed
    part-way never leaves one.  Inconsistent end records are "not whole" too, never a fault: the last bytes
    of a tensor still being written may look like an end record by chance, and must not stop a watch."""
    if size < _EOCD_SIZE:
        return False
    start = size - tail_size(size)
    tail = read(start, size - start)
    if len(tail) != size - start:
        return False
    at = _find_eocd(tail)
    if at < 0:
        return False
    eocd = start + at
    disk, cd_disk, n_here, n_total, cd_size, cd_offset = struct.unpack_from("<HHHHII", tail, at + 4)
    end_of_cd = eocd
    loc = at - _LOCATOR_SIZE
    has_locator = loc >= 0 and tail[loc : loc + 4] == _LOCATOR
    if 0xFFFF in (n_here, n_total) or 0xFFFFFFFF in (cd_size, cd_offset) or has_locator:
        # torch's writer puts zip64 end records before every end record, large or not
        if not has_locator:
            return False
        (z64,) = struct.unpack_from("<Q", tail, loc + 8)
        if z64 + _EOCD64_SIZE > eocd - _LOCATOR_SIZE:
            return False
        record = read(z64, _EOCD64_SIZE)
        if len(record) != _EOCD64_SIZE or record[:4] != _EOCD64:
            return False
        n_here, n_total, cd_size, cd_offset = struct.unpack_from("<QQQQ", record, 24)
        end_of_cd = z64
    if disk or cd_disk or n_here != n_total:
        return False
    if cd_offset + cd_size != end_of_cd:
        return False
    if cd_size > CENTRAL_LIMIT:
        return False  # not a torch archive
    directory = read(cd_offset, cd_size)
    if len(directory) != cd_size:
        return False
    pos = count = 0
    while pos < cd_size:
        if directory[pos : pos + 4] != _ENTRY or pos + _ENTRY_SIZE > cd_size:
            return False
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", directory, pos + 28)
        (local,) = struct.unpack_from("<I", directory, pos + 42)
        if local >= cd_offset and local != 0xFFFFFFFF:
            return False
        pos += _ENTRY_SIZE + name_len + extra_len + comment_len
        count += 1
    if pos != cd_size or count != n_total:
        return False
    return count > 0
