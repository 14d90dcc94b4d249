"""A broken or hostile S3 server (and Vault) cannot make the command delete wrong things, loop, or exhaust
memory: a loopback server that signs nothing answers LIST, GET and DeleteObjects with crafted bodies."""

from __future__ import annotations

import http.server
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import pytest

from publish.rules import layout
from publish.rules.credentials import Credentials
from publish.rules.deadline import Deadline
from publish.rules.errors import StoreError
from publish.s3.s3client import DELETE_LIMIT, LIST_LIMIT, S3Client
from publish.stores.s3 import S3Store
from tests.conftest import remember_secret, run_cli

BUCKET = "hostile"
PREFIX = "run"
#: What a hostile server sends at most before it gives up on a client that keeps reading.
SEND_AT_MOST = 96 * 1024 * 1024
#: What the client may have let through before it stopped reading: its cap, plus what the loopback socket
#: buffers hold on both sides.
READ_AT_MOST = 32 * 1024 * 1024


@dataclass
class Request:
    method: str
    path: str  # the key part, decoded, without /BUCKET/
    query: dict[str, str]
    body: bytes

    @property
    def kind(self) -> str:
        if self.method == "GET" and self.query.get("list-type") == "2":
            return "LIST"
        if self.method == "POST" and "delete" in self.query:
            return "DELETE_OBJECTS"
        return self.method


Reply = Callable[["Handler", Request], None]


#: A GET of a key that is not there.
NO_SUCH_KEY = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code></Error>"


@dataclass
class Hostile:
    """A loopback "S3": ``reply(handler, request)`` writes each answer; ``seen`` lists the requests and
    ``sent`` counts the body bytes the server managed to write before the client went away."""

    reply: Reply
    seen: list[Request] = field(default_factory=list)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kinds(self) -> list[str]:
        with self.lock:
            return [r.kind for r in self.seen]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _any(self) -> None:
        owner: Hostile = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        path = unquote(split.path)
        path = path[len(f"/{BUCKET}/") :] if path.startswith(f"/{BUCKET}/") else ""
        req = Request(self.command, path, dict(parse_qsl(split.query, keep_blank_values=True)), body)
        with owner.lock:
            owner.seen.append(req)
        owner.reply(self, req)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    # -- answers

    def answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def endless(self, status: int = 200, how: str = "chunked") -> None:
        """A body that never ends (chunked, or close-delimited), until the client stops reading."""
        owner: Hostile = self.server.owner
        self.send_response(status)
        if how == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        piece = b"<ListBucketResult>" + b"<Contents><Key>run/pub/x</Key></Contents>" * 1600
        frame = b"%x\r\n%s\r\n" % (len(piece), piece) if how == "chunked" else piece
        deadline = time.monotonic() + 60
        try:
            while owner.sent < SEND_AT_MOST and time.monotonic() < deadline:
                self.wfile.write(frame)
                with owner.lock:
                    owner.sent += len(piece)
        except OSError:
            return

    def huge_length(self, status: int = 200, length: int = 10 * 1000**3) -> None:
        """Claim ``length`` bytes, send a little, then hold on until the client goes away."""
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.write(b"<ListBucketResult>")
            self.wfile.flush()
            self.connection.settimeout(30)
            self.connection.recv(1)  # returns when the client closes
        except OSError:
            return


def listing(
    keys: list[str] = [],  # noqa: B006 - read only
    prefixes: list[str] = [],  # noqa: B006 - read only
    truncated: str = "false",
    token: str | None = None,
) -> bytes:
    """A ListObjectsV2 page, keys URL-encoded as asked."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?>']
    parts.append('<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
    parts.append(
        f"<Name>{BUCKET}</Name><EncodingType>url</EncodingType><IsTruncated>{truncated}</IsTruncated>"
    )
    if token is not None:
        parts.append(f"<NextContinuationToken>{token}</NextContinuationToken>")
    parts += [f"<Contents><Key>{quote(k)}</Key><Size>0</Size></Contents>" for k in keys]
    parts += [f"<CommonPrefixes><Prefix>{quote(p)}</Prefix></CommonPrefixes>" for p in prefixes]
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()


DELETED = b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult></DeleteResult>'


@pytest.fixture
def hostile() -> Iterator[Callable[[Reply], tuple[Hostile, str]]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(reply: Reply) -> tuple[Hostile, str]:
        owner = Hostile(reply)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.owner = owner  # type: ignore[attr-defined]
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return owner, f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


KEY_ID, SECRET = "HOSTILEKEY000001", "hostile-secret-000001"


def store(endpoint: str) -> S3Store:
    creds = Credentials(KEY_ID, SECRET, endpoint=endpoint, region="us-east-1")
    return S3Store(BUCKET, PREFIX, creds, proxy=None, env={}, sleep=lambda s: None)


def s3client(endpoint: str) -> S3Client:
    return store(endpoint).client


def creds_dir(tmp: Path, endpoint: str) -> str:
    d = tmp / f"creds-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    values = {
        "access_key_id": KEY_ID,
        "secret_access_key": SECRET,
        "endpoint": endpoint,
        "region": "us-east-1",
    }
    for name, value in values.items():
        (d / name).write_text(value + "\n")
        (d / name).chmod(0o600)
    remember_secret(KEY_ID, SECRET)
    return f"file:{d}"


def cli(tmp: Path, endpoint: str, verb: str, *args: str) -> Any:
    return run_cli(
        verb,
        "-checkpoint",
        f"s3://{BUCKET}/{PREFIX}",
        "-creds",
        creds_dir(tmp, endpoint),
        "-timeout",
        "20s",
        *args,
    )


def entry(step: int, path: str | None = None) -> str:
    return layout.name(0, step, path or f"exec/A/checkpoint-{step}")


# ------------------------------------------------------------------------------ keys outside the prefix


def ignores_prefix(keys: list[str]) -> Reply:
    """A store that answers every LIST with the same keys, whatever prefix was asked for."""

    def reply(h: Handler, req: Request) -> None:
        if req.kind == "LIST":
            h.answer(200, listing(keys))
        elif req.kind == "DELETE_OBJECTS":
            h.answer(200, DELETED)
        else:
            h.answer(200, b"")

    return reply


EVERYTHING = [
    f"{PREFIX}/exec/A/checkpoint-1/model.bin",
    f"{PREFIX}/exec/A/checkpoint-3/model.bin",
    f"{PREFIX}/pub/{entry(1)}",
    f"{PREFIX}/pub/{entry(2)}",
    f"{PREFIX}/pub/{entry(3)}",
    "other-run/data.bin",
]


def test_prune_deletes_nothing_when_a_list_holds_a_key_outside_its_prefix(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    srv, url = hostile(ignores_prefix(EVERYTHING))
    r = cli(tmp_path, url, "prune", "-keep", "1")
    assert r.code == 1
    assert r.err == (
        f"publish: store: list s3://{BUCKET}/{PREFIX}/pub/: the store returned "
        f"{PREFIX}/exec/A/checkpoint-1/model.bin, outside the prefix\n"
    )
    assert "DELETE_OBJECTS" not in srv.kinds() and "DELETE" not in srv.kinds()


def test_prune_deletes_no_object_of_a_folder_whose_listing_holds_a_key_outside_it(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    deleted: set[str] = set()

    def reply(h: Handler, req: Request) -> None:
        if req.kind == "GET" and req.path.startswith(f"{PREFIX}/man/"):
            h.answer(404, NO_SUCH_KEY)  # entries made before manifests: a prune has nothing to check
        elif req.kind == "LIST" and req.query["prefix"] == f"{PREFIX}/pub/":
            names = [f"{PREFIX}/pub/{entry(1)}", f"{PREFIX}/pub/{entry(2)}"]
            h.answer(200, listing([n for n in names if n not in deleted]))
        elif req.kind == "LIST" and req.query["prefix"] == f"{PREFIX}/tomb/":
            h.answer(200, listing([]))  # no prune was interrupted here
        elif req.kind == "LIST" and req.query.get("max-keys") == "1":  # does a save exist: an honest answer
            h.answer(200, listing([req.query["prefix"] + "w"]))
        elif req.kind == "LIST" and req.query["prefix"].startswith(f"{PREFIX}/exec/"):
            # the old folder's listing strays into its sibling
            h.answer(200, listing([f"{PREFIX}/exec/A/checkpoint-1/w", f"{PREFIX}/exec/A/checkpoint-2/w"]))
        elif req.kind == "LIST":
            h.answer(200, listing([]))
        else:
            if req.kind == "DELETE_OBJECTS":
                deleted.update(re.findall(r"<Key>([^<]*)</Key>", req.body.decode()))
            h.answer(200, DELETED)

    srv, url = hostile(reply)
    r = cli(tmp_path, url, "prune", "-keep", "1")
    assert r.code == 1
    assert r.err == (
        f"publish: store: list s3://{BUCKET}/{PREFIX}/exec/A/checkpoint-1/: the store returned "
        f"{PREFIX}/exec/A/checkpoint-2/w, outside the prefix\n"
    )
    deletes = [req.body.decode() for req in srv.seen if req.kind == "DELETE_OBJECTS"]
    # The entry, then its manifest; no object of a folder.
    assert len(deletes) == 2 and f"<Key>{PREFIX}/pub/{entry(1)}</Key>" in deletes[0], deletes
    assert f"<Key>{PREFIX}/man/{entry(1)}</Key>" in deletes[1] and "/exec/" not in "".join(deletes), deletes


def test_publish_refuses_a_save_that_only_a_key_outside_the_prefix_seems_to_hold(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    srv, url = hostile(ignores_prefix(["other-run/exec/A/checkpoint-9/model.bin"]))
    r = cli(tmp_path, url, "publish", f"s3://{BUCKET}/{PREFIX}/exec/A/checkpoint-9", "9")
    assert r.code == 1
    assert "outside the prefix" in r.err and r.err.startswith("publish: store: list ")
    assert "PUT" not in srv.kinds()


def test_resolve_fails_on_a_key_outside_the_prefix(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    _, url = hostile(ignores_prefix(EVERYTHING))
    r = cli(tmp_path, url, "resolve")
    assert (r.code, r.out) == (1, "")
    assert "outside the prefix" in r.err


BELOW = "not one element below the prefix"


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("elsewhere/", "elsewhere/, outside the prefix"),
        ("else\u2028where/", '"else\\u2028where/", outside the prefix'),  # quoted: it holds a line break
        (f"{PREFIX}/exec/A/deeper/", f"the common prefix {PREFIX}/exec/A/deeper/, {BELOW}"),
        (f"{PREFIX}/exec/A", f"the common prefix {PREFIX}/exec/A, {BELOW}"),  # no delimiter
        (f"{PREFIX}/exec/", f"the common prefix {PREFIX}/exec/, {BELOW}"),  # the prefix itself
    ],
)
def test_a_common_prefix_that_is_not_one_element_below_is_an_error(
    hostile: Callable[[Reply], tuple[Hostile, str]], prefix: str, why: str
) -> None:
    def reply(h: Handler, req: Request) -> None:
        h.answer(200, listing(prefixes=[f"{PREFIX}/exec/B/", prefix]))

    _, url = hostile(reply)
    with pytest.raises(StoreError) as e:
        store(url).list_folders(Deadline(20), "exec")
    assert str(e.value) == f"store: list s3://hostile/run/exec/: the store returned {why}"


def test_keys_under_the_prefix_are_listed(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    def reply(h: Handler, req: Request) -> None:
        if req.query.get("delimiter"):
            h.answer(200, listing(prefixes=[f"{PREFIX}/exec/A/", f"{PREFIX}/exec/B/"]))
        else:
            h.answer(200, listing([f"{PREFIX}/pub/", f"{PREFIX}/pub/{entry(1)}"]))

    _, url = hostile(reply)
    s = store(url)
    assert s.list_entries(Deadline(20)) == [entry(1)]
    assert s.list_folders(Deadline(20), "exec") == ["A", "B"]


# ------------------------------------------------------------------------------ bodies without end


@pytest.mark.parametrize("how", ["chunked", "close"])
def test_an_endless_list_body_is_refused_at_the_cap(
    hostile: Callable[[Reply], tuple[Hostile, str]], how: str
) -> None:
    srv, url = hostile(lambda h, req: h.endless(how=how))
    with pytest.raises(
        StoreError, match=rf"list s3://hostile/run/pub/: the answer is more than {LIST_LIMIT} bytes"
    ):
        store(url).list_entries(Deadline(20))
    assert srv.sent < READ_AT_MOST
    assert srv.kinds() == ["LIST"]  # refused, never sent again


def test_a_huge_content_length_is_refused_before_reading(
    hostile: Callable[[Reply], tuple[Hostile, str]],
) -> None:
    srv, url = hostile(lambda h, req: h.huge_length())
    t0 = time.monotonic()
    with pytest.raises(
        StoreError,
        match=rf"list s3://hostile/run/pub/: the answer is 10000000000 bytes, over the limit of {LIST_LIMIT}",
    ):
        store(url).list_entries(Deadline(20))
    assert time.monotonic() - t0 < 10
    assert srv.kinds() == ["LIST"]


def test_an_endless_delete_objects_answer_is_refused(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    srv, url = hostile(lambda h, req: h.endless())
    with pytest.raises(StoreError, match=rf"delete-objects .*: the answer is more than {DELETE_LIMIT} bytes"):
        s3client(url).delete_objects([f"{PREFIX}/pub/{entry(1)}"])
    assert srv.sent < READ_AT_MOST


@pytest.mark.parametrize("op", ["get", "list", "put", "delete"])
def test_an_endless_error_body_is_refused_at_64_kib(
    hostile: Callable[[Reply], tuple[Hostile, str]], op: str
) -> None:
    srv, url = hostile(lambda h, req: h.endless(status=400))
    c = s3client(url)
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: c.get(f"{PREFIX}/x"),
        "list": lambda: c.list(f"{PREFIX}/pub/"),
        "put": lambda: c.put(f"{PREFIX}/x", b"y"),
        "delete": lambda: c.delete(f"{PREFIX}/x"),
    }
    with pytest.raises(
        StoreError, match=r"larger than the limit of 65536 bytes|HTTP 400 answer is more than 65536"
    ):
        calls[op]()
    assert srv.sent < READ_AT_MOST
    assert len(srv.seen) == 1


def test_an_endless_503_is_sent_again_like_any_503(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    def reply(h: Handler, req: Request) -> None:
        if len(h.server.owner.seen) <= 2:
            h.endless(status=503)
        else:
            h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"]))

    srv, url = hostile(reply)
    assert store(url).list_entries(Deadline(20)) == [entry(1)]
    assert srv.kinds() == ["LIST", "LIST", "LIST"]
    assert srv.sent < READ_AT_MOST


def test_an_endless_503_fails_once_out_of_attempts(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    srv, url = hostile(lambda h, req: h.endless(status=503))
    c = s3client(url)
    with pytest.raises(
        StoreError, match=r"HTTP 503 answer is more than 65536 bytes.*\(gave up after 8 attempts\)"
    ):
        c.list(f"{PREFIX}/pub/", deadline=Deadline.none())  # no deadline: a bounded number of sends
    assert len(srv.seen) == 8


def test_a_get_error_with_a_huge_length_is_refused(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    _, url = hostile(lambda h, req: h.huge_length(status=404))
    with pytest.raises(StoreError, match=r"get s3://hostile/run/x: the HTTP 404 answer is 10000000000 bytes"):
        s3client(url).get(f"{PREFIX}/x")


def test_the_cli_reports_an_endless_list_as_a_store_error(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    srv, url = hostile(lambda h, req: h.endless())
    r = cli(tmp_path, url, "resolve")
    assert (r.code, r.out) == (1, "")
    assert r.err == (
        f"publish: store: list s3://{BUCKET}/{PREFIX}/pub/: the answer is more than {LIST_LIMIT} bytes, "
        f"over the limit of {LIST_LIMIT} bytes\n"
    )
    assert srv.sent < READ_AT_MOST


# ------------------------------------------------------------------------------ pages without end


def test_a_repeated_continuation_token_is_an_error(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    def reply(h: Handler, req: Request) -> None:
        h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"], truncated="true", token="always-the-same"))

    srv, url = hostile(reply)
    with pytest.raises(
        StoreError, match="list s3://hostile/run/pub/: the store sent a continuation token it had sent before"
    ):
        store(url).list_entries(Deadline(5))
    assert srv.kinds() == ["LIST", "LIST"]


def test_a_token_cycle_is_an_error(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    def reply(h: Handler, req: Request) -> None:
        nxt = {"": "a", "a": "b", "b": "a"}[req.query.get("continuation-token", "")]
        h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"], truncated="true", token=nxt))

    srv, url = hostile(reply)
    with pytest.raises(StoreError, match="continuation token it had sent before"):
        store(url).list_entries(Deadline(5))
    assert len(srv.seen) == 3


def test_is_truncated_without_a_token_is_an_error(hostile: Callable[[Reply], tuple[Hostile, str]]) -> None:
    srv, url = hostile(lambda h, req: h.answer(200, listing(truncated="true")))
    with pytest.raises(StoreError, match="truncated listing without a token"):
        store(url).list_entries(Deadline(20))
    assert len(srv.seen) == 1


def test_the_cli_reports_a_repeated_token(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    def reply(h: Handler, req: Request) -> None:
        h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"], truncated="true", token="again"))

    _, url = hostile(reply)
    r = cli(tmp_path, url, "prune")
    assert r.code == 1
    assert r.err == (
        f"publish: store: list s3://{BUCKET}/{PREFIX}/pub/: the store sent a continuation token it had sent before\n"
    )


# ------------------------------------------------------------------------------ answers that are not listings


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html><body>Welcome to nginx</body></html>", "an answer that is not a listing"),
        (b"not xml at all", "an answer that is not a listing"),
        (b"", "an answer that is not a listing"),
        (b'<?xml version="1.0" encoding="x-no-such"?><ListBucketResult/>', "an answer that is not a listing"),
        (
            b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">'
            b'<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">'
            b'<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;"><!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">]>'
            b"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>&h;</Key></Contents></ListBucketResult>",
            "an answer that is not a listing",
        ),
        (
            b"<ListBucketResult><Contents><Key>run/pub/x</Key></Contents></ListBucketResult>",
            "without IsTruncated",
        ),
        (b"<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>", "without IsTruncated"),
        (
            b"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Size>1</Size></Contents></ListBucketResult>",
            "a Contents that has no Key",
        ),
        (
            b"<ListBucketResult><IsTruncated>false</IsTruncated><CommonPrefixes/></ListBucketResult>",
            "a CommonPrefixes that has no Prefix",
        ),
    ],
)
def test_a_list_answer_that_is_not_a_listing_is_a_store_error(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path, body: bytes, why: str
) -> None:
    _, url = hostile(lambda h, req: h.answer(200, body))
    r = cli(tmp_path, url, "resolve")
    assert (r.code, r.out) == (1, "")
    assert r.err.startswith(f"publish: store: list s3://{BUCKET}/{PREFIX}/pub/: the store sent ")
    assert why in r.err and "internal error" not in r.err


def test_a_delete_objects_answer_that_is_not_a_result_is_a_store_error(
    hostile: Callable[[Reply], tuple[Hostile, str]],
) -> None:
    _, url = hostile(lambda h, req: h.answer(200, b"<html/>"))
    with pytest.raises(StoreError, match="not a result"):
        s3client(url).delete_objects([f"{PREFIX}/pub/{entry(1)}"])


# ------------------------------------------------------------------------------ Vault


def test_an_endless_vault_answer_is_a_credentials_error(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    srv, url = hostile(lambda h, req: h.endless())
    jwt = tmp_path / "jwt"
    jwt.write_text("eyJhbGciOiJIUzI1NiJ9.hostile-test-jwt.sig\n")
    remember_secret("eyJhbGciOiJIUzI1NiJ9.hostile-test-jwt.sig")
    r = run_cli(
        "resolve",
        "-checkpoint",
        f"s3://{BUCKET}/{PREFIX}",
        "-creds",
        f"vault:{url}/team/s3?auth=kubernetes&role=training&jwt={jwt}",
        "-timeout",
        "20s",
    )
    assert (r.code, r.out) == (1, "")
    assert r.err.startswith("publish: credentials: vault:")
    assert "larger than the limit of 1048576 bytes" in r.err
    assert srv.sent < READ_AT_MOST


# ------------------------------------------------------------------------------ multipart uploads (-orphans)


def uploads_page(
    uploads: list[tuple[str, str]], truncated: str = "false", key_marker: str = "", upload_marker: str = ""
) -> bytes:
    """A ListMultipartUploads page of (key, upload id), initiated in 2010, keys URL-encoded."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult>']
    parts.append(
        f"<Bucket>{BUCKET}</Bucket><EncodingType>url</EncodingType><IsTruncated>{truncated}</IsTruncated>"
    )
    if key_marker:
        parts.append(f"<NextKeyMarker>{quote(key_marker)}</NextKeyMarker>")
    if upload_marker:
        parts.append(f"<NextUploadIdMarker>{upload_marker}</NextUploadIdMarker>")
    parts += [
        f"<Upload><Key>{quote(k)}</Key><UploadId>{u}</UploadId><Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>"
        for k, u in uploads
    ]
    parts.append("</ListMultipartUploadsResult>")
    return "".join(parts).encode()


#: The save of ``entry(1)``.
SAVE_1 = f"{PREFIX}/exec/A/checkpoint-1"


def orphan_root(uploads: Callable[[Request], bytes]) -> Reply:
    """A root with one entry whose save exists, no tombstone, no leftover in exec/, whose uploads answer as
    ``uploads`` says."""

    def reply(h: Handler, req: Request) -> None:
        if req.kind == "LIST" and req.query["prefix"] == f"{PREFIX}/pub/":
            h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"]))
        elif (
            req.kind == "LIST" and req.query.get("max-keys") == "1" and req.query["prefix"].startswith(SAVE_1)
        ):
            h.answer(200, listing([f"{SAVE_1}/w"]))  # the entry's save exists (prune asks, as resolve does)
        elif req.kind == "LIST":
            h.answer(200, listing([]))
        elif req.method == "GET" and "uploads" in req.query:
            h.answer(200, uploads(req))
        elif req.method == "GET" and "uploadId" in req.query:  # ListParts: none
            h.answer(200, b"<ListPartsResult><IsTruncated>false</IsTruncated></ListPartsResult>")
        else:
            h.answer(204, b"")

    return reply


def test_prune_orphans_aborts_nothing_when_an_upload_lies_outside_exec(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    stray = [(f"{PREFIX}/exec/A/x", "u1"), (f"{PREFIX}/pub/{entry(1)}", "u2")]
    srv, url = hostile(orphan_root(lambda req: uploads_page(stray)))
    r = cli(tmp_path, url, "prune", "-keep", "1", "-orphans")
    assert r.code == 1
    assert r.err == (
        f"publish: store: list-uploads s3://{BUCKET}/{PREFIX}/exec/: the store returned "
        f"{PREFIX}/pub/{entry(1)}, outside the prefix\n"
    )
    assert "DELETE" not in srv.kinds() and "PUT" not in srv.kinds()


@pytest.mark.parametrize(
    ("markers", "why"),
    [
        (("", ""), "a truncated listing without a token"),
        (("k", "u"), "a continuation token it had sent before"),
    ],
)
def test_prune_orphans_refuses_uploads_listed_round_and_round(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path, markers: tuple[str, str], why: str
) -> None:
    page = uploads_page([(f"{PREFIX}/exec/A/x", "u1")], "true", *markers)
    srv, url = hostile(orphan_root(lambda req: page))
    r = cli(tmp_path, url, "prune", "-keep", "1", "-orphans")
    assert r.code == 1
    assert r.err == f"publish: store: list-uploads s3://{BUCKET}/{PREFIX}/exec/: the store sent {why}\n"
    assert srv.kinds().count("GET") <= 3 and "DELETE" not in srv.kinds()


def test_prune_orphans_follows_both_markers_and_aborts_old_uploads(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    def pages(req: Request) -> bytes:
        if not req.query.get("key-marker"):
            return uploads_page([(f"{PREFIX}/exec/A/a b+c", "u1")], "true", f"{PREFIX}/exec/A/a b+c", "u1")
        assert (req.query["key-marker"], req.query["upload-id-marker"]) == (f"{PREFIX}/exec/A/a b+c", "u1")
        return uploads_page([(f"{PREFIX}/exec/B/y", "u2")])

    srv, url = hostile(orphan_root(pages))
    r = cli(tmp_path, url, "prune", "-keep", "1", "-orphans")
    assert r.code == 0, r
    assert r.lines == [
        f"aborted s3://{BUCKET}/{PREFIX}/exec/A/a b+c (multipart upload u1)",
        f"aborted s3://{BUCKET}/{PREFIX}/exec/B/y (multipart upload u2)",
    ]
    aborts = [(req.path, req.query["uploadId"]) for req in srv.seen if req.method == "DELETE"]
    assert aborts == [(f"{PREFIX}/exec/A/a b+c", "u1"), (f"{PREFIX}/exec/B/y", "u2")]


def test_prune_orphans_leaves_a_folder_whose_path_no_tombstone_can_name(
    hostile: Callable[[Reply], tuple[Hostile, str]], tmp_path: Path
) -> None:
    def reply(h: Handler, req: Request) -> None:
        if req.kind == "GET" and req.path.startswith(f"{PREFIX}/man/"):
            h.answer(404, NO_SUCH_KEY)  # an entry made before manifests: a prune has nothing to check
        elif req.kind == "LIST" and req.query["prefix"] == f"{PREFIX}/pub/":
            h.answer(200, listing([f"{PREFIX}/pub/{entry(1)}"]))
        elif req.kind == "LIST" and req.query["prefix"] == f"{PREFIX}/exec/" and req.query.get("delimiter"):
            h.answer(200, listing(prefixes=[f"{PREFIX}/exec/../", f"{PREFIX}/exec/./"]))
        elif (
            req.kind == "LIST" and req.query.get("max-keys") == "1" and req.query["prefix"].startswith(SAVE_1)
        ):
            h.answer(200, listing([f"{SAVE_1}/w"]))  # the entry's save exists
        elif req.kind == "LIST":
            h.answer(200, listing([]))
        elif req.method == "GET" and "uploads" in req.query:
            h.answer(200, uploads_page([]))
        else:
            h.answer(204, b"")

    srv, url = hostile(reply)
    r = cli(tmp_path, url, "prune", "-keep", "1", "-orphans")
    assert (r.code, r.out) == (0, ""), r
    why = "an empty, . or .. element in its path cannot be recorded in tomb/"
    assert r.err == "".join(
        f"publish: prune: left s3://{BUCKET}/{PREFIX}/exec/{name} in place: {why}\n" for name in (".", "..")
    )
    assert "DELETE" not in srv.kinds() and "PUT" not in srv.kinds() and "POST" not in srv.kinds()
