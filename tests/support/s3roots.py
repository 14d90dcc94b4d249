"""An s3:// root for command tests: a fresh prefix in a shared bucket of a test server, its ``file:``
credentials directory, and a boto3 client beside it."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from publish.rules.layout import ROOT_OBJECT
from publish.stores.s3 import ROOT_BODY
from tests.conftest import Result, remember_secret, run_cli
from tests.support.servers import S3Server


def creds_dir(base: Path, server: S3Server, endpoint: str | None = None, **fields: str) -> str:
    """A private ``file:`` source directory holding the server's key."""
    d = base / f"creds-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    values = {
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
        "endpoint": endpoint or server.endpoint,
        "region": server.region,
        **fields,
    }
    for name, value in values.items():
        p = d / name
        p.write_text(value + "\n")
        p.chmod(0o600)
    remember_secret(values["access_key_id"], values["secret_access_key"])
    return f"file:{d}"


def client(server: S3Server) -> Any:
    """boto3, without ``Expect: 100-continue``: after an empty PUT on a kept connection, SeaweedFS leaves a
    PUT with a body that expects a 100 waiting out boto3's 60 s read timeout."""
    s3 = server.client()

    def drop_expect(request: Any, **kw: Any) -> None:
        request.headers.pop("Expect", None)

    s3.meta.events.register("before-send.s3", drop_expect)
    return s3


class Root:
    """An s3:// root on one server: a fresh prefix in a shared bucket, with a boto3 client beside it."""

    def __init__(self, server: S3Server, tmp: Path, endpoint: str | None = None, init: bool = True) -> None:
        self.server = server
        self.bucket = server.shared_bucket()
        self.prefix = "run-" + uuid.uuid4().hex[:10]
        self.url = f"s3://{self.bucket}/{self.prefix}"
        self.creds = creds_dir(tmp, server, endpoint)
        self.s3 = client(server)
        if init:  # as `publish init` makes it: a prefix holding nothing at all is a missing root
            self.put(ROOT_OBJECT, ROOT_BODY)

    def run(self, verb: str, *args: str, env: dict[str, str] | None = None) -> Result:
        return run_cli(verb, "-checkpoint", self.url, "-creds", self.creds, *args, env=env)

    def put(self, key: str, body: bytes = b"") -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=body)

    def put_many(self, keys: list[str], body: bytes = b"") -> None:
        s3 = client(self.server)
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda k: s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{k}", Body=body), keys
                )
            )

    def keys(self, under: str = "") -> list[str]:
        """The keys under the root (below ``under``), relative to it; the root's own object is left out."""
        found: list[str] = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/{under}"
        )
        for page in pages:
            found += [o["Key"][len(self.prefix) + 1 :] for o in page.get("Contents", [])]
        return sorted(k for k in found if k != ROOT_OBJECT)

    def entries(self) -> list[str]:
        return [k[len("pub/") :] for k in self.keys("pub/")]
