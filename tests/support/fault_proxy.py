"""A scriptable reverse proxy in front of one S3 server (SeaweedFS, moto), for faults no real server makes.

    proxy = FaultProxy(weed.endpoint)       # or the ``fault_proxy`` fixture (tests/support/servers.py), in front of weed
    proxy.add(Respond(503, "SlowDown"), kind="PUT", times=2)
    proxy.seen, proxy.count("LIST")          # every request (a ``tests.support.netfixtures.Seen``), counts by kind

Each request gets the first matching :class:`Rule`'s :class:`Action` (:class:`Respond`, :class:`Drop`,
:class:`ForwardThenDrop`, :class:`Stall`), or is forwarded untouched.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.support.netfixtures import HOP_BY_HOP, Seen


class Action:
    """What the proxy does with a matching request.  ``handle`` writes the answer (or not) to ``h``."""

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        proxy.forward(h, req)


class Forward(Action):
    pass


@dataclass
class Respond(Action):
    """Answer without forwarding: an S3 error document when ``code`` is given, else ``body``."""

    status: int
    code: str = ""
    message: str = ""
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        body = self.body
        headers = dict(self.headers)
        if self.code:
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{self.code}</Code><Message>{self.message or self.code}</Message>"
                f"<Resource>{req.path}</Resource><RequestId>fault</RequestId></Error>"
            ).encode()
            headers.setdefault("Content-Type", "application/xml")
        h.send_response(self.status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if req.method != "HEAD":
            h.wfile.write(body)


class Drop(Action):
    """Close the connection without forwarding or answering."""

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        h.drop()


class ForwardThenDrop(Action):
    """Forward the request (so it lands), then close the connection instead of answering."""

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        proxy.upstream_call(req)
        h.drop()


@dataclass
class Stall(Action):
    """Hold the request ``seconds`` (or until the proxy stops), then close the connection."""

    seconds: float

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        proxy.stopping.wait(self.seconds)
        h.drop()


@dataclass
class Rule:
    """Match a request; act ``times`` times (None: every time).  Every given field must match.

    ``kind`` is a :attr:`Seen.kind`; ``query`` a parameter name that must be present; ``header`` a lower-case
    header name that must be present; ``path`` a substring of the path; ``match`` any predicate.
    """

    action: Action
    method: str | None = None
    kind: str | None = None
    query: str | None = None
    header: str | None = None
    path: str | None = None
    match: Callable[[Seen], bool] | None = None
    times: int | None = None
    used: int = 0

    def matches(self, req: Seen) -> bool:
        return (
            (self.times is None or self.used < self.times)
            and (self.method is None or req.method == self.method)
            and (self.kind is None or req.kind == self.kind)
            and (self.query is None or self.query in req.query)
            and (self.header is None or self.header in req.headers)
            and (self.path is None or self.path in req.path)
            and (self.match is None or self.match(req))
        )


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.server.proxy.dispatch(self, req)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


class FaultProxy:
    """A reverse proxy in front of one S3 server that applies the first matching rule to each request.

    Requests are forwarded with their headers untouched (the Host header included), so signatures made for
    the proxy's address verify upstream.  ``seen`` records every request; ``count(kind)`` counts them.
    """

    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.server = _ProxyServer(("127.0.0.1", 0), ProxyHandler)
        self.server.proxy = self
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, action: Action, **match: Any) -> Rule:
        rule = Rule(action, **match)
        with self.lock:
            self.rules.append(rule)
        return rule

    def count(self, kind: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.seen if kind is None or r.kind == kind)

    def reset(self) -> None:
        with self.lock:
            self.rules.clear()
            self.seen.clear()

    def dispatch(self, h: ProxyHandler, req: Seen) -> None:
        action: Action = Forward()
        with self.lock:
            self.seen.append(req)
            for rule in self.rules:
                if rule.matches(req):
                    rule.used += 1
                    action = rule.action
                    break
        action.handle(self, h, req)

    def upstream_call(self, req: Seen) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.putrequest(req.method, req.target, skip_host=True, skip_accept_encoding=True)
            for k, v in req.headers.items():
                if k not in HOP_BY_HOP and k != "content-length":
                    conn.putheader(k, v)
            if req.body or req.method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(req.body)))
            conn.endheaders(req.body or None)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, resp.reason, resp.getheaders(), body
        finally:
            conn.close()

    def forward(self, h: ProxyHandler, req: Seen) -> None:
        status, reason, headers, body = self.upstream_call(req)
        h.send_response(status, reason)
        length_sent = False
        for k, v in headers:
            lk = k.lower()
            if lk in HOP_BY_HOP or lk in ("server", "date"):
                continue
            if lk == "content-length":
                if req.method != "HEAD":
                    continue
                length_sent = True
            h.send_header(k, v)
        if not length_sent:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if req.method != "HEAD":
            h.wfile.write(body)

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


class Throttle(Action):
    """Answer 503 SlowDown to a fraction of the requests it is given, the others forwarded: which ones is
    drawn from ``random.Random(seed)`` in the order they arrive, and at most ``limit`` are refused, so a
    client that retries always gets through.  ``refused`` counts them."""

    def __init__(self, fraction: float, seed: int, limit: int) -> None:
        import random

        self.fraction = fraction
        self.draw = random.Random(seed)
        self.limit = limit
        self.refused = 0
        self.lock = threading.Lock()

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        with self.lock:
            slow = self.refused < self.limit and self.draw.random() < self.fraction
            self.refused += slow
        if slow:
            Respond(503, "SlowDown", "Please reduce your request rate.").handle(proxy, h, req)
        else:
            proxy.forward(h, req)


class RefuseKey(Action):
    """Answer 403 InvalidAccessKeyId, as a store does to a key rotated away; add it with
    ``match=RefuseKey.signed_with(key_id)``.  The first ``together`` refusals are held until that many
    requests wait (or 10 s passed), so that many senders are refused by the same key at once.  ``refused``
    counts the refusals."""

    def __init__(self, together: int = 1) -> None:
        self.together = threading.Barrier(together, timeout=10) if together > 1 else None
        self.refused = 0
        self.lock = threading.Lock()

    @staticmethod
    def signed_with(key_id: str, when: Callable[[], bool] = lambda: True) -> Callable[[Seen], bool]:
        """A predicate: the request is signed with ``key_id`` (and ``when()`` holds)."""
        return lambda r: f"Credential={key_id}/" in r.headers.get("authorization", "") and when()

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        if self.together is not None:
            with contextlib.suppress(threading.BrokenBarrierError):
                self.together.wait()
            self.together.abort()  # held once: every later refusal is answered at once
        with self.lock:
            self.refused += 1
        Respond(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist.").handle(
            proxy, h, req
        )
