"""Whole zip archives: real torch.save files, every cut of one, and end records that lie."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import pytest

from publish.frameworks.parse.ziptail import directory, member, tail_size, whole
from tests.conftest import need


def _reader(data: bytes):  # type: ignore[no-untyped-def]
    return lambda offset, length: data[offset : offset + length]


def _is_whole(data: bytes) -> bool:
    return whole(len(data), _reader(data))


def _torch_archive(**tensors: int) -> bytes:
    try:
        import torch
    except ImportError:
        need(False, "torch is not installed")
        raise
    buf = io.BytesIO()
    torch.save({k: torch.arange(n) for k, n in tensors.items()} | {"step": 3}, buf)
    return buf.getvalue()


@pytest.mark.torch
def test_a_torch_archive_is_whole_and_every_cut_is_not() -> None:
    data = _torch_archive(a=10, b=300, c=7)
    assert _is_whole(data)
    for cut in range(len(data)):
        assert not _is_whole(data[:cut]), cut


@pytest.mark.torch
def test_the_zip64_end_records_torch_writes_are_checked() -> None:
    data = _torch_archive(a=10)
    loc = len(data) - 22 - 20
    assert data[loc : loc + 4] == b"PK\x06\x07"  # torch writes zip64 end records even for small archives
    (z64,) = struct.unpack_from("<Q", data, loc + 8)
    for where, value in ((loc + 8, z64 + 1), (z64 + 48, 0), (z64 + 32, 99)):  # locator, cd offset, entries
        bad = bytearray(data)
        struct.pack_into("<Q", bad, where, value)
        assert not _is_whole(bytes(bad)), where


def _zip(members: dict[str, bytes], comment: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
        z.comment = comment
    return buf.getvalue()


def test_an_archive_with_a_comment_is_whole() -> None:
    assert _is_whole(_zip({"a": b"x" * 100}, comment=b"PK\x05\x06 looks like an end record"))


def test_reads_are_bounded_to_the_tail_and_the_directory() -> None:
    data = _zip({f"m{i}": b"y" * 5000 for i in range(50)})
    reads: list[tuple[int, int]] = []

    def read(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return data[offset : offset + length]

    assert whole(len(data), read)
    assert reads[0] == (len(data) - tail_size(len(data)), tail_size(len(data)))
    assert len(reads) == 2 and reads[1][1] < 5000  # the central directory, never the members


def _tamper(data: bytes, field: int, fmt: str, value: int) -> bytes:
    at = data.rfind(b"PK\x05\x06")
    out = bytearray(data)
    struct.pack_into(fmt, out, at + field, value)
    return bytes(out)


@pytest.mark.parametrize(
    "field, fmt, value",
    [
        (10, "<H", 3),  # total entries
        (8, "<H", 3),  # entries on this disk
        (12, "<I", 1),  # central directory size
        (16, "<I", 0),  # central directory offset
        (4, "<H", 1),  # disk number
        (20, "<H", 5),  # comment length past the end
    ],
)
def test_end_records_that_disagree_are_not_whole(field: int, fmt: str, value: int) -> None:
    data = _zip({"a": b"1" * 50, "b": b"2" * 60})
    assert _is_whole(data)
    assert not _is_whole(_tamper(data, field, fmt, value))


def test_garbage_and_tiny_files_are_not_whole() -> None:
    assert not _is_whole(b"")
    assert not _is_whole(b"PK\x05\x06" + b"\0" * 18)  # an empty archive holds no payload
    assert not _is_whole(b"\0" * 10_000)
    assert not _is_whole(b"x" * 100 + b"PK\x05\x06" + b"\xff" * 18)


def test_a_member_offset_inside_the_directory_is_not_whole() -> None:
    data = bytearray(_zip({"a": b"1" * 50}))
    cd = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 42, cd)
    assert not _is_whole(bytes(data))


def test_the_directory_lists_each_member_and_each_member_reads_as_zipfile_reads_it() -> None:
    """What the DeepSpeed rule reads data.pkl through: the entries, then one member by its local header."""
    members = {
        "archive/data.pkl": b"\x80\x02}q\x00.",
        "archive/data/0": bytes(range(256)) * 3,
        "archive/version": b"3\n",
    }
    data = _zip(members)
    found = directory(len(data), _reader(data))
    assert found is not None
    entries, end = found
    assert end == data.rfind(b"PK\x05\x06") - sum(
        46 + len(name) for name in members
    )  # the central directory: one 46-byte record and the name per member
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert [(e[0].decode(), e[1], e[2], e[3], e[4], e[5]) for e in entries] == [
            (i.filename, i.compress_type, i.CRC, i.compress_size, i.file_size, i.header_offset)
            for i in z.infolist()
        ]
    assert [member(e, end, _reader(data)) for e in entries] == list(members.values())
    assert directory(len(data) - 1, _reader(data[:-1])) is None


def test_a_member_whose_local_header_disagrees_is_not_read() -> None:
    data = _zip({"a/data.pkl": b"x" * 40, "a/b": b"y" * 40})
    (entries, end) = directory(len(data), _reader(data)) or ([], 0)
    name, method, crc, packed, size, local = entries[0]
    renamed = bytearray(data)
    renamed[local + 30 : local + 30 + len(name)] = b"a/data.pkq"  # the local header names another member
    assert member(entries[0], end, _reader(bytes(renamed))) is None
    assert (
        member((name, method, crc, packed, size, 0xFFFFFFFF), end, _reader(data)) is None
    )  # no header there
    assert (
        member((name, method, crc, end, size, local), end, _reader(data)) is None
    )  # runs into the directory


def _zip64_member(body: bytes) -> bytes:
    """One stored member whose central directory record gives its sizes and offset in a zip64 extra field
    (as a writer does for members past 4 GiB), then the zip64 end records torch writes and the end record."""
    name = b"archive/data.pkl"
    crc = zlib.crc32(body)
    local = struct.pack(
        "<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, 0, 0, 0, crc, len(body), len(body), len(name), 0
    )
    extra = struct.pack("<HHQQQ", 1, 24, len(body), len(body), 0)
    # signature, versions, flags, method, time, date, CRC, sizes (in the extra field), name, extra and
    # comment lengths, disk, attributes, local header offset (in the extra field)
    head = (b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0)
    central = struct.pack("<4sHHHHHHIIIHHHHHII", *head, 0xFFFFFFFF) + name + extra
    cd_offset = len(local) + len(name) + len(body)
    eocd64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, len(central), cd_offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, cd_offset + len(central), 1)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), cd_offset, 0)
    return local + name + body + central + eocd64 + locator + eocd


def test_a_zip64_extra_field_gives_the_sizes_and_the_offset() -> None:
    body = b"\x80\x02K\x01."
    data = _zip64_member(body)
    with zipfile.ZipFile(io.BytesIO(data)) as z:  # the reference reader agrees it is well formed
        assert z.read("archive/data.pkl") == body
    found = directory(len(data), _reader(data))
    assert found is not None
    (entry,), end = found
    assert entry[3:] == (len(body), len(body), 0)
    assert member(entry, end, _reader(data)) == body
