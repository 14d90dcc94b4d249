"""AWS Signature Version 4: canonical request, string to sign, signature.  Pure; the time is a parameter.

``sign_s3`` is what the S3 client uses: the path is encoded once and not normalised, as S3 wants.  The
general functions (path normalisation, double encoding) exist for other services and for the official test
suite, which pins the algorithm down.
"""

from __future__ import annotations

import posixpath
import time

from publish.rules import percent
from publish.rules.hashing import hmac_sha256, sha256_hex

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    import datetime
    from collections.abc import Mapping, Sequence

    from publish.rules.credentials import Credentials

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = sha256_hex(b"")

# Headers a proxy or the connection layer may add or change: never signed (botocore leaves out the same).
UNSIGNED_HEADERS = frozenset(
    (
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
        "authorization",
    )
)


class Signed:
    """The intermediate values of one signature, kept so tests can compare each step."""

    __slots__ = ("canonical_request", "string_to_sign", "signature", "authorization")

    def __init__(
        self, canonical_request: str, string_to_sign: str, signature: str, authorization: str
    ) -> None:
        self.canonical_request = canonical_request
        self.string_to_sign = string_to_sign
        self.signature = signature
        self.authorization = authorization


def amz_date(now: datetime.datetime | float) -> str:
    """``YYYYMMDDTHHMMSSZ`` in UTC of a datetime (a naive one taken as UTC) or of seconds since the epoch
    (what the client passes: the datetime module is not imported for it)."""
    if isinstance(now, (int, float)):
        return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    if now.tzinfo is not None:
        import datetime  # already loaded: the caller made the value

        now = now.astimezone(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def uri_encode(text: str, *, keep_slash: bool = False) -> str:
    """Percent-encode UTF-8 bytes of ``text`` except A-Z a-z 0-9 - _ . ~ (and '/' when asked)."""
    return percent.encode(text, keep_slash=keep_slash)


def encode_path(path: str) -> str:
    """The request target's path for S3: each element encoded once, '/' kept, no normalisation."""
    return uri_encode(path, keep_slash=True) if path else "/"


def encode_query(query: Sequence[tuple[str, str]]) -> str:
    """The canonical (and sent) query string: pairs encoded, then sorted by key then value."""
    pairs = sorted((uri_encode(k), uri_encode(v)) for k, v in query)
    return "&".join(f"{k}={v}" for k, v in pairs)


def normalize_path(path: str) -> str:
    """RFC 3986 dot-segment removal and collapsed slashes, a trailing '/' kept (non-S3 services)."""
    if not path:
        return "/"
    normalized = posixpath.normpath(path)
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return normalized


def canonical_uri(path: str, *, s3: bool) -> str:
    """S3: encode once as given.  Others: normalise, then encode each element twice."""
    if s3:
        return encode_path(path)
    return uri_encode(uri_encode(normalize_path(path), keep_slash=True), keep_slash=True)


def _trimall(value: str) -> str:
    return " ".join(value.split())


def canonical_headers(headers: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(canonical header block, signed header list) for every header given; repeated names are joined
    with ',' in the order given."""
    merged: dict[str, list[str]] = {}
    for name, value in headers:
        merged.setdefault(name.strip().lower(), []).append(_trimall(value))
    names = sorted(merged)
    block = "".join(f"{n}:{','.join(merged[n])}\n" for n in names)
    return block, ";".join(names)


def canonical_request(
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    headers: Sequence[tuple[str, str]],
    payload_sha256: str,
    *,
    s3: bool,
) -> tuple[str, str]:
    """(canonical request, signed headers).  ``path`` and ``query`` are raw (unencoded)."""
    block, signed = canonical_headers(headers)
    creq = "\n".join(
        (method.upper(), canonical_uri(path, s3=s3), encode_query(query), block, signed, payload_sha256)
    )
    return creq, signed


def signing_key(secret_access_key: str, date: str, region: str, service: str) -> bytes:
    """The derived key for one day, region and service (``date`` is YYYYMMDD)."""
    key = ("AWS4" + secret_access_key).encode("utf-8")
    for part in (date, region, service, "aws4_request"):
        key = hmac_sha256(key, part.encode("utf-8"))
    return key


def sign(
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    headers: Sequence[tuple[str, str]],
    payload_sha256: str,
    *,
    access_key_id: str,
    secret_access_key: str,
    region: str,
    service: str,
    timestamp: str,
    s3: bool,
) -> Signed:
    """Sign the request exactly as given: every header in ``headers`` is signed (x-amz-date among them
    if the caller wants it); ``timestamp`` is the ``YYYYMMDDTHHMMSSZ`` time of signing."""
    creq, signed = canonical_request(method, path, query, headers, payload_sha256, s3=s3)
    scope = f"{timestamp[:8]}/{region}/{service}/aws4_request"
    sts = "\n".join((ALGORITHM, timestamp, scope, sha256_hex(creq.encode("utf-8"))))
    key = signing_key(secret_access_key, timestamp[:8], region, service)
    signature = hmac_sha256(key, sts.encode("utf-8")).hex()
    authz = f"{ALGORITHM} Credential={access_key_id}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return Signed(creq, sts, signature, authz)


def sign_s3(
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    headers: Mapping[str, str],
    payload_sha256: str,
    creds: Credentials,
    now: datetime.datetime | float,
) -> dict[str, str]:
    """Sign an S3 request.

    ``path`` is the raw '/bucket/key' (encoded once here, '/' kept, not normalised); ``query`` raw pairs;
    ``headers`` must include 'host'.  Returns the headers to send: the given ones plus x-amz-date,
    x-amz-content-sha256, x-amz-security-token (with a session token) and authorization (service s3,
    creds.region).  Hop-by-hop headers and user-agent are sent but not signed."""
    if not any(k.lower() == "host" for k in headers):
        raise ValueError("sign_s3: headers must include host")
    timestamp = amz_date(now)
    added = {"x-amz-date": timestamp, "x-amz-content-sha256": payload_sha256}
    if creds.session_token:
        added["x-amz-security-token"] = creds.session_token
    replaced = set(added) | {"authorization"}
    out = {k: v for k, v in headers.items() if k.lower() not in replaced}
    out.update(added)
    to_sign = [(k, v) for k, v in out.items() if k.lower() not in UNSIGNED_HEADERS]
    signed = sign(
        method,
        path,
        query,
        to_sign,
        payload_sha256,
        access_key_id=creds.access_key_id,
        secret_access_key=creds.secret_access_key,
        region=creds.region,
        service="s3",
        timestamp=timestamp,
        s3=True,
    )
    out["authorization"] = signed.authorization
    return out
