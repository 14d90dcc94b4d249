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


#: One entry of a central directory: its name, compression method, CRC-32, compressed and uncompressed
#: sizes, and the offset of its local header.
Entry = tuple[bytes, int, int, int, int, int]
_LOCAL = b"PK\x03\x04"
_LOCAL_SIZE = 30


def whole(size: int, read: Callable[[int, int], bytes]) -> bool:
    """True when the zip archive of ``size`` bytes is whole; ``read(offset, length)`` returns file bytes.

    False otherwise: while it is being written there is no end record at its end yet, and a writer killed
    part-way never leaves one.  Inconsistent end records are "not whole" too, never a fault: the last bytes
    of a tensor still being written may look like an end record by chance, and must not stop a watch."""
    found = directory(size, read)
    return bool(found and found[0])


def directory(size: int, read: Callable[[int, int], bytes]) -> tuple[list[Entry], int] | None:
    """The entries of the whole zip archive of ``size`` bytes, and the offset its central directory starts
    at; None when it is not whole (:func:`whole`)."""
    if size < _EOCD_SIZE:
        return None
    start = size - tail_size(size)
    tail = read(start, size - start)
    if len(tail) != size - start:
        return None
    at = _find_eocd(tail)
    if at < 0:
        return None
    eocd = start + at
    disk, cd_disk, n_here, n_total, cd_size, cd_offset = struct.unpack_from("<HHHHII", tail, at + 4)
    end_of_cd = eocd
    loc = at - _LOCATOR_SIZE
    has_locator = loc >= 0 and tail[loc : loc + 4] == _LOCATOR
    if 0xFFFF in (n_here, n_total) or 0xFFFFFFFF in (cd_size, cd_offset) or has_locator:
        # torch's writer puts zip64 end records before every end record, large or not
        if not has_locator:
            return None
        (z64,) = struct.unpack_from("<Q", tail, loc + 8)
        if z64 + _EOCD64_SIZE > eocd - _LOCATOR_SIZE:
            return None
        record = read(z64, _EOCD64_SIZE)
        if len(record) != _EOCD64_SIZE or record[:4] != _EOCD64:
            return None
        n_here, n_total, cd_size, cd_offset = struct.unpack_from("<QQQQ", record, 24)
        end_of_cd = z64
    if disk or cd_disk or n_here != n_total:
        return None
    if cd_offset + cd_size != end_of_cd:
        return None
    if cd_size > CENTRAL_LIMIT:
        return None  # not a torch archive
    data = read(cd_offset, cd_size)
    if len(data) != cd_size:
        return None
    entries: list[Entry] = []
    pos = 0
    while pos < cd_size:
        if data[pos : pos + 4] != _ENTRY or pos + _ENTRY_SIZE > cd_size:
            return None
        method, _, _, crc, packed, unpacked, name_len, extra_len, comment_len = struct.unpack_from(
            "<HHHIIIHHH", data, pos + 10
        )
        (local,) = struct.unpack_from("<I", data, pos + 42)
        name = data[pos + _ENTRY_SIZE : pos + _ENTRY_SIZE + name_len]
        extra = data[pos + _ENTRY_SIZE + name_len : pos + _ENTRY_SIZE + name_len + extra_len]
        if local >= cd_offset and local != 0xFFFFFFFF:
            return None
        unpacked, packed, local = _zip64(extra, unpacked, packed, local)
        entries.append((name, method, crc, packed, unpacked, local))
        pos += _ENTRY_SIZE + name_len + extra_len + comment_len
    if pos != cd_size or len(entries) != n_total:
        return None
    return entries, cd_offset


def _zip64(extra: bytes, unpacked: int, packed: int, local: int) -> tuple[int, int, int]:
    """The sizes and offset an entry's zip64 extra field holds for those of its fields that are 0xFFFFFFFF
    (in that order); as they are when it has none (the offset then stays 0xFFFFFFFF: past any file)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            values = [unpacked, packed, local]
            at = pos + 4
            for i, value in enumerate(values):
                if value == 0xFFFFFFFF and at + 8 <= pos + 4 + length and at + 8 <= len(extra):
                    (values[i],) = struct.unpack_from("<Q", extra, at)
                    at += 8
            return values[0], values[1], values[2]
        pos += 4 + length
    return unpacked, packed, local


def member(entry: Entry, end: int, read: Callable[[int, int], bytes]) -> bytes | None:
    """The stored bytes of ``entry`` (of :func:`directory`), read through its local header, which must name
    it and end with the member before ``end`` (where the central directory starts); None otherwise."""
    name, _, _, packed, _, local = entry
    header = read(local, _LOCAL_SIZE + len(name))
    if len(header) != _LOCAL_SIZE + len(name) or header[:4] != _LOCAL or header[_LOCAL_SIZE:] != name:
        return None
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    start = local + _LOCAL_SIZE + name_len + extra_len
    if name_len != len(name) or start + packed > end:
        return None
    data = read(start, packed)
    return data if len(data) == packed else None
