"""publish.http.tls: TLS over the _ssl C module keeps what ssl.SSLContext promised: the chain and the host name
verified, TLS 1.2 at least, and a connection lost without close_notify never taken for a whole answer."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from publish.http import net, streams, tls
from tests.support.netfixtures import Proxy, TestCA


def test_the_client_context_verifies_chain_and_name_from_tls_1_2() -> None:
    ctx = tls.client_context()
    assert ctx.check_hostname is True
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def serve_once(ca: TestCA, answer: Callable[[ssl.SSLSocket], None], **ctx_options: object) -> int:
    """A TLS server on loopback for one connection, which ``answer`` handles; its port."""
    ctx = ca.server_ctx()
    for name, value in ctx_options.items():
        setattr(ctx, name, value)
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        with listener:
            conn, _ = listener.accept()
            conn.settimeout(10)
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls_conn:
                    answer(tls_conn)
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=run, daemon=True).start()
    return int(listener.getsockname()[1])


def serve(ca: TestCA, answers: list[Callable[[ssl.SSLSocket], None]]) -> tuple[int, list[int]]:
    """A TLS server on loopback that hands its n-th connection to ``answers[n]`` and then stops listening;
    its port, and a list that gets an item per connection taken."""
    ctx = ca.server_ctx()
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[int] = []

    def run() -> None:
        with listener:
            for answer in answers:
                conn, _ = listener.accept()
                taken.append(1)
                conn.settimeout(10)
                try:
                    with ctx.wrap_socket(conn, server_side=True) as tls_conn:
                        answer(tls_conn)
                except (OSError, ssl.SSLError):
                    pass

    threading.Thread(target=run, daemon=True).start()
    return int(listener.getsockname()[1]), taken


def read_request(conn: ssl.SSLSocket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return
        data += piece


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_a_server_that_only_speaks_tls_1_1_is_refused(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    port = serve_once(
        ca,
        read_request,
        minimum_version=ssl.TLSVersion.MINIMUM_SUPPORTED,
        maximum_version=ssl.TLSVersion.TLSv1_1,
    )
    conn = net.Connector(f"https://127.0.0.1:{port}", cafile=ca.pem)
    with pytest.raises(net.TLSFailure, match="TLS handshake failed"):
        conn.request("GET", "/", {}, timeout=10)


def test_a_body_cut_by_a_lost_connection_is_dropped_not_short(tmp_path: Path) -> None:
    """The server closes TCP without TLS close_notify ten bytes into a 100-byte body: a ragged end of stream,
    which reads as the end, and the HTTP layer then refuses the short body."""
    ca = TestCA(tmp_path)

    def answer(conn: ssl.SSLSocket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        raw = socket.socket(fileno=conn.detach())  # no close_notify: the TCP connection just ends
        raw.shutdown(socket.SHUT_RDWR)
        raw.close()

    port = serve_once(ca, answer)
    conn = net.Connector(f"https://127.0.0.1:{port}", cafile=ca.pem)
    with pytest.raises(net.Dropped, match="IncompleteRead"):
        conn.request("GET", "/", {}, timeout=10)


def test_a_whole_answer_over_tls_reads_and_the_connection_is_kept(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)

    def answer(conn: ssl.SSLSocket) -> None:
        for body in (b"first", b"second"):
            read_request(conn)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    port = serve_once(ca, answer)
    conn = net.Connector(f"https://127.0.0.1:{port}", cafile=ca.pem)
    assert conn.request("GET", "/", {}, timeout=10).body == b"first"
    assert conn.request("GET", "/", {}, timeout=10).body == b"second"  # one connection: the server takes one


# --------------------------------------------------------------------- what arrives on an idle connection


def _late_session_ticket(conn: ssl.SSLSocket) -> None:
    """Send a TLS 1.3 NewSessionTicket now, after the handshake, through OpenSSL itself (Python's ssl sends
    tickets only within the handshake, before any answer, where a client's first read consumes them)."""
    import _ssl
    import ctypes

    lib = ctypes.CDLL(_ssl.__file__)  # its libssl's symbols resolve through it
    for name in ("SSL_get_fd", "SSL_new_session_ticket", "SSL_do_handshake"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    # _ssl's socket object: PyObject_HEAD, then a weak reference to the socket, then its SSL pointer.
    where = id(conn._sslobj) + object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p)  # type: ignore[attr-defined]
    ssl_ptr = ctypes.c_void_p.from_address(where).value
    assert conn.version() == "TLSv1.3" and lib.SSL_get_fd(ssl_ptr) == conn.fileno()
    assert lib.SSL_new_session_ticket(ssl_ptr) == 1 and lib.SSL_do_handshake(ssl_ptr) == 1


Route = tuple[TestCA, dict[str, Any]]  # the test CA, and the Connector's arguments to reach its server


@pytest.fixture(params=["direct", "via http proxy", "via https proxy"])
def route(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Route]:
    """The test CA and the Connector's arguments to reach a server it certifies: directly, or through a
    proxy's tunnel (TLS to the server inside the CONNECT tunnel, itself inside TLS to an https proxy)."""
    ca = TestCA(tmp_path)
    if request.param == "direct":
        yield ca, {"cafile": ca.pem}
        return
    with Proxy(tls=ca if request.param == "via https proxy" else None) as proxy:
        yield ca, {"cafile": ca.pem, "proxy": proxy.url, "env": {"SSL_CERT_FILE": ca.pem}}


def _idle_then(route: Route, between: Callable[[ssl.SSLSocket], None]) -> tuple[list[bytes], int]:
    """Two requests on one connector, the server sending ``between`` while the connection is idle: the
    bodies answered and how many connections the server took (it answers "second" on either)."""
    ca, how = route
    sent = threading.Event()

    def first(conn: ssl.SSLSocket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        try:
            between(conn)  # raises once it ended the connection
        finally:
            sent.set()
        second(conn)

    def second(conn: ssl.SSLSocket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")

    port, taken = serve(ca, [first, second])
    conn = net.Connector(f"https://127.0.0.1:{port}", **how)
    bodies = [conn.request("GET", "/", {}, timeout=10).body]
    assert sent.wait(10)
    stream = conn._stream
    assert stream is not None
    # What the server sent is there to be read: on the socket, or (TLS in a proxy's tunnel) come in with the
    # answer and waiting in the TLS layer's buffer.
    buffered = stream._in if isinstance(stream, streams.TLSStream) else None
    sock = (stream.inner if isinstance(stream, streams.TLSStream) else stream).sock
    deadline = time.monotonic() + 10
    while not (buffered is not None and buffered.pending) and not select.select([sock], [], [], 0.05)[0]:
        assert time.monotonic() < deadline
    bodies.append(conn.request("GET", "/", {}, timeout=10).body)
    conn.close()
    return bodies, len(taken)


def test_a_late_session_ticket_on_an_idle_connection_does_not_end_it(route: Route) -> None:
    assert _idle_then(route, _late_session_ticket) == ([b"first", b"second"], 1)


def test_an_idle_connection_the_server_closed_is_reopened(route: Route) -> None:
    def close(conn: ssl.SSLSocket) -> None:
        conn.settimeout(0.5)  # unwrap waits for the client's close_notify, which comes only once it reopens
        conn.unwrap().close()  # close_notify, then the end of TCP
        raise OSError("closed")

    assert _idle_then(route, close) == ([b"first", b"second"], 2)


def test_an_idle_connection_the_server_cut_is_reopened(route: Route) -> None:
    def cut(conn: ssl.SSLSocket) -> None:
        raw = socket.socket(fileno=conn.detach())  # no close_notify
        raw.shutdown(socket.SHUT_RDWR)
        raw.close()
        raise OSError("cut")

    assert _idle_then(route, cut) == ([b"first", b"second"], 2)


def test_bytes_sent_on_an_idle_connection_end_it(route: Route) -> None:
    """Application data nobody asked for (here a whole answer): the connection is out of step."""

    def stray(conn: ssl.SSLSocket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")

    assert _idle_then(route, stray) == ([b"first", b"second"], 2)
