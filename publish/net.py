"""Connections to one HTTP(S) server: direct or through one explicit proxy, verified TLS, a deadline.

Environment proxies are never consulted (http.client does not read them; urllib is not used).  TLS trust is
the cafile given, else the system trust found from the ``env`` mapping as Go's crypto/x509 finds it.  Every socket
operation gets the time left before the request's deadline.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping

from publish.neterrors import (
    Dropped,
    NetError,
    ProxyRefused,
    TimedOut,
    TLSFailure,
    TooLarge,
    TrustNotFound,
    Unreachable,
)
from publish.neterrors import reason as _reason
from publish.streams import Facade, SockStream, Stream, TLSStream
from publish.trust import Trust, find_trust
from publish.urls import netloc, parse_endpoint, parse_proxy

__all__ = [
    "DEFAULT_LIMIT",
    "ERROR_LIMIT",
    "Connector",
    "Dropped",
    "NetError",
    "ProxyRefused",
    "Response",
    "TLSFailure",
    "TimedOut",
    "TooLarge",
    "TrustNotFound",
    "Unreachable",
]

#: The cap on a response body when the caller gives none.
DEFAULT_LIMIT = 1024 * 1024
#: The cap on the body of an answer with a status of 300 or more (an error document is far smaller).
ERROR_LIMIT = 64 * 1024
#: The most one read asks of the stream, so a large cap never allocates the whole cap up front.
_PIECE = 256 * 1024


# ------------------------------------------------------------------------------------ TLS context


def _tls_context(trust: Trust) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    trust.load(ctx)
    return ctx


# --------------------------------------------------------------------------------------- connector

_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_BAD_VALUE_RE = re.compile(r"[\r\n\0]")


class Response:
    """A whole response: ``headers`` has lower-case names (repeated headers joined with ', ')."""

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"Response({self.status} {self.reason}, {len(self.body)} bytes)"


class Connector:
    """Connections to one server (scheme, host, port), direct or through one explicit proxy.

    Environment proxies are never consulted.  https is always verified; the trust is ``cafile`` if given,
    else the system trust found from ``env`` (publish.trust).  An https proxy is verified against the system
    trust.  One connection is kept and reused; not thread-safe (one Connector per thread)."""

    def __init__(
        self,
        base_url: str,
        *,
        proxy: str | None = None,
        cafile: str | None = None,
        env: Mapping[str, str] = {},  # noqa: B006 - read only
    ) -> None:
        self.scheme, self.host, self.port = parse_endpoint(base_url)
        self.host_header = netloc(self.scheme, self.host, self.port)
        self.name = f"{self.scheme}://{self.host_header}"
        self.proxy = parse_proxy(proxy) if proxy is not None else None
        self._cafile = cafile
        self._env = dict(env)
        self._ctx: ssl.SSLContext | None = None
        self._proxy_ctx: ssl.SSLContext | None = None
        self._stream: Stream | None = None
        self._deadline: float | None = None

    # -- time and contexts

    def _left(self) -> float | None:
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(f"{self.name}: timed out")
        return left

    def _target_ctx(self) -> ssl.SSLContext:
        if self._ctx is None:
            if self._cafile is not None:
                if not os.path.isfile(self._cafile):
                    raise TrustNotFound(f"CA file {self._cafile} not found")
                trust = Trust(f"CA file {self._cafile}", cafile=self._cafile)
            else:
                trust = find_trust(self._env)
            self._ctx = _tls_context(trust)
        return self._ctx

    def _system_ctx(self) -> ssl.SSLContext:
        if self._proxy_ctx is None:
            self._proxy_ctx = _tls_context(find_trust(self._env))
        return self._proxy_ctx

    # -- opening

    def _connect(self, host: str, port: int, who: str) -> socket.socket:
        try:
            try:
                sock = socket.create_connection((host, port), timeout=self._left())
            except socket.gaierror:
                if not (host.endswith(".") and host.strip(".")):
                    raise
                # A fully qualified name that only the hosts file holds: glibc matches "localhost." to no
                # line of it, Go's resolver matches it to "localhost".  Ask for the name without its dot.
                sock = socket.create_connection((host.rstrip("."), port), timeout=self._left())
        except socket.gaierror:
            raise Unreachable(f"{who} does not answer: cannot resolve host name {host}") from None
        except (socket.timeout, TimeoutError):
            raise Unreachable(f"{who} does not answer: connect timed out") from None
        except OSError as e:
            raise Unreachable(f"{who} does not answer: {_reason(e)}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _handshake(self, op: Callable[[], object], who: str) -> None:
        try:
            op()
        except ssl.SSLCertVerificationError as e:
            raise TLSFailure(f"{who}: certificate not trusted: {_reason(e)}") from None
        except (socket.timeout, TimeoutError):
            raise TimedOut(f"{who}: timed out in the TLS handshake") from None
        except (ssl.SSLError, OSError) as e:
            raise TLSFailure(f"{who}: TLS handshake failed: {_reason(e)}") from None

    def _wrap(self, sock: socket.socket, ctx: ssl.SSLContext, host: str, who: str) -> ssl.SSLSocket:
        ssock = ctx.wrap_socket(sock, server_hostname=host.rstrip("."), do_handshake_on_connect=False)

        def handshake() -> None:
            ssock.settimeout(self._left())
            ssock.do_handshake()

        try:
            self._handshake(handshake, who)
        except NetError:
            ssock.close()
            raise
        return ssock

    def _tunnel(self, stream: SockStream, who: str) -> SockStream:
        """CONNECT through the proxy; returns the stream to the target (bytes past the answer kept)."""
        hostport = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            stream.sendall(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode("ascii"))
            data = b""
            while b"\r\n\r\n" not in data:
                if len(data) > 65536:
                    raise NetError(f"{who}: answer to CONNECT too long")
                piece = stream.recv(65536)
                if not piece:
                    raise Dropped(f"{who}: closed the connection in answer to CONNECT")
                data += piece
        except (socket.timeout, TimeoutError):
            raise TimedOut(f"{who}: no answer to CONNECT within the time left") from None
        except (ssl.SSLError, OSError) as e:
            raise Dropped(f"{who}: connection dropped during CONNECT: {_reason(e)}") from None
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        m = re.match(r"HTTP/1\.[01] (\d{3})(?: (.*))?$", status_line)
        if not m:
            raise NetError(f"{who}: bad answer to CONNECT")
        status = int(m.group(1))
        if not 200 <= status < 300:
            reason = (m.group(2) or "").strip()
            raise ProxyRefused(f"{who} refused CONNECT to {hostport}: {status} {reason}".rstrip())
        return SockStream(stream.sock, self._left, pending=rest)

    def _open(self) -> Stream:
        # The trust is found before connecting: a missing one fails without touching the network.
        ctx = self._target_ctx() if self.scheme == "https" else None
        if self.proxy is None:
            sock = self._connect(self.host, self.port, self.name)
            if ctx is not None:
                try:
                    sock = self._wrap(sock, ctx, self.host, self.name)
                except NetError:
                    sock.close()
                    raise
            return SockStream(sock, self._left)
        who = f"proxy {self.proxy}"
        pscheme, phost, pport = parse_endpoint(self.proxy)
        proxy_ctx = self._system_ctx() if pscheme == "https" else None
        sock = self._connect(phost, pport, who)
        try:
            if proxy_ctx is not None:
                sock = self._wrap(sock, proxy_ctx, phost, who)
            stream = SockStream(sock, self._left)
            if ctx is None:
                return stream
            stream = self._tunnel(stream, who)
            result: list[TLSStream] = []
            self._handshake(
                lambda: result.append(TLSStream(stream, ctx, self.host)), f"{self.name} (via {who})"
            )
            return result[0]
        except NetError:
            sock.close()
            raise

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        """Close the kept connection, if any."""
        self._drop()

    # -- requests

    def _head(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> bytes:
        if not _TOKEN_RE.match(method):
            raise ValueError("bad HTTP method")
        if not target.startswith("/") or not target.isascii() or any(ord(c) <= 0x20 for c in target):
            raise ValueError("bad request target: must be an encoded path starting with '/'")
        if self.proxy is not None and self.scheme == "http":
            target = f"http://{self.host_header}{target}"
        lines = [f"{method} {target} HTTP/1.1"]
        names = {k.lower() for k in headers}
        if "host" not in names:
            lines.append(f"Host: {self.host_header}")
        for k, v in headers.items():
            if not _TOKEN_RE.match(k) or _BAD_VALUE_RE.search(v):
                raise ValueError(f"bad HTTP header {k!r}")
            lines.append(f"{k}: {v}")
        if "content-length" not in names and (body or method in ("PUT", "POST", "PATCH")):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        timeout: float | None,
        limit: int = DEFAULT_LIMIT,
        error_limit: int = ERROR_LIMIT,
    ) -> Response:
        """Send one request (``target``: the path and query, already encoded) and read the whole response.

        ``timeout`` is the time left for the whole request.  The body is capped at ``limit`` bytes, or at
        ``error_limit`` when the status is 300 or more: over the cap is :class:`TooLarge` (a Content-Length
        over it before anything is read; a body without one once cap + 1 bytes arrived).  There is no way to
        read a body without a cap.  A kept connection that the server closed is reopened before anything is
        sent."""
        head = self._head(method, target, headers, body)
        self._deadline = None if timeout is None else time.monotonic() + timeout
        if self._stream is not None and self._stream.idle_readable():
            self._drop()
        if self._stream is None:
            self._stream = self._open()
        stream = self._stream
        try:
            if len(body) <= 65536:
                stream.sendall(head + body)
            else:
                stream.sendall(head)
                stream.sendall(body)
            resp = http.client.HTTPResponse(Facade(stream), method=method)  # type: ignore[arg-type]
            resp.begin()
            data = self._body(resp, method, limit if resp.status < 300 else error_limit)
        except NetError:
            self._drop()
            raise
        except (socket.timeout, TimeoutError):
            self._drop()
            raise TimedOut(f"{self.name}: no response within the time left") from None
        except (ConnectionError, http.client.IncompleteRead, ssl.SSLError) as e:
            self._drop()
            raise Dropped(f"{self.name}: connection dropped: {_reason(e)}") from None
        except http.client.HTTPException as e:
            self._drop()
            raise NetError(f"{self.name}: bad HTTP response: {type(e).__name__}") from None
        except OSError as e:
            self._drop()
            raise Dropped(f"{self.name}: connection dropped: {_reason(e)}") from None
        if resp.will_close or not resp.isclosed():
            self._drop()
        headers_out: dict[str, str] = {}
        for k, v in resp.getheaders():
            k = k.lower()
            headers_out[k] = f"{headers_out[k]}, {v}" if k in headers_out else v
        return Response(resp.status, resp.reason, headers_out, data)

    def _body(self, resp: http.client.HTTPResponse, method: str, limit: int) -> bytes:
        what = "response body" if resp.status < 300 else f"body of the HTTP {resp.status} answer"
        length = resp.getheader("content-length", "")
        if method != "HEAD" and length.isdigit() and int(length) > limit:
            raise TooLarge(
                f"{self.name}: {what} of {int(length)} bytes is larger than the limit of {limit} bytes",
                int(length),
                limit,
                resp.status,
            )
        parts: list[bytes] = []
        total = 0
        while True:
            piece = resp.read(min(_PIECE, limit + 1 - total))
            if not piece:
                return b"".join(parts)
            parts.append(piece)
            total += len(piece)
            if total > limit:
                raise TooLarge(
                    f"{self.name}: {what} is larger than the limit of {limit} bytes", None, limit, resp.status
                )
