"""SHA-256, MD5 and HMAC-SHA256 for request signing, without hashlib's start-up cost.

``hashlib`` loads OpenSSL's libcrypto (several milliseconds, and in the one file a library to unpack) even
for an http:// endpoint; CPython's own ``_sha256`` (``_sha2`` from 3.12) and ``_md5`` modules are built in
to most interpreters and cost nothing to import.  The bodies hashed here are small (requests, not payloads),
so their speed does not matter.  Where a build lacks them, hashlib is used.  Pure: no I/O.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Hasher = Callable[[bytes], Any]

sha256: Hasher
md5: Hasher
try:
    from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256  # type: ignore[no-redef,unused-ignore]
try:
    from _md5 import md5  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    from hashlib import md5  # type: ignore[no-redef,unused-ignore]

_BLOCK = 64  # SHA-256's block size in bytes
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in lower-case hex."""
    return str(sha256(data).hexdigest())


def md5_digest(data: bytes) -> bytes:
    """The MD5 of ``data`` (S3's Content-MD5 checks transport, not tampering)."""
    return bytes(md5(data).digest())


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of ``message`` under ``key``."""
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_INNER) + message).digest()
    return bytes(sha256(key.translate(_OUTER) + inner).digest())
