"""Whole zip archives: real torch.save files, every cut of one, and end records that lie."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from publish.ziptail import tail_size, whole
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
