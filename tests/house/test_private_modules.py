"""The private CPython modules the wire and the DCP reader use, on each supported Python (a subprocess of each
pyenv interpreter): ``_ssl``, ``_socket`` and ``pyexpat`` (no fallback: each must import and offer what
publish calls), ``_sha256`` (``_sha2`` from 3.12) and ``_md5`` (hashlib when the build lacks them: tried by
hiding them), and pickle's pure-Python ``_Unpickler`` with the opcodes the guarded reader wraps."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess

import pytest

from tests.conftest import REPO
from tests.support.dcp_shapes import metadata
from tests.support.pythons import SUPPORTED, python

_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
for hidden in sys.argv[2].split(",") if sys.argv[2] else []:
    sys.modules[hidden] = None  # import of it raises ImportError, as in a build without it
from publish.rules import hashing
from publish.http import lookup, net, tls
from publish.s3 import s3xml
from publish.frameworks.parse import dcp_metadata
import _socket, _ssl, pickle, pyexpat

data = bytes.fromhex(sys.stdin.read())
ctx = tls.client_context()
keys, prefixes, sizes, modified, truncated, token = s3xml.listing("a listing", b'<?xml version="1.0"?><ListBucketResult><Name>b</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>3</Size></Contents></ListBucketResult>')
print(json.dumps({
    "sha256_from": hashing.sha256.__module__,
    "md5_from": hashing.md5.__module__,
    "sha256_hex": hashing.sha256_hex(b"abc"),
    "md5": hashing.md5_digest(b"abc").hex(),
    "hmac": hashing.hmac_sha256(b"k" * 70, b"message").hex(),
    "tls": [ctx.check_hostname, ctx.verify_mode == _ssl.CERT_REQUIRED, hasattr(ctx, "_wrap_socket"), hasattr(ctx, "_wrap_bio")],
    "bio": type(tls.MemoryBIO()).__name__,
    "socket": [hasattr(_socket, n) for n in ("socket", "getaddrinfo", "AF_INET", "SOCK_STREAM")],
    "xml": [keys, sizes, truncated],
    "guarded": dcp_metadata._ends(data, "m", guarded=True),
    "fast": dcp_metadata._ends(data, "m"),
    "unpickler": pickle._Unpickler.__module__,
}))
"""

_HIDE = {
    "built in": "",
    "without _sha256, _sha2 and _md5": "_sha256,_sha2,_md5",
}


@pytest.mark.parametrize("hide", sorted(_HIDE))
@pytest.mark.parametrize("version", SUPPORTED)
def test_each_private_module_or_its_fallback_works(version: str, hide: str) -> None:
    data = metadata(
        {f"w{i}": {"relative_path": f"__{i % 2}_0.distcp", "offset": i, "length": 2} for i in range(9)}
    )
    out = subprocess.run(
        [python(version), "-I", "-c", _SCRIPT, str(REPO), _HIDE[hide]],
        input=data.hex(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    got = json.loads(out.stdout)
    new = tuple(map(int, version.split("."))) >= (3, 12)
    if _HIDE[hide]:
        assert (got["sha256_from"], got["md5_from"]) == ("_hashlib", "_hashlib")  # hashlib's OpenSSL ones
    else:
        assert (got["sha256_from"], got["md5_from"]) == ("_sha2" if new else "_sha256", "_md5")
    assert got["sha256_hex"] == hashlib.sha256(b"abc").hexdigest()
    assert got["md5"] == hashlib.md5(b"abc").hexdigest()
    assert got["hmac"] == hmac.new(b"k" * 70, b"message", "sha256").hexdigest()
    assert got["tls"] == [True, True, True, True]
    assert got["bio"] == "MemoryBIO"
    assert got["socket"] == [True] * 4
    assert got["xml"] == [["k"], [3], False]
    assert got["guarded"] == got["fast"] == {"__0_0.distcp": 10, "__1_0.distcp": 9}
    assert got["unpickler"] == "pickle"
