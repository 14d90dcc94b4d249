"""Command-line flags with the semantics and messages of Go's ``flag`` package.

One ``FlagSet`` per verb. ``-name value``, ``-name=value``, ``--name`` and ``--name=value`` are the same;
a boolean flag (and one parsed like it, ``-verify``) never takes the next argument (``-probe=false`` sets it
false); parsing stops at the first
argument that is not a flag (a lone ``-`` included) or after ``--``, which is consumed; a flag given twice
keeps the last value; names are never abbreviated. Errors are ``FlagError`` with Go's text; this module
imports nothing of the command, so a caller decides how an error is shown (the command's cli hides a URL's
password in the values it echoes, and exits 2).

The value parsers it shares with the rest of the command (``strconv.ParseBool``, ``time.ParseDuration``,
``%q``, plain decimals) live in ``publish.rules.go.gocompat``, imported where a value is parsed or a usage shown:
a command line of string flags alone needs none of them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any, Callable, Generic, TypeVar

    T = TypeVar("T")

    class _Generic(Generic[T]):
        __slots__ = ()
else:  # Flag[str] in an annotation, without importing typing at run time

    class _Generic:
        __slots__ = ()

        def __class_getitem__(cls, item: object) -> type:
            return cls

    T = None

__all__ = ["Flag", "FlagError", "FlagSet", "HelpRequested"]


_LATER = object()  #: a Flag's shown default that the usage works out when it is printed (Go's rules)


def _parse_bool(text: str) -> bool:
    from publish.rules.go.gocompat import parse_go_bool

    return parse_go_bool(text)


class HelpRequested(Exception):
    """-h, -help or --help given (and not defined as a flag): print usage, exit 0."""


def _same(text: str) -> str:
    return text


def _same_why(why: str, text: str) -> str:
    return why


class FlagError(Exception):
    """A command line the flags refuse (Go's usage error).  ``str()`` is Go's message; ``message(shown,
    why)`` is the same message with each value taken from the command line passed through ``shown`` first,
    and the reason a value was refused through ``why(reason, value)``: how the caller hides what a value
    may hold (a URL's password)."""

    #: ``form``: which message, with ``arg`` (the argument, flag name or value at fault), ``flag`` and ``why``
    SYNTAX, UNDEFINED, NEEDS_VALUE, BAD_BOOL, BAD_VALUE = "syntax", "undefined", "needs", "bool", "value"

    def __init__(self, form: str, arg: str, flag: str = "", why: str = "") -> None:
        super().__init__(form, arg, flag, why)
        self.form = form
        self.arg = arg
        self.flag = flag
        self.why = why

    def message(
        self,
        shown: Callable[[str], str] = _same,
        why: Callable[[str, str], str] = _same_why,
    ) -> str:
        from publish.rules.go.gocompat import PARSE_ERROR, go_quote

        form, arg, flag = self.form, self.arg, self.flag
        if form == self.SYNTAX:
            return f"bad flag syntax: {shown(arg)}"
        if form == self.UNDEFINED:
            return f"flag provided but not defined: -{shown(arg)}"
        if form == self.NEEDS_VALUE:
            return f"flag needs an argument: -{flag}"
        if form == self.BAD_BOOL:
            return f"invalid boolean value {go_quote(shown(arg))} for -{flag}: {self.why or PARSE_ERROR}"
        return f"invalid value {go_quote(shown(arg))} for flag -{flag}: {why(self.why, arg)}"

    def __str__(self) -> str:
        return self.message()


class Flag(_Generic[T]):
    """One defined flag, as Go's ``fs.String()`` returns a pointer: ``value`` (the default until parsed) and
    ``is_set`` (given on the command line, even with its default value)."""

    __slots__ = ("name", "usage", "kind", "default", "value", "parse", "metavar", "_shown", "is_set")

    def __init__(
        self,
        name: str,
        usage: str,
        kind: str,
        default: T,
        parse: Callable[[str], T],
        metavar: str,
        shown_default: str | None | object,
    ) -> None:
        self.name = name
        self.usage = usage
        self.kind = kind
        self.default = default
        self.value = default
        self.parse = parse
        self.metavar = metavar
        self._shown = shown_default
        self.is_set = False

    @property
    def shown_default(self) -> str | None:
        """The default as the usage shows it, or None: not shown (Go leaves out a zero value)."""
        if self._shown is not _LATER:
            return self._shown  # type: ignore[return-value]
        from publish.rules.go.gocompat import format_duration, go_quote  # only when a usage is printed

        if self.kind == "string":
            return None if self.default == "" else go_quote(str(self.default))
        text = format_duration(self.default)  # type: ignore[arg-type]  # a duration's: float seconds
        return None if text == "0s" else text


class FlagSet:
    """The flags of one verb, defined, then parsed once from its arguments."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._flags: dict[str, Flag[Any]] = {}

    # Definitions

    def _define(self, flag: Flag[T]) -> Flag[T]:
        name = flag.name
        if not name or name.startswith("-") or "=" in name:
            raise ValueError(f"flag {name!r} begins with - or contains =")
        if name in self._flags:
            raise ValueError(f"{self.name} flag redefined: {name}")
        self._flags[name] = flag
        return flag

    def string(self, name: str, default: str, usage: str) -> Flag[str]:
        return self._define(Flag(name, usage, "string", default, str, "string", _LATER))

    def boolean(self, name: str, default: bool, usage: str) -> Flag[bool]:
        shown = "true" if default else None
        return self._define(Flag(name, usage, "bool", default, _parse_bool, "", shown))

    def boolean_like(self, name: str, default: T, usage: str, parse: Callable[[str], T]) -> Flag[T]:
        """A flag parsed as a boolean is (Go's ``IsBoolFlag``): ``-name`` alone is ``parse("true")`` and never
        takes the next argument; ``-name=TEXT`` is ``parse(TEXT)``, whose ``ValueError(why)`` is Go's
        ``invalid boolean value`` with that why.  No default is shown in the usage."""
        return self._define(Flag(name, usage, "boolean_like", default, parse, "", None))

    def duration(self, name: str, default: float, usage: str) -> Flag[float]:
        """A Go duration, held in seconds (``value`` is a float); a given value must be > 0."""

        def parse(text: str) -> float:
            from publish.rules.go.gocompat import ParseError, parse_duration_ns

            try:
                ns = parse_duration_ns(text)
            except ValueError:
                raise ParseError() from None
            if ns <= 0:
                raise ValueError("must be positive")
            return ns / 1_000_000_000  # int / int: correctly rounded, as before

        return self._define(Flag(name, usage, "duration", float(default), parse, "duration", _LATER))

    def integer(
        self,
        name: str,
        default: int,
        usage: str,
        *,
        minimum: int | None = None,
        below: int | None = None,
        int64: bool = False,
    ) -> Flag[int]:
        """A plain decimal integer (an optional ``-``, ASCII digits), with ``minimum <= n < below``.

        ``int64``: a Go ``int`` flag first, so a value outside [-2^63, 2^63) is Go's ``value out of range``
        whatever the bounds say."""

        def parse(text: str) -> int:
            from publish.rules.go.gocompat import ParseError, RangeError, parse_decimal

            if int64:
                try:
                    parse_decimal(text, minimum=-(1 << 63), below=1 << 63)
                except ParseError:
                    raise
                except ValueError:
                    raise RangeError() from None
            return parse_decimal(text, minimum=minimum, below=below)

        shown = None if default == 0 else str(default)
        return self._define(Flag(name, usage, "int", default, parse, "int", shown))

    def custom(
        self,
        name: str,
        default: T,
        usage: str,
        parse: Callable[[str], T],
        metavar: str = "value",
    ) -> Flag[T]:
        """A flag whose text ``parse`` turns into its value; ``parse`` raises ``ValueError(why)``.

        The usage shows ``(default <str(default)>)`` unless the default is ``None`` or prints as ``""``.
        """
        shown = None if default is None or str(default) == "" else str(default)
        return self._define(Flag(name, usage, "custom", default, parse, metavar, shown))

    # Parsing

    def parse(self, args: list[str]) -> list[str]:
        """Parse flags; return the positional arguments that remain. Raises FlagError with Go's message text
        (no 'publish: ' prefix, the cli adds it), or HelpRequested."""
        rest = list(args)
        at = 0  # rest[at:] is what is left: an index, not pop(0), so many flags cost linear time
        while at < len(rest):
            s = rest[at]
            if len(s) < 2 or s[0] != "-":
                break
            minuses = 1
            if s[1] == "-":
                minuses = 2
                if len(s) == 2:  # "--" ends the flags
                    at += 1
                    break
            name = s[minuses:]
            if not name or name[0] in "-=":
                raise FlagError(FlagError.SYNTAX, s)
            at += 1
            has_value = False
            text = ""
            eq = name.find("=", 1)
            if eq > 0:
                name, text, has_value = name[:eq], name[eq + 1 :], True
            flag = self._flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    raise HelpRequested()
                raise FlagError(FlagError.UNDEFINED, name)
            if flag.kind == "bool":
                if has_value:
                    try:
                        flag.value = _parse_bool(text)
                    except ValueError:
                        raise FlagError(FlagError.BAD_BOOL, text, name) from None
                else:
                    flag.value = True
            elif flag.kind == "boolean_like":
                try:
                    flag.value = flag.parse(text if has_value else "true")
                except ValueError as e:
                    raise FlagError(FlagError.BAD_BOOL, text, name, str(e)) from None
            else:
                if not has_value and at < len(rest):
                    text, has_value = rest[at], True
                    at += 1
                if not has_value:
                    raise FlagError(FlagError.NEEDS_VALUE, "", name)
                try:
                    flag.value = flag.parse(text)
                except ValueError as e:
                    raise FlagError(FlagError.BAD_VALUE, text, name, str(e)) from None
            flag.is_set = True
        return rest[at:]

    # Results

    def value(self, name: str) -> Any:
        """The parsed value, or the default; ``KeyError`` for a name never defined."""
        return self._flags[name].value

    def is_set(self, name: str) -> bool:
        """Whether the flag was given on the command line (even with its default value)."""
        return self._flags[name].is_set

    def defined(self) -> list[Flag[Any]]:
        """The flags defined, sorted by name (what ``usage`` lists, and the shell completion offers)."""
        return [self._flags[name] for name in sorted(self._flags)]

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


def _unquote_usage(flag: Flag[Any]) -> tuple[str, str]:
    """Go's ``UnquoteUsage``: a back-quoted word in the usage names the value; else the kind does."""
    usage = flag.usage
    i = usage.find("`")
    if i >= 0:
        j = usage.find("`", i + 1)
        if j >= 0:
            name = usage[i + 1 : j]
            return name, usage[:i] + name + usage[j + 1 :]
    return flag.metavar, usage
