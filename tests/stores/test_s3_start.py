"""What an S3 `resolve` imports: on http:// and on https:// nothing of the ssl module (TLS goes through the
_ssl C module), socket, http.client, email, urllib, re, enum, typing, dataclasses or hashlib.  Each module an S3
verb imports costs its start-up (bench/startup_s3.py, docs/perf-startup.md).  Run with -S: without site,
whose .pth files import re and typing themselves."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from publish.rules import layout
from tests.support.netfixtures import TestCA, TLSFront
from tests.support.s3roots import Root
from tests.support.servers import Weed

REPO = Path(__file__).resolve().parents[2]

CODE = (
    "import os, sys; from publish.cli import main; "
    "code = main(sys.argv[1:], os.environ, sys.stdout, sys.stderr); "
    "sys.stderr.write('modules: ' + ' '.join(sorted(sys.modules)) + '\\n'); sys.exit(code)"
)

#: Never imported by an S3 resolve, whatever the endpoint's scheme.
NEVER = {
    "http",
    "http.client",
    "email",
    "urllib",
    "urllib.parse",
    "xml.etree",
    "xml.etree.ElementTree",
    "xml.sax",
    "dataclasses",
    "inspect",
    "datetime",
    "random",
    "hashlib",
    "hmac",
    "json",
    "typing",
    "ipaddress",
    "encodings.idna",
    "threading",
    "publish.creds.vault",
}
#: Not imported on an http:// endpoint either: TLS and the socket module with the enum it needs.
NOT_FOR_HTTP = {
    "ssl",
    "_ssl",
    "_hashlib",
    "socket",
    "selectors",
    "enum",
    "functools",
    "collections",
    "base64",
}


@pytest.fixture
def published(weed: Weed, tmp_path: Path) -> Iterator[tuple[Root, Root, str]]:
    """The same root seen through http:// and through a TLS front (https://), with one publication."""
    ca = TestCA(tmp_path)
    front = TLSFront(("127.0.0.1", int(weed.endpoint.rsplit(":", 1)[1])), ca.server_ctx())
    try:
        plain = Root(weed, tmp_path)
        tls = Root(weed, tmp_path, endpoint=front.endpoint)
        tls.prefix, tls.url = plain.prefix, plain.url
        plain.put("exec/1/checkpoint-100/x")
        plain.put("pub/" + layout.name(0, 100, "exec/1/checkpoint-100"))
        yield plain, tls, ca.pem
    finally:
        front.close()


def modules_of_resolve(root: Root, cafile: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-S", "-c", CODE, "resolve", "-checkpoint", root.url, "-creds", root.creds],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": cafile},
    )
    out, _, listed = r.stderr.rpartition("modules: ")
    assert (r.returncode, r.stdout, out) == (0, f"{root.url}/exec/1/checkpoint-100\n", "")
    return set(listed.split())


def test_an_s3_resolve_on_http_imports_no_tls_and_none_of_the_heavy_modules(
    published: tuple[Root, Root, str],
) -> None:
    plain, _, cafile = published
    assert sorted(modules_of_resolve(plain, cafile) & (NEVER | NOT_FOR_HTTP)) == []


def test_an_s3_resolve_on_https_imports_only_the_tls_c_module_and_none_of_the_heavy_modules(
    published: tuple[Root, Root, str],
) -> None:
    _, tls, cafile = published
    loaded = modules_of_resolve(tls, cafile)
    assert {"_ssl", "publish.http.tls"} <= loaded
    assert sorted(loaded & NEVER) == []
