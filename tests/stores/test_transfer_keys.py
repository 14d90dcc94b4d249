"""An upload to an S3 root while its keys are rotated: the threads renew them once for all, and no
multipart upload is left behind, whatever order the store and the source change in.

The old key is the SeaweedFS admin's; the new one an identity of its own.  The fault proxy in front of
SeaweedFS refuses the old key from the moment of the rotation (InvalidAccessKeyId, as a store does), and the
``file:`` source is rewritten by the test.  boto3 is the independent reader of what is left."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from publish.rules.credentials import Credentials
from publish.rules.deadline import Deadline
from publish.rules.errors import UploadError
from publish.stores.posix import PosixStore
from publish.stores.s3 import S3Store
from publish.stores.transfer import MIB, upload_save
from tests.conftest import remember_secret
from tests.support.fault_proxy import Action, FaultProxy, ProxyHandler, RefuseKey
from tests.support.netfixtures import Seen
from tests.support.s3roots import creds_dir
from tests.support.servers import Weed

pytestmark = pytest.mark.s3

PART = 5 * MIB
JOBS = 8


class Rotation:
    """A save of eight small files and one of two parts, a ``file:`` source holding the old key, and the new
    key the store accepts; ``reads`` lists the key each resolution of the source gave."""

    def __init__(self, weed: Weed, proxy: FaultProxy, tmp: Path) -> None:
        self.weed, self.proxy = weed, proxy
        self.old = weed.access_key
        self.new = ("AKNEW" + uuid.uuid4().hex[:15].upper(), "new-secret-" + uuid.uuid4().hex)
        remember_secret(*self.new)
        weed.set_identity("rotated-" + uuid.uuid4().hex[:8], *self.new)
        self.spec = creds_dir(tmp, weed, endpoint=proxy.endpoint)
        self.folder = Path(self.spec[len("file:") :])
        fast = tmp / "fast"
        for i in range(JOBS):  # the first unit of each thread: eight PUTs at once
            (fast / "s").mkdir(parents=True, exist_ok=True)
            (fast / "s" / f"a-{i}.bin").write_bytes(os.urandom(1000 + i))
        (fast / "s" / "z-big.distcp").write_bytes(os.urandom(PART + 100))
        self.src = PosixStore(str(fast))
        self.reads: list[str] = []
        self.rotated = threading.Event()
        from publish.creds import sources

        creds, _ = sources.resolve(self.spec, {}, 10)

        def renew(code: str) -> Credentials:
            fresh, _ = sources.resolve(self.spec, {}, 10)
            self.reads.append(fresh.access_key_id)
            return fresh

        self.dst = S3Store(
            weed.shared_bucket(), "keys-" + uuid.uuid4().hex[:8], creds, proxy=None, env={}, renew=renew
        )

    def write_new_key(self) -> None:
        """Rotate the source: the new key's files replace the old ones'."""
        for name, value in (("access_key_id", self.new[0]), ("secret_access_key", self.new[1])):
            tmp = self.folder / f".{name}.tmp"
            tmp.write_text(value + "\n")
            tmp.chmod(0o600)
            os.replace(tmp, self.folder / name)

    def refuse_old_key(self) -> None:
        """From the moment ``rotated`` is set, the store refuses the old key."""
        self.proxy.add(RefuseKey(), match=RefuseKey.signed_with(self.old, self.rotated.is_set))

    def upload(self) -> list[tuple[str, int, str]]:
        return upload_save(Deadline(60), self.src, "s", self.dst, jobs=JOBS, part_size=PART)

    def open_uploads(self) -> list[str]:
        s3 = self.weed.client()
        answer = s3.list_multipart_uploads(Bucket=self.dst.bucket, Prefix=self.dst.prefix + "/")
        return [u["Key"] for u in answer.get("Uploads", [])]

    def objects(self) -> dict[str, bytes]:
        s3 = self.weed.client()
        out = {}
        for item in s3.list_objects_v2(Bucket=self.dst.bucket, Prefix=self.dst.prefix + "/").get(
            "Contents", []
        ):
            body = s3.get_object(Bucket=self.dst.bucket, Key=item["Key"])["Body"].read()
            out[item["Key"][len(self.dst.prefix) + 1 :]] = body
        return out


class Then(Action):
    """Call ``before(req)``, then act as ``action`` (forward when None)."""

    def __init__(self, before: Any, action: Action | None = None) -> None:
        self.before, self.action = before, action

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        self.before(req)
        if self.action is None:
            proxy.forward(h, req)
        else:
            self.action.handle(proxy, h, req)


def _first_put(r: Seen) -> bool:
    return r.method == "PUT" and "x-amz-checksum-crc32" in r.headers


def test_threads_refused_by_the_same_key_resolve_the_source_once(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """Issue #31, "Each of the 8 upload threads also re-reads the sources on its own": the source holds the
    new key, then the store refuses the old one while eight threads are sending with it.  The upload goes on
    with the new key, every file lands, and the source was read once for the eight refusals, not once a
    thread (on the code before: once for each thread refused)."""
    r = Rotation(weed, fault_proxy, tmp_path)

    def rotate(req: Seen) -> None:
        if not r.rotated.is_set():
            r.rotated.set()  # later requests are refused, each answered once the new key is written
            r.write_new_key()

    gate = RefuseKey(together=4)  # the first four refusals are answered together
    fault_proxy.add(Then(rotate, gate), match=_first_put, times=1)  # the very first PUT rotates
    fault_proxy.add(gate, match=RefuseKey.signed_with(r.old, r.rotated.is_set))
    rows = r.upload()
    assert [row[0] for row in rows] == [*(f"a-{i}.bin" for i in range(JOBS)), "z-big.distcp"]
    files = {f"s/{p.name}": p.read_bytes() for p in (tmp_path / "fast" / "s").iterdir()}
    assert r.objects() == files
    assert r.reads == [r.new[0]]  # one resolution of -creds served every thread
    assert gate.refused >= 4  # several threads were refused by the old key, not one
    assert r.open_uploads() == []


def test_keys_refused_before_the_new_ones_are_written_leave_no_multipart_upload(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """Issue #31, "Keys rotated mid-upload leave a multipart upload behind": the store refuses the old key
    while a multipart upload is open, and the source is rewritten only after the abort was refused twice
    (the one renewal a request gets).  The upload fails naming the refusal, and the abort, sent again with
    the renewed keys as the retry policy says, leaves no multipart upload in the store (on the code before,
    the abort was given up after its one renewal, and the upload stayed)."""
    r = Rotation(weed, fault_proxy, tmp_path)
    aborts: list[str] = []

    def abort_refused(req: Seen) -> None:
        aborts.append(req.method)
        if len(aborts) == 2:
            r.write_new_key()

    part = fault_proxy.add(
        Then(lambda req: r.rotated.set(), RefuseKey()), method="PUT", query="partNumber", times=1
    )
    is_abort = RefuseKey.signed_with(r.old, r.rotated.is_set)
    fault_proxy.add(
        Then(abort_refused, RefuseKey()),
        match=lambda q: q.method == "DELETE" and "uploadId" in q.query and is_abort(q),
    )
    r.refuse_old_key()
    with pytest.raises(UploadError, match=r"upload of .*/s/.*: store: .*InvalidAccessKeyId"):
        r.upload()
    assert part.used == 1
    assert len(aborts) >= 2
    assert r.open_uploads() == []
    assert r.reads[-1] == r.new[0]  # the abort that landed was signed with the new key
