"""publish.http.tls: TLS over the _ssl C module keeps what ssl.SSLContext promised: the chain and the host name
verified, TLS 1.2 at least, and a connection lost without close_notify never taken for a whole answer."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from publish.http import net, tls
from tests.support.netfixtures import TestCA


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
