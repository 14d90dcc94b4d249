"""The S3 store: the conformance suite on SeaweedFS and on moto, and what only S3 has (probe, renewal)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from publish.rules import layout
from publish.rules.credentials import Credentials
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure, StoreError
from publish.stores.s3 import PROBE_NAME, S3Store
from tests.support.fault_proxy import FaultProxy, Respond
from tests.support.servers import S3Server, Weed
from tests.support.store_contract import SenderContract, StoreContract

pytestmark = pytest.mark.s3


def fresh_prefix() -> str:
    return "run-" + uuid.uuid4().hex[:12]


def make_store(server: S3Server, bucket: str, prefix: str, **kw: Any) -> S3Store:
    creds = kw.pop("creds", None) or server.credentials()
    return S3Store(bucket, prefix, creds, proxy=None, env={}, **kw)


def file_maker(server: S3Server, bucket: str, prefix: str) -> Callable[..., None]:
    client = server.client()

    def make(path: str, data: bytes = b"") -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path}" if prefix else path, Body=data)

    return make


def unreadable_maker(
    server: S3Server, bucket: str, prefix: str, proxies: list[FaultProxy]
) -> Callable[[str], tuple[S3Store, str]]:
    """A real refusal: the object is there, and the fault proxy in front of the server answers every GET of
    it with a 403 AccessDenied, as a bucket policy denying s3:GetObject does (HEAD and LIST pass)."""
    make = file_maker(server, bucket, prefix)

    def unreadable(folder: str) -> tuple[S3Store, str]:
        path = f"{folder}/model.safetensors"
        make(path, b"weights")
        proxy = FaultProxy(server.endpoint)
        proxies.append(proxy)
        key = f"/{bucket}/{prefix}/{path}" if prefix else f"/{bucket}/{path}"
        proxy.add(Respond(403, "AccessDenied", "Access Denied."), kind="GET", match=lambda r: r.path == key)
        store = make_store(server, bucket, prefix, creds=server.credentials(endpoint=proxy.endpoint))
        return store, path

    return unreadable


@pytest.fixture
def proxies() -> Iterator[list[FaultProxy]]:
    made: list[FaultProxy] = []
    yield made
    for proxy in made:
        proxy.stop()


class TestS3StoreOnSeaweedFS(StoreContract, SenderContract):
    @pytest.fixture
    def store(self, weed: Weed) -> S3Store:
        self.bucket, self.prefix = weed.shared_bucket(), fresh_prefix()
        return make_store(weed, self.bucket, self.prefix)

    @pytest.fixture
    def make_file(self, weed: Weed, store: S3Store) -> Callable[..., None]:
        return file_maker(weed, self.bucket, self.prefix)

    @pytest.fixture
    def peer(self, weed: Weed, store: S3Store) -> Callable[[], S3Store]:
        return lambda: make_store(weed, self.bucket, self.prefix)

    @pytest.fixture
    def unreadable(self, weed: Weed, store: S3Store, proxies: list[FaultProxy]) -> Callable[..., Any]:
        return unreadable_maker(weed, self.bucket, self.prefix, proxies)


class TestS3StoreOnMoto(StoreContract, SenderContract):
    @pytest.fixture
    def store(self, moto_s3: S3Server) -> S3Store:
        self.bucket, self.prefix = moto_s3.shared_bucket(), fresh_prefix()
        return make_store(moto_s3, self.bucket, self.prefix)

    @pytest.fixture
    def make_file(self, moto_s3: S3Server, store: S3Store) -> Callable[..., None]:
        return file_maker(moto_s3, self.bucket, self.prefix)

    @pytest.fixture
    def peer(self, moto_s3: S3Server, store: S3Store) -> Callable[[], S3Store]:
        return lambda: make_store(moto_s3, self.bucket, self.prefix)

    @pytest.fixture
    def unreadable(self, moto_s3: S3Server, store: S3Store, proxies: list[FaultProxy]) -> Callable[..., Any]:
        return unreadable_maker(moto_s3, self.bucket, self.prefix, proxies)


class TestS3StoreWithoutPrefix(StoreContract, SenderContract):
    @pytest.fixture
    def store(self, weed: Weed) -> S3Store:
        self.bucket = weed.create_bucket()
        return make_store(weed, self.bucket, "")

    @pytest.fixture
    def make_file(self, weed: Weed, store: S3Store) -> Callable[..., None]:
        return file_maker(weed, self.bucket, "")

    @pytest.fixture
    def peer(self, weed: Weed, store: S3Store) -> Callable[[], S3Store]:
        return lambda: make_store(weed, self.bucket, "")

    @pytest.fixture
    def unreadable(self, weed: Weed, store: S3Store, proxies: list[FaultProxy]) -> Callable[..., Any]:
        return unreadable_maker(weed, self.bucket, "", proxies)


@pytest.fixture(params=["seaweedfs", "moto"])
def server(request: pytest.FixtureRequest) -> S3Server:
    return request.getfixturevalue("weed" if request.param == "seaweedfs" else "moto_s3")  # type: ignore[no-any-return]


@pytest.fixture
def bucket(server: S3Server) -> str:
    return server.shared_bucket()


@pytest.fixture
def prefix() -> str:
    return fresh_prefix()


def keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    out: list[str] = []
    for page in server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


# -- roots and keys


def test_root_and_location() -> None:
    creds = Credentials("AKID", "secret", endpoint="http://127.0.0.1:9")
    s = S3Store("bkt", "a/b", creds, proxy=None, env={})
    assert s.root == "s3://bkt/a/b"
    assert s.location("pub/x") == "s3://bkt/a/b/pub/x"
    assert s.key("exec/A") == "a/b/exec/A"
    bare = S3Store("bkt", "", creds, proxy=None, env={})
    assert bare.root == "s3://bkt"
    assert bare.key("pub/x") == "pub/x"
    assert not bare.cheap_listing


def test_entries_are_empty_objects_under_pub_seen_by_boto3(
    server: S3Server, bucket: str, prefix: str
) -> None:
    store = make_store(server, bucket, prefix)
    name = layout.name(3, 40, "exec/A/checkpoint-40")
    assert store.create_entry(UNBOUNDED, name)
    obj = server.client().get_object(Bucket=bucket, Key=f"{prefix}/pub/{name}")
    assert obj["Body"].read() == b""


def test_pub_folder_object_and_deeper_keys(server: S3Server, bucket: str, prefix: str) -> None:
    c = server.client()
    c.put_object(Bucket=bucket, Key=f"{prefix}/pub/", Body=b"")
    c.put_object(Bucket=bucket, Key=f"{prefix}/pub/a/b", Body=b"")
    c.put_object(Bucket=bucket, Key=f"{prefix}/pubx", Body=b"")
    assert make_store(server, bucket, prefix).list_entries(UNBOUNDED) == ["a/b"]


def test_holds_the_object_itself(server: S3Server, bucket: str, prefix: str) -> None:
    server.client().put_object(Bucket=bucket, Key=f"{prefix}/exec/A/file", Body=b"1")
    store = make_store(server, bucket, prefix)
    assert store.holds(UNBOUNDED, "exec/A/file")
    assert store.holds(UNBOUNDED, "exec/A")
    assert not store.holds(UNBOUNDED, "exec/A/fil")


def test_each_call_keeps_its_own_deadline(server: S3Server, bucket: str, prefix: str) -> None:
    """A store holds no deadline of its own: calls of two scans interleaved on one store, one scan's
    deadline passed and the other's fresh, each fail or succeed by the deadline handed to them."""
    store = make_store(server, bucket, prefix)
    now = [0.0]
    passed = Deadline(5, clock=lambda: now[0])  # the first scan's, made first
    now[0] = 6.0
    fresh = Deadline(30)  # the second scan's, made after
    timed_out = f"^store: list {re.escape(store.root)}/pub/: " + r"timed out \(the time given was 5s\)$"
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    assert store.create_entry(fresh, name)
    with pytest.raises(StoreError, match=timed_out):
        store.list_entries(passed)
    assert store.list_entries(fresh) == [name]
    with pytest.raises(StoreError, match=timed_out):
        store.list_entries(passed)


def test_listing_more_than_a_page(weed: Weed) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(weed, bucket, prefix)
    names = {layout.name(0, i, f"exec/A/checkpoint-{i}") for i in range(1005)}
    weed.put_many(bucket, (f"{prefix}/pub/{n}" for n in names))
    store.client.sent.clear()
    assert sorted(store.list_entries(UNBOUNDED)) == sorted(names)
    assert store.client.sent["list"] == 2


def test_remove_folder_in_batches_of_1000(weed: Weed) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(weed, bucket, prefix)
    weed.put_many(bucket, (f"{prefix}/exec/A/s-1/f{i}" for i in range(1001)))
    weed.client().put_object(Bucket=bucket, Key=f"{prefix}/exec/A/s-10/keep", Body=b"k")
    store.client.sent.clear()
    assert store.remove_folder(UNBOUNDED, "exec/A/s-1").removed
    assert store.client.sent["delete-objects"] == 2
    assert keys(weed, bucket, prefix) == [f"{prefix}/exec/A/s-10/keep"]


# -- probe


def test_probe_on_a_store_that_honours_conditional_writes(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(
        weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint), token=lambda: "ab12"
    )
    store.probe(UNBOUNDED)
    assert [r.kind for r in fault_proxy.seen] == ["PUT", "GET", "PUT_IF_NONE_MATCH", "LIST", "DELETE"]
    assert fault_proxy.seen[0].path == f"/{bucket}/{prefix}/{PROBE_NAME}ab12"
    assert fault_proxy.seen[3].query["prefix"] == f"{prefix}/pub/"
    assert keys(weed, bucket, prefix) == []


@pytest.mark.parametrize(
    ("step", "rule", "says"),
    [
        ("write", {"kind": "PUT"}, "probe: write: "),
        ("read", {"kind": "GET"}, "probe: read: "),
        ("conditional write", {"kind": "PUT_IF_NONE_MATCH"}, "probe: conditional write: "),
        ("list", {"kind": "LIST"}, "probe: list: "),
        ("delete", {"kind": "DELETE"}, "probe: delete: "),
    ],
)
def test_probe_names_the_step_that_failed(
    weed: Weed,
    fault_proxy: FaultProxy,
    step: str,
    rule: dict[str, str],
    says: str,
) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint))
    fault_proxy.add(Respond(403, "AccessDenied", "Access Denied."), **rule)
    with pytest.raises(StoreError) as e:
        store.probe(UNBOUNDED)
    assert str(e.value).startswith("store: " + says)
    assert "AccessDenied" in str(e.value)


def test_probe_says_when_a_second_conditional_write_succeeds(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint))
    fault_proxy.add(Respond(200), kind="PUT_IF_NONE_MATCH")
    with pytest.raises(StoreError, match="probe: conditional write: .*does not honour conditional writes"):
        store.probe(UNBOUNDED)
    assert fault_proxy.count("PUT") + fault_proxy.count("PUT_IF_NONE_MATCH") == 2


def test_probe_says_when_conditional_writes_are_not_implemented(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    store = make_store(weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint))
    fault_proxy.add(
        Respond(501, "NotImplemented", "A header you provided is not implemented"), kind="PUT_IF_NONE_MATCH"
    )
    with pytest.raises(StoreError, match="probe: conditional write: .*does not honour conditional writes"):
        store.probe(UNBOUNDED)


def test_probe_on_moto(moto_s3: S3Server) -> None:
    bucket = moto_s3.create_bucket()
    make_store(moto_s3, bucket, "").probe(UNBOUNDED)
    assert moto_s3.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# -- renewal


class Renewer:
    def __init__(self, *answers: Credentials | Exception) -> None:
        self.answers = list(answers)
        self.codes: list[str] = []

    def __call__(self, code: str) -> Credentials:
        self.codes.append(code)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


@pytest.fixture
def rotating(weed: Weed) -> Iterator[tuple[Weed, str, str]]:
    weed.set_identity("rotating", "ROTATEKEY0000001", "rotate-secret-1")
    try:
        yield weed, weed.shared_bucket(), fresh_prefix()
    finally:
        weed.remove_identity("rotating")


def test_a_rotated_key_is_renewed_and_the_request_sent_again(rotating: tuple[Weed, str, str]) -> None:
    weed, bucket, prefix = rotating
    old = weed.credentials(access_key_id="ROTATEKEY0000001", secret_access_key="rotate-secret-1")
    new = weed.credentials(access_key_id="ROTATEKEY0000002", secret_access_key="rotate-secret-2")
    renew = Renewer(new)
    store = make_store(weed, bucket, prefix, creds=old, renew=renew)
    assert store.create_entry(UNBOUNDED, layout.name(0, 1, "exec/A/checkpoint-1"))
    weed.set_identity("rotating", "ROTATEKEY0000002", "rotate-secret-2")
    assert store.create_entry(UNBOUNDED, layout.name(0, 2, "exec/A/checkpoint-2"))
    assert renew.codes == ["InvalidAccessKeyId"]
    assert len(store.list_entries(UNBOUNDED)) == 2


def test_a_refused_head_is_recognised_as_a_rotated_key(rotating: tuple[Weed, str, str]) -> None:
    weed, bucket, prefix = rotating
    weed.client().put_object(Bucket=bucket, Key=f"{prefix}/exec/A/step-1/.metadata", Body=b"")
    old = weed.credentials(access_key_id="ROTATEKEY0000001", secret_access_key="rotate-secret-1")
    new = weed.credentials(access_key_id="ROTATEKEY0000003", secret_access_key="rotate-secret-3")
    renew = Renewer(new)
    store = make_store(weed, bucket, prefix, creds=old, renew=renew)
    weed.set_identity("rotating", "ROTATEKEY0000003", "rotate-secret-3")
    assert store.exists(UNBOUNDED, "exec/A/step-1/.metadata")
    assert renew.codes == ["InvalidAccessKeyId"]


def test_without_renew_the_first_refusal_fails(rotating: tuple[Weed, str, str]) -> None:
    weed, bucket, prefix = rotating
    creds = weed.credentials(access_key_id="NOSUCHKEY0000001", secret_access_key="x")
    with pytest.raises(StoreError, match=r"^store: list s3://.*/pub/: InvalidAccessKeyId") as e:
        make_store(weed, bucket, prefix, creds=creds).list_entries(UNBOUNDED)
    assert e.value.code == "InvalidAccessKeyId"


def test_a_second_refusal_fails(rotating: tuple[Weed, str, str]) -> None:
    weed, bucket, prefix = rotating
    bad = weed.credentials(access_key_id="NOSUCHKEY0000001", secret_access_key="secret-value-1")
    renew = Renewer(weed.credentials(access_key_id="NOSUCHKEY0000002", secret_access_key="secret-value-2"))
    with pytest.raises(StoreError, match="InvalidAccessKeyId") as e:
        make_store(weed, bucket, prefix, creds=bad, renew=renew).list_entries(UNBOUNDED)
    assert renew.codes == ["InvalidAccessKeyId"]
    assert "NOSUCHKEY" not in str(e.value) and "secret-value" not in str(e.value)


def test_renewal_to_another_endpoint_or_region_fails(
    weed: Weed,
    fault_proxy: FaultProxy,
) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    creds = weed.credentials(endpoint=fault_proxy.endpoint)
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."))
    for changed, says in (
        ({"endpoint": weed.endpoint}, "another endpoint"),
        ({"region": "eu-west-1"}, "another region"),
    ):
        renew = Renewer(weed.credentials(**{"endpoint": fault_proxy.endpoint, **changed}))
        with pytest.raises(StoreError, match=says):
            make_store(weed, bucket, prefix, creds=creds, renew=renew).list_entries(UNBOUNDED)
        assert renew.codes == ["ExpiredToken"]


def test_expired_token_once_is_renewed(weed: Weed, fault_proxy: FaultProxy) -> None:
    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."), times=1)
    renew = Renewer(weed.credentials(endpoint=fault_proxy.endpoint))
    store = make_store(
        weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint), renew=renew
    )
    assert store.create_entry(UNBOUNDED, layout.name(0, 1, "exec/A/checkpoint-1"))
    assert renew.codes == ["ExpiredToken"]
    assert fault_proxy.count("PUT_IF_NONE_MATCH") == 2


def test_a_renewer_that_fails_stops_the_request(weed: Weed, fault_proxy: FaultProxy) -> None:
    from publish.rules.errors import CredentialsError

    bucket, prefix = weed.shared_bucket(), fresh_prefix()
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."), times=1)
    renew = Renewer(CredentialsError("no source answered: secret:/x: no such directory"))
    store = make_store(
        weed, bucket, prefix, creds=weed.credentials(endpoint=fault_proxy.endpoint), renew=renew
    )
    with pytest.raises(CredentialsError, match="no source answered"):
        store.list_entries(UNBOUNDED)


def test_a_save_on_an_s3_root_is_not_a_source_of_uploads(weed: Weed) -> None:
    store = make_store(weed, weed.shared_bucket(), fresh_prefix())
    with pytest.raises(
        Failure, match=r"^s3://.*/exec/A/checkpoint-1: a save on an S3 root is not uploaded elsewhere$"
    ):
        store.open_save(UNBOUNDED, "exec/A/checkpoint-1")
