"""Go's conventions that the command follows, in one place.

``parse_go_bool`` is ``strconv.ParseBool``; ``parse_duration_ns`` is ``time.ParseDuration`` (in
nanoseconds); ``format_duration`` is ``Duration.String``; ``go_quote`` is
``%q`` (``strconv.Quote``); ``parse_decimal`` reads the plain decimal integers of ``-keep``, ``-epoch``,
``STEP`` and the variables that carry them. Everything here is pure: no I/O, no imports beyond the language.

A malformed number is a :class:`ParseError`, one out of range a :class:`RangeError` (Go's ``strconv.ErrSyntax``
and ``strconv.ErrRange``): callers tell them apart by type, never by their words.
"""

from __future__ import annotations

__all__ = [
    "PARSE_ERROR",
    "OUT_OF_RANGE",
    "ParseError",
    "RangeError",
    "format_duration",
    "format_duration_ns",
    "go_quote",
    "parse_decimal",
    "parse_duration_ns",
    "parse_go_bool",
    "parse_go_int",
]

# The `why` Go's strconv gives for a malformed number, and for one out of range.
PARSE_ERROR = "parse error"
OUT_OF_RANGE = "value out of range"


class ParseError(ValueError):
    """A malformed number: Go's ``strconv.ErrSyntax``, whose words are ``parse error``."""

    def __init__(self) -> None:
        super().__init__(PARSE_ERROR)


class RangeError(ValueError):
    """A well-formed number outside what the type holds: Go's ``strconv.ErrRange`` (``value out of range``)."""

    def __init__(self) -> None:
        super().__init__(OUT_OF_RANGE)


# --- Go's strconv.ParseBool

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_go_bool(text: str) -> bool:
    """Parse a boolean as Go's ``strconv.ParseBool`` does; ``ValueError`` for anything else."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"invalid boolean {go_quote(text)}")


# --- Go's time.ParseDuration and Duration.String

_NANOSECOND = 1
_MICROSECOND = 1000 * _NANOSECOND
_MILLISECOND = 1000 * _MICROSECOND
_SECOND = 1000 * _MILLISECOND
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE

_UNITS = {
    "ns": _NANOSECOND,
    "us": _MICROSECOND,
    "\u00b5s": _MICROSECOND,  # micro sign
    "\u03bcs": _MICROSECOND,  # Greek small letter mu
    "ms": _MILLISECOND,
    "s": _SECOND,
    "m": _MINUTE,
    "h": _HOUR,
}

_MAX_U63 = 1 << 63


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


def parse_duration_ns(text: str) -> int:
    """Parse ``text`` exactly as Go's ``time.ParseDuration``; return nanoseconds (an int64 value).

    ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` with units ns, us, µs, μs, ms, s, m, h; ``0`` needs no unit.
    ``ValueError`` carries Go's message (``time: invalid duration "x"``...).
    """
    orig = text
    invalid = f"time: invalid duration {_time_quote(orig)}"
    s = text
    n = len(s)
    at = 0  # s[at:] is what is left: indices, not slices, so many components cost linear time
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        at = 1
    if s[at:] == "0":
        return 0
    if at == n:
        raise ValueError(invalid)
    d = 0
    while at < n:
        if not (s[at] == "." or _is_digit(s[at])):
            raise ValueError(invalid)
        # Leading integer, with Go's overflow checks.
        i = at
        v = 0
        while i < n and _is_digit(s[i]):
            if v > _MAX_U63 // 10:
                raise ValueError(invalid)
            v = v * 10 + ord(s[i]) - ord("0")
            if v > _MAX_U63:
                raise ValueError(invalid)
            i += 1
        pre = i > at
        at = i
        # Optional fraction; precision stops accumulating on overflow, as in Go.
        f = 0
        scale = 1.0
        post = False
        if at < n and s[at] == ".":
            at += 1
            i = at
            overflow = False
            while i < n and _is_digit(s[i]):
                if not overflow:
                    if f > (_MAX_U63 - 1) // 10:
                        overflow = True
                    else:
                        y = f * 10 + ord(s[i]) - ord("0")
                        if y > _MAX_U63:
                            overflow = True
                        else:
                            f = y
                            scale *= 10
                i += 1
            post = i > at
            at = i
        if not pre and not post:
            raise ValueError(invalid)
        # The unit: everything up to the next digit or '.'.
        i = at
        while i < n and not (s[i] == "." or _is_digit(s[i])):
            i += 1
        if i == at:
            raise ValueError(f"time: missing unit in duration {_time_quote(orig)}")
        u = s[at:i]
        at = i
        unit = _UNITS.get(u)
        if unit is None:
            raise ValueError(f"time: unknown unit {_time_quote(u)} in duration {_time_quote(orig)}")
        if v > _MAX_U63 // unit:
            raise ValueError(invalid)
        v *= unit
        if f > 0:
            # Go converts the float product to uint64, truncating toward zero.
            v += int(float(f) * (float(unit) / scale))
            if v > _MAX_U63:
                raise ValueError(invalid)
        d += v
        if d > _MAX_U63:
            raise ValueError(invalid)
    if neg:
        return -d
    if d > _MAX_U63 - 1:
        raise ValueError(invalid)
    return d


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    digits = ""
    printing = False
    for _ in range(prec):
        digit = v % 10
        printing = printing or digit != 0
        if printing:
            digits = str(digit) + digits
        v //= 10
    return ("." + digits if printing else ""), v


def format_duration(seconds: float) -> str:
    """Format a duration as Go's ``Duration.String`` does (``5m0s``, ``1.5s``, ``300ms``, ``1h0m0s``).

    ``seconds`` is rounded to the nanosecond. An ``int`` is taken as seconds as well.
    """
    return format_duration_ns(round(seconds * _SECOND))


def format_duration_ns(ns: int) -> str:
    """Go's ``Duration.String`` for a count of nanoseconds."""
    neg = ns < 0
    u = -ns if neg else ns
    if u < _SECOND:
        if u == 0:
            return "0s"
        if u < _MICROSECOND:
            prec, unit = 0, "ns"
        elif u < _MILLISECOND:
            prec, unit = 3, "\u00b5s"
        else:
            prec, unit = 6, "ms"
        frac, u = _fmt_frac(u, prec)
        out = f"{u}{frac}{unit}"
    else:
        frac, u = _fmt_frac(u, 9)
        out = f"{u % 60}{frac}s"
        u //= 60
        if u > 0:
            out = f"{u % 60}m{out}"
            u //= 60
            if u > 0:
                out = f"{u}h{out}"
    return "-" + out if neg else out


# --- Go's quoting

_SIMPLE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """Quote ``text`` as Go's ``%q`` (``strconv.Quote``) does.

    Bytes that were not UTF-8 (decoded by Python as ``surrogateescape``, U+DC80..U+DCFF) come out as
    ``\\xNN``, as Go prints the invalid bytes of a string.
    """
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0xDC80 <= cp <= 0xDCFF:
            out.append(f"\\x{cp - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif 0xD800 <= cp <= 0xDFFF:
            out.append("\\ufffd")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def _time_quote(text: str) -> str:
    """The ``quote`` of Go's time package: ``"`` and ``\\`` escaped, control and non-ASCII bytes as ``\\xNN``."""
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if cp < 0x20 or cp >= 0x80:
            try:
                raw = ch.encode("utf-8", "surrogateescape")  # a byte that was not UTF-8 in argv
            except UnicodeEncodeError:
                raw = "\ufffd".encode()
            out.extend(f"\\x{b:02x}" for b in raw)
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --- Plain decimals


def _decimal(text: str) -> bool:
    """``-?[0-9]+``, without importing re on the start-up path."""
    body = text[1:] if text.startswith("-") else text
    return body.isascii() and body.isdigit()


def parse_decimal(text: str, *, minimum: int | None = None, below: int | None = None) -> int:
    """A plain decimal integer (an optional ``-`` and ASCII digits; no ``+``, ``0x``, ``_`` or spaces).

    ``ValueError`` says why: :class:`ParseError` (``parse error``, Go's word for a malformed number),
    ``must be at least N``, ``must be below N``, or :class:`RangeError` (``value out of range``: longer than
    Python reads, with no bound to compare).
    """
    if not _decimal(text):
        raise ParseError()
    negative = text[0] == "-"
    digits = text.lstrip("-").lstrip("0") or "0"
    # Refuse, before int(), a number longer than any in range (and Python's digit limit).
    if below is not None and not negative and len(digits) > len(str(below)):
        raise ValueError(f"must be below {below}")
    if minimum is not None and negative and len(digits) > len(str(abs(minimum))) + 1:
        raise ValueError(f"must be at least {minimum}")
    try:
        n = -int(digits) if negative else int(digits)
    except ValueError:
        raise RangeError() from None
    if minimum is not None and n < minimum:
        raise ValueError(f"must be at least {minimum}")
    if below is not None and n >= below:
        raise ValueError(f"must be below {below}")
    return n


def parse_go_int(text: str, *, minimum: int | None = None, below: int | None = None) -> int:
    """A count as a Go ``int`` flag (64 bits) reads it, then held to ``minimum <= n < below``: a value
    outside [-2^63, 2^63) is Go's ``value out of range`` whatever the bounds say, as ``FlagSet.integer``'s
    ``int64`` flags (``-keep``) have it."""
    try:
        parse_decimal(text, minimum=-(1 << 63), below=1 << 63)
    except ParseError:
        raise
    except ValueError:
        raise RangeError() from None
    return parse_decimal(text, minimum=minimum, below=below)
