"""The HTTP/1.x response reader (publish.http.http1) through publish.http.net.Connector, against byte-exact answers
from a loopback server (tests.support.netfixtures.Canned), and what plain http:// loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from publish.http import http1, net
from tests.support.netfixtures import Canned, Server

ROOT = Path(__file__).resolve().parents[2]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def get(server: Canned, limit: int = net.DEFAULT_LIMIT, error_limit: int = net.ERROR_LIMIT) -> net.Response:
    return net.Connector(server.url).request("GET", "/", {}, timeout=5, limit=limit, error_limit=error_limit)


def twice(answer: bytes, method: str = "GET") -> tuple[net.Response, net.Response, int]:
    """``answer`` then OK, asked on one Connector: (first, second, the connections the two came on)."""
    with Canned([answer, OK]) as srv:
        c = net.Connector(srv.url)
        first = c.request(method, "/", {}, timeout=5)
        second = c.request("GET", "/", {}, timeout=5)
        c.close()
        return first, second, len(set(srv.peers))


def twice_limit(answer: bytes, limit: int) -> tuple[net.Response, net.Response, int]:
    """``answer`` read under ``limit``, then OK, on one Connector: (first, second, the connections the two
    came on)."""
    with Canned([answer, OK]) as srv:
        c = net.Connector(srv.url)
        first = c.request("GET", "/", {}, timeout=30, limit=limit)
        second = c.request("GET", "/", {}, timeout=5)
        c.close()
        return first, second, len(set(srv.peers))


# ------------------------------------------------------------------------------------------- framing


def test_chunked_with_extensions_and_trailers_then_reuse() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
        b'5;name=value;q="x y"\r\nhello\r\n6 ; ext\r\n world\r\nA\r\n0123456789\r\n'
        b"0;last\r\nX-Trailer: yes\r\nX-Checksum: abc\r\n\r\n"
    )
    first, second, connections = twice(answer)
    assert first.body == b"hello world0123456789" and first.headers["x-a"] == "1"
    assert second.body == b"ok" and connections == 1


def test_interim_answers_are_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK
    first, second, connections = twice(answer)
    assert (first.status, first.body, second.body, connections) == (200, b"ok", b"ok", 1)


def test_too_many_interim_answers_refused() -> None:
    with (
        Canned([b"HTTP/1.1 100 Continue\r\n\r\n" * 17 + OK]) as srv,
        pytest.raises(net.NetError, match=r": bad HTTP response: TooManyInterimAnswers$"),
    ):
        get(srv)


def test_head_with_content_length_reads_no_body() -> None:
    first, second, connections = twice(b"HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n", "HEAD")
    assert first.body == b"" and first.headers["content-length"] == "5000000"
    assert second.body == b"ok" and connections == 1


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_no_body_for_204_and_304(status: bytes) -> None:
    # A 304 carries the Content-Length of the object it stands for: no body follows, whatever its size.
    first, second, connections = twice(b"HTTP/1.1 " + status + b"\r\nContent-Length: 100000\r\n\r\n")
    assert first.body == b"" and second.body == b"ok" and connections == 1


def test_close_delimited_body_and_a_new_connection_after_it() -> None:
    with Canned([b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 100_000, OK], close_after=(0,)) as srv:
        c = net.Connector(srv.url)
        assert c.request("GET", "/", {}, timeout=5).body == b"z" * 100_000
        assert c.request("GET", "/", {}, timeout=5).body == b"ok"
        assert len(srv.peers) == 2 and len(set(srv.peers)) == 2  # each on a connection of its own


@pytest.mark.parametrize(
    ("head", "connections"),
    [
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", 2),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", 1),
        (b"HTTP/1.0 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\n", 1),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n", 2),
    ],
)
def test_keep_alive_as_http_client_decided(head: bytes, connections: int) -> None:
    with Canned([head + b"ok", OK], close_after=(0,) if connections == 2 else ()) as srv:
        c = net.Connector(srv.url)
        assert c.request("GET", "/", {}, timeout=5).body == b"ok"
        assert c.request("GET", "/", {}, timeout=5).body == b"ok"
        assert len(srv.peers) == 2 and len(set(srv.peers)) == connections


def test_a_byte_past_the_answer_drops_the_connection() -> None:
    first, second, connections = twice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert first.body == b"ok" and second.body == b"ok" and connections == 2


def test_chunked_with_a_content_length_too_is_read_chunked_and_not_reused() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
    first, second, connections = twice(answer)
    assert first.body == b"ab" and second.body == b"ok" and connections == 2


def test_repeated_equal_content_lengths_accepted() -> None:
    with Canned([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nok"]) as srv:
        assert get(srv).body == b"ok"


# ------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk", "ContentLength"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nokk", "ContentLength"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", "ContentLength"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\nok", "ContentLength"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok", "ContentLength"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok", "TransferEncoding"),
        (b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 65536 + b"\r\n\r\n", "LineTooLong"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 101 + b"Content-Length: 0\r\n\r\n", "HTTPException"),
        (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n", "ObsFold"),
        (b"HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 0\r\n\r\n", "BadHeaderLine"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 0\r\n\r\n", "BadHeaderLine"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 65537 + b"\r\n", "LineTooLong"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"X: 1\r\n" * 101,
            "TooManyTrailers",
        ),
        (b"HTTP/2 200 OK\r\n\r\n", "UnknownProtocol"),
        (b"HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", "UnknownProtocol"),
        (b"ICY 200 OK\r\n\r\n", "BadStatusLine"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "BadStatusLine"),
        (b"HTTP/1.1 099 OK\r\n\r\n", "BadStatusLine"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "SwitchingProtocols"),
    ],
)
def test_refused(answer: bytes, kind: str) -> None:
    with Canned([answer]) as srv:
        with pytest.raises(net.NetError, match=f"^{srv.url}: bad HTTP response: {kind}$") as e:
            get(srv)
        assert type(e.value) is net.NetError


def test_one_hundred_headers_accepted() -> None:
    with Canned([b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 99 + b"Content-Length: 2\r\n\r\nok"]) as srv:
        resp = get(srv)
        assert resp.body == b"ok" and resp.headers["x-a"] == ", ".join(["1"] * 99)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            r"IncompleteRead\(3 bytes read, 7 more expected\)",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            r"IncompleteRead\(2 bytes read, 3 more",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n",
            r"IncompleteRead\(5 bytes read\)",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", r"IncompleteRead\(0 bytes read\)"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
            r"IncompleteRead\(2 bytes",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "Remote end closed connection in the middle of a line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", "Remote end closed connection in the headers"),
        (b"", "Remote end closed connection without response"),
    ],
)
def test_truncated_is_dropped(answer: bytes, why: str) -> None:
    with (
        Canned([answer], close_after=(0,)) as srv,
        pytest.raises(net.Dropped, match=f"^{srv.url}: connection dropped: {why}"),
    ):
        get(srv)


# ------------------------------------------------------------------------------------------------ caps


@pytest.mark.parametrize(
    ("answer", "size"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n" + b"x" * 101, 101),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n"
            + b"x" * 100
            + b"\r\n1\r\nx\r\n0\r\n\r\n",
            None,
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n" + b"x" * 1000, None),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 101, None),
    ],
)
def test_body_over_the_cap(answer: bytes, size: int | None) -> None:
    with Canned([answer], close_after=(0,)) as srv:
        with pytest.raises(net.TooLarge, match="larger than the limit of 100 bytes") as e:
            get(srv, limit=100)
        assert (e.value.size, e.value.limit, e.value.status) == (size, 100, 200)


def test_error_body_cap_on_a_chunked_answer() -> None:
    answer = (
        b"HTTP/1.1 503 Slow Down\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"e" * 1024 + b"\r\n"
    )
    with (
        Canned([answer * 1], close_after=(0,)) as srv,
        pytest.raises(net.TooLarge, match=r"body of the HTTP 503 answer is larger than the limit of 1000"),
    ):
        get(srv, error_limit=1000)


def chunked(body: bytes, size: int) -> bytes:
    """An answer carrying ``body`` in chunks of ``size`` bytes, with a trailer."""
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)
    )
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.mark.parametrize(("limit", "most"), [(1 << 20, 1024), (4 << 20, 4096), (64 << 20, 65536)])
def test_a_body_in_too_many_chunks_is_refused(limit: int, most: int) -> None:
    with Canned([chunked(b"x" * (most + 1), 1)], close_after=(0,)) as srv:
        with pytest.raises(
            net.NetError, match=f"^{srv.url}: bad HTTP response: the body came in more than {most} chunks$"
        ) as e:
            get(srv, limit=limit)
        assert type(e.value) is net.NetError


@pytest.mark.parametrize(("limit", "most"), [(1 << 20, 1024), (64 << 20, 65536)])
def test_a_body_in_as_many_chunks_as_the_cap_is_read(limit: int, most: int) -> None:
    # 1 MiB in chunks of 1 KiB is what a server may send under the cap of a GET of 1 MiB.
    body = os.urandom(limit // most) * most
    first, second, connections = twice_limit(chunked(body, limit // most), limit)
    assert first.body == body and second.body == b"ok" and connections == 1


def test_a_body_in_chunks_of_kilobytes_is_read() -> None:
    body = os.urandom(3 << 20)
    first, second, connections = twice_limit(chunked(body, 16 << 10), 64 << 20)
    assert first.body == body and second.body == b"ok" and connections == 1


def test_tiny_chunks_are_held_in_about_the_size_of_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    monkeypatch.setattr(http1, "MAX_CHUNKS", 1 << 20)  # the count cap raised: what the body costs is tested
    body = b"ab" * (32 << 10)  # 64 KiB in 2-byte chunks: a list of 32768 bytes objects was 60 times that
    reader = http1.Reader(Pieces(chunked(body, 2), 65536))  # type: ignore[arg-type]
    how = http1.framing(http1.read_head(reader), "GET")
    tracemalloc.start()
    try:
        got = http1.read_body(reader, how, 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == body and peak < 4 * len(body)  # the buffer filled and the bytes made of it


# ------------------------------------------------------------------------------------------- linearity


class Pieces:
    """A stream over fixed bytes, ``size`` bytes a read; counts its reads."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data = memoryview(data)
        self.size = size
        self.reads = 0

    def recv_into(self, buf: memoryview) -> int:
        self.reads += 1
        n = min(len(buf), self.size, len(self.data))
        buf[:n] = self.data[:n]
        self.data = self.data[n:]
        return n


def test_a_mebibyte_of_one_byte_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "MAX_CHUNKS", 1 << 20)  # the cap on the chunk count raised: the time is tested
    body = bytes(range(256)) * 4096
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += b"".join(b"1\r\n" + body[i : i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n"
    stream = Pieces(wire, 1 << 20)
    reader = http1.Reader(stream)  # type: ignore[arg-type]
    head = http1.read_head(reader)
    got = http1.read_body(reader, http1.framing(head, "GET"), 1 << 20)
    assert got == body and reader.leftover() == b"" and not reader.eof
    assert stream.reads <= len(wire) // 65536 + 2  # each read fills the reader's whole 64 KiB buffer


def test_a_long_header_line_a_byte_at_a_time() -> None:
    wire = b"HTTP/1.1 200 OK\r\nX-Long: " + b"v" * 60000 + b"\r\nContent-Length: 0\r\n\r\n"
    stream = Pieces(wire, 1)
    reader = http1.Reader(stream)  # type: ignore[arg-type]
    head = http1.read_head(reader)
    assert head.get("x-long") == "v" * 60000 and stream.reads == len(wire)


def test_a_large_content_length_allocates_only_what_arrived() -> None:
    import tracemalloc

    wire = b"HTTP/1.1 200 OK\r\nContent-Length: 50000000\r\n\r\n" + b"x" * 10
    reader = http1.Reader(Pieces(wire, 65536))  # type: ignore[arg-type]
    how = http1.framing(http1.read_head(reader), "GET")
    tracemalloc.start()
    try:
        with pytest.raises(
            http1.Incomplete, match=r"IncompleteRead\(10 bytes read, 49999990 more expected\)"
        ):
            http1.read_body(reader, how, 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20


# --------------------------------------------------------------------------------------------- imports

HEAVY = [
    "http", "http.client", "email", "ssl", "_ssl", "socket", "enum", "re", "functools", "collections",
    "typing", "urllib", "selectors", "ipaddress", "encodings.idna",
]  # fmt: skip

PROBE = """
import sys
import publish.rules.urls
before = set(sys.modules)
from publish.http import net
resp = net.Connector(sys.argv[1]).request("GET", "/bytes/3", {}, timeout=5)
assert resp.body == b"xxx", resp
print(" ".join(sorted(before)))
print(" ".join(sorted(sys.modules)))
"""


def test_plain_http_loads_no_tls_socket_or_http_client() -> None:
    with Server() as srv:
        out = subprocess.run(
            [sys.executable, "-S", "-c", PROBE, srv.url],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ""},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    urls_loads, loaded = (set(line.split()) for line in out.splitlines())
    # publish.rules.urls (another module) still imports re and ipaddress, and with them enum, functools and
    # collections: only what importing it alone loaded is let off here, nothing the request loaded.
    assert sorted(m for m in HEAVY if m in loaded and m not in urls_loads) == []
    assert sorted(m for m in HEAVY if m in urls_loads) in (
        [],
        ["collections", "enum", "functools", "ipaddress", "re"],
    )
