"""publish.stores.transfer.upload_save against SeaweedFS and moto, and the fault proxy in front of SeaweedFS:
objects land byte-identical (read back with boto3), faults mid-part are retried, a lying store fails the
upload naming the file, a file that changes while it is read fails, links inside a save are refused."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest

from publish.rules.deadline import Deadline
from publish.rules.errors import UploadError
from publish.stores import transfer
from publish.stores.posix import PosixStore
from publish.stores.s3 import S3Store
from publish.stores.transfer import MIB, upload_save
from tests.support.fault_proxy import Action, Drop, FaultProxy, ForwardThenDrop, ProxyHandler, Respond
from tests.support.netfixtures import Seen
from tests.support.servers import S3Server, Weed

pytestmark = pytest.mark.s3

PART = 5 * MIB


def dst_store(server: S3Server, bucket: str, endpoint: str | None = None) -> S3Store:
    creds = server.credentials(**({"endpoint": endpoint} if endpoint else {}))
    return S3Store(bucket, "mirror-" + uuid.uuid4().hex[:8], creds, proxy=None, env={})


def write(root: Path, rel: str, data: bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def blob(n: int, seed: int = 0) -> bytes:
    """``n`` bytes that differ from part to part (a shifted part would not compare equal)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    out = bytearray()
    i = 0
    while len(out) < n:
        out += block[: min(len(block), n - len(out))]
        out[-1:] = bytes([i % 251])
        i += 1
    return bytes(out)


def objects(server: S3Server, store: S3Store) -> dict[str, bytes]:
    """Every object under the store's prefix, read with boto3 (an independent client), by key below it."""
    s3 = server.client()
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=store.prefix + "/"):
        for item in page.get("Contents", []):
            key = item["Key"]
            out[key[len(store.prefix) + 1 :]] = s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    return out


def open_uploads(server: S3Server, store: S3Store) -> list[str]:
    s3 = server.client()
    answer = s3.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix + "/")
    return [u["Key"] for u in answer.get("Uploads", [])]


@pytest.fixture
def src(tmp_path: Path) -> tuple[Path, PosixStore]:
    root = tmp_path / "fast"
    root.mkdir()
    return root, PosixStore(str(root))


def test_part_sizes_keep_memory_bounded() -> None:
    assert transfer.default_part(8) == 8 * MIB
    assert transfer.default_part(1) == 64 * MIB
    assert transfer.default_part(64) == 5 * MIB
    # a file that would need more than 10,000 parts gets larger ones, and fewer threads hold them
    assert transfer.part_of(10_000 * 8 * MIB + 1, 8 * MIB) == 9 * MIB
    threads, buffer = transfer.plan([1 << 40], 8, 8 * MIB)
    assert buffer == 105 * MIB and threads == 1
    threads, buffer = transfer.plan([300 * MIB], 8, 8 * MIB)
    assert (threads, buffer) == (8, 8 * MIB)
    threads, buffer = transfer.plan([100, 200], 8, 8 * MIB)  # small files: small buffers, no idle threads
    assert (threads, buffer) == (2, 200)


def test_composite_checksum_is_the_crc_of_the_part_crcs() -> None:
    a, b = zlib.crc32(b"a" * 10), zlib.crc32(b"b" * 10)
    assert transfer.composite([a, b]) == transfer.crc_text(
        zlib.crc32(a.to_bytes(4, "big") + b.to_bytes(4, "big"))
    )


def test_a_save_lands_byte_identical(s3_server: S3Server, bucket: str, src: tuple[Path, PosixStore]) -> None:
    root, posix = src
    names = ["a+b", "per%cent", "with space", "unicodé ✓", "sub/dir/x.distcp", "pub", "man", "empty"]
    data = {n: blob(1000 + i * 7, i) for i, n in enumerate(names)}
    data["empty"] = b""
    data["big-1.distcp"] = blob(PART * 2 + 12345, 100)  # 3 parts, the last short
    data["big-2.distcp"] = blob(PART * 3, 101)  # parts of exactly the part size
    for rel, d in data.items():
        write(root, f"step-7/{rel}", d)
    dst = dst_store(s3_server, bucket)
    rows = upload_save(Deadline(120), posix, "step-7", dst, jobs=4, part_size=PART)
    assert rows == sorted((p, len(d), hashlib.sha256(d).hexdigest()) for p, d in data.items())
    got = objects(s3_server, dst)
    assert got == {f"step-7/{p}": d for p, d in data.items()}
    assert open_uploads(s3_server, dst) == []


def test_a_save_that_is_one_file(s3_server: S3Server, bucket: str, src: tuple[Path, PosixStore]) -> None:
    root, posix = src
    big = blob(PART + 1, 3)
    write(root, "ckpts/epoch=1-step=5.ckpt", big)
    dst = dst_store(s3_server, bucket)
    rows = upload_save(Deadline(60), posix, "ckpts/epoch=1-step=5.ckpt", dst, jobs=2, part_size=PART)
    assert rows == [("", len(big), hashlib.sha256(big).hexdigest())]
    assert objects(s3_server, dst) == {"ckpts/epoch=1-step=5.ckpt": big}


def test_many_small_files_and_a_few_multipart_ones(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore]
) -> None:
    root, posix = src
    data = {f"shard/{i:04d}.bin": blob(i * 13 % 4000, i) for i in range(300)}
    data.update({f"model-{i}.distcp": blob(PART * 2 + i, 50 + i) for i in range(3)})
    for rel, d in data.items():
        write(root, f"s/{rel}", d)
    dst = dst_store(weed, weed_bucket)
    rows = upload_save(Deadline(180), posix, "s", dst, jobs=8, part_size=PART)
    assert [r[0] for r in rows] == sorted(data)
    assert objects(weed, dst) == {f"s/{p}": d for p, d in data.items()}


def test_expect_names_the_file_that_differs(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore]
) -> None:
    root, posix = src
    write(root, "s/a", b"aaa")
    write(root, "s/b", b"bbb")
    dst = dst_store(weed, weed_bucket)
    good = [("a", 3, hashlib.sha256(b"aaa").hexdigest()), ("b", 3, hashlib.sha256(b"bbb").hexdigest())]
    assert upload_save(Deadline(30), posix, "s", dst, expect=good) == good
    wrong_digest = [good[0], ("b", 3, hashlib.sha256(b"bbc").hexdigest())]
    with pytest.raises(UploadError, match=r"upload of .*/s/b: its SHA-256 is "):
        upload_save(Deadline(30), posix, "s", dst, expect=wrong_digest)
    with pytest.raises(UploadError, match=r"upload of .*/s/b: 3 bytes, the fast root's manifest says 4"):
        upload_save(Deadline(30), posix, "s", dst, expect=[good[0], ("b", 4, None)])
    with pytest.raises(UploadError, match=r"/s/c: in the fast root's manifest, but not in the save"):
        upload_save(Deadline(30), posix, "s", dst, expect=[*good, ("c", 1, None)])
    with pytest.raises(UploadError, match=r"/s/b: in the save, but not in the fast root's manifest"):
        upload_save(Deadline(30), posix, "s", dst, expect=[good[0]])


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_link_inside_a_save_is_refused_naming_it(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], tmp_path: Path, where: str
) -> None:
    root, posix = src
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "key").write_bytes(b"not part of the save")
    write(root, "s/a", b"aaa")
    (root / "s" / "link").symlink_to(secret / "key" if where == "file" else secret)
    dst = dst_store(weed, weed_bucket)
    with pytest.raises(
        UploadError, match=r"upload of .*/s/link: a symbolic link inside a save is not uploaded"
    ):
        upload_save(Deadline(30), posix, "s", dst)
    assert objects(weed, dst) == {}


def test_a_fifo_is_refused_never_opened(weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore]) -> None:
    root, posix = src
    write(root, "s/a", b"aaa")
    os.mkfifo(root / "s" / "pipe")
    with pytest.raises(UploadError, match=r"/s/pipe: a FIFO, not a regular file"):
        upload_save(Deadline(30), posix, "s", dst_store(weed, weed_bucket))


class Hook(Action):
    """Forward, calling ``before(req)`` first (once per matching request)."""

    def __init__(self, before: Any) -> None:
        self.before = before

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        self.before(req)
        proxy.forward(h, req)


def test_a_file_that_grows_during_the_upload_fails(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    root, posix = src
    path = root / "s" / "grows.distcp"
    write(root, "s/grows.distcp", blob(PART * 3, 9))

    def append(req: Seen) -> None:
        with open(path, "ab") as f:
            f.write(b"more")

    fault_proxy.add(Hook(append), method="PUT", query="partNumber", times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(
        UploadError, match=r"upload of .*/s/grows\.distcp: changed while it was being uploaded"
    ):
        upload_save(Deadline(60), posix, "s", dst, jobs=1, part_size=PART)
    assert open_uploads(weed, dst) == []  # aborted
    assert objects(weed, dst) == {}


def test_a_file_touched_during_the_upload_fails(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    """Same size, same bytes, a new mtime: a writer was there, and what was read may mix two versions."""
    root, posix = src
    path = root / "s" / "touched.distcp"
    write(root, "s/touched.distcp", blob(PART * 3, 9))
    write(root, "s/other", b"o")
    fault_proxy.add(Hook(lambda req: os.utime(path, (1, 1))), method="PUT", query="partNumber", times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(UploadError, match=r"/s/touched\.distcp: changed while it was being uploaded"):
        upload_save(Deadline(60), posix, "s", dst, jobs=1, part_size=PART)
    assert open_uploads(weed, dst) == []


def test_bytes_altered_on_the_way_are_refused_by_the_store(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    """The CRC32 sent with a part is checked by SeaweedFS: a part whose bytes change on the way (one bit)
    is refused (BadDigest, not sent again), and the upload fails naming the file."""
    root, posix = src
    write(root, "s/big.distcp", blob(PART * 2 + 3, 5))

    class Flip(Action):
        def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
            body = bytearray(req.body)
            body[len(body) // 2] ^= 1
            proxy.forward(h, Seen(req.method, req.target, req.headers, bytes(body)))

    fault_proxy.add(Flip(), method="PUT", match=lambda r: "partNumber=2" in r.target, times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(UploadError, match=r"upload of .*/s/big\.distcp: store: upload-part s3://.*BadDigest"):
        upload_save(Deadline(60), posix, "s", dst, jobs=2, part_size=PART)
    assert open_uploads(weed, dst) == []
    assert objects(weed, dst) == {}


def test_a_file_truncated_during_the_upload_fails(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    root, posix = src
    path = root / "s" / "shrinks.distcp"
    write(root, "s/shrinks.distcp", blob(PART * 3, 9))
    fault_proxy.add(Hook(lambda req: os.truncate(path, PART + 10)), method="PUT", query="partNumber", times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(UploadError, match=r"/s/shrinks\.distcp: changed while it was being uploaded"):
        upload_save(Deadline(60), posix, "s", dst, jobs=1, part_size=PART)
    assert open_uploads(weed, dst) == []


@pytest.mark.parametrize(
    "fault",
    [Respond(500, "InternalError"), Respond(503, "SlowDown"), Drop(), ForwardThenDrop()],
    ids=["500", "503-slowdown", "dropped", "landed-then-dropped"],
)
def test_a_fault_mid_part_is_retried(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy, fault: Action
) -> None:
    root, posix = src
    data = {"big.distcp": blob(PART * 3 + 5, 1), "small": b"x" * 1000}
    for rel, d in data.items():
        write(root, f"s/{rel}", d)
    fault_proxy.add(fault, method="PUT", match=lambda r: "partNumber=2" in r.target, times=2)
    fault_proxy.add(fault, method="PUT", path="/small", times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    rows = upload_save(Deadline(60), posix, "s", dst, jobs=3, part_size=PART)
    assert [r[0] for r in rows] == ["big.distcp", "small"]
    assert objects(weed, dst) == {f"s/{p}": d for p, d in data.items()}
    assert sum(1 for r in fault_proxy.seen if "partNumber=2" in r.target) == 3


class Rewrite(Action):
    """Forward, then change the answer's headers or body with ``change(headers, body)``."""

    def __init__(self, change: Any) -> None:
        self.change = change

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        status, reason, headers, body = proxy.upstream_call(req)
        headers, body = self.change(dict((k.lower(), v) for k, v in headers), body)
        h.send_response(status, reason)
        for k, v in headers.items():
            if k not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                h.send_header(k, v)
        h.send_header(
            "Content-Length",
            headers.get("content-length", str(len(body))) if req.method == "HEAD" else str(len(body)),
        )
        h.end_headers()
        if req.method != "HEAD":
            h.wfile.write(body)


def _set(name: str, value: str) -> Any:
    def change(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
        headers[name] = value
        return headers, body

    return change


@pytest.mark.parametrize(
    ("case", "rule", "message"),
    [
        (
            "part checksum",
            {"method": "PUT", "query": "partNumber", "times": 1},
            r"the store computed the CRC32 AAAAAA== of the bytes it received",
        ),
        ("put checksum", {"method": "PUT", "path": "/small"}, r"the store computed the CRC32 AAAAAA=="),
        ("head checksum", {"method": "HEAD"}, r"the store keeps the checksum AAAAAA=="),
        ("head size", {"method": "HEAD"}, r"the store holds 7 bytes at s3://.*/s/big\.distcp, not "),
        (
            "listed size",
            {"method": "GET", "query": "list-type"},
            r"the store lists 999 bytes at s3://.*/s/small, not 1000",
        ),
    ],
)
def test_a_store_that_lies_fails_the_upload_naming_the_file(
    weed: Weed,
    weed_bucket: str,
    src: tuple[Path, PosixStore],
    fault_proxy: FaultProxy,
    case: str,
    rule: dict[str, Any],
    message: str,
) -> None:
    root, posix = src
    write(root, "s/big.distcp", blob(PART * 2 + 1, 4))
    write(root, "s/small", b"y" * 1000)
    if case == "head size":
        change = _set("content-length", "7")
    elif case == "listed size":

        def change(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
            return headers, re.sub(rb"(/small</Key>.*?<Size>)1000<", rb"\g<1>999<", body)

    else:
        change = _set("x-amz-checksum-crc32", "AAAAAA==")
    fault_proxy.add(Rewrite(change), **rule)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(UploadError, match=r"upload of .*/s/(big\.distcp|small): .*" + message):
        upload_save(Deadline(60), posix, "s", dst, jobs=2, part_size=PART)
    if case in ("part checksum", "put checksum"):
        assert open_uploads(weed, dst) == []


def test_a_refusal_names_the_file_and_aborts_the_uploads(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    root, posix = src
    for i in range(3):
        write(root, f"s/big-{i}.distcp", blob(PART * 3, i))
    fault_proxy.add(
        Respond(403, "AccessDenied"),
        method="PUT",
        match=lambda r: "big-1" in r.path and "partNumber=3" in r.target,
    )
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(
        UploadError, match=r"upload of .*/s/big-1\.distcp: store: upload-part s3://.*AccessDenied"
    ):
        upload_save(Deadline(60), posix, "s", dst, jobs=3, part_size=PART)
    assert open_uploads(weed, dst) == []
    assert fault_proxy.count() > 0


def test_the_deadline_bounds_the_upload(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    root, posix = src
    write(root, "s/big.distcp", blob(PART * 2, 1))
    from tests.support.fault_proxy import Stall

    fault_proxy.add(Stall(30), method="PUT", query="partNumber")
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    started = threading.Event()
    started.set()
    import time

    t0 = time.monotonic()
    with pytest.raises(UploadError, match=r"/s/big\.distcp: .*timed out"):
        upload_save(Deadline(2), posix, "s", dst, jobs=2, part_size=PART)
    assert time.monotonic() - t0 < 15


class Interrupted(Exception):
    pass


def test_an_exception_from_a_signal_handler_stops_the_threads_and_aborts(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy
) -> None:
    """What run's SIGTERM handler raises in the main thread ends the upload at once: no thread takes another
    part, the multipart uploads are aborted, and the handler's exception is what the caller gets."""
    import signal
    import time

    root, posix = src
    for i in range(2):
        write(root, f"s/big-{i}.distcp", blob(PART * 4, i))

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        fault_proxy.add(
            Hook(lambda req: os.kill(os.getpid(), signal.SIGUSR1)), method="PUT", query="partNumber", times=1
        )
        dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            upload_save(Deadline(60), posix, "s", dst, jobs=2, part_size=PART)
        assert time.monotonic() - t0 < 20
    finally:
        signal.signal(signal.SIGUSR1, old)
    parts = [r for r in fault_proxy.seen if "partNumber" in r.query]
    assert len(parts) <= 4  # the first, and at most one more per thread, of 8
    assert open_uploads(weed, dst) == []
    assert [
        t.name for t in threading.enumerate() if t.name.startswith("publish-upload")
    ] == []  # the workers ended


def test_a_file_swapped_for_a_link_after_the_walk_is_not_followed(
    weed: Weed, weed_bucket: str, src: tuple[Path, PosixStore], fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """The walk saw a regular file; by the time it is opened it is a link to a file outside the save: the
    open (O_NOFOLLOW) refuses it, and the outside file's bytes never leave."""
    root, posix = src
    outside = tmp_path / "secret"
    outside.write_bytes(b"outside the save")
    write(root, "s/a", b"aaa")
    write(root, "s/b", b"bbb")
    target = root / "s" / "b"

    def swap(req: Seen) -> None:
        target.unlink()
        target.symlink_to(outside)

    fault_proxy.add(Hook(swap), method="PUT", path="/s/a", times=1)
    dst = dst_store(weed, weed_bucket, fault_proxy.endpoint)
    with pytest.raises(UploadError, match=r"upload of .*/s/b: replaced by a symbolic link while it was read"):
        upload_save(Deadline(30), posix, "s", dst, jobs=1)
    assert all(b"outside the save" not in r.body for r in fault_proxy.seen)
    assert "s/b" not in objects(weed, dst)
