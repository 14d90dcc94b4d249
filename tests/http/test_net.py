"""The connection layer against real loopback servers and proxies (tests/support/netfixtures.py)."""

from __future__ import annotations

import _socket
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from publish.http import lookup, net, trust
from publish.rules import urls
from tests.support.netfixtures import Proxy, Server, TestCA
from tests.support.ports import dead_port

# ------------------------------------------------------------------------------------------- parsing

PROXY_OK = [
    ("http://proxy:3128", "http://proxy:3128"),
    ("HTTP://Proxy.Example.COM:3128/", "http://proxy.example.com:3128"),
    ("https://p", "https://p:443"),
    ("http://p", "http://p:80"),
    ("http://10.0.0.1:8080", "http://10.0.0.1:8080"),
    ("http://[::1]:8080", "http://[::1]:8080"),
    ("https://[2001:db8::1]", "https://[2001:db8::1]:443"),
    ("http://p:00080", "http://p:80"),
    # as Go's net/url reads them: a fully qualified name, and an empty port (the scheme's)
    ("http://proxy.example.:3128", "http://proxy.example.:3128"),
    ("http://p:", "http://p:80"),
    ("https://p:/", "https://p:443"),
    ("http://under_score.example", "http://under_score.example:80"),
]

PROXY_BAD = [
    ("", "empty"),
    ("proxy:3128", "must start with http:// or https://"),
    ("socks5://p:1080", "scheme 'socks5' is not http or https"),
    ("ftp://p", "scheme 'ftp' is not http or https"),
    ("http://alice:hunter2@p:3128", "user name or password"),
    ("http://alice@p:3128", "user name or password"),
    ("http://a:b@c@d", "user name or password"),
    ("http://p:3128/path", "must not have a path"),
    ("http://p:3128//", "must not have a path"),
    ("http://p:3128?x=1", "query or fragment"),
    ("http://p:3128/?x=1", "query or fragment"),
    ("http://p#frag", "query or fragment"),
    ("http://p:0", "port must be a number from 1 to 65535"),
    ("http://p:65536", "port must be a number from 1 to 65535"),
    ("http://p:-1", "port must be a number from 1 to 65535"),
    ("http://p:hunter2", "port must be a number from 1 to 65535"),
    ("http://p:१२३", "port must be a number from 1 to 65535"),
    ("http://", "no host"),
    ("http://:3128", "no host"),
    ("http://[::1", "unterminated IPv6"),
    ("http://[zz::]:80", "invalid IPv6"),
    ("http://[::1]x", "text after the IPv6"),
    ("http://a..b", "invalid host name"),
    ("http://-a", "invalid host name"),
    ("http://a-.b", "invalid host name"),
    ("http://a.-b", "invalid host name"),
    ("http://a..", "invalid host name"),
    ("http://.a", "invalid host name"),
    ("http://%61", "invalid host name"),  # %-escaped ASCII, which Go's url.Parse refuses in a host
    ("http://h%2Eexample", "invalid host name"),
    ("http://bücher.example", "invalid host name"),  # a name in Unicode: give its xn-- form
    ("http://" + "a" * 64 + ".example", "invalid host name"),  # a label over 63
    ("http://[fe80::1%25eth0]:80", "IPv6 zone"),
    ("http://[fe80::1%eth0]", "IPv6 zone"),
    ("http://p:٣١٢٨", "port must be a number from 1 to 65535"),
    ("http://a b", "whitespace or control"),
    ("http://a\nb", "whitespace or control"),
]


@pytest.mark.parametrize(("url", "want"), PROXY_OK)
def test_parse_proxy_accepts(url: str, want: str) -> None:
    assert urls.parse_proxy(url) == want


@pytest.mark.parametrize(("url", "why"), PROXY_BAD)
def test_parse_proxy_refuses(url: str, why: str) -> None:
    with pytest.raises(ValueError, match="^proxy URL") as info:
        urls.parse_proxy(url)
    assert why in str(info.value)
    for secret in ("hunter2", "alice"):
        assert secret not in str(info.value)


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("https://s3.us-east-1.amazonaws.com", ("https", "s3.us-east-1.amazonaws.com", 443)),
        ("http://127.0.0.1:8333/", ("http", "127.0.0.1", 8333)),
        ("HTTPS://Vault.Internal:8200", ("https", "vault.internal", 8200)),
        ("http://[::1]:9000", ("http", "::1", 9000)),
        ("http://minio", ("http", "minio", 80)),
    ],
)
def test_parse_endpoint(url: str, want: tuple[str, str, int]) -> None:
    assert urls.parse_endpoint(url) == want


@pytest.mark.parametrize(("url", "why"), PROXY_BAD)
def test_parse_endpoint_refuses(url: str, why: str) -> None:
    with pytest.raises(ValueError, match="^endpoint URL") as info:
        urls.parse_endpoint(url)
    assert why in str(info.value) and "hunter2" not in str(info.value)


def test_netloc() -> None:
    assert urls.netloc("https", "h", 443) == "h"
    assert urls.netloc("http", "h", 80) == "h"
    assert urls.netloc("http", "h", 443) == "h:443"
    assert urls.netloc("https", "::1", 8443) == "[::1]:8443"
    assert net.Connector("http://[::1]:9000").host_header == "[::1]:9000"


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as srv:
        yield srv


@pytest.fixture
def tls_server(ca: TestCA) -> Iterator[Server]:
    with Server(tls=ca) as srv:
        yield srv


@pytest.fixture
def no_bundles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The machine's own CA bundles out of the way: trust must come from what the test gives."""
    monkeypatch.setattr(trust, "BUNDLE_PATHS", (str(tmp_path / "none-1.pem"), str(tmp_path / "none-2.pem")))


def echo(resp: net.Response) -> dict[str, object]:
    assert resp.status == 200, resp
    data: dict[str, object] = json.loads(resp.body)
    return data


# -------------------------------------------------------------------------------------------- direct


def test_direct_http_reuses_one_connection(server: Server) -> None:
    c = net.Connector(server.url)
    for i in range(3):
        info = echo(c.request("GET", f"/echo/{i}?a=b%20c", {"X-Test": "1"}, timeout=5))
        assert info["path"] == f"/echo/{i}?a=b%20c"
        headers = info["headers"]
        assert isinstance(headers, dict)
        assert headers["Host"] == f"127.0.0.1:{server.port}"
        assert headers["X-Test"] == "1"
    assert len(server.peers) == 3 and len(set(server.peers)) == 1
    c.close()


def test_put_body_and_head(server: Server) -> None:
    c = net.Connector(server.url)
    info = echo(c.request("PUT", "/echo", {"Content-Type": "text/plain"}, b"payload", timeout=5))
    assert info["method"] == "PUT" and info["body"] == "payload"
    assert server.requests[-1][2]["Content-Length"] == "7"
    big = b"y" * 300_000
    c.request("PUT", "/echo", {}, big, timeout=5)
    assert server.requests[-1][3] == big
    head = c.request("HEAD", "/bytes/5000", {}, timeout=5, limit=10)
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == "5000"
    empty_put = c.request("PUT", "/echo", {}, timeout=5)
    assert empty_put.status == 200 and server.requests[-1][2]["Content-Length"] == "0"
    assert len(server.peers) == 4 and len(set(server.peers)) == 1  # all four on one connection


def test_response_headers_are_lower_case(server: Server) -> None:
    resp = net.Connector(server.url).request("GET", "/bytes/3", {}, timeout=5)
    assert resp.headers["content-length"] == "3" and resp.body == b"xxx"
    assert all(k == k.lower() for k in resp.headers)


def test_reopens_a_kept_connection_the_server_closed(server: Server) -> None:
    c = net.Connector(server.url)
    assert c.request("GET", "/close-after", {}, timeout=5).status == 200
    time.sleep(0.2)  # the server's FIN arrives
    assert echo(c.request("GET", "/echo", {}, timeout=5))["path"] == "/echo"
    assert len(server.peers) == 2 and len(set(server.peers)) == 2  # the second on a new connection


def test_chunked_body(server: Server) -> None:
    assert net.Connector(server.url).request("GET", "/chunked/5000", {}, timeout=5).body == b"x" * 5000


def test_bad_header_and_target_refused(server: Server) -> None:
    c = net.Connector(server.url)
    with pytest.raises(ValueError):
        c.request("GET", "/", {"X-A": "1\r\nX-Injected: 1"}, timeout=5)
    with pytest.raises(ValueError):
        c.request("GET", "/a b", {}, timeout=5)
    with pytest.raises(ValueError):
        c.request("GET", "http://elsewhere/", {}, timeout=5)
    assert server.requests == []  # nothing sent


# ---------------------------------------------------------------------------------------- body limit


def test_limit_by_content_length(server: Server) -> None:
    c = net.Connector(server.url)
    assert c.request("GET", "/bytes/100", {}, timeout=5, limit=100).body == b"x" * 100
    with pytest.raises(net.NetError, match=r"body of 100 bytes is larger than the limit of 99 bytes") as e:
        c.request("GET", "/bytes/100", {}, timeout=5, limit=99)
    assert type(e.value) is net.TooLarge and server.url.split("//")[1] in str(e.value)
    assert (e.value.size, e.value.limit, e.value.status) == (100, 99, 200)
    assert c.request("GET", "/bytes/1", {}, timeout=5, limit=1).body == b"x"  # still usable


def test_limit_on_chunked_body(server: Server) -> None:
    c = net.Connector(server.url)
    assert len(c.request("GET", "/chunked/5000", {}, timeout=5, limit=5000).body) == 5000
    with pytest.raises(net.NetError, match="larger than the limit of 4999 bytes"):
        c.request("GET", "/chunked/5000", {}, timeout=5, limit=4999)


# ------------------------------------------------------------------------------------ failures, time


def test_connection_refused_is_unreachable() -> None:
    port = dead_port()
    with pytest.raises(net.Unreachable, match=f"http://127.0.0.1:{port} does not answer: connection refused"):
        net.Connector(f"http://127.0.0.1:{port}").request("GET", "/", {}, timeout=5)


def test_name_not_resolved_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(_socket, "getaddrinfo", fail)  # what publish.http.net connects with
    with pytest.raises(net.Unreachable, match="cannot resolve host name s3.invalid"):
        net.Connector("https://s3.invalid").request("GET", "/", {}, timeout=5)


def test_a_lookup_that_never_answers_fails_within_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A nameserver that swallows the query: getaddrinfo waits until the test ends and releases it.
    released = threading.Event()

    def silent(
        host: bytes, port: int, family: int = 0, kind: int = 0, proto: int = 0, flags: int = 0
    ) -> object:
        if flags & socket.AI_NUMERICHOST:  # as getaddrinfo answers for a name, at once
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        released.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(_socket, "getaddrinfo", silent)  # what publish.http.net resolves with
    errors: list[Exception] = []

    def request() -> None:
        try:
            net.Connector("http://s3.example.test").request("GET", "/", {}, timeout=1)
        except Exception as e:
            errors.append(e)

    caller = threading.Thread(target=request, daemon=True)
    caller.start()
    caller.join(20)  # a bound far past the 1 s deadline: only a lookup that ignores it gets here
    try:
        assert not caller.is_alive(), "the request is still waiting for the host name lookup"
    finally:
        released.set()
    assert [(type(e), str(e)) for e in errors] == [
        (net.Unreachable, "http://s3.example.test does not answer: host name lookup timed out")
    ]


def test_a_retry_waits_on_the_lookup_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, each request given up on a silent nameserver left its lookup's thread behind, and the retry
    started another; now a lookup of the same name still running is waited for, and its answer is used."""
    released = threading.Event()
    asked: list[bytes] = []

    def slow(
        host: bytes, port: int, family: int = 0, kind: int = 0, proto: int = 0, flags: int = 0
    ) -> object:
        asked.append(host)
        released.wait(60)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(_socket, "getaddrinfo", slow)
    for _ in range(3):
        with pytest.raises(net.Unreachable, match="^w does not answer: host name lookup timed out$"):
            lookup.addresses(b"s3.example.test", 443, 0.05, "w")
    assert asked == [b"s3.example.test"]
    timer = threading.Timer(0.2, released.set)
    timer.start()
    try:
        got = lookup.addresses(b"s3.example.test", 443, 30, "w")
    finally:
        timer.cancel()
        released.set()
    assert got == [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))]
    assert asked == [b"s3.example.test"]
    assert lookup.addresses(b"s3.example.test", 443, 30, "w") == got  # done: a new lookup, answered at once
    assert asked == [b"s3.example.test"] * 2


def test_an_ip_address_is_not_looked_up(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_lookup(*args: object) -> object:
        raise AssertionError("an IP address was looked up on a thread")

    monkeypatch.setattr(lookup, "addresses", no_lookup)
    c = net.Connector(server.url)  # http://127.0.0.1:PORT
    for timeout in (5, None):
        c.close()
        assert echo(c.request("GET", "/echo", {}, timeout=timeout))["path"] == "/echo"
    with pytest.raises(net.Unreachable, match=r"^http://\[::1\]:9 does not answer: "):
        net.Connector("http://[::1]:9").request("GET", "/", {}, timeout=5)


@pytest.mark.parametrize("timeout", [5, None])
def test_a_host_name_is_looked_up_within_the_deadline_or_without_one(
    server: Server, timeout: float | None
) -> None:
    port = server.url.rsplit(":", 1)[1]
    c = net.Connector(f"http://localhost:{port}")
    assert echo(c.request("GET", "/echo", {}, timeout=timeout))["path"] == "/echo"


def test_connect_timeout_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    class Slow(_socket.socket):
        def connect(self, address: object) -> None:
            raise socket.timeout("timed out")

    monkeypatch.setattr(_socket, "socket", Slow)  # what publish.http.net connects with
    with pytest.raises(net.Unreachable, match="does not answer: connect timed out"):
        net.Connector("http://127.0.0.1:9").request("GET", "/", {}, timeout=5)


def test_stall_past_the_deadline_times_out(server: Server) -> None:
    c = net.Connector(server.url)
    start = time.monotonic()
    with pytest.raises(net.TimedOut, match=f"{server.url}: no response within the time left"):
        c.request("GET", "/stall/3", {}, timeout=0.4)
    assert time.monotonic() - start < 1.5
    assert echo(c.request("GET", "/echo", {}, timeout=5))["path"] == "/echo"  # a fresh connection


def test_deadline_covers_the_whole_request(server: Server) -> None:
    # 40 bytes at one per 50 ms: every read is quick, the whole is 2 s.
    start = time.monotonic()
    with pytest.raises(net.TimedOut):
        net.Connector(server.url).request("GET", "/trickle/40", {}, timeout=0.5)
    assert time.monotonic() - start < 1.2
    assert net.Connector(server.url).request("GET", "/trickle/4", {}, timeout=5).body == b"xxxx"


@pytest.mark.parametrize("fault", ["/drop", "/reset"])
def test_dropped_connection(server: Server, fault: str) -> None:
    with pytest.raises(net.Dropped, match=f"{server.url}: connection dropped"):
        net.Connector(server.url).request("GET", fault, {}, timeout=5)


# ----------------------------------------------------------------------------------------------- TLS


def test_https_with_ssl_cert_file(ca: TestCA, tls_server: Server, no_bundles: None) -> None:
    c = net.Connector(tls_server.url, env={"SSL_CERT_FILE": ca.pem})
    assert echo(c.request("GET", "/echo", {}, timeout=5))["path"] == "/echo"
    assert echo(c.request("GET", "/echo", {}, timeout=5))["path"] == "/echo"
    # the second request on the first's connection (a count of connections would take in a stranger's)
    assert len(tls_server.peers) == 2 and len(set(tls_server.peers)) == 1


def test_a_strangers_connection_is_not_taken_for_the_clients_second(ca: TestCA, tls_server: Server) -> None:
    """As a process of another test does when it connects to a port it took for dead (or for its own server's)
    that the system has since given this server: the connector's reuse is seen per connection, not counted."""
    ctx = ssl.create_default_context(cafile=ca.pem)
    with ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", tls_server.port), 5), server_hostname="127.0.0.1"
    ) as s:
        assert s.version() is not None  # its handshake done: the server has counted it
        c = net.Connector(tls_server.url, cafile=ca.pem)
        assert c.request("GET", "/echo", {}, timeout=5).status == 200
        assert c.request("GET", "/echo", {}, timeout=5).status == 200
    assert tls_server.connections == 2  # the stranger's counts too: what this test shows, so a count it stays
    assert len(tls_server.peers) == 2 and len(set(tls_server.peers)) == 1


def test_https_with_ssl_cert_dir(ca: TestCA, tls_server: Server, no_bundles: None, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "README").write_text("not a certificate\n")
    ca.ca.cert_pem.write_to_path(str(certs / "test-ca.crt"))  # no OpenSSL hash links needed
    c = net.Connector(tls_server.url, env={"SSL_CERT_DIR": f"{tmp_path / 'missing'}:{certs}"})
    assert c.request("GET", "/echo", {}, timeout=5).status == 200


def test_https_with_cafile_replaces_system_trust(ca: TestCA, tls_server: Server, tmp_path: Path) -> None:
    other = TestCA(tmp_path)
    c = net.Connector(tls_server.url, cafile=ca.pem, env={"SSL_CERT_FILE": other.pem})
    assert c.request("GET", "/echo", {}, timeout=5).status == 200


def test_cafile_missing(tls_server: Server, tmp_path: Path) -> None:
    with pytest.raises(net.TrustNotFound, match="CA file .*nope.pem not found"):
        net.Connector(tls_server.url, cafile=str(tmp_path / "nope.pem")).request("GET", "/", {}, timeout=5)


def test_wrong_ca_is_refused(ca: TestCA, tls_server: Server, tmp_path: Path) -> None:
    other = TestCA(tmp_path)
    for c in (
        net.Connector(tls_server.url, cafile=other.pem),
        net.Connector(tls_server.url, env={"SSL_CERT_FILE": other.pem}),
    ):
        with pytest.raises(net.TLSFailure, match=f"{tls_server.url}: certificate not trusted"):
            c.request("GET", "/echo", {}, timeout=5)
    assert tls_server.requests == []


def test_wrong_host_name_is_refused(tmp_path: Path) -> None:
    ca = TestCA(tmp_path, hosts=("localhost",))
    with Server(tls=ca) as srv:
        with pytest.raises(net.TLSFailure, match="certificate not trusted"):
            net.Connector(srv.url, cafile=ca.pem).request("GET", "/", {}, timeout=5)
        c = net.Connector(f"https://localhost:{srv.port}", cafile=ca.pem)
        assert c.request("GET", "/echo", {}, timeout=5).status == 200


def test_tls_to_a_plain_server_fails(server: Server, ca: TestCA) -> None:
    url = server.url.replace("http://", "https://")
    with pytest.raises(net.TLSFailure, match="TLS handshake failed"):
        net.Connector(url, cafile=ca.pem).request("GET", "/", {}, timeout=5)


def test_no_trust_found_lists_where_it_looked(tls_server: Server, no_bundles: None, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"SSL_CERT_FILE": str(tmp_path / "gone.pem"), "SSL_CERT_DIR": str(empty)}
    with pytest.raises(net.TrustNotFound) as info:
        net.Connector(tls_server.url, env=env).request("GET", "/", {}, timeout=5)
    msg = str(info.value)
    assert msg.startswith("no CA certificates found; looked at ")
    for place in (f"SSL_CERT_FILE={tmp_path / 'gone.pem'}", f"SSL_CERT_DIR={empty}", *trust.BUNDLE_PATHS):
        assert place in msg
    assert tls_server.requests == []  # found out before connecting


def test_http_needs_no_trust(server: Server, no_bundles: None) -> None:
    assert net.Connector(server.url, env={}).request("GET", "/echo", {}, timeout=5).status == 200


def test_trust_lookup_order(tmp_path: Path) -> None:
    ca1, ca2, ca3 = (TestCA(tmp_path) for _ in range(3))
    certs = tmp_path / "certs"
    certs.mkdir()
    ca2.ca.cert_pem.write_to_path(str(certs / "ca2.pem"))
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = [str(tmp_path / "missing.pem"), ca3.pem, ca1.pem]
    both = {"SSL_CERT_FILE": ca1.pem, "SSL_CERT_DIR": str(certs)}
    assert trust.find_trust(both, paths).where == f"SSL_CERT_FILE={ca1.pem}"
    assert (
        trust.find_trust({**both, "SSL_CERT_FILE": str(tmp_path / "x")}, paths).where
        == f"SSL_CERT_DIR={certs}"
    )
    assert trust.find_trust({"SSL_CERT_FILE": "", "SSL_CERT_DIR": str(empty)}, paths).where == ca3.pem
    assert trust.find_trust({}, paths).cafile == ca3.pem
    with pytest.raises(net.TrustNotFound, match="missing.pem"):
        trust.find_trust({}, [str(tmp_path / "missing.pem")])


def test_default_bundle_list_is_go_s() -> None:
    assert trust.BUNDLE_PATHS == (
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem",
        "/etc/pki/tls/cacert.pem",
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
        "/etc/ssl/cert.pem",
    )


# --------------------------------------------------------------------------------------------- proxies


def test_https_target_through_http_proxy(ca: TestCA, tls_server: Server) -> None:
    with Proxy() as proxy:
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=ca.pem)
        for _ in range(2):
            assert echo(c.request("GET", "/echo", {}, timeout=5))["path"] == "/echo"
        assert proxy.connects == [f"127.0.0.1:{tls_server.port}"]
        assert proxy.forwards == []
    assert len(tls_server.requests) == 2


def test_https_target_through_https_proxy(ca: TestCA, tls_server: Server, tmp_path: Path) -> None:
    proxy_ca = TestCA(tmp_path)  # the proxy is verified against the system trust, the target against cafile
    with Proxy(tls=proxy_ca) as proxy:
        assert proxy.url.startswith("https://")
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=ca.pem, env={"SSL_CERT_FILE": proxy_ca.pem})
        for _ in range(2):
            assert echo(c.request("PUT", "/echo", {}, b"z" * 200_000, timeout=5))["method"] == "PUT"
        assert proxy.connects == [f"127.0.0.1:{tls_server.port}"]
    assert tls_server.requests[-1][3] == b"z" * 200_000


def test_https_proxy_not_trusted(ca: TestCA, tls_server: Server, tmp_path: Path) -> None:
    proxy_ca = TestCA(tmp_path)
    with Proxy(tls=proxy_ca) as proxy:
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=proxy_ca.pem, env={"SSL_CERT_FILE": ca.pem})
        with pytest.raises(net.TLSFailure, match=f"proxy {proxy.url}: certificate not trusted"):
            c.request("GET", "/echo", {}, timeout=5)
        assert proxy.connects == []


def test_target_not_trusted_through_proxy(ca: TestCA, tls_server: Server, tmp_path: Path) -> None:
    other = TestCA(tmp_path)
    with Proxy() as proxy:
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=other.pem)
        with pytest.raises(net.TLSFailure, match=rf"{tls_server.url} \(via proxy {proxy.url}\): certificate"):
            c.request("GET", "/echo", {}, timeout=5)


@pytest.mark.parametrize("proxy_tls", [False, True])
def test_http_target_through_proxy_is_absolute_form(
    server: Server, ca: TestCA, proxy_tls: bool, no_bundles: None
) -> None:
    with Proxy(tls=ca if proxy_tls else None) as proxy:
        c = net.Connector(server.url, proxy=proxy.url, env={"SSL_CERT_FILE": ca.pem})
        info = echo(c.request("GET", "/echo?x=1", {}, timeout=5))
        assert info["path"] == "/echo?x=1"
        assert echo(c.request("PUT", "/echo", {}, b"body", timeout=5))["body"] == "body"
        assert proxy.forwards == [f"GET {server.url}/echo?x=1", f"PUT {server.url}/echo"]
        assert proxy.connects == []
        assert len(proxy.peers) == 2 and len(set(proxy.peers)) == 1  # both on one connection to the proxy


def test_proxy_refusing_connect(tls_server: Server, ca: TestCA) -> None:
    with Proxy(refuse=403) as proxy:
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=ca.pem)
        with pytest.raises(net.ProxyRefused) as info:
            c.request("GET", "/echo", {}, timeout=5)
        assert str(info.value) == (
            f"proxy {proxy.url} refused CONNECT to 127.0.0.1:{tls_server.port}: 403 Forbidden"
        )
    assert tls_server.requests == []


def test_a_proxys_reason_phrase_is_read_as_utf8_and_quoted(tls_server: Server, ca: TestCA) -> None:
    with Proxy(refuse=407, reason="Proxy\x1b[2J auth \u202e") as proxy:
        c = net.Connector(tls_server.url, proxy=proxy.url, cafile=ca.pem)
        with pytest.raises(net.ProxyRefused) as info:
            c.request("GET", "/echo", {}, timeout=5)
    assert str(info.value) == (
        f'proxy {proxy.url} refused CONNECT to 127.0.0.1:{tls_server.port}: 407 "Proxy\\x1b[2J auth \\u202e"'
    )


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_dead_proxy_never_falls_back_to_direct(
    server: Server, tls_server: Server, ca: TestCA, scheme: str
) -> None:
    target = server if scheme == "http" else tls_server
    dead = f"http://127.0.0.1:{dead_port()}"
    c = net.Connector(target.url, proxy=dead, cafile=ca.pem)
    with pytest.raises(net.Unreachable, match=f"^proxy {dead} does not answer: connection refused$"):
        c.request("GET", "/echo", {}, timeout=5)
    assert target.requests == []


ENV_PROXY_NAMES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def test_environment_proxies_are_ignored(
    server: Server, tls_server: Server, ca: TestCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{dead_port()}"
    env = {name: dead for name in ENV_PROXY_NAMES}
    env.update(NO_PROXY="nothing.example", no_proxy="nothing.example", SSL_CERT_FILE=ca.pem)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert os.environ["HTTPS_PROXY"] == dead
    assert net.Connector(server.url, env=env).request("GET", "/echo", {}, timeout=5).status == 200
    assert net.Connector(tls_server.url, env=env).request("GET", "/echo", {}, timeout=5).status == 200
    assert len(server.peers) == 1 and len(tls_server.peers) == 1  # each asked directly


def test_no_time_left_and_no_deadline(server: Server) -> None:
    with pytest.raises(net.TimedOut):
        net.Connector(server.url).request("GET", "/echo", {}, timeout=0)
    assert server.requests == []
    assert net.Connector(server.url).request("GET", "/echo", {}, timeout=None).status == 200
