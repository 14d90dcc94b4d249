"""Connections to one HTTP(S) server: direct or through one explicit proxy, verified TLS, a deadline.

Environment proxies are never consulted.  TLS trust is the cafile given, else the system trust found from the
``env`` mapping as Go's crypto/x509 finds it.  Every socket operation and host name lookup gets the time left
before the request's deadline.  Sockets come from the _socket C module, responses are read by publish.http.http1;
https goes through publish.http.tls (the _ssl C module), imported when used: no start-up loads ssl or socket.
"""

from __future__ import annotations

import _socket
import os
import time

from publish.http import http1
from publish.http.streams import SockStream, TLSStream
from publish.http.trust import Trust, find_trust
from publish.http.trustcache import lazy
from publish.rules.neterrors import (
    Dropped,
    NetError,
    ProxyRefused,
    TimedOut,
    TLSFailure,
    TooLarge,
    TrustNotFound,
    Unreachable,
    Untrusted,
)
from publish.rules.neterrors import reason as _reason
from publish.rules.redact import foreign, shown
from publish.rules.urls import netloc, parse_endpoint, parse_proxy

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Union

    from publish.http.streams import Stream
    from publish.http.tls import Conn, Context

    Body = Union[bytes, bytearray, memoryview]  # sent as it is: a caller's buffer is never copied whole

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
#: What a socket timeout is raised as (socket.timeout is TimeoutError from Python 3.10).
_TIMEOUT = (TimeoutError, _socket.timeout)


# --------------------------------------------------------------------------------------- connector

_BAD_VALUE = "\r\n\0"


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
    else the system trust found from ``env`` (publish.http.trust).  An https proxy is verified against the system
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
        self._ctx: Context | None = None
        self._proxy_ctx: Context | None = None
        self._trust: Trust | None = None  # what _ctx and _proxy_ctx were made from
        self._proxy_trust: Trust | None = None
        self._stream: Stream | None = None
        self._deadline: float | None = None

    def clone(self) -> Connector:
        """A connector to the same server by the same way, with a connection of its own (one per thread);
        the trust found by this one is shared."""
        other = Connector.__new__(Connector)
        other.__dict__.update(self.__dict__)
        other._stream = None
        other._deadline = None
        return other

    # -- time and contexts

    def _left(self) -> float | None:
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(f"{self.name}: timed out")
        return left

    def _target_ctx(self) -> Context:
        if self._ctx is None:
            if self._cafile is not None:
                if not os.path.isfile(self._cafile):
                    raise TrustNotFound(f"CA file {self._cafile} not found")
                trust = Trust(f"CA file {self._cafile}", cafile=self._cafile)
            else:
                trust = find_trust(self._env)
            self._trust = lazy(trust, self._env)
            self._ctx = self._trust.context()
        return self._ctx

    def _system_ctx(self) -> Context:
        if self._proxy_ctx is None:
            self._proxy_trust = lazy(find_trust(self._env), self._env)
            self._proxy_ctx = self._proxy_trust.context()
        return self._proxy_ctx

    def _read_whole_bundles(self) -> bool:
        """After a chain did not verify: make the contexts that read a hashed copy of a bundle read the
        bundle file itself (publish.http.trustcache), so the copy never changes what is trusted.  True if any
        did."""
        target = self._trust.whole() if self._trust is not None else None
        proxy = self._proxy_trust.whole() if self._proxy_trust is not None else None
        if target is not None:
            self._trust, self._ctx = target, target.context()
        if proxy is not None:
            self._proxy_trust, self._proxy_ctx = proxy, proxy.context()
        return target is not None or proxy is not None

    # -- opening

    def _dial(self, host: str, port: int, who: str) -> _socket.socket:
        """socket.create_connection on _socket: the lookup and each address tried with the time left."""
        name = host.encode("ascii")  # a str makes getaddrinfo load the idna codec
        try:  # a literal address needs no lookup: no thread, and no import of publish.http.lookup
            infos = _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM, 0, _socket.AI_NUMERICHOST)
        except _socket.gaierror:
            from publish.http.lookup import addresses

            infos = addresses(name, port, self._left(), who)
        err: OSError = OSError("getaddrinfo returns an empty list")
        for family, kind, proto, _, addr in infos:
            sock = _socket.socket(family, kind, proto)
            try:
                sock.settimeout(self._left())
                sock.connect(addr)
            except BaseException as e:
                sock.close()
                if not isinstance(e, OSError):
                    raise
                err = e
                continue
            return sock
        raise err

    def _connect(self, host: str, port: int, who: str) -> _socket.socket:
        try:
            try:
                sock = self._dial(host, port, who)
            except _socket.gaierror:
                if not (host.endswith(".") and host.strip(".")):
                    raise
                # A fully qualified name that only the hosts file holds: glibc matches "localhost." to no
                # line of it, Go's resolver matches it to "localhost".  Ask for the name without its dot.
                sock = self._dial(host.rstrip("."), port, who)
        except _socket.gaierror:
            raise Unreachable(f"{who} does not answer: cannot resolve host name {host}") from None
        except _TIMEOUT:
            raise Unreachable(f"{who} does not answer: connect timed out") from None
        except OSError as e:
            raise Unreachable(f"{who} does not answer: {_reason(e)}") from None
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        return sock

    def _handshake(self, op: Callable[[], object], who: str) -> None:
        from publish.http import tls

        try:
            op()
        except tls.CertVerificationError as e:
            raise Untrusted(f"{who}: certificate not trusted: {_reason(e)}") from None
        except _TIMEOUT:
            raise TimedOut(f"{who}: timed out in the TLS handshake") from None
        except (tls.Error, OSError) as e:
            raise TLSFailure(f"{who}: TLS handshake failed: {_reason(e)}") from None

    def _wrap(self, sock: _socket.socket, ctx: Context, host: str, who: str) -> Conn:
        from publish.http import tls

        ssock = tls.Conn(ctx, sock, host)

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
        reader = http1.Reader(stream)
        try:
            stream.sendall(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode("ascii"))
            status_line = reader.line(65536)
            line = status_line
            while line:  # the headers, up to the empty line: 64 KiB in all
                line = reader.line(65536 - reader.consumed)
            if line is None:
                raise Dropped(f"{who}: closed the connection in answer to CONNECT")
        except (http1.BadResponse, http1.Closed) as e:
            if isinstance(e, http1.Closed):
                raise Dropped(f"{who}: closed the connection in answer to CONNECT") from None
            raise NetError(f"{who}: answer to CONNECT too long") from None
        except _TIMEOUT:
            raise TimedOut(f"{who}: no answer to CONNECT within the time left") from None
        except OSError as e:
            raise Dropped(f"{who}: connection dropped during CONNECT: {_reason(e)}") from None
        assert status_line is not None
        text = status_line.decode("latin-1")
        code = text[9:12]
        if (
            text[:9] not in ("HTTP/1.0 ", "HTTP/1.1 ")
            or not (code.isascii() and code.isdigit())
            or text[12:13] not in ("", " ")
        ):
            raise NetError(f"{who}: bad answer to CONNECT")
        status = int(code)
        if not 200 <= status < 300:
            reason = shown(foreign(text[13:].strip().encode("latin-1").decode("utf-8", "replace")))  # outside
            raise ProxyRefused(f"{who} refused CONNECT to {hostport}: {status} {reason}".rstrip())
        return SockStream(stream.sock, self._left, pending=reader.leftover())

    def _open(self) -> Stream:
        try:
            return self._open_once()
        except Untrusted:
            if not self._read_whole_bundles():
                raise
            return self._open_once()

    def _open_once(self) -> Stream:
        # The trust is found before connecting: a missing one fails without touching the network.
        ctx = self._target_ctx() if self.scheme == "https" else None
        sock: _socket.socket | Conn
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

    def _head(self, method: str, target: str, headers: Mapping[str, str], body: Body) -> bytes:
        if not method.isascii() or not http1.is_token(method.encode("ascii")):
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
            if not k.isascii() or not http1.is_token(k.encode("ascii")) or any(c in v for c in _BAD_VALUE):
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
        body: Body = b"",
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
                stream.sendall(head + bytes(body))
            else:
                stream.sendall(head)
                stream.sendall(body)
            reader = http1.Reader(stream)
            answer = http1.read_head(reader)
            how = http1.framing(answer, method)
            data = self._body(reader, answer.status, how, limit if answer.status < 300 else error_limit)
        except NetError:
            self._drop()
            raise
        except _TIMEOUT:
            self._drop()
            raise TimedOut(f"{self.name}: no response within the time left") from None
        except (http1.Closed, http1.Incomplete) as e:
            self._drop()
            raise Dropped(f"{self.name}: connection dropped: {e}") from None
        except http1.BadResponse as e:
            self._drop()
            raise NetError(f"{self.name}: bad HTTP response: {e}") from None
        except OSError as e:
            self._drop()
            raise Dropped(f"{self.name}: connection dropped: {_reason(e)}") from None
        if how.will_close or reader.eof or reader.leftover():
            self._drop()  # a byte past the answer: the connection is out of step
        headers_out: dict[str, str] = {}
        for k, v in answer.fields:
            headers_out[k] = f"{headers_out[k]}, {v}" if k in headers_out else v
        return Response(answer.status, answer.reason, headers_out, data)

    def _body(self, reader: http1.Reader, status: int, how: http1.Framing, limit: int) -> bytes:
        what = "response body" if status < 300 else f"body of the HTTP {status} answer"
        try:
            return http1.read_body(reader, how, limit)
        except http1.OverLimit as e:
            if e.size is not None:
                raise TooLarge(
                    f"{self.name}: {what} of {e.size} bytes is larger than the limit of {limit} bytes",
                    e.size,
                    limit,
                    status,
                ) from None
            raise TooLarge(
                f"{self.name}: {what} is larger than the limit of {limit} bytes", None, limit, status
            ) from None
