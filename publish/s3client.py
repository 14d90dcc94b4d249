"""An S3 REST client for one bucket: path-style requests signed with SigV4, over one :class:`net.Connector`.

ListObjectsV2, GET (with a size cap), HEAD, PUT (plain and ``If-None-Match: *``), DELETE and DeleteObjects.
Every request gets the time left before the deadline set with :meth:`S3Client.set_deadline`.  Idempotent
requests are retried on a dropped connection, 500, 502, 503, 504 and SlowDown with jittered exponential
backoff while time is left; any other error fails at once as :class:`StoreError` ``"<operation> <key>:
<code>: <message>"``.  Time, sleep and randomness are parameters, so tests are deterministic.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote_plus
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from publish import net, redact, sigv4
from publish.credentials import Credentials
from publish.errors import StoreError

#: The largest object GET reads (spec: trainer_state.json over 64 MiB is refused).
GET_LIMIT = 64 * 1024 * 1024
#: The cap on one LIST page: 1,000 keys of 1,024 bytes URL-encoded (up to 3 bytes a byte) is about 3 MiB,
#: with each <Contents> element's ETag, size, date and owner on top; 16 MiB leaves four times that.
LIST_LIMIT = 16 * 1024 * 1024
#: The cap on a DeleteObjects answer.  Quiet, it holds only the per-key errors: 1,000 of them, each with a key
#: of up to 1,024 bytes that XML escaping makes up to 5,120 (``&amp;``), a code and a message: about 6 MiB.
DELETE_LIMIT = 8 * 1024 * 1024
#: The cap on an error document, and on the answer to a PUT, HEAD or DELETE (which carries no body).
SMALL_LIMIT = net.ERROR_LIMIT
#: Keys per DeleteObjects request, and per LIST page.
BATCH = 1000
#: Codes that mean the credentials were refused: renewed once when a renewer is given.
REFUSED = frozenset(("ExpiredToken", "InvalidAccessKeyId"))
#: Statuses and codes worth sending an idempotent request again for.
RETRY_STATUS = frozenset((500, 502, 503, 504))
RETRY_CODES = frozenset(("SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"))
#: Waits between the sends of a conditional PUT answered 409 ConditionalRequestConflict (seconds).
CONFLICT_WAITS = ((0.05, 0.1), (0.1, 0.2), (0.2, 0.4))
#: Backoff for the other retries: the first wait is in [BASE/2, BASE], doubling up to CAP.
BACKOFF_BASE = 0.1
BACKOFF_CAP = 5.0
#: Sends of one idempotent request when no deadline bounds them.
UNBOUNDED_ATTEMPTS = 8

Renew = Callable[[str], Credentials]


@dataclass
class Listing:
    """What a LIST returned: keys and common prefixes, decoded, in the server's order."""

    keys: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    #: The size of each key, in the order of ``keys`` (-1 where the store sent none).
    sizes: list[int] = field(default_factory=list)
    #: True when the store had more to list than the pages asked for.
    truncated: bool = False


@dataclass
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    code: str = ""
    message: str = ""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(elem: ElementTree.Element, name: str) -> list[ElementTree.Element]:
    return [c for c in elem if _local(c.tag) == name]


def _text(elem: ElementTree.Element, name: str) -> str:
    for c in elem:
        if _local(c.tag) == name:
            return c.text or ""
    return ""


def _parse_xml(body: bytes) -> ElementTree.Element | None:
    try:
        return ElementTree.fromstring(body)
    except (ElementTree.ParseError, ValueError, LookupError):  # LookupError: an unknown declared encoding
        return None


def _too_large(op: str, e: net.TooLarge) -> str:
    """``the answer is N bytes, over the limit of L bytes``: why a body was refused, in the operation's words."""
    size = f"{e.size} bytes" if e.size is not None else f"more than {e.limit} bytes"
    kind = f"HTTP {e.status} answer" if e.status >= 300 else "object" if op == "get" else "answer"
    return f"the {kind} is {size}, over the limit of {e.limit} bytes"


def _listing(what: str, body: bytes) -> tuple[list[str], list[str], list[int], bool, str]:
    """(keys, common prefixes, sizes of the keys, truncated, next token) of one ListObjectsV2 page, decoded."""
    root = _parse_xml(body)
    if root is None or _local(root.tag) != "ListBucketResult":
        raise StoreError(f"{what}: the store sent an answer that is not a listing")
    truncated = _text(root, "IsTruncated").lower()
    if truncated not in ("true", "false"):
        raise StoreError(f"{what}: the store sent a listing without IsTruncated true or false")
    encoded = _text(root, "EncodingType").lower() == "url"

    def dec(s: str) -> str:
        if not encoded or ("%" not in s and "+" not in s):
            return s
        try:
            return unquote_plus(s, errors="strict")
        except UnicodeDecodeError:
            raise StoreError(f"{what}: the store listed a key that is not UTF-8: {s}") from None

    def each(parent: str, child: str) -> list[str]:
        found = []
        for elem in _children(root, parent):
            value = _text(elem, child)
            if not value:
                raise StoreError(f"{what}: the store sent a listing with a {parent} that has no {child}")
            found.append(dec(value))
        return found

    def size(elem: ElementTree.Element) -> int:
        text = _text(elem, "Size")
        return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else -1

    return (
        each("Contents", "Key"),
        each("CommonPrefixes", "Prefix"),
        [size(elem) for elem in _children(root, "Contents")],
        truncated == "true",
        _text(root, "NextContinuationToken"),
    )


def _error_of(status: int, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
    """(code, message) from an S3 error document, else from the headers or the status; both scrubbed of
    credential values (a store or proxy may echo the request's headers)."""
    code, message = _unscrubbed_error_of(status, headers, body)
    return redact.shown(redact.scrub(code)), redact.shown(redact.scrub(message))


def _unscrubbed_error_of(status: int, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
    root = _parse_xml(body) if body else None
    if root is not None and _local(root.tag) == "Error":
        return _text(root, "Code"), _text(root, "Message")
    code = headers.get("x-amz-error-code", "")
    message = headers.get("x-amz-error-message", "")
    if not code:
        code = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict"}.get(
            status, str(status)
        )
    return code, message


class S3Client:
    """Requests to one bucket at ``creds.endpoint``.  Thread-safe: requests are sent one at a time.

    ``renew(code)`` is called when the store refuses the credentials (ExpiredToken, InvalidAccessKeyId): it
    returns new credentials (for the same endpoint and region) and the request is sent once more with them.
    """

    def __init__(
        self,
        creds: Credentials,
        bucket: str,
        *,
        proxy: str | None = None,
        env: Mapping[str, str] = {},  # noqa: B006 - read only
        cafile: str | None = None,
        renew: Renew | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
        connector: net.Connector | None = None,
    ) -> None:
        self.creds = creds
        self.bucket = bucket
        self.renew = renew
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.now = now
        try:
            self.conn = connector or net.Connector(creds.endpoint, proxy=proxy, cafile=cafile, env=env)
        except ValueError as e:
            raise StoreError(f"s3://{bucket}: {e}") from None
        self.deadline: float | None = None
        self.timeout: float | None = None
        #: Requests sent, by operation (list, get, head, put, delete, delete-objects), resends included.
        self.sent: Counter[str] = Counter()
        self._lock = threading.Lock()

    # -- time

    def set_deadline(self, timeout: float | None) -> None:
        """Requests from now on share ``timeout`` seconds (None: no bound)."""
        self.timeout = timeout
        self.deadline = None if timeout is None else self.clock() + timeout

    def _left(self, what: str) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - self.clock()
        if left <= 0:
            raise self._timed_out(what)
        return left

    def _timed_out(self, what: str) -> StoreError:
        given = f" (the time given was {self.timeout:g}s)" if self.timeout is not None else ""
        return StoreError(f"{what}: timed out{given}")

    def where(self, key: str) -> str:
        """The object's URL as a message shows it (quoted when the key holds a control character)."""
        return redact.shown(f"s3://{self.bucket}/{key}")

    def close(self) -> None:
        self.conn.close()

    # -- one request

    def _send(
        self,
        op: str,
        name: str,
        key: str | None,
        method: str,
        query: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        limit: int = SMALL_LIMIT,
    ) -> _Answer:
        """Sign and send once (``key`` None: to the bucket itself; ``name`` is the key messages name); a
        refusal of the credentials is renewed and sent once more."""
        what = f"{op} {self.where(name)}"
        path = f"/{self.bucket}" + (f"/{key}" if key is not None else "")
        target = sigv4.encode_path(path) + (f"?{sigv4.encode_query(query)}" if query else "")
        renewed = False
        while True:
            hdrs = {"host": self.conn.host_header, **(headers or {})}
            signed = sigv4.sign_s3(
                method, path, query, hdrs, hashlib.sha256(body).hexdigest(), self.creds, self.now()
            )
            self.sent[op] += 1
            try:
                resp = self.conn.request(
                    method,
                    target,
                    signed,
                    body,
                    timeout=self._left(what),
                    limit=limit,
                    error_limit=SMALL_LIMIT,
                )
            except net.TimedOut:
                raise self._timed_out(what) from None
            except net.NetError:
                raise
            answer = _Answer(resp.status, resp.headers, resp.body)
            if resp.status >= 300:
                answer.code, answer.message = _error_of(resp.status, resp.headers, resp.body)
                if (
                    method == "HEAD"
                    and resp.status in (400, 403)
                    and answer.code in ("BadRequest", "Forbidden")
                ):
                    answer.code, answer.message = self._code_for_head(key, answer)
            if answer.code in REFUSED and self.renew is not None and not renewed:
                self._renew(answer.code)
                renewed = True
                continue
            return answer

    def _code_for_head(self, key: str | None, answer: _Answer) -> tuple[str, str]:
        """A HEAD error has no body; ask with a one-byte GET so a refusal of the credentials is recognised."""
        path = f"/{self.bucket}/{key}"
        hdrs = {"host": self.conn.host_header, "range": "bytes=0-0"}
        signed = sigv4.sign_s3("GET", path, (), hdrs, sigv4.EMPTY_SHA256, self.creds, self.now())
        self.sent["get"] += 1
        try:
            resp = self.conn.request(
                "GET", sigv4.encode_path(path), signed, timeout=self._left(f"head {key}"), limit=SMALL_LIMIT
            )
        except net.NetError:
            return answer.code, answer.message
        if resp.status < 300:
            return answer.code, answer.message
        return _error_of(resp.status, resp.headers, resp.body)

    def _renew(self, code: str) -> None:
        assert self.renew is not None
        new = self.renew(code)
        if new.endpoint.rstrip("/") != self.creds.endpoint.rstrip("/"):
            raise StoreError(
                f"the credentials source now names another endpoint ({new.endpoint}, was {self.creds.endpoint})"
            )
        if new.region != self.creds.region:
            raise StoreError(
                f"the credentials source now names another region ({new.region}, was {self.creds.region})"
            )
        self.creds = new

    def _fail(self, op: str, key: str, a: _Answer) -> StoreError:
        message = f": {a.message}" if a.message else ""
        return StoreError(f"{op} {self.where(key)}: {a.code}{message}", code=a.code, status=a.status)

    def _backoff(self, attempt: int, what: str, last: str) -> None:
        """Wait before send number ``attempt + 1``, or fail with ``last`` when no time is left for it."""
        if self.deadline is None and attempt >= UNBOUNDED_ATTEMPTS:
            raise StoreError(f"{what}: {last} (gave up after {attempt} attempts)")
        high = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
        wait = high / 2 + self.rand() * high / 2
        if self.deadline is not None and self.clock() + wait >= self.deadline:
            raise StoreError(f"{what}: {last} (gave up after {attempt} attempts: out of time)")
        self.sleep(wait)

    def _idempotent(
        self,
        op: str,
        name: str,
        key: str | None,
        method: str,
        query: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        limit: int = SMALL_LIMIT,
        ok: Iterable[int] = (),
    ) -> _Answer:
        """Send, and send again on a dropped connection or a 5xx/SlowDown while time is left.

        Returns a 2xx answer or one whose status is in ``ok``; raises StoreError for any other."""
        what = f"{op} {self.where(name)}"
        attempt = 0
        while True:
            attempt += 1
            try:
                a = self._send(op, name, key, method, query, headers, body, limit)
            except net.Dropped as e:
                self._backoff(attempt, what, str(e))
                continue
            except net.TooLarge as e:
                if e.status in RETRY_STATUS:  # a proxy's error page can be large: still worth another send
                    self._backoff(attempt, what, _too_large(op, e))
                    continue
                raise StoreError(f"{what}: {_too_large(op, e)}", status=e.status) from None
            except net.NetError as e:
                raise StoreError(f"{what}: {e}") from None
            if a.status < 300 or a.status in ok:
                return a
            if a.status in RETRY_STATUS or a.code in RETRY_CODES:
                self._backoff(attempt, what, f"{a.code}: {a.message}" if a.message else a.code)
                continue
            raise self._fail(op, name, a)

    # -- operations

    def list(
        self, prefix: str, delimiter: str = "", *, max_keys: int = BATCH, pages: int | None = None
    ) -> Listing:
        """ListObjectsV2 of ``prefix``: every page (or the first ``pages``), keys and prefixes decoded.

        Every key and common prefix the store returns must lie under ``prefix`` (a common prefix one element
        below it); anything else, a page over :data:`LIST_LIMIT`, a page that is not a listing, a truncated
        page without a continuation token or with one already used, is a StoreError naming the LIST."""
        out = Listing()
        token = ""
        used: set[bytes] = set()  # digests: a token may be long, and a hostile store sends many
        page = 0
        what = f"list {self.where(prefix)}"
        with self._lock:
            while True:
                query = [("list-type", "2"), ("prefix", prefix), ("max-keys", str(max_keys))]
                query.append(("encoding-type", "url"))
                if delimiter:
                    query.append(("delimiter", delimiter))
                if token:
                    query.append(("continuation-token", token))
                a = self._idempotent("list", prefix, None, "GET", query, limit=LIST_LIMIT)
                keys, prefixes, sizes, truncated, token = _listing(what, a.body)
                for k in keys:
                    if not k.startswith(prefix):
                        raise StoreError(f"{what}: the store returned {k}, outside the prefix")
                for p in prefixes:
                    if not p.startswith(prefix):
                        raise StoreError(f"{what}: the store returned {p}, outside the prefix")
                    rest = p[len(prefix) :]
                    if not delimiter or not rest.endswith(delimiter) or delimiter in rest[: -len(delimiter)]:
                        raise StoreError(
                            f"{what}: the store returned the common prefix {p}, not one element below the prefix"
                        )
                out.keys += keys
                out.prefixes += prefixes
                out.sizes += sizes
                page += 1
                if not truncated:
                    return out
                if pages is not None and page >= pages:
                    out.truncated = True
                    return out
                # A store that hands back a token it gave before would be listed forever.
                if not token:
                    raise StoreError(f"{what}: the store sent a truncated listing without a token")
                digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
                if digest in used:
                    raise StoreError(f"{what}: the store sent a continuation token it had sent before")
                used.add(digest)

    def get(self, key: str, limit: int = GET_LIMIT) -> bytes | None:
        """The object's bytes, or None when there is none (404 NoSuchKey).  Over ``limit`` (at most 64 MiB)
        bytes is refused, naming the key and its size."""
        limit = min(limit, GET_LIMIT)
        with self._lock:
            a = self._idempotent("get", key, key, "GET", limit=limit, ok=(404,))
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise self._fail("get", key, a)
        return a.body

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of the object from ``offset`` (a ranged GET; fewer at its end, none past
        it), or None when there is no object.  A store that ignores Range sends the whole object, which is
        then read under the GET cap and cut here."""
        if length <= 0:
            return b""
        headers = {"range": f"bytes={offset}-{offset + length - 1}"}
        with self._lock:
            a = self._idempotent("get", key, key, "GET", headers=headers, limit=GET_LIMIT, ok=(404, 416))
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise self._fail("get", key, a)
        if a.status == 416:  # InvalidRange: the offset lies past the end
            return b""
        if a.status == 206:
            return a.body[:length]
        return a.body[offset : offset + length]

    def head(self, key: str) -> dict[str, str] | None:
        """The object's headers, or None when there is none."""
        with self._lock:
            a = self._idempotent("head", key, key, "HEAD", ok=(404,))
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise self._fail("head", key, a)
        return a.headers

    def put(self, key: str, body: bytes = b"") -> None:
        """A plain PUT, sent once."""
        with self._lock:
            try:
                a = self._send("put", key, key, "PUT", headers={"content-length": str(len(body))}, body=body)
            except net.NetError as e:
                raise StoreError(f"put {self.where(key)}: {e}") from None
        if a.status >= 300:
            raise self._fail("put", key, a)

    def put_if_absent(self, key: str, body: bytes = b"") -> bool:
        """PUT with ``If-None-Match: *``: True when this call created the object, False when it was there.

        409 ConditionalRequestConflict: sent up to 4 times in all (waits of 50-100, 100-200, 200-400 ms).
        A dropped connection, a 5xx or SlowDown: sent again while time is left (the condition makes a
        resend safe; a 412 after a drop means the first send landed, and is reported as already there).
        501 NotImplemented: the store does not honour conditional writes."""
        what = f"put {self.where(key)}"
        headers = {"if-none-match": "*", "content-length": str(len(body))}
        conflicts = 0
        attempt = 0
        with self._lock:
            while True:
                attempt += 1
                try:
                    a = self._send("put", key, key, "PUT", headers=headers, body=body)
                except net.Dropped as e:
                    self._backoff(attempt, what, str(e))
                    continue
                except net.NetError as e:
                    raise StoreError(f"{what}: {e}") from None
                if a.status < 300:
                    return True
                if a.status == 412:
                    return False
                if a.status == 501 or a.code == "NotImplemented":
                    raise StoreError(
                        f"{what}: the store does not honour conditional writes (If-None-Match: *): "
                        f"{a.status} {a.code}",
                        code=a.code,
                        status=a.status,
                    )
                if a.status == 409 and a.code in (
                    "ConditionalRequestConflict",
                    "OperationAborted",
                    "Conflict",
                ):
                    if conflicts == len(CONFLICT_WAITS):
                        raise StoreError(
                            f"{what}: {a.code}: another conditional write of this key was still in flight "
                            f"after {conflicts + 1} attempts",
                            code=a.code,
                            status=a.status,
                        )
                    low, high = CONFLICT_WAITS[conflicts]
                    conflicts += 1
                    wait = low + self.rand() * (high - low)
                    if self.deadline is not None and self.clock() + wait >= self.deadline:
                        raise self._fail("put", key, a)
                    self.sleep(wait)
                    continue
                if a.status in RETRY_STATUS or a.code in RETRY_CODES:
                    self._backoff(attempt, what, f"{a.code}: {a.message}" if a.message else a.code)
                    continue
                raise self._fail("put", key, a)

    def delete(self, key: str) -> None:
        """DELETE one object; a missing one is fine."""
        with self._lock:
            self._idempotent("delete", key, key, "DELETE", ok=(404,))

    def delete_objects(self, keys: Sequence[str]) -> None:
        """DeleteObjects, 1,000 keys a request, Quiet, with Content-MD5.  A per-key error fails naming the key."""
        for start in range(0, len(keys), BATCH):
            batch = keys[start : start + BATCH]
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>'
                + "".join(f"<Object><Key>{escape(k)}</Key></Object>" for k in batch)
                + "</Delete>"
            ).encode("utf-8")
            headers = {
                "content-md5": base64.b64encode(hashlib.md5(body).digest()).decode("ascii"),
                "content-type": "application/xml",
                "content-length": str(len(body)),
            }
            with self._lock:
                a = self._idempotent(
                    "delete-objects", batch[0], None, "POST", [("delete", "")], headers, body, DELETE_LIMIT
                )
            root = _parse_xml(a.body)
            if root is None or _local(root.tag) != "DeleteResult":
                raise StoreError(
                    f"delete {self.where(batch[0])}: the store sent an answer that is not a result"
                )
            for err in _children(root, "Error"):
                code = _text(err, "Code")
                if code == "NoSuchKey":
                    continue
                k = _text(err, "Key")
                message = redact.shown(redact.scrub(_text(err, "Message")))
                raise StoreError(f"delete {self.where(k)}: {code}: {message}", code=code, status=200)
