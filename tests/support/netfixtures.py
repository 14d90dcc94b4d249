"""Loopback servers for network tests: a test CA, an HTTP(S) server with faults on demand, and an
http:// or https:// proxy (CONNECT tunnels and absolute-form forwarding) that counts what it carried.

    ca = TestCA(tmp_path)                              # ca.pem: the CA file; ca.server_ctx(): for servers
    with Server(tls=ca) as srv:  ...  srv.url          # https://127.0.0.1:PORT (http:// without tls)
    with Proxy(tls=ca) as proxy: ...  proxy.url        # https://127.0.0.1:PORT; proxy.connects, .forwards
    with Proxy(refuse=403) as proxy: ...               # answers every CONNECT with 403
    proxy.seen, proxy.paths()                          # every request (headers, body); (method, path) pairs

Server paths (any method): /echo... answers JSON {method, path, headers, body}; /bytes/N a body of N bytes;
/chunked/N the same, chunked; /trickle/N N bytes, one every 50 ms; /stall/SECONDS waits before answering; /drop closes without answering;
/reset resets the connection; /close-after answers (keep-alive) and then closes.  Proxy (and Server
handler) classes can be subclassed for other faults; the Proxy forwards to any loopback server
(SeaweedFS, moto, OpenBao), so the S3 and Vault tests can put it in front of theirs.
"""

from __future__ import annotations

import http.client
import http.server
import json
import select
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import trustme

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class TestCA:
    """A fresh CA (trustme) with a certificate for 127.0.0.1 and localhost; ``pem`` is the CA file."""

    __test__ = False

    def __init__(self, directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
        self.ca = trustme.CA()
        self.cert = self.ca.issue_cert(*hosts)
        self.pem = str(directory / f"ca-{id(self)}.pem")
        self.ca.cert_pem.write_to_path(self.pem)

    def server_ctx(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.cert.configure_cert(ctx)
        return ctx


class _ThreadedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: Any

    def handle_error(self, request: Any, client_address: Any) -> None:  # quiet: faults are the point
        pass


class _Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _ThreadedServer

    def setup(self) -> None:
        owner = self.server.owner
        with owner.lock:
            owner.connections += 1
        if owner.tls is not None:
            self.request.settimeout(10)
            self.request = owner.tls.server_ctx().wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Closing:
    """A context manager that calls ``close()`` on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Listening(Closing):
    """A TCP server on a free loopback port (``port``): each connection goes to ``_serve`` on a thread of its
    own; ``close()`` stops accepting."""

    sock: socket.socket
    port: int

    def _listen(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._accepted()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _accepted(self) -> None:
        """Called for each connection before it is served."""

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()


class _Running(Closing):
    """Start ``handler`` on a free loopback port in a thread; a context manager."""

    handler: type[_Base]

    def __init__(self, tls: TestCA | None = None) -> None:
        self.tls = tls
        self.lock = threading.Lock()
        self.connections = 0
        self.httpd = _ThreadedServer(("127.0.0.1", 0), self.handler)
        self.httpd.owner = self
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class ServerHandler(_Base):
    def _any(self) -> None:
        owner: Server = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with owner.lock:
            owner.requests.append((self.command, self.path, dict(self.headers), body))
            owner.peers.append(self.client_address)
        parts = self.path.split("?")[0].split("/")
        kind = parts[1] if len(parts) > 1 else ""
        if kind == "stall":
            time.sleep(float(parts[2]))
        if kind == "drop":
            self.close_connection = True
            return
        if kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if kind == "trickle":  # /trickle/N: N bytes, one every 50 ms
            self.send_response(200)
            self.send_header("Content-Length", parts[2])
            self.end_headers()
            for _ in range(int(parts[2])):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
            return
        if kind in ("bytes", "chunked"):
            data = b"x" * int(parts[2])
        else:
            info = {"method": self.command, "path": self.path, "headers": dict(self.headers)}
            info["body"] = body.decode("latin-1")
            data = json.dumps(info).encode()
        self.send_response(200)
        if kind == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 1000):
                piece = data[i : i + 1000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        if kind == "close-after":
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


class Server(_Running):
    """The test HTTP(S) server; ``requests`` lists (method, path, headers, body), ``peers`` the client address
    (host, port) each came from: one connection's requests share it.  ``connections`` counts every connection
    accepted, a stranger's too: a process of another test that connects to a port it took for dead, or for its
    own server's, which the system has since given this server."""

    handler = ServerHandler

    def __init__(self, tls: TestCA | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.peers: list[tuple[str, int]] = []
        super().__init__(tls)


def relay(a: socket.socket, b: socket.socket, idle: float = 30.0) -> None:
    """Copy bytes both ways until either side closes (TLS sockets' buffered records included)."""
    socks = [a, b]
    while True:
        ready = [s for s in socks if isinstance(s, ssl.SSLSocket) and s.pending()]
        if not ready:
            ready, _, _ = select.select(socks, [], [], idle)
            if not ready:
                return
        for s in ready:
            other = b if s is a else a
            try:
                data = s.recv(65536)
                if not data:
                    return
                other.sendall(data)
            except OSError:
                return


@dataclass
class Seen:
    """One request a proxy was sent (:class:`Proxy` here, ``tests.support.servers.FaultProxy``): ``target`` as
    received (origin form, absolute form, or CONNECT's host:port), headers with lower-case names."""

    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def path(self) -> str:
        """The target's path, percent-decoded."""
        return unquote(urlsplit(self.target).path)

    @property
    def query(self) -> dict[str, str]:
        """The target's query parameters (blank values kept)."""
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))

    @property
    def kind(self) -> str:
        """In S3 terms: LIST, GET, HEAD, PUT, PUT_IF_NONE_MATCH, DELETE, DELETE_OBJECTS, or the method."""
        if self.method == "GET" and self.query.get("list-type") == "2":
            return "LIST"
        if self.method == "POST" and "delete" in self.query:
            return "DELETE_OBJECTS"
        if self.method == "PUT" and "if-none-match" in self.headers:
            return "PUT_IF_NONE_MATCH"
        return self.method


class ProxyHandler(_Base):
    def do_CONNECT(self) -> None:
        owner: Proxy = self.server.owner
        with owner.lock:
            owner.connects.append(self.path)
            owner.seen.append(Seen("CONNECT", self.path, {k.lower(): v for k, v in self.headers.items()}))
            owner.peers.append(self.client_address)
        self.close_connection = True
        if owner.refuse:
            # The reason phrase's UTF-8 bytes as they are on the wire (http.server writes latin-1).
            reason = owner.reason.encode().decode("latin-1") if owner.reason is not None else None
            self.send_response(owner.refuse, reason)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except (OSError, ValueError):
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        with upstream:
            relay(self.connection, upstream)

    def _forward(self) -> None:
        owner: Proxy = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with owner.lock:
            owner.forwards.append(f"{self.command} {self.path}")
            owner.seen.append(
                Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            owner.peers.append(self.client_address)
        url = urlsplit(self.path)
        if url.scheme != "http" or url.hostname is None:
            self.send_error(400, "absolute-form http URL expected")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
        try:
            target = (url.path or "/") + (f"?{url.query}" if url.query else "")
            conn.request(self.command, target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


class Proxy(_Running):
    """An http:// (or, with ``tls``, https://) proxy.  ``connects``: the CONNECT targets; ``forwards``:
    the absolute-form request lines; ``seen``: every request, headers and body included, and ``peers`` the
    client address each came from (as :class:`Server`'s); ``refuse``: a status to answer every CONNECT with
    (may be set while it runs), with ``reason`` as its reason phrase."""

    handler = ProxyHandler

    def __init__(self, tls: TestCA | None = None, refuse: int = 0, reason: str | None = None) -> None:
        self.refuse = refuse
        self.reason = reason
        self.connects: list[str] = []
        self.forwards: list[str] = []
        self.seen: list[Seen] = []
        self.peers: list[tuple[str, int]] = []
        super().__init__(tls)

    def paths(self) -> list[tuple[str, str]]:
        """(method, path) of each request: the path without scheme and host, or CONNECT's host:port."""
        return [(s.method, s.target if s.method == "CONNECT" else urlsplit(s.target).path) for s in self.seen]


class TLSFront(Listening):
    """TLS on a loopback port in front of a real server (SeaweedFS, moto): each connection is decrypted here
    and its bytes relayed to ``upstream``.  ``endpoint`` is its https:// URL; ``handshakes`` counts clients."""

    def __init__(self, upstream: tuple[str, int], context: ssl.SSLContext) -> None:
        self.upstream = upstream
        self.context = context
        self.handshakes = 0
        self._listen()
        self.endpoint = f"https://127.0.0.1:{self.port}"

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        self.handshakes += 1
        with tls, socket.create_connection(self.upstream) as up:
            relay(tls, up)


class Canned(Listening):
    """A loopback HTTP server that answers the n-th request with ``answers[n]`` byte for byte, and closes
    the connection after an answer in ``close_after`` (by index) or once the answers run out.  Each request is
    read as its head up to the empty line plus a Content-Length body; ``heads`` lists them, ``peers`` the
    client address each came from (one connection's requests share it), ``connections`` counts the
    connections accepted, a stranger's too (see :class:`Server`).  A context manager; ``url`` is
    http://127.0.0.1:PORT."""

    def __init__(self, answers: list[bytes], close_after: tuple[int, ...] = ()) -> None:
        self.answers = answers
        self.close_after = close_after
        self.heads: list[bytes] = []
        self.peers: list[tuple[str, int]] = []
        self.connections = 0
        self.lock = threading.Lock()
        self._listen()
        self.url = f"http://127.0.0.1:{self.port}"

    def _accepted(self) -> None:
        with self.lock:
            self.connections += 1

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        data = b""
        with conn:
            try:
                peer = conn.getpeername()
            except OSError:
                return
            while True:
                try:
                    while b"\r\n\r\n" not in data:
                        piece = conn.recv(65536)
                        if not piece:
                            return
                        data += piece
                    head, _, data = data.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(data) < length:
                        data += conn.recv(65536)
                    data = data[length:]
                    with self.lock:
                        n = len(self.heads)
                        self.heads.append(head)
                        self.peers.append(peer)
                    if n >= len(self.answers):
                        return
                    conn.sendall(self.answers[n])
                    if n in self.close_after:
                        conn.shutdown(socket.SHUT_WR)
                        while conn.recv(65536):  # the client closes: no reset of unread bytes
                            pass
                        return
                except OSError:
                    return
