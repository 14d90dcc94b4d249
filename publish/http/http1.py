"""HTTP/1.0 and 1.1 responses read from a stream (publish.http.streams), without http.client.

What it refuses, and why (each is :class:`BadResponse`, or :class:`Incomplete` when the body's framing breaks):
a status line that is not ``HTTP/1.0`` or ``HTTP/1.1``, a 3-digit status from 100 and a reason (BadStatusLine,
UnknownProtocol); a status, header, chunk-size or trailer line over 64 KiB (LineTooLong: http.client's cap);
more than 100 header lines (HTTPException, as http.client said) or 100 trailer lines; a header line that is
folded (obs-fold, refused rather than joined: no S3 server folds, and a fold is a way to smuggle a header),
has no colon or a name that is not a token; more than 16 interim 1xx answers, or a 101 (never asked for);
a Content-Length that is not digits, over 18 digits, or two different values; a Transfer-Encoding other than
``chunked``; a chunk size that is not 1 to 16 hex digits, or chunk data not followed by a line end; a body
in more than one chunk per KiB of its cap (1024 chunks at least).
The connection is not kept after an answer with both Transfer-Encoding and Content-Length (a smuggling
sign), nor when bytes follow the answer (the connection is out of step).
Every line is found with one ``find`` over the bytes not yet searched, the buffer is one bytearray with an
offset compacted only when over half is read: the whole response is read in time linear in its size.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.http.streams import Stream

MAX_LINE = 65536
MAX_HEADERS = 100
MAX_INTERIM = 16
MAX_CHUNKS = 1024  # the fewest chunks a body may come in before it is refused
_READ = 65536
_STEP = 256 * 1024
_TOKEN = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HEX = b"0123456789abcdefABCDEF"
_DIGITS = b"0123456789"


class BadResponse(Exception):
    """The answer is not HTTP/1.x as this reader takes it; ``str()`` is one word for what is wrong (a phrase
    naming the limit for too many chunks)."""


class Closed(Exception):
    """The server closed the connection before the end of the status line or headers."""


class Incomplete(Exception):
    """The body ended early or its chunk framing broke; ``str()`` as http.client's IncompleteRead."""

    def __init__(self, got: int, more: int | None) -> None:
        super().__init__(got, more)
        self.got = got
        self.more = more

    def __str__(self) -> str:
        more = "" if self.more is None else f", {self.more} more expected"
        return f"IncompleteRead({self.got} bytes read{more})"


class OverLimit(Exception):
    """The body is over the cap: ``size`` is its Content-Length, None when it came without one."""

    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size


def is_token(name: bytes) -> bool:
    """True for an HTTP token (a method or a header name)."""
    return bool(name) and not name.translate(None, _TOKEN)


class Reader:
    """Buffered reads from one stream: lines and byte counts; ``eof`` once the stream ended."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._pos = 0
        self._scratch = memoryview(bytearray(_READ))
        self.eof = False
        self.consumed = 0  # bytes handed out so far (lines with their line ends)

    def leftover(self) -> bytes:
        """The bytes read from the stream and not handed out."""
        return bytes(self._buf[self._pos :])

    def _fill(self) -> bool:
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        n = self._stream.recv_into(self._scratch)
        if not n:
            self.eof = True
            return False
        self._buf += self._scratch[:n]
        return True

    def line(self, cap: int = MAX_LINE) -> bytes | None:
        """The next line without its LF or CRLF (at most ``cap`` bytes with it, else LineTooLong); None at
        end of stream before its first byte, Closed in its middle."""
        seen = 0
        while True:
            pos = self._pos
            i = self._buf.find(b"\n", pos + seen, pos + cap)
            if i >= 0:
                line = bytes(self._buf[pos:i])
                self._pos = i + 1
                self.consumed += i + 1 - pos
                return line[:-1] if line.endswith(b"\r") else line
            seen = min(len(self._buf) - pos, cap)
            if seen >= cap:
                raise BadResponse("LineTooLong")
            if not self._fill():
                if seen:
                    raise Closed("Remote end closed connection in the middle of a line")
                return None

    def read(self, n: int) -> bytes:
        """Up to ``n`` (> 0) bytes, fewer only at the end of the stream (b'' there)."""
        if self._pos == len(self._buf) and not self._fill():
            return b""
        piece = bytes(self._buf[self._pos : self._pos + n])
        self._pos += len(piece)
        self.consumed += len(piece)
        return piece

    def exactly(self, n: int) -> bytes:
        """``n`` bytes, fewer only at the end of the stream (as :meth:`into` reads them)."""
        out = bytearray()
        self.into(out, n)
        return bytes(out)

    def into(self, out: bytearray, n: int) -> int:
        """Append ``n`` bytes to ``out``, fewer only at the end of the stream, and return how many; read
        straight into ``out``, grown (at most doubling what arrived) as bytes arrive, so a large length never
        allocates what was not sent."""
        start = len(out)
        got = min(n, len(self._buf) - self._pos)
        out += self._buf[self._pos : self._pos + got]
        self._pos += got
        while got < n:
            if start + got == len(out):
                out += bytes(min(max(got, _STEP), n - got))
            k = self._stream.recv_into(memoryview(out)[start + got :])  # gone before the next resize
            if not k:
                self.eof = True
                break
            got += k
        del out[start + got :]
        self.consumed += got
        return got


class Head:
    """The status line and header fields of a response; names lower-case, in order."""

    def __init__(self, version: int, status: int, reason: str, fields: list[tuple[str, str]]) -> None:
        self.version = version
        self.status = status
        self.reason = reason
        self.fields = fields

    def get(self, name: str) -> str | None:
        """Every value of ``name`` joined with ', ', None if absent."""
        values = [v for k, v in self.fields if k == name]
        return ", ".join(values) if values else None


def status_line(line: bytes) -> tuple[int, int, str]:
    """(version 10 or 11, status, reason) of a status line, as http.client splits it."""
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) == 2:
        parts.append("")
    if len(parts) != 3 or not parts[0].startswith("HTTP/"):
        raise BadResponse("BadStatusLine")
    version, code, reason = parts
    if len(code) != 3 or code.encode("latin-1").translate(None, _DIGITS) or int(code) < 100:
        raise BadResponse("BadStatusLine")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadResponse("UnknownProtocol")
    return (10 if version == "HTTP/1.0" else 11), int(code), reason.strip()


def fields(reader: Reader, most: int, too_many: str) -> list[tuple[str, str]]:
    """Header (or trailer) lines up to the empty line; values stripped of surrounding blanks."""
    out: list[tuple[str, str]] = []
    while True:
        line = reader.line()
        if line is None:
            raise Closed("Remote end closed connection in the headers")
        if not line:
            return out
        if len(out) >= most:
            raise BadResponse(too_many)
        if line[:1] in (b" ", b"\t"):
            raise BadResponse("ObsFold")
        name, colon, value = line.partition(b":")
        if not colon or not is_token(name):
            raise BadResponse("BadHeaderLine")
        out.append((name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")))


def read_head(reader: Reader) -> Head:
    """The final answer's head, interim 1xx answers skipped."""
    for _ in range(MAX_INTERIM + 1):
        line = reader.line()
        if line is None:
            raise Closed("Remote end closed connection without response")
        version, status, reason = status_line(line)
        head = Head(version, status, reason, fields(reader, MAX_HEADERS, "HTTPException"))
        if status == 101:
            raise BadResponse("SwitchingProtocols")
        if status >= 200:
            return head
    raise BadResponse("TooManyInterimAnswers")


class Framing:
    """How the body of one answer ends: ``kind`` is none, length, chunked or close."""

    def __init__(self, kind: str, length: int | None, will_close: bool) -> None:
        self.kind = kind
        self.length = length
        self.will_close = will_close


def _close_after(head: Head) -> bool:
    # As http.client decides it.
    conn = (head.get("connection") or "").lower()
    if head.version == 11:
        return "close" in conn
    if head.get("keep-alive") is not None or "keep-alive" in conn:
        return False
    return "keep-alive" not in (head.get("proxy-connection") or "").lower()


def framing(head: Head, method: str) -> Framing:
    """The body's framing (RFC 9112 section 6.3) and whether the connection closes after it."""
    close = _close_after(head)
    if method == "HEAD" or head.status in (204, 304):
        return Framing("none", 0, close)
    te = head.get("transfer-encoding")
    cl = head.get("content-length")
    if te is not None:
        if te.strip().lower() != "chunked":
            raise BadResponse("TransferEncoding")
        return Framing("chunked", None, close or cl is not None)  # both: a smuggling sign, so no reuse
    if cl is None:
        return Framing("close", None, True)
    values = {v.strip() for v in cl.split(",")}
    value = values.pop()
    if values or not 0 < len(value) <= 18 or value.encode("latin-1").translate(None, _DIGITS):
        raise BadResponse("ContentLength")
    return Framing("length", int(value), close)


def _chunk_size(line: bytes) -> int | None:
    size = line.split(b";", 1)[0].strip(b" \t")  # chunk extensions are ignored
    if not 0 < len(size) <= 16 or size.translate(None, _HEX):
        return None
    return int(size, 16)


def read_body(reader: Reader, how: Framing, limit: int) -> bytes:
    """The whole body; OverLimit once it is known to be over ``limit`` bytes (before reading it when the
    length is known), Incomplete when it ends early."""
    if how.kind == "none":
        return b""
    if how.kind == "length":
        assert how.length is not None
        if how.length > limit:
            raise OverLimit(how.length)
        data = reader.exactly(how.length)
        if len(data) < how.length:
            raise Incomplete(len(data), how.length - len(data))
        return data
    body = bytearray()  # one buffer: a list of bytes objects costs ~35 bytes more per chunk than its data
    if how.kind == "close":
        if reader.into(body, limit + 1) > limit:
            raise OverLimit(None)
        return bytes(body)
    # S3 servers and proxies send chunks of kilobytes; a body cut into far more, smaller chunks costs a
    # line and a parse per chunk for nothing: refused past one chunk per KiB of the cap (1024 at least).
    most = max(MAX_CHUNKS, limit // 1024)
    chunks = 0
    while True:
        line = reader.line()
        size = None if line is None else _chunk_size(line)
        if size is None:
            raise Incomplete(len(body), None)
        if not size:
            break
        if len(body) + size > limit:
            raise OverLimit(None)
        chunks += 1
        if chunks > most:
            raise BadResponse(f"the body came in more than {most} chunks")
        got = reader.into(body, size)
        if got < size:
            raise Incomplete(len(body), size - got)
        end = reader.read(1)
        if end == b"\r":
            end = reader.read(1)
        if end != b"\n":
            raise Incomplete(len(body), None)
    try:
        fields(reader, MAX_HEADERS, "TooManyTrailers")
    except Closed:
        reader.eof = True  # the trailers cut short: the body is whole, the connection is not reused
    return bytes(body)
