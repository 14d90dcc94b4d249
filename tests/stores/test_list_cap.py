"""One whole listing is capped: a store that answers every LIST "truncated" with a fresh token is refused once
the listing passes ``LIST_ENTRIES`` entries or ``LIST_NAMES`` bytes of names, instead of being read (and held)
until ``-timeout``.  SeaweedFS answers each LIST for real; a proxy in front marks each answer truncated."""

from __future__ import annotations

import io
import re
import threading
import uuid
from pathlib import Path

import pytest

from publish.cli import main
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import StoreError
from publish.s3 import s3client
from publish.s3.s3client import S3Client
from publish.s3.s3xml import Listing
from tests.support.fault_proxy import Action, FaultProxy, ProxyHandler
from tests.support.netfixtures import Seen
from tests.support.s3roots import Root
from tests.support.secret_log import record_output
from tests.support.servers import Weed

pytestmark = pytest.mark.s3

ENDLESS = "the listing passed {}: refused (a store that keeps answering truncated)"


class EndlessTruncation(Action):
    """Forward the LIST, then send SeaweedFS's answer back as truncated, with a token never sent before.

    SeaweedFS takes a token as the key to list after: ``!fresh-N`` sorts before every key, so each page it
    answers holds the same keys again, as a store that went wrong might."""

    def __init__(self) -> None:
        self.tokens = 0
        self.lock = threading.Lock()

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        status, reason, _, body = proxy.upstream_call(req)
        with self.lock:
            self.tokens += 1
            token = f"!fresh-{self.tokens}"
        body = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", body)
        body = re.sub(
            rb"<IsTruncated>\w+</IsTruncated>",
            b"<IsTruncated>true</IsTruncated><NextContinuationToken>%s</NextContinuationToken>"
            % token.encode(),
            body,
        )
        h.send_response(status, reason)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


class Kept(Listing):
    """A Listing that the test can look at after ``list`` raised: what the client held when it stopped."""

    last: Kept | None = None

    def __init__(self) -> None:
        super().__init__()
        Kept.last = self


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> type[Kept]:
    monkeypatch.setattr(s3client, "Listing", Kept)
    Kept.last = None
    return Kept


def client(weed: Weed, endpoint: str) -> tuple[S3Client, str]:
    return S3Client(weed.credentials(endpoint=endpoint), weed.shared_bucket()), "cap-" + uuid.uuid4().hex[:12]


def utf8(names: list[str]) -> int:
    return sum(len(n.encode("utf-8")) for n in names)


def held(listing: Listing | None) -> int:
    assert listing is not None
    return len(listing.keys) + len(listing.prefixes)


def test_an_endless_listing_is_refused_once_it_passes_the_entry_cap(
    weed: Weed, fault_proxy: FaultProxy, kept: type[Kept], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    weed.put_many(c.bucket, [f"{p}/k{i}" for i in range(5)])
    monkeypatch.setattr(s3client, "LIST_ENTRIES", 42)
    fault_proxy.add(EndlessTruncation(), kind="LIST")
    with pytest.raises(StoreError) as e:
        c.list(f"{p}/", deadline=Deadline(60))
    assert str(e.value) == f"store: list s3://{c.bucket}/{p}/: " + ENDLESS.format("42 entries")
    assert (e.value.op, e.value.thing) == ("list", f"s3://{c.bucket}/{p}/")
    # Eight pages of five are kept (40); the ninth would make 45, and is refused before it is kept.
    assert fault_proxy.count("LIST") == 9
    assert held(kept.last) == 40


def test_an_endless_listing_is_refused_once_it_passes_the_cap_on_names(
    weed: Weed, fault_proxy: FaultProxy, kept: type[Kept], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    keys = [f"{p}/файл-{i}" for i in range(5)]  # counted in UTF-8 bytes, two a Cyrillic letter
    weed.put_many(c.bucket, keys)
    page = utf8(keys)
    cap = 3 * page + page // 2
    monkeypatch.setattr(s3client, "LIST_NAMES", cap)
    fault_proxy.add(EndlessTruncation(), kind="LIST")
    with pytest.raises(StoreError) as e:
        c.list(f"{p}/", deadline=Deadline(60))
    assert str(e.value) == f"store: list s3://{c.bucket}/{p}/: " + ENDLESS.format(f"{cap} bytes of names")
    assert fault_proxy.count("LIST") == 4
    assert kept.last is not None and kept.last.keys == sorted(keys) * 3
    assert utf8(kept.last.keys) <= cap


def test_a_real_listing_at_the_caps_is_listed_in_full(
    weed: Weed, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, p = client(weed, fault_proxy.endpoint)
    keys = sorted([f"{p}/k{i}" for i in range(7)] + [f"{p}/a/x", f"{p}/b/y"])
    weed.put_many(c.bucket, keys)
    flat = [k for k in keys if "/a/" not in k and "/b/" not in k]
    # Seven keys and two common prefixes, in pages of two: nine entries, at both caps exactly.
    names = utf8(flat) + utf8([f"{p}/a/", f"{p}/b/"])
    monkeypatch.setattr(s3client, "LIST_ENTRIES", 9)
    monkeypatch.setattr(s3client, "LIST_NAMES", names)
    got = c.list(f"{p}/", "/", max_keys=2, deadline=Deadline(60))
    assert (got.keys, got.prefixes) == (flat, [f"{p}/a/", f"{p}/b/"])
    assert fault_proxy.count("LIST") == 5
    # One entry fewer allowed, or one byte, and the same real listing is refused.
    for cap, value, what in (
        ("LIST_ENTRIES", 8, "8 entries"),
        ("LIST_NAMES", names - 1, f"{names - 1} bytes of names"),
    ):
        with monkeypatch.context() as m:
            m.setattr(s3client, cap, value)
            with pytest.raises(StoreError, match=re.escape(ENDLESS.format(what))):
                c.list(f"{p}/", "/", max_keys=2, deadline=Deadline(60))


def test_resolve_reports_an_endless_listing_as_a_store_error(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Root(weed, tmp_path, endpoint=fault_proxy.endpoint)
    root.put("exec/A/checkpoint-1/model.bin")
    root.put("pub/" + layout.name(0, 1, "exec/A/checkpoint-1"))
    # The caps are module constants: lowered here, so the command runs in this process, binary or not.
    monkeypatch.setattr(s3client, "LIST_ENTRIES", 3)
    fault_proxy.add(EndlessTruncation(), kind="LIST")
    out, err = io.StringIO(), io.StringIO()
    args = ["resolve", "-checkpoint", root.url, "-creds", root.creds, "-timeout", "60s"]
    code = main(args, {}, out, err)
    record_output("resolve", out.getvalue(), err.getvalue())
    assert (code, out.getvalue()) == (1, "")
    assert err.getvalue() == f"publish: store: list {root.url}/pub/: " + ENDLESS.format("3 entries") + "\n"
    assert fault_proxy.count("LIST") == 4
