"""The XML of S3 answers: ListObjectsV2 pages, ListMultipartUploads and ListParts pages, error documents,
DeleteObjects requests and results.

Pure functions over bytes (no I/O), and :class:`Pages`, which ends a listing that would go on without end.  A
malformed answer is a :class:`StoreError` naming the request.
"""

from __future__ import annotations

import pyexpat

from publish.rules import percent, redact
from publish.rules.errors import StoreError
from publish.rules.hashing import sha256

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


class Listing:
    """What a LIST returned: keys and common prefixes, decoded, in the server's order."""

    __slots__ = ("keys", "prefixes", "sizes", "modified", "truncated")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.prefixes: list[str] = []
        #: The size of each key, in the order of ``keys`` (-1 where the store sent none).
        self.sizes: list[int] = []
        #: The LastModified text of each key, in the order of ``keys`` ("" where the store sent none).
        self.modified: list[str] = []
        #: True when the store had more to list than the pages asked for.
        self.truncated = False


class Element:
    """One element of an answer: its local name (namespace left out), children, and text before the first
    child (ElementTree's ``text``)."""

    __slots__ = ("tag", "children", "parts")

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.children: list[Element] = []
        self.parts: list[str] = []  # the pieces of text expat handed over before the first child

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _NotAnswer(Exception):
    pass


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(elem: Element, name: str) -> list[Element]:
    return [c for c in elem.children if c.tag == name]


def _text(elem: Element, name: str) -> str:
    for c in elem.children:
        if c.tag == name:
            return c.text
    return ""


def _parse_xml(body: bytes) -> Element | None:
    """The tree of an XML answer, or None when ``body`` is not well-formed XML in an encoding expat knows
    (UTF-8, UTF-16, ISO-8859-1, US-ASCII) or holds a document type declaration (S3 sends none; refusing it
    leaves no entity to expand).  expat is linear; pyexpat is built into CPython, where ElementTree's import
    costs an S3 verb's start-up milliseconds."""
    parser = pyexpat.ParserCreate(None, "}")
    stack: list[Element] = []
    top: list[Element] = []

    def start(tag: str, attrs: object) -> None:
        elem = Element(_local(tag))
        if stack:
            stack[-1].children.append(elem)
        else:
            top.append(elem)
        stack.append(elem)

    def end(tag: str) -> None:
        stack.pop()

    def data(text: str) -> None:
        if stack and not stack[-1].children:
            stack[-1].parts.append(text)

    def doctype(*args: object) -> None:
        raise _NotAnswer

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(body, True)
    except (pyexpat.ExpatError, _NotAnswer, ValueError, LookupError):
        return None
    return top[0] if top else None


def _decoder(root: Element, op: str, thing: str) -> Callable[[str], str]:
    """How the names of an answer read: as sent, or URL-decoded when the answer says ``EncodingType`` url."""
    encoded = _text(root, "EncodingType").lower() == "url"

    def dec(s: str) -> str:
        if not encoded or ("%" not in s and "+" not in s):
            return s
        try:
            return percent.decode_plus(s)
        except UnicodeDecodeError:
            raise StoreError(
                f"the store listed a key that is not UTF-8: {redact.shown(s)}", op=op, thing=thing
            ) from None

    return dec


def _truncated(root: Element, op: str, thing: str, what: str) -> bool:
    truncated = _text(root, "IsTruncated").lower()
    if truncated not in ("true", "false"):
        raise StoreError(f"the store sent {what} without IsTruncated true or false", op=op, thing=thing)
    return truncated == "true"


def listing(thing: str, body: bytes) -> tuple[list[str], list[str], list[int], list[str], bool, str]:
    """(keys, common prefixes, sizes of the keys, their LastModified texts, truncated, next token) of one
    ListObjectsV2 page, decoded; ``thing`` is the prefix's URL, which a fault names."""
    root = _parse_xml(body)
    if root is None or root.tag != "ListBucketResult":
        raise StoreError("the store sent an answer that is not a listing", op="list", thing=thing)
    truncated = _truncated(root, "list", thing, "a listing")
    dec = _decoder(root, "list", thing)

    def each(parent: str, child: str) -> list[str]:
        found = []
        for elem in _children(root, parent):
            value = _text(elem, child)
            if not value:
                raise StoreError(
                    f"the store sent a listing with a {parent} that has no {child}", op="list", thing=thing
                )
            found.append(dec(value))
        return found

    def size(elem: Element) -> int:
        text = _text(elem, "Size")
        return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else -1

    return (
        each("Contents", "Key"),
        each("CommonPrefixes", "Prefix"),
        [size(elem) for elem in _children(root, "Contents")],
        [_text(elem, "LastModified")[:64] for elem in _children(root, "Contents")],
        truncated,
        _text(root, "NextContinuationToken"),
    )


def uploads(thing: str, body: bytes) -> tuple[list[tuple[str, str, str]], bool, str, str]:
    """((key, upload id, Initiated text) of each upload, truncated, next key marker, next upload id marker) of
    one ListMultipartUploads page, the keys decoded; ``thing`` is the prefix's URL, which a fault names."""
    root = _parse_xml(body)
    if root is None or root.tag != "ListMultipartUploadsResult":
        raise StoreError(
            "the store sent an answer that is not a list of uploads", op="list-uploads", thing=thing
        )
    truncated = _truncated(root, "list-uploads", thing, "a list of uploads")
    dec = _decoder(root, "list-uploads", thing)
    found = []
    for elem in _children(root, "Upload"):
        key, upload_id = _text(elem, "Key"), _text(elem, "UploadId")
        if not key or not upload_id:
            raise StoreError(
                "the store sent an Upload without its Key or UploadId", op="list-uploads", thing=thing
            )
        found.append((dec(key), upload_id, _text(elem, "Initiated")[:64]))
    return found, truncated, dec(_text(root, "NextKeyMarker")), _text(root, "NextUploadIdMarker")


def parts(thing: str, body: bytes) -> tuple[list[str], bool, str]:
    """(the LastModified text of each part, truncated, next part number marker) of one ListParts page;
    ``thing`` is the upload's URL, which a fault names.  (moto calls the answer ListPartsResponse.)"""
    root = _parse_xml(body)
    if root is None or root.tag not in ("ListPartsResult", "ListPartsResponse"):
        raise StoreError("the store sent an answer that is not a list of parts", op="list-parts", thing=thing)
    truncated = _truncated(root, "list-parts", thing, "a list of parts")
    times = [_text(elem, "LastModified")[:64] for elem in _children(root, "Part")]
    return times, truncated, _text(root, "NextPartNumberMarker")


def check_page(
    thing: str, prefix: str, delimiter: str, keys: list[str], prefixes: list[str], op: str = "list"
) -> None:
    """Refuse a LIST page (``op``) with a key outside ``prefix``, or a common prefix not one element below it."""
    for k in keys:
        if not k.startswith(prefix):
            raise StoreError(f"the store returned {redact.shown(k)}, outside the prefix", op=op, thing=thing)
    for p in prefixes:
        if not p.startswith(prefix):
            raise StoreError(f"the store returned {redact.shown(p)}, outside the prefix", op=op, thing=thing)
        rest = p[len(prefix) :]
        if not delimiter or not rest.endswith(delimiter) or delimiter in rest[: -len(delimiter)]:
            raise StoreError(
                f"the store returned the common prefix {redact.shown(p)}, not one element below the prefix",
                op=op,
                thing=thing,
            )


class Pages:
    """The pages of one listing so far.  A StoreError naming ``thing``: past ``entries`` entries (keys and common
    prefixes) or ``names`` bytes of them in UTF-8, a truncated page without a token, a token sent before."""

    def __init__(self, thing: str, entries: int, names: int, op: str = "list") -> None:
        self.thing, self.entries, self.names, self.op = thing, entries, names, op
        self.held = self.size = 0
        self.used: set[bytes] = set()  # digests: a token may be long, and a hostile store sends many

    def add(self, keys: list[str], prefixes: list[str]) -> None:
        """Count a page, before it is kept: a store answering truncated with a fresh token ends here."""
        self.held += len(keys) + len(prefixes)
        for n in (keys, prefixes):  # a str's characters never take more memory than their UTF-8
            self.size += sum(len(k) if k.isascii() else len(k.encode("utf-8", "surrogatepass")) for k in n)
        if self.held > self.entries or self.size > self.names:
            cap = f"{self.entries} entries" if self.held > self.entries else f"{self.names} bytes of names"
            why = f"the listing passed {cap}: refused (a store that keeps answering truncated)"
            raise StoreError(why, op=self.op, thing=self.thing)

    def follow(self, token: str) -> None:
        """Take the next page's token; one sent before would have the listing go round forever."""
        digest = sha256(token.encode("utf-8", "surrogatepass")).digest()
        if not token or digest in self.used:
            why = (
                "a continuation token it had sent before" if token else "a truncated listing without a token"
            )
            raise StoreError(f"the store sent {why}", op=self.op, thing=self.thing)
        self.used.add(digest)


#: The codes the client acts on (publish.s3.s3client, publish.s3.s3retry): kept as they are, so a credential that
#: holds a piece of one never changes what the client does.  Any other code is outside text, scrubbed.
ACTED_ON = frozenset(
    (
        "NoSuchKey",
        "NotFound",
        "BadRequest",
        "Forbidden",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "NotImplemented",
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "ConditionalRequestConflict",
        "OperationAborted",
        "Conflict",
        "NoSuchUpload",
    )
)


def _code(code: str) -> str:
    return code if code in ACTED_ON else redact.shown(redact.foreign(code))


def error_of(status: int, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
    """(code, message) from an S3 error document, else from the headers or the status.  Both are the store's
    words, which may echo the request (its key id, its session token) in any case: scrubbed here, where they
    come in (publish.rules.redact.foreign), and quoted if they hold a control character.  A code the client acts
    on (ACTED_ON) is kept as it is."""
    code, message = _unscrubbed_error_of(status, headers, body)
    return _code(code), redact.shown(redact.foreign(message))


def _unscrubbed_error_of(status: int, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
    root = _parse_xml(body) if body else None
    if root is not None and root.tag == "Error":
        return _text(root, "Code"), _text(root, "Message")
    code = headers.get("x-amz-error-code", "")
    message = headers.get("x-amz-error-message", "")
    if not code:
        code = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict"}.get(
            status, str(status)
        )
    return code, message


def _escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as entities (xml.sax.saxutils.escape, whose import brings urllib.request), and a
    carriage return as ``&#13;``: written as it is, a parser reads it (and CR LF) back as a line feed, and a
    DeleteObjects for ``a\rb`` would delete ``a\nb``."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("\r", "&#13;")


# What XML 1.0 cannot carry at all, not even as a character reference: the C0 controls other than tab, line
# feed and carriage return, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = frozenset([chr(c) for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)] + ["\ufffe", "\uffff"])


def fits_xml(key: str) -> bool:
    """Whether ``key`` can be named in an XML request body exactly (linear in the key)."""
    return not any(c in _NOT_XML or "\ud800" <= c <= "\udfff" for c in key)


def delete_request(keys: Sequence[str]) -> bytes:
    """The body of a Quiet DeleteObjects request for ``keys``."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>'
        + "".join(f"<Object><Key>{_escape(k)}</Key></Object>" for k in keys)
        + "</Delete>"
    ).encode("utf-8")


def delete_errors(body: bytes) -> list[tuple[str, str, str]] | None:
    """(key, code, message) of each per-key error in a DeleteObjects result, NoSuchKey left out; None when
    ``body`` is not a result.  The key is a name, kept as it is; the code and message are the store's words,
    scrubbed as ``error_of`` scrubs them."""
    root = _parse_xml(body)
    if root is None or root.tag != "DeleteResult":
        return None
    return [
        (_text(err, "Key"), _code(code), redact.shown(redact.foreign(_text(err, "Message"))))
        for err in _children(root, "Error")
        if (code := _text(err, "Code")) != "NoSuchKey"
    ]


def upload_id(thing: str, body: bytes) -> str:
    """The UploadId of a CreateMultipartUpload answer; ``thing`` is the object's URL, which a fault names."""
    root = _parse_xml(body)
    if root is None or root.tag != "InitiateMultipartUploadResult" or not _text(root, "UploadId"):
        raise StoreError("the store sent an answer without an UploadId", op="create-upload", thing=thing)
    return _text(root, "UploadId")


def complete_request(parts: Sequence[tuple[str, str]]) -> bytes:
    """The body of a CompleteMultipartUpload request: (ETag, base64 CRC32) of parts 1, 2, ... in order."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{_escape(etag)}</ETag>"
            f"<ChecksumCRC32>{_escape(crc)}</ChecksumCRC32></Part>"
            for n, (etag, crc) in enumerate(parts, 1)
        )
        + "</CompleteMultipartUpload>"
    ).encode("utf-8")


def completed(thing: str, body: bytes) -> tuple[str, str, str]:
    """(ETag, ChecksumCRC32, "") of a CompleteMultipartUpload answer, or ("", "", CODE: MESSAGE) when the
    store answered 200 with an error document (S3 does, for a completion that failed after it began)."""
    root = _parse_xml(body)
    if root is not None and root.tag == "Error":
        code, message = _code(_text(root, "Code")), redact.shown(redact.foreign(_text(root, "Message")))
        return "", "", f"{code}: {message}" if message else code
    if root is None or root.tag != "CompleteMultipartUploadResult":
        raise StoreError(
            "the store sent an answer that is not a completion", op="complete-upload", thing=thing
        )
    return _text(root, "ETag"), _text(root, "ChecksumCRC32"), ""
