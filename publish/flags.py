"""Command-line flags with the semantics and messages of Go's ``flag`` package.

One ``FlagSet`` per verb. ``-name value``, ``-name=value``, ``--name`` and ``--name=value`` are the same;
a boolean flag never takes the next argument (``-probe=false`` sets it false); parsing stops at the first
argument that is not a flag (a lone ``-`` included) or after ``--``, which is consumed; a flag given twice
keeps the last value; names are never abbreviated. Errors are ``UsageError`` with Go's text.

Also here, for other parsers that follow the same rules: ``parse_go_bool`` (``strconv.ParseBool``),
``parse_duration`` (``time.ParseDuration``, in seconds), ``format_duration`` (``Duration.String``),
``parse_decimal`` (the integers of ``-keep``, ``-epoch``, STEP) and ``go_quote`` (Go's ``%q``).
"""

from __future__ import annotations

from publish.errors import UsageError

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any, Callable

__all__ = [
    "FlagSet",
    "HelpRequested",
    "format_duration",
    "format_duration_ns",
    "go_quote",
    "parse_decimal",
    "parse_duration",
    "parse_duration_ns",
    "parse_go_bool",
]

# The `why` Go's flag package gives for any value its own types cannot parse.
_PARSE_ERROR = "parse error"
_OUT_OF_RANGE = "value out of range"


class HelpRequested(Exception):
    """-h, -help or --help given (and not defined as a flag): print usage, exit 0."""


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
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(invalid)
    d = 0
    while s:
        if not (s[0] == "." or _is_digit(s[0])):
            raise ValueError(invalid)
        # Leading integer, with Go's overflow checks.
        i = 0
        v = 0
        while i < len(s) and _is_digit(s[i]):
            if v > _MAX_U63 // 10:
                raise ValueError(invalid)
            v = v * 10 + ord(s[i]) - ord("0")
            if v > _MAX_U63:
                raise ValueError(invalid)
            i += 1
        pre = i > 0
        s = s[i:]
        # Optional fraction; precision stops accumulating on overflow, as in Go.
        f = 0
        scale = 1.0
        post = False
        if s and s[0] == ".":
            s = s[1:]
            i = 0
            overflow = False
            while i < len(s) and _is_digit(s[i]):
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
            post = i > 0
            s = s[i:]
        if not pre and not post:
            raise ValueError(invalid)
        # The unit: everything up to the next digit or '.'.
        i = 0
        while i < len(s) and not (s[i] == "." or _is_digit(s[i])):
            i += 1
        if i == 0:
            raise ValueError(f"time: missing unit in duration {_time_quote(orig)}")
        u = s[:i]
        s = s[i:]
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


def parse_duration(text: str) -> float:
    """Parse ``text`` as Go's ``time.ParseDuration``; return seconds. Zero and negative values parse."""
    return parse_duration_ns(text) / _SECOND


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


# --- The flag set


def _decimal(text: str) -> bool:
    """``-?[0-9]+``, without importing re on the start-up path."""
    body = text[1:] if text.startswith("-") else text
    return body.isascii() and body.isdigit()


def parse_decimal(text: str, *, minimum: int | None = None, below: int | None = None) -> int:
    """A plain decimal integer (an optional ``-`` and ASCII digits; no ``+``, ``0x``, ``_`` or spaces).

    ``ValueError`` says why: ``parse error`` (Go's word for a malformed number), ``must be at least N``,
    ``must be below N``, or ``value out of range`` (longer than Python reads, with no bound to compare).
    """
    if not _decimal(text):
        raise ValueError(_PARSE_ERROR)
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
        raise ValueError(_OUT_OF_RANGE) from None
    if minimum is not None and n < minimum:
        raise ValueError(f"must be at least {minimum}")
    if below is not None and n >= below:
        raise ValueError(f"must be below {below}")
    return n


class _Flag:
    __slots__ = ("name", "usage", "kind", "default", "value", "parse", "metavar", "shown_default")

    def __init__(
        self,
        name: str,
        usage: str,
        kind: str,
        default: object,
        parse: Callable[[str], object],
        metavar: str,
        shown_default: str | None,
    ) -> None:
        self.name = name
        self.usage = usage
        self.kind = kind
        self.default = default
        self.value = default
        self.parse = parse
        self.metavar = metavar
        self.shown_default = shown_default


class FlagSet:
    """The flags of one verb, defined, then parsed once from its arguments."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._flags: dict[str, _Flag] = {}
        self._set: set[str] = set()

    # Definitions

    def _define(self, flag: _Flag) -> None:
        name = flag.name
        if not name or name.startswith("-") or "=" in name:
            raise ValueError(f"flag {name!r} begins with - or contains =")
        if name in self._flags:
            raise ValueError(f"{self.name} flag redefined: {name}")
        self._flags[name] = flag

    def string(self, name: str, default: str, usage: str) -> None:
        shown = None if default == "" else go_quote(default)
        self._define(_Flag(name, usage, "string", default, str, "string", shown))

    def boolean(self, name: str, default: bool, usage: str) -> None:
        shown = "true" if default else None
        self._define(_Flag(name, usage, "bool", default, parse_go_bool, "", shown))

    def duration(self, name: str, default: float, usage: str) -> None:
        """A Go duration, held in seconds (``value`` is a float); a given value must be > 0."""

        def parse(text: str) -> float:
            try:
                ns = parse_duration_ns(text)
            except ValueError:
                raise ValueError(_PARSE_ERROR) from None
            if ns <= 0:
                raise ValueError("must be positive")
            return ns / _SECOND

        shown_text = format_duration(default)
        shown = None if shown_text == "0s" else shown_text
        self._define(_Flag(name, usage, "duration", float(default), parse, "duration", shown))

    def integer(
        self,
        name: str,
        default: int,
        usage: str,
        *,
        minimum: int | None = None,
        below: int | None = None,
        int64: bool = False,
    ) -> None:
        """A plain decimal integer (an optional ``-``, ASCII digits), with ``minimum <= n < below``.

        ``int64``: a Go ``int`` flag first, so a value outside [-2^63, 2^63) is Go's ``value out of range``
        whatever the bounds say."""

        def parse(text: str) -> int:
            if int64:
                try:
                    parse_decimal(text, minimum=-(1 << 63), below=1 << 63)
                except ValueError as e:
                    raise ValueError(_OUT_OF_RANGE if str(e) != _PARSE_ERROR else _PARSE_ERROR) from None
            return parse_decimal(text, minimum=minimum, below=below)

        shown = None if default == 0 else str(default)
        self._define(_Flag(name, usage, "int", default, parse, "int", shown))

    def custom(
        self,
        name: str,
        default: object,
        usage: str,
        parse: Callable[[str], object],
        metavar: str = "value",
    ) -> None:
        """A flag whose text ``parse`` turns into its value; ``parse`` raises ``ValueError(why)``.

        The usage shows ``(default <str(default)>)`` unless the default is ``None`` or prints as ``""``.
        """
        shown = None if default is None or str(default) == "" else str(default)
        self._define(_Flag(name, usage, "custom", default, parse, metavar, shown))

    # Parsing

    def parse(self, args: list[str]) -> list[str]:
        """Parse flags; return the positional arguments that remain. Raises publish.errors.UsageError with
        Go's message text (no 'publish: ' prefix, the cli adds it), or HelpRequested."""
        rest = list(args)
        while rest:
            s = rest[0]
            if len(s) < 2 or s[0] != "-":
                break
            minuses = 1
            if s[1] == "-":
                minuses = 2
                if len(s) == 2:  # "--" ends the flags
                    rest.pop(0)
                    break
            name = s[minuses:]
            if not name or name[0] in "-=":
                raise UsageError(f"bad flag syntax: {s}")
            rest.pop(0)
            has_value = False
            text = ""
            eq = name.find("=", 1)
            if eq > 0:
                name, text, has_value = name[:eq], name[eq + 1 :], True
            flag = self._flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    raise HelpRequested()
                raise UsageError(f"flag provided but not defined: -{name}")
            if flag.kind == "bool":
                if has_value:
                    try:
                        flag.value = parse_go_bool(text)
                    except ValueError:
                        raise UsageError(
                            f"invalid boolean value {go_quote(text)} for -{name}: {_PARSE_ERROR}"
                        ) from None
                else:
                    flag.value = True
            else:
                if not has_value and rest:
                    text, has_value = rest.pop(0), True
                if not has_value:
                    raise UsageError(f"flag needs an argument: -{name}")
                try:
                    flag.value = flag.parse(text)
                except ValueError as e:
                    raise UsageError(f"invalid value {go_quote(text)} for flag -{name}: {e}") from None
            self._set.add(name)
        return rest

    # Results

    def value(self, name: str) -> Any:
        """The parsed value, or the default; ``KeyError`` for a name never defined."""
        return self._flags[name].value

    def is_set(self, name: str) -> bool:
        """Whether the flag was given on the command line (even with its default value)."""
        if name not in self._flags:
            raise KeyError(name)
        return name in self._set

    def usage(self) -> str:
        """The flags as Go's ``PrintDefaults`` lists them, sorted by name."""
        lines = []
        for name in sorted(self._flags):
            flag = self._flags[name]
            metavar, text = _unquote_usage(flag)
            head = f"  -{name}"
            if metavar:
                head += " " + metavar
            # Go puts a one-letter boolean's usage on the same line.
            head += "\t" if len(head.encode()) <= 4 else "\n    \t"
            line = head + text.replace("\n", "\n    \t")
            if flag.shown_default is not None:
                line += f" (default {flag.shown_default})"
            lines.append(line + "\n")
        return "".join(lines)


def _unquote_usage(flag: _Flag) -> tuple[str, str]:
    """Go's ``UnquoteUsage``: a back-quoted word in the usage names the value; else the kind does."""
    usage = flag.usage
    i = usage.find("`")
    if i >= 0:
        j = usage.find("`", i + 1)
        if j >= 0:
            name = usage[i + 1 : j]
            return name, usage[:i] + name + usage[j + 1 :]
    return flag.metavar, usage
