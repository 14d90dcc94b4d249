"""The S3 client against SeaweedFS (and moto), with the fault proxy for what a healthy server never does.

boto3 is the independent reader and writer: what our client writes, boto3 reads, and the other way round.
"""

from __future__ import annotations

import math
import time
import uuid
import zlib
from typing import Any

import pytest

from publish.rules.deadline import Deadline
from publish.rules.errors import StoreError
from publish.s3.s3client import GET_LIMIT, S3Client
from tests.support.fault_proxy import Drop, FaultProxy, ForwardThenDrop, Respond, Stall
from tests.support.netfixtures import Seen
from tests.support.servers import S3Server, Weed

pytestmark = pytest.mark.s3


class Waits:
    """An injected sleep that records the waits and lets no time pass."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def prefix() -> str:
    return "c-" + uuid.uuid4().hex[:12]


def client(server: S3Server, endpoint: str | None = None, **kw: Any) -> tuple[S3Client, str]:
    creds = kw.pop("creds", None) or server.credentials(**({"endpoint": endpoint} if endpoint else {}))
    return S3Client(creds, kw.pop("bucket", None) or server.shared_bucket(), **kw), prefix()


@pytest.fixture(params=["seaweedfs", "moto"])
def server(request: pytest.FixtureRequest) -> S3Server:
    return request.getfixturevalue("weed" if request.param == "seaweedfs" else "moto_s3")  # type: ignore[no-any-return]


# -- what boto3 sees


def test_put_get_head_delete_agree_with_boto3(server: S3Server) -> None:
    c, p = client(server)
    key = f"{p}/exec/A/checkpoint 1/trainer_state+ü.json"
    c.put(key, b'{"global_step": 1}')
    assert server.client().get_object(Bucket=c.bucket, Key=key)["Body"].read() == b'{"global_step": 1}'
    assert c.get(key) == b'{"global_step": 1}'
    head = c.head(key)
    assert head is not None and head["content-length"] == "18"
    c.delete(key)
    assert "Contents" not in server.client().list_objects_v2(Bucket=c.bucket, Prefix=p)
    assert c.get(key) is None
    assert c.head(key) is None
    c.delete(key)  # a missing one is fine


def test_conditional_put_creates_once(server: S3Server) -> None:
    c, p = client(server)
    assert c.put_if_absent(f"{p}/pub/e") is True
    assert c.put_if_absent(f"{p}/pub/e") is False
    assert server.client().head_object(Bucket=c.bucket, Key=f"{p}/pub/e")["ContentLength"] == 0


ODD = ["a b", "a+b", "a%2Bb", "ü/ñ x", "plus+/x", "tab\tx", "amp&=?#", "100%", "~tilde", "star*"]


def test_listed_keys_and_prefixes_are_decoded(server: S3Server) -> None:
    c, p = client(server)
    s3 = server.client()
    for k in ODD:
        s3.put_object(Bucket=c.bucket, Key=f"{p}/{k}", Body=b"")
    listing = c.list(f"{p}/")
    assert sorted(listing.keys) == sorted(f"{p}/{k}" for k in ODD)
    folders = c.list(f"{p}/", "/")
    assert sorted(folders.prefixes) == [f"{p}/plus+/", f"{p}/ü/"]
    assert sorted(folders.keys) == sorted(f"{p}/{k}" for k in ODD if "/" not in k)


def test_list_asks_for_url_encoding(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    c.list(f"{p}/")
    assert fault_proxy.seen[0].query["encoding-type"] == "url"
    assert fault_proxy.seen[0].query["list-type"] == "2"


# -- counts


def test_a_full_list_is_one_request_per_1000_keys(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    n = 2345
    weed.put_many(c.bucket, (f"{p}/k{i:05d}" for i in range(n)))
    fault_proxy.reset()
    keys = c.list(f"{p}/").keys
    assert keys == [f"{p}/k{i:05d}" for i in range(n)]
    assert fault_proxy.count("LIST") == math.ceil(n / 1000) == c.sent["list"]
    assert [r.query.get("continuation-token", "") != "" for r in fault_proxy.seen] == [False, True, True]
    # One page only, when asked (holds).
    assert len(c.list(f"{p}/", max_keys=1, pages=1).keys) == 1


def test_delete_objects_is_one_request_per_1000_keys(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    m = 2001
    keys = [f"{p}/f{i}" for i in range(m)]
    weed.put_many(c.bucket, keys)
    fault_proxy.reset()
    c.delete_objects(keys + [f"{p}/never-there"])
    assert fault_proxy.count("DELETE_OBJECTS") == math.ceil((m + 1) / 1000) == 3
    assert all("content-md5" in r.headers for r in fault_proxy.seen)
    assert b"<Quiet>true</Quiet>" in fault_proxy.seen[0].body
    assert weed.client().list_objects_v2(Bucket=c.bucket, Prefix=p)["KeyCount"] == 0


def test_delete_objects_removes_exactly_the_keys_named_whatever_they_hold(weed: Weed) -> None:
    """A carriage return written as it is reads back as a line feed (the wrong key deleted); a C0 control
    cannot be written in XML at all (MalformedXML, and the prune fails): the one is a character reference,
    the other deleted by its path."""
    c, p = client(weed)
    doomed = [f"{p}/x\ry", f"{p}/x\r\ny", f"{p}/x\x01y", f"{p}/x\x1b[2Jy", f"{p}/plain"]
    kept = [f"{p}/x\ny", f"{p}/xy"]
    for key in doomed + kept:
        c.put(key, b"1")
    c.delete_objects(doomed)
    listed = weed.client().list_objects_v2(Bucket=c.bucket, Prefix=p)
    assert sorted(o["Key"] for o in listed.get("Contents", [])) == sorted(kept)


def test_a_per_key_delete_error_fails_naming_the_key(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Error><Key>{p}/b</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        "</DeleteResult>"
    ).encode()
    fault_proxy.add(Respond(200, body=body), kind="DELETE_OBJECTS")
    with pytest.raises(
        StoreError, match=rf"^store: delete s3://{c.bucket}/{p}/b: AccessDenied: Access Denied$"
    ):
        c.delete_objects([f"{p}/a", f"{p}/b"])


def test_a_per_key_delete_error_with_a_control_character_is_quoted(
    weed: Weed, fault_proxy: FaultProxy
) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Error><Key>{p}/b</Key><Code>AccessDenied&#13;</Code><Message>no&#x2028;pe</Message></Error>"
        "</DeleteResult>"
    ).encode()
    fault_proxy.add(Respond(200, body=body), kind="DELETE_OBJECTS")
    with pytest.raises(StoreError) as e:
        c.delete_objects([f"{p}/a", f"{p}/b"])
    assert str(e.value) == f'store: delete s3://{c.bucket}/{p}/b: "AccessDenied\\r": "no\\u2028pe"'


# -- size cap


def test_get_refuses_an_object_over_the_cap_naming_key_and_size(weed: Weed) -> None:
    c, p = client(weed)
    weed.client().put_object(Bucket=c.bucket, Key=f"{p}/big", Body=b"\0" * (GET_LIMIT + 1))
    with pytest.raises(
        StoreError, match=rf"get s3://{c.bucket}/{p}/big: the object is {GET_LIMIT + 1} bytes"
    ):
        c.get(f"{p}/big", GET_LIMIT * 2)  # the cap holds whatever the caller asks
    weed.client().put_object(Bucket=c.bucket, Key=f"{p}/ok", Body=b"x" * 100)
    with pytest.raises(StoreError, match="the object is 100 bytes, over the limit of 99 bytes"):
        c.get(f"{p}/ok", 99)
    assert c.get(f"{p}/ok", 100) == b"x" * 100


# -- errors and credentials


def test_another_4xx_fails_at_once_with_operation_key_code_message(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    fault_proxy.add(Respond(403, "AccessDenied", "Access Denied."))
    with pytest.raises(StoreError) as e:
        c.get(f"{p}/x")
    assert str(e.value) == f"store: get s3://{c.bucket}/{p}/x: AccessDenied: Access Denied."
    assert (e.value.code, e.value.status) == ("AccessDenied", 403)
    assert fault_proxy.count() == 1


def test_missing_bucket_is_an_error_not_an_empty_answer(weed: Weed) -> None:
    c, _ = client(weed, bucket="no-such-bucket-" + uuid.uuid4().hex[:8])
    with pytest.raises(StoreError, match="NoSuchBucket"):
        c.list("x/")
    with pytest.raises(StoreError, match="NoSuchBucket"):
        c.get("x")


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"secret_access_key": "wrong-secret-value"}, "SignatureDoesNotMatch"),
        ({"access_key_id": "AKIDNOTKNOWN0001"}, "InvalidAccessKeyId"),
    ],
)
def test_wrong_keys_are_refused(weed: Weed, changes: dict[str, str], code: str) -> None:
    creds = weed.credentials(**changes)
    c, p = client(weed, creds=creds)
    for call in (lambda: c.list(f"{p}/"), lambda: c.put_if_absent(f"{p}/e"), lambda: c.get(f"{p}/e")):
        with pytest.raises(StoreError) as e:
            call()
        assert e.value.code == code
        assert all(s not in str(e.value) for s in creds.secrets())
    with pytest.raises(StoreError) as e:
        c.head(f"{p}/e")  # no body in a HEAD error: the code is still found
    assert e.value.code == code


def test_expired_token_without_renewal_fails_at_once(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."), times=1)
    with pytest.raises(StoreError, match=": ExpiredToken: ") as e:
        c.list(f"{p}/")
    assert e.value.code == "ExpiredToken"
    assert fault_proxy.count() == 1


def test_session_token_is_sent(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, creds=weed.credentials(endpoint=fault_proxy.endpoint, session_token="TOKEN-VALUE"))
    with pytest.raises(StoreError):
        c.list(f"{p}/")  # SeaweedFS refuses a session token it did not issue
    assert fault_proxy.seen[0].headers["x-amz-security-token"] == "TOKEN-VALUE"
    assert "x-amz-security-token" in fault_proxy.seen[0].headers["authorization"]


# -- retries of idempotent requests


@pytest.mark.parametrize(
    "action",
    [
        Respond(500, "InternalError", "We encountered an internal error."),
        Respond(502),
        Respond(503, "SlowDown", "Reduce your request rate."),
        Respond(504),
        Drop(),
    ],
    ids=["500", "502", "503-SlowDown", "504", "drop"],
)
@pytest.mark.parametrize("kind", ["LIST", "GET", "HEAD", "DELETE", "DELETE_OBJECTS"])
def test_idempotent_requests_are_retried(
    weed: Weed,
    fault_proxy: FaultProxy,
    kind: str,
    action: Any,
) -> None:
    waits = Waits()
    c, p = client(weed, fault_proxy.endpoint, sleep=waits, rand=lambda: 1.0)
    weed.client().put_object(Bucket=c.bucket, Key=f"{p}/k", Body=b"v")
    fault_proxy.add(action, kind=kind, times=2)
    call = {
        "LIST": lambda: c.list(f"{p}/").keys == [f"{p}/k"],
        "GET": lambda: c.get(f"{p}/k") == b"v",
        "HEAD": lambda: c.head(f"{p}/k") is not None,
        "DELETE": lambda: c.delete(f"{p}/k") is None,
        "DELETE_OBJECTS": lambda: c.delete_objects([f"{p}/k"]) is None,
    }[kind]
    assert call()
    assert fault_proxy.count(kind) == 3
    assert waits.waits == [0.1, 0.2]  # exponential backoff (rand 1.0: the top of each range)


def test_slowdown_with_any_status_is_retried(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    fault_proxy.add(Respond(400, "SlowDown", "Reduce your request rate."), kind="LIST", times=1)
    assert c.list(f"{p}/").keys == []
    assert fault_proxy.count("LIST") == 2


def test_backoff_is_jittered(weed: Weed, fault_proxy: FaultProxy) -> None:
    waits = Waits()
    c, p = client(weed, fault_proxy.endpoint, sleep=waits, rand=lambda: 0.0)
    fault_proxy.add(Respond(503, "SlowDown"), kind="LIST", times=3)
    c.list(f"{p}/")
    assert waits.waits == [0.05, 0.1, 0.2]


def test_retries_stop_when_the_time_is_out(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    fault_proxy.add(Respond(500, "InternalError", "We encountered an internal error."), kind="GET")
    deadline = Deadline(1.0)
    start = time.monotonic()
    with pytest.raises(StoreError, match=rf"^store: get s3://{c.bucket}/{p}/k: InternalError: .*out of time"):
        c.get(f"{p}/k", deadline=deadline)
    assert time.monotonic() - start < 1.2
    assert fault_proxy.count("GET") >= 3


def test_retries_are_bounded_without_a_deadline(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    fault_proxy.add(Drop(), kind="GET")
    with pytest.raises(StoreError, match="gave up after 8 attempts"):
        c.get(f"{p}/k")
    assert fault_proxy.count("GET") == 8


def _is(method: str, *, query: str = "", without: tuple[str, ...] = (), header: str = "") -> Any:
    """A predicate on the proxy's requests: this method, this query parameter (or none of ``without``)."""

    def match(r: Seen) -> bool:
        return (
            r.method == method
            and (not query or query in r.query)
            and not any(w in r.query for w in without)
            and (not header or header in r.headers)
            and "if-none-match" not in r.headers
        )

    return match


#: Every request the client sends, by operation: how to pick it out of the proxy's requests.
KINDS = {
    "put": _is("PUT", without=("partNumber", "uploadId")),
    "put-if-absent": lambda r: r.kind == "PUT_IF_NONE_MATCH",
    "get": _is("GET", without=("list-type", "uploads", "uploadId", "range")),
    "get-range": lambda r: r.method == "GET" and "range" in r.headers,
    "head": _is("HEAD"),
    "list": lambda r: r.kind == "LIST",
    "delete": _is("DELETE", without=("uploadId",)),
    "delete-objects": lambda r: r.kind == "DELETE_OBJECTS",
    "list-uploads": _is("GET", query="uploads"),
    "list-parts": _is("GET", query="uploadId"),
    "abort": _is("DELETE", query="uploadId"),
    "create-upload": _is("POST", query="uploads"),
    "upload-part": _is("PUT", query="partNumber"),
    "complete-upload": _is("POST", query="uploadId"),
    "put-bytes": _is("PUT", without=("partNumber",), header="x-amz-checksum-crc32"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_request_is_sent_again_after_a_slowdown(weed: Weed, fault_proxy: FaultProxy, kind: str) -> None:
    """Issue #31, "One 503 SlowDown throws a finished upload away": every request the client sends goes through
    the one retry policy, so one 503 SlowDown on any of them is waited out and sent again, never the end of
    the command.  (On the code before, the plain PUT a manifest is written with failed at once.)"""
    from publish.stores.transfer import crc_text

    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    s3 = weed.client()
    key = f"{p}/man/00000000000000000001-00000000000000000002-AB"
    s3.put_object(Bucket=c.bucket, Key=key, Body=b"manifest bytes\n")
    body = b"part bytes"
    crc = crc_text(zlib.crc32(body))
    upload = (
        c.create_upload(f"{p}/big")
        if kind in ("list-parts", "abort", "upload-part", "complete-upload")
        else ""
    )
    etag = c.upload_part(f"{p}/big", upload, 1, body, crc) if kind == "complete-upload" else ""
    fault_proxy.add(Respond(503, "SlowDown", "Reduce your request rate."), match=KINDS[kind], times=1)
    call = {
        "put": lambda: c.put(key, b"manifest bytes\n") is None,
        "put-if-absent": lambda: c.put_if_absent(f"{p}/pub/e") is True,
        "get": lambda: c.get(key) == b"manifest bytes\n",
        "get-range": lambda: c.get_range(key, 9, 5) == b"bytes",
        "head": lambda: c.head(key) is not None,
        "list": lambda: c.list(f"{p}/man/").keys == [key],
        "delete": lambda: c.delete(key) is None,
        "delete-objects": lambda: c.delete_objects([key]) is None,
        "list-uploads": lambda: c.list_uploads(f"{p}/") == [],
        "list-parts": lambda: c.list_parts(f"{p}/big", upload) == [],
        "abort": lambda: c.abort_upload(f"{p}/big", upload) is True,
        "create-upload": lambda: bool(c.create_upload(f"{p}/big")),
        "upload-part": lambda: bool(c.upload_part(f"{p}/big", upload, 1, body, crc)),
        "complete-upload": lambda: c.complete_upload(f"{p}/big", upload, [(etag, crc)]) is not None,
        "put-bytes": lambda: bool(c.put_bytes(f"{p}/small", body, crc)),
    }[kind]
    assert call()
    assert (
        sum(1 for r in fault_proxy.seen if KINDS[kind](r)) == 2
    )  # the refused send, and the one that landed


@pytest.mark.parametrize("kind", ["LIST", "GET", "PUT_IF_NONE_MATCH"])
def test_every_request_finishes_by_the_deadline(weed: Weed, fault_proxy: FaultProxy, kind: str) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    fault_proxy.add(Stall(30), kind=kind)
    deadline = Deadline(0.8)
    start = time.monotonic()
    with pytest.raises(StoreError, match="timed out"):
        {
            "LIST": lambda: c.list(f"{p}/", deadline=deadline),
            "GET": lambda: c.get(f"{p}/k", deadline=deadline),
            "PUT_IF_NONE_MATCH": lambda: c.put_if_absent(f"{p}/e", deadline=deadline),
        }[kind]()
    assert time.monotonic() - start < 1.0


def test_a_deadline_already_past_sends_nothing(weed: Weed, fault_proxy: FaultProxy) -> None:
    now = [100.0]
    c, p = client(weed, fault_proxy.endpoint, clock=lambda: now[0])
    deadline = Deadline(5, clock=lambda: now[0])
    now[0] = 105.0
    with pytest.raises(StoreError, match=r"list .*: timed out \(the time given was 5s\)"):
        c.list(f"{p}/", deadline=deadline)
    assert fault_proxy.count() == 0


# -- the conditional entry PUT


def test_conditional_put_dropped_after_landing_is_already_published(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    fault_proxy.add(ForwardThenDrop(), kind="PUT_IF_NONE_MATCH", times=1)
    assert c.put_if_absent(f"{p}/pub/e") is False
    assert fault_proxy.count("PUT_IF_NONE_MATCH") == 2
    assert weed.client().head_object(Bucket=c.bucket, Key=f"{p}/pub/e")["ContentLength"] == 0


def test_conditional_put_dropped_before_landing_is_created(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    fault_proxy.add(Drop(), kind="PUT_IF_NONE_MATCH", times=1)
    assert c.put_if_absent(f"{p}/pub/e") is True
    assert fault_proxy.count("PUT_IF_NONE_MATCH") == 2


@pytest.mark.parametrize(("conflicts", "rand"), [(1, 0.0), (3, 0.0), (3, 1.0)])
def test_conflicts_are_sent_again_with_jittered_waits(
    weed: Weed,
    fault_proxy: FaultProxy,
    conflicts: int,
    rand: float,
) -> None:
    waits = Waits()
    c, p = client(weed, fault_proxy.endpoint, sleep=waits, rand=lambda: rand)
    fault_proxy.add(
        Respond(409, "ConditionalRequestConflict", "A conflicting operation is in progress."), times=conflicts
    )
    assert c.put_if_absent(f"{p}/pub/e") is True
    assert fault_proxy.count("PUT_IF_NONE_MATCH") == conflicts + 1
    ranges = [(0.05, 0.1), (0.1, 0.2), (0.2, 0.4)][:conflicts]
    assert waits.waits == [lo if rand == 0.0 else hi for lo, hi in ranges]


def test_conflicts_then_412_is_already_published(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint, sleep=Waits())
    weed.client().put_object(Bucket=c.bucket, Key=f"{p}/pub/e", Body=b"")
    fault_proxy.add(Respond(409, "ConditionalRequestConflict"), times=2)
    assert c.put_if_absent(f"{p}/pub/e") is False


def test_four_conflicts_fail(weed: Weed, fault_proxy: FaultProxy) -> None:
    waits = Waits()
    c, p = client(weed, fault_proxy.endpoint, sleep=waits, rand=lambda: 0.5)
    fault_proxy.add(Respond(409, "ConditionalRequestConflict", "A conflicting operation is in progress."))
    with pytest.raises(
        StoreError, match=rf"^store: put s3://{c.bucket}/{p}/pub/e: ConditionalRequestConflict: .*4 attempts"
    ) as e:
        c.put_if_absent(f"{p}/pub/e")
    assert e.value.code == "ConditionalRequestConflict"
    assert fault_proxy.count("PUT_IF_NONE_MATCH") == 4
    assert waits.waits == pytest.approx([0.075, 0.15, 0.3])


def test_not_implemented_conditional_put_says_so(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    fault_proxy.add(
        Respond(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
    )
    with pytest.raises(StoreError, match="does not honour conditional writes"):
        c.put_if_absent(f"{p}/pub/e")
    assert fault_proxy.count() == 1


def test_conditional_put_sends_the_header(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    c.put_if_absent(f"{p}/pub/e")
    assert fault_proxy.seen[0].headers["if-none-match"] == "*"
    assert fault_proxy.seen[0].body == b""


def test_a_listed_key_that_is_not_utf8_is_an_error(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated><Contents><Key>{p}/%FF</Key></Contents>"
        "</ListBucketResult>"
    ).encode()
    fault_proxy.add(Respond(200, body=body), kind="LIST")
    with pytest.raises(
        StoreError, match=rf"list s3://{c.bucket}/{p}/: the store listed a key that is not UTF-8"
    ):
        c.list(f"{p}/")


def test_a_truncated_listing_without_a_token_is_an_error(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    body = b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"
    fault_proxy.add(Respond(200, body=body), kind="LIST")
    with pytest.raises(StoreError, match="truncated listing without a token"):
        c.list(f"{p}/")


def test_a_refusal_carries_its_fields_and_renders_them(weed: Weed, fault_proxy: FaultProxy) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    fault_proxy.add(Respond(403, "AccessDenied", "Access Denied."), kind="GET")
    with pytest.raises(StoreError) as caught:
        c.get(f"{p}/k")
    e = caught.value
    assert (e.op, e.thing, e.code, e.status) == ("get", f"s3://{c.bucket}/{p}/k", "AccessDenied", 403)
    assert e.detail == "AccessDenied: Access Denied."
    assert str(e) == f"store: get s3://{c.bucket}/{p}/k: AccessDenied: Access Denied."
    stepped = e.in_step("read")
    assert str(stepped) == f"store: probe: read: get s3://{c.bucket}/{p}/k: AccessDenied: Access Denied."
    assert (stepped.code, stepped.status, stepped.step) == ("AccessDenied", 403, "read")
