"""An S3 REST client for one bucket: path-style requests signed with SigV4, over one :class:`net.Connector`.

ListObjectsV2, GET (with a size cap), HEAD, PUT (plain and ``If-None-Match: *``), DELETE and DeleteObjects;
ListMultipartUploads, ListParts and AbortMultipartUpload (for ``prune -orphans``); a PUT of file bytes and
CreateMultipartUpload, UploadPart and CompleteMultipartUpload (for publish.stores.transfer), each body sent
from the caller's buffer with its CRC32 for the store to check.
Every request gets the time left before the :class:`Deadline` handed to it (the client keeps none).  Every
request goes through the one retry loop (publish.s3.s3retry): sent again on a dropped connection, 500, 502,
503, 504 and SlowDown with jittered exponential backoff while time is left; any other error fails at once as
:class:`StoreError` ``"<operation> <key>: <code>: <message>"`` (docs/s3.md lists each request and its rule).
Time, sleep and randomness are parameters, so tests are deterministic.
"""

from __future__ import annotations

import _thread
import binascii
import time

from publish.http import net
from publish.rules import redact
from publish.rules.deadline import UNBOUNDED
from publish.rules.errors import PublishError, StoreError
from publish.rules.hashing import md5_digest, sha256_hex
from publish.s3 import s3xml, sigv4
from publish.s3.s3retry import (
    REFUSED_CODES,
    Answer,
    Clock,
    Counts,
    Policy,
    jitter,
    refused,
    retrying,
    time_left,
    timed_out,
)
from publish.s3.s3xml import Listing

# Only modules already loaded, or built into the interpreter, at import: every one an S3 verb imports costs its
# start-up (docs/perf-startup.md).  Type names live in the block below; random only once a send is retried.
TYPE_CHECKING = False  # mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    import datetime
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from publish.rules.credentials import Credentials
    from publish.rules.deadline import Deadline

#: The largest object GET reads (spec: trainer_state.json over 64 MiB is refused).
GET_LIMIT = 64 * 1024 * 1024
#: The cap on one LIST page: 1,000 keys of 1,024 bytes URL-encoded (up to 3 bytes a byte) is about 3 MiB,
#: with each <Contents> element's ETag, size, date and owner on top; 16 MiB leaves four times that.
LIST_LIMIT = 16 * 1024 * 1024
#: The caps on one whole listing, so a store answering "truncated" with a fresh token each time is refused, not
#: held until -timeout (3 GiB by 5 minutes): 1,000,000 entries, 10 times bench/'s 100,000-entry pub/ and 100
#: times a 10,000-object save, and 256 MiB of names (262,144 keys of S3's longest, 1,024 bytes).  An entry
#: takes about 100 bytes besides its name (str, list slots, size): just under both caps is about 370 MB.
LIST_ENTRIES = 1_000_000
LIST_NAMES = 256 * 1024 * 1024
#: The cap on a DeleteObjects answer.  Quiet, it holds only the per-key errors: 1,000 of them, each with a key
#: of up to 1,024 bytes that XML escaping makes up to 5,120 (``&amp;``), a code and a message: about 6 MiB.
DELETE_LIMIT = 8 * 1024 * 1024
#: The cap on an error document, and on the answer to a PUT, HEAD or DELETE (which carries no body).
SMALL_LIMIT = net.ERROR_LIMIT
#: Keys per DeleteObjects request, and per LIST page.
BATCH = 1000
#: Codes that mean the credentials were refused: renewed once when a renewer is given.
REFUSED = REFUSED_CODES
#: What a conditional PUT hands back: 412 (already there), besides what the conditional policy adds.
_CONDITIONAL = Policy(ok=frozenset((412,)), conditional=True)

__all__ = ["GET_LIMIT", "Listing", "S3Client"]

if TYPE_CHECKING:
    from typing import Union

    Renew = Callable[[str], Credentials]
    Body = Union[bytes, bytearray, memoryview]

#: What a body's CRC32 is sent as (the store checks it and answers with what it computed), and how a PUT or
#: UploadPart body is signed: its integrity is the CRC32 the store checks, its SHA-256 is not computed twice.
CHECKSUM = "x-amz-checksum-crc32"
UNSIGNED = "UNSIGNED-PAYLOAD"


class Keys:
    """The credentials a client and its forks sign with, and their renewal, one at a time for all of them.

    ``state`` is (credentials, generation), replaced whole.  :meth:`refresh` is called by a request the store
    refused, with the generation it was signed with: the first such caller resolves the sources again (under
    the lock, so the others wait for it); a caller whose generation is older than the current one was refused
    credentials already renewed, and is sent again with the current ones without resolving anything.  So the
    eight threads of an upload refused by the same old key cause one resolution of ``-creds`` (one Vault
    login), not eight, and an abort sent after them signs with what that resolution gave."""

    __slots__ = ("state", "renew", "_lock", "_failed")

    def __init__(self, creds: Credentials, renew: Renew | None) -> None:
        self.state: tuple[Credentials, int] = (creds, 0)
        self.renew = renew
        self._lock = _thread.allocate_lock()
        self._failed: tuple[int, PublishError] | None = None  # the generation a renewal failed to replace

    def refresh(self, seen: int, code: str) -> None:
        """Renew the credentials of generation ``seen``, refused with ``code``, unless that was done already
        (a renewal that failed then fails every request refused with them, without being tried again)."""
        assert self.renew is not None
        with self._lock:
            creds, generation = self.state
            if generation != seen:
                failed = self._failed
                if failed is not None and failed[0] == generation:
                    raise failed[1]
                return
            try:
                new = self.renew(code)
                if new.endpoint.rstrip("/") != creds.endpoint.rstrip("/"):
                    raise StoreError(
                        "the credentials source now names another endpoint "
                        f"({new.endpoint}, was {creds.endpoint})"
                    )
                if new.region != creds.region:
                    raise StoreError(
                        f"the credentials source now names another region ({new.region}, was {creds.region})"
                    )
            except PublishError as e:
                self._failed = (generation + 1, e)
                self.state = (creds, generation + 1)
                raise
            self.state = (new, generation + 1)


class S3Client:
    """Requests to one bucket at ``creds.endpoint``.  Thread-safe: requests are sent one at a time.

    ``renew(code)`` is called when the store refuses the credentials (ExpiredToken, InvalidAccessKeyId): it
    returns new credentials (for the same endpoint and region) and the request is sent once more with them.
    A client and its forks share their credentials and renew them once for all (:class:`Keys`).
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
        rand: Callable[[], float] = jitter,
        now: Callable[[], datetime.datetime | float] = time.time,
        connector: net.Connector | None = None,
        keys: Keys | None = None,
    ) -> None:
        self.keys = keys or Keys(creds, renew)
        self.bucket = bucket
        self._options = (proxy, env, cafile)
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.now = now
        try:
            self.conn = connector or net.Connector(creds.endpoint, proxy=proxy, cafile=cafile, env=env)
        except ValueError as e:
            raise StoreError(str(e), thing=f"s3://{bucket}") from None
        #: Requests sent, by operation (list, get, head, put, delete, delete-objects), resends included.
        self.sent: dict[str, int] = Counts()
        self._lock = _thread.allocate_lock()

    @property
    def creds(self) -> Credentials:
        """The credentials requests are signed with now."""
        return self.keys.state[0]

    # -- time

    def _retrying(
        self, send: Callable[[], Answer], policy: Policy, deadline: Deadline, op: str, name: str
    ) -> Answer:
        clock = Clock(deadline.clock, self.sleep, self.rand, deadline.at)
        return retrying(send, policy, clock, op, self.where(name))

    def where(self, key: str) -> str:
        """The object's URL as a message shows it (quoted when the key holds a control character)."""
        return redact.shown(f"s3://{self.bucket}/{key}")

    def close(self) -> None:
        self.conn.close()

    def fork(self) -> S3Client:
        """Another client of the same bucket with the same credentials (shared: renewed once for both), renewer
        and time, over a connection of its own: one for each thread that sends at the same time as others."""
        proxy, env, cafile = self._options
        return S3Client(
            self.creds,
            self.bucket,
            proxy=proxy,
            env=env,
            cafile=cafile,
            clock=self.clock,
            sleep=self.sleep,
            rand=self.rand,
            now=self.now,
            connector=self.conn.clone(),
            keys=self.keys,
        )

    # -- one request

    def _send(
        self,
        op: str,
        name: str,
        key: str | None,
        method: str,
        query: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        body: Body = b"",
        limit: int = SMALL_LIMIT,
        *,
        deadline: Deadline,
        payload: str = "",
    ) -> Answer:
        """Sign and send once (``key`` None: to the bucket itself; ``name`` is the key messages name); a
        refusal of the credentials is renewed and sent once more."""
        thing = self.where(name)
        path = f"/{self.bucket}" + (f"/{key}" if key is not None else "")
        target = sigv4.encode_path(path) + (f"?{sigv4.encode_query(query)}" if query else "")
        renewed = False
        while True:
            creds, generation = self.keys.state
            hdrs = {"host": self.conn.host_header, **(headers or {})}
            digest = payload or sha256_hex(bytes(body))  # bytes of bytes: the same object
            signed = sigv4.sign_s3(method, path, query, hdrs, digest, creds, self.now())
            self.sent[op] += 1
            try:
                resp = self.conn.request(
                    method,
                    target,
                    signed,
                    body,
                    timeout=time_left(deadline, op, thing),
                    limit=limit,
                    error_limit=SMALL_LIMIT,
                )
            except net.TimedOut:
                raise timed_out(deadline, op, thing) from None
            except net.NetError:
                raise
            answer = Answer(resp.status, resp.headers, resp.body)
            if resp.status >= 300:
                answer.code, answer.message = s3xml.error_of(resp.status, resp.headers, resp.body)
                if (
                    method == "HEAD"
                    and resp.status in (400, 403)
                    and answer.code in ("BadRequest", "Forbidden")
                ):
                    answer.code, answer.message = self._code_for_head(key, creds, answer, deadline)
            if answer.code in REFUSED and self.keys.renew is not None and not renewed:
                self.keys.refresh(generation, answer.code)
                renewed = True
                continue
            return answer

    def _code_for_head(
        self, key: str | None, creds: Credentials, answer: Answer, deadline: Deadline
    ) -> tuple[str, str]:
        """A HEAD error has no body; ask with a one-byte GET (signed as the HEAD was) so a refusal of the
        credentials is recognised.  Sent once, outside the retry loop: it only names the HEAD's error, and
        when it fails the HEAD's own answer stands, for the loop around the HEAD to retry or fail."""
        path = f"/{self.bucket}/{key}"
        hdrs = {"host": self.conn.host_header, "range": "bytes=0-0"}
        signed = sigv4.sign_s3("GET", path, (), hdrs, sigv4.EMPTY_SHA256, creds, self.now())
        self.sent["get"] += 1
        try:
            resp = self.conn.request(
                "GET",
                sigv4.encode_path(path),
                signed,
                timeout=time_left(deadline, "head", str(key)),
                limit=SMALL_LIMIT,
            )
        except net.NetError:
            return answer.code, answer.message
        if resp.status < 300:
            return answer.code, answer.message
        return s3xml.error_of(resp.status, resp.headers, resp.body)

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
        *,
        deadline: Deadline,
    ) -> Answer:
        """Send through the retry loop (:func:`publish.s3.s3retry.retrying`): a 2xx answer, or one whose status is
        in ``ok``; StoreError for any other."""
        return self._retrying(
            lambda: self._send(op, name, key, method, query, headers, body, limit, deadline=deadline),
            Policy(ok=frozenset(ok)),
            deadline,
            op,
            name,
        )

    # -- operations

    def list(
        self,
        prefix: str,
        delimiter: str = "",
        *,
        max_keys: int = BATCH,
        pages: int | None = None,
        deadline: Deadline = UNBOUNDED,
    ) -> Listing:
        """ListObjectsV2 of ``prefix``: every page (or the first ``pages``), keys and prefixes decoded.

        Every key and common prefix the store returns must lie under ``prefix`` (a common prefix one element
        below it); anything else, a page over :data:`LIST_LIMIT`, a page that is not a listing, a truncated
        page without a continuation token or with one already used, a listing past :data:`LIST_ENTRIES` entries
        or :data:`LIST_NAMES` bytes of names, is a StoreError naming the LIST."""
        out = Listing()
        token = ""
        page = 0
        thing = self.where(prefix)
        seen = s3xml.Pages(thing, LIST_ENTRIES, LIST_NAMES)
        with self._lock:
            while True:
                query = [("list-type", "2"), ("prefix", prefix), ("max-keys", str(max_keys))]
                query.append(("encoding-type", "url"))
                if delimiter:
                    query.append(("delimiter", delimiter))
                if token:
                    query.append(("continuation-token", token))
                a = self._idempotent("list", prefix, None, "GET", query, limit=LIST_LIMIT, deadline=deadline)
                keys, prefixes, sizes, modified, truncated, token = s3xml.listing(thing, a.body)
                s3xml.check_page(thing, prefix, delimiter, keys, prefixes)
                seen.add(keys, prefixes)
                out.keys += keys
                out.prefixes += prefixes
                out.sizes += sizes
                out.modified += modified
                page += 1
                if not truncated:
                    return out
                if pages is not None and page >= pages:
                    out.truncated = True
                    return out
                seen.follow(token)

    def list_uploads(
        self, prefix: str, *, max_uploads: int = BATCH, deadline: Deadline = UNBOUNDED
    ) -> Sequence[tuple[str, str, str]]:
        """ListMultipartUploads of ``prefix``, every page: (key, upload id, Initiated text) of each incomplete
        multipart upload, keys decoded, in the store's order.  The same refusals as :meth:`list`: a key
        outside ``prefix``, a page over :data:`LIST_LIMIT`, more than :data:`LIST_ENTRIES` uploads or
        :data:`LIST_NAMES` bytes of keys, a truncated page without markers or with markers sent before."""
        out: list[tuple[str, str, str]] = []
        key_marker = upload_marker = ""
        thing = self.where(prefix)
        seen = s3xml.Pages(thing, LIST_ENTRIES, LIST_NAMES, "list-uploads")
        with self._lock:
            while True:
                query = [("uploads", ""), ("prefix", prefix), ("max-uploads", str(max_uploads))]
                query.append(("encoding-type", "url"))
                if key_marker:
                    query.append(("key-marker", key_marker))
                if upload_marker:  # SeaweedFS pages by upload id alone, with no NextKeyMarker
                    query.append(("upload-id-marker", upload_marker))
                a = self._idempotent(
                    "list-uploads", prefix, None, "GET", query, limit=LIST_LIMIT, deadline=deadline
                )
                found, truncated, key_marker, upload_marker = s3xml.uploads(thing, a.body)
                keys = [u[0] for u in found]
                s3xml.check_page(thing, prefix, "", keys, [], "list-uploads")
                seen.add(keys, [])
                out += found
                if not truncated:
                    return out
                seen.follow(f"{key_marker}\0{upload_marker}" if key_marker or upload_marker else "")

    def list_parts(
        self, key: str, upload_id: str, *, max_parts: int = BATCH, deadline: Deadline = UNBOUNDED
    ) -> Sequence[str] | None:
        """ListParts of one upload, every page: the LastModified text of each part; None when there is no
        such upload (404 NoSuchUpload: completed or aborted meanwhile)."""
        out: list[str] = []
        marker = ""
        thing = self.where(key)
        seen = s3xml.Pages(thing, LIST_ENTRIES, LIST_NAMES, "list-parts")
        with self._lock:
            while True:
                query = [("uploadId", upload_id), ("max-parts", str(max_parts))]
                if marker:
                    query.append(("part-number-marker", marker))
                a = self._idempotent(
                    "list-parts", key, key, "GET", query, limit=LIST_LIMIT, ok=(404,), deadline=deadline
                )
                if a.status == 404:
                    if a.code == "NoSuchUpload":
                        return None
                    raise refused("list-parts", thing, a)
                times, truncated, marker = s3xml.parts(thing, a.body)
                seen.add(times, [])
                out += times
                if not truncated:
                    return out
                seen.follow(marker)

    def abort_upload(self, key: str, upload_id: str, *, deadline: Deadline = UNBOUNDED) -> bool:
        """AbortMultipartUpload: True when this call aborted it, False when there was no such upload (404
        NoSuchUpload: completed or aborted meanwhile, or by a first send whose answer was lost).  Retried as
        every request, and, when the client renews its credentials, after their refusal too (``rekey``)."""
        query = [("uploadId", upload_id)]
        # With a renewer, a refusal of the credentials is sent again (renewing them each time) while time is
        # left: the keys may be rotated away before the new ones are written, and an abort given up leaves
        # the upload's parts stored until a sweep.
        policy = Policy(ok=frozenset((404,)), rekey=self.keys.renew is not None)
        with self._lock:
            a = self._retrying(
                lambda: self._send("abort", key, key, "DELETE", query, deadline=deadline),
                policy,
                deadline,
                "abort",
                key,
            )
        if a.status == 404:
            if a.code == "NoSuchUpload":
                return False
            raise refused("abort", self.where(key), a)
        return True

    def get(self, key: str, limit: int = GET_LIMIT, *, deadline: Deadline = UNBOUNDED) -> bytes | None:
        """The object's bytes, or None when there is none (404 NoSuchKey).  Over ``limit`` (at most 64 MiB)
        bytes is refused, naming the key and its size."""
        limit = min(limit, GET_LIMIT)
        with self._lock:
            a = self._idempotent("get", key, key, "GET", limit=limit, ok=(404,), deadline=deadline)
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise refused("get", self.where(key), a)
        return a.body

    def get_range(
        self, key: str, offset: int, length: int, *, deadline: Deadline = UNBOUNDED
    ) -> bytes | None:
        """Up to ``length`` bytes of the object from ``offset`` (a ranged GET; fewer at its end, none past
        it), or None when there is no object.  A store that ignores Range sends the whole object, which is
        then read under the GET cap and cut here."""
        if length <= 0:
            return b""
        headers = {"range": f"bytes={offset}-{offset + length - 1}"}
        with self._lock:
            a = self._idempotent(
                "get", key, key, "GET", headers=headers, limit=GET_LIMIT, ok=(404, 416), deadline=deadline
            )
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise refused("get", self.where(key), a)
        if a.status == 416:  # InvalidRange: the offset lies past the end
            return b""
        if a.status == 206:
            return a.body[:length]
        return a.body[offset : offset + length]

    def head(
        self, key: str, *, checksum: bool = False, deadline: Deadline = UNBOUNDED
    ) -> dict[str, str] | None:
        """The object's headers, or None when there is none; ``checksum``: with the checksum the store keeps
        (``x-amz-checksum-mode: ENABLED``)."""
        headers = {"x-amz-checksum-mode": "ENABLED"} if checksum else None
        with self._lock:
            a = self._idempotent("head", key, key, "HEAD", headers=headers, ok=(404,), deadline=deadline)
        if a.status == 404:
            if a.code in ("NoSuchKey", "NotFound"):
                return None
            raise refused("head", self.where(key), a)
        return a.headers

    def put(self, key: str, body: bytes = b"", *, deadline: Deadline = UNBOUNDED) -> None:
        """A plain PUT (a manifest, the probe object), through the retry loop as every idempotent request: the
        same bytes to the same key, unconditionally, so a resend after a lost answer or a 503 leaves the object
        exactly as one send would, and a writer that raced it wrote the same bytes (a manifest's are decided by
        its entry's name and its save's files; a probe's key holds random hex)."""
        headers = {"content-length": str(len(body))}
        with self._lock:
            self._idempotent("put", key, key, "PUT", headers=headers, body=body, deadline=deadline)

    def put_if_absent(self, key: str, body: bytes = b"", *, deadline: Deadline = UNBOUNDED) -> bool:
        """PUT with ``If-None-Match: *``: True when this call created the object, False when it was there.

        409 ConditionalRequestConflict: sent up to 4 times in all (waits of 50-100, 100-200, 200-400 ms).
        A dropped connection, a 5xx or SlowDown: sent again while time is left (the condition makes a
        resend safe; a 412 after a drop means the first send landed, and is reported as already there).
        501 NotImplemented: the store does not honour conditional writes."""
        headers = {"if-none-match": "*", "content-length": str(len(body))}
        with self._lock:
            a = self._retrying(
                lambda: self._send("put", key, key, "PUT", headers=headers, body=body, deadline=deadline),
                _CONDITIONAL,
                deadline,
                "put",
                key,
            )
        if a.status < 300:
            return True
        if a.status == 412:
            return False
        raise StoreError(
            f"the store does not honour conditional writes (If-None-Match: *): {a.status} {a.code}",
            op="put",
            thing=self.where(key),
            code=a.code,
            status=a.status,
        )

    def delete(self, key: str, *, deadline: Deadline = UNBOUNDED) -> None:
        """DELETE one object; a missing one is fine."""
        with self._lock:
            self._idempotent("delete", key, key, "DELETE", ok=(404,), deadline=deadline)

    def delete_objects(self, keys: Sequence[str], *, deadline: Deadline = UNBOUNDED) -> None:
        """DeleteObjects, 1,000 keys a request, Quiet, with Content-MD5.  A per-key error fails naming the key.
        A key that XML cannot carry exactly (a control character) is deleted on its own, by its path."""
        for key in keys:
            if not s3xml.fits_xml(key):
                self.delete(key, deadline=deadline)
        keys = [k for k in keys if s3xml.fits_xml(k)]
        for start in range(0, len(keys), BATCH):
            batch = keys[start : start + BATCH]
            body = s3xml.delete_request(batch)
            headers = {
                "content-md5": binascii.b2a_base64(md5_digest(body), newline=False).decode("ascii"),
                "content-type": "application/xml",
                "content-length": str(len(body)),
            }
            with self._lock:
                a = self._idempotent(
                    "delete-objects",
                    batch[0],
                    None,
                    "POST",
                    [("delete", "")],
                    headers,
                    body,
                    DELETE_LIMIT,
                    deadline=deadline,
                )
            errors = s3xml.delete_errors(a.body)
            if errors is None:
                raise StoreError(
                    "the store sent an answer that is not a result", op="delete", thing=self.where(batch[0])
                )
            if errors:
                k, code, message = errors[0]
                text = f"{redact.shown(code)}: {redact.shown(message)}"
                raise StoreError(text, op="delete", thing=self.where(k), code=code, status=200)

    # -- uploads of file bytes (publish.stores.transfer): one thread per client, bodies from its buffer

    def _checked(
        self, op: str, key: str, query: Sequence[tuple[str, str]], body: Body, crc: str, deadline: Deadline
    ) -> Answer:
        """PUT ``body`` (unsigned, with its CRC32 ``crc`` in base64) through the retry loop; the answer must
        carry the CRC32 the store computed, equal to ``crc``, when it carries one."""
        headers = {
            "content-length": str(len(body)),
            "x-amz-sdk-checksum-algorithm": "CRC32",
            CHECKSUM: crc,
        }
        with self._lock:
            a = self._retrying(
                lambda: self._send(
                    op, key, key, "PUT", query, headers, body, deadline=deadline, payload=UNSIGNED
                ),
                Policy(),
                deadline,
                op,
                key,
            )
        got = a.headers.get(CHECKSUM)
        if got is not None and got != crc:
            raise StoreError(
                f"the store computed the CRC32 {redact.shown(redact.foreign(got))} of the bytes it received, "
                f"not {crc}: they changed on the way",
                op=op,
                thing=self.where(key),
            )
        return a

    def put_bytes(self, key: str, body: Body, crc: str, *, deadline: Deadline = UNBOUNDED) -> str:
        """PUT a whole object whose CRC32 is ``crc`` (base64), sent again on a dropped connection or a 5xx (the
        same bytes again: idempotent); its ETag."""
        return self._checked("put", key, (), body, crc, deadline).headers.get("etag", "")

    def create_upload(self, key: str, *, deadline: Deadline = UNBOUNDED) -> str:
        """CreateMultipartUpload with CRC32 checksums; its upload id.  A resend after a lost answer leaves the
        first upload open: the stale uploads of a prefix are aborted by ``prune -orphans``."""
        headers = {"x-amz-checksum-algorithm": "CRC32", "content-length": "0"}
        with self._lock:
            a = self._idempotent(
                "create-upload", key, key, "POST", [("uploads", "")], headers, deadline=deadline
            )
        return s3xml.upload_id(self.where(key), a.body)

    def upload_part(
        self, key: str, upload_id: str, number: int, body: Body, crc: str, *, deadline: Deadline = UNBOUNDED
    ) -> str:
        """UploadPart ``number`` (from 1) with CRC32 ``crc`` (base64), sent again as :meth:`put_bytes`; its
        ETag."""
        query = [("partNumber", str(number)), ("uploadId", upload_id)]
        etag = self._checked("upload-part", key, query, body, crc, deadline).headers.get("etag", "")
        if not etag:
            raise StoreError(
                f"the store sent no ETag for part {number}", op="upload-part", thing=self.where(key)
            )
        return etag

    def complete_upload(
        self, key: str, upload_id: str, parts: Sequence[tuple[str, str]], *, deadline: Deadline = UNBOUNDED
    ) -> str:
        """CompleteMultipartUpload of ``parts`` ((ETag, CRC32) of parts 1, 2, ...); the ChecksumCRC32 the
        store answered with ("" when it sent none).  A 200 answer holding an error document is that error
        (retried when it is InternalError or SlowDown).  After a resend, 404 NoSuchUpload may mean the first
        send completed it: "" is returned, and the caller checks the object itself."""
        body = s3xml.complete_request(parts)
        headers = {"content-type": "application/xml", "content-length": str(len(body))}
        thing = self.where(key)
        sends = [0]
        result: list[str] = []

        def send() -> Answer:
            sends[0] += 1
            a = self._send(
                "complete-upload",
                key,
                key,
                "POST",
                [("uploadId", upload_id)],
                headers,
                body,
                LIST_LIMIT,
                deadline=deadline,
            )
            if a.status < 300:
                _, crc, error = s3xml.completed(thing, a.body)
                if error:
                    a.status, (a.code, _, a.message) = 400, error.partition(": ")  # the code decides a resend
                else:
                    result[:] = [crc]
            return a

        with self._lock:
            a = self._retrying(send, Policy(ok=frozenset((404,))), deadline, "complete-upload", key)
        if a.status == 404:
            if a.code == "NoSuchUpload" and sends[0] > 1:
                return ""
            raise refused("complete-upload", thing, a)
        return result[0] if result else ""
