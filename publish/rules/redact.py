"""What a message may show: no URL password, no credential value from outside text, no raw control character.

The answer is never altered (spec addendum, section 14): a location, an entry name, a path or a JSON value is
printed exactly.  Credential values are scrubbed only from text that comes from outside (a store's, Vault's
or a proxy's error text, an echoed request), where that text enters; the command's own messages never hold
one in the first place.

- ``register(value)`` when a credential value is read; ``foreign(text)`` is outside text as a message may show
  it: every fragment of 8 or more characters of a registered value (and a whole shorter one of 4 or more),
  ignoring case, replaced with ``[redacted]``, and the password of any ``scheme://user:pw@`` in it hidden.
- ``url(text)``: the password (or a lone token) of a URL's userinfo replaced, however malformed the URL.
- ``register_userinfo(items, sep)`` for a list split at a separator (``-creds``, a query): a URL password
  that the separator cut is remembered, so ``echo`` removes its pieces from a message showing one item.
- ``echo(text)``: a URL-like value the user gave (``-proxy``, a ``-creds`` item, a root), as a message shows it.
- ``shown(value)``: the value as it is, or Go's ``%q`` of it when it holds a control character.
"""

from __future__ import annotations

REDACTED = "[redacted]"
FRAGMENT = 8  #: the shortest piece of a secret that is never shown
SHORTEST = 4  #: a secret shorter than FRAGMENT is replaced whole when it has at least this many characters


def _fold(text: str) -> str:
    """``text`` in lower case, one character for one (so positions in it are positions in ``text``)."""
    low = text.lower()
    if len(low) == len(text):  # lower() never shrinks a character: equal lengths are one for one
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


class _Values:
    """Values that a scrub removes, ignoring case: their ``FRAGMENT``-long pieces, and the short ones whole."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.windows: set[str] = set()  # every FRAGMENT-long piece of every value, folded
        self.short: set[str] = set()  # folded

    def add(self, value: str) -> None:
        if not value or value in self.values:
            return
        self.values.add(value)
        folded = _fold(value)
        if len(folded) >= FRAGMENT:
            self.windows.update(folded[i : i + FRAGMENT] for i in range(len(folded) - FRAGMENT + 1))
        elif len(folded) >= SHORTEST:
            self.short.add(folded)

    def spans(self, folded: str) -> list[tuple[int, int]]:
        """Where ``folded`` holds a piece of a value: (start, end) pairs, unsorted, maybe overlapping.

        Linear: each position is looked up once in the set of the pieces; a run of overlapping or adjacent
        hits is one span."""
        found: list[tuple[int, int]] = []
        windows = self.windows
        if windows and len(folded) >= FRAGMENT:
            start, end = -1, -1
            for i in range(len(folded) - FRAGMENT + 1):
                if folded[i : i + FRAGMENT] in windows:
                    if i > end:  # a new run
                        if start >= 0:
                            found.append((start, end))
                        start = i
                    end = i + FRAGMENT
            if start >= 0:
                found.append((start, end))
        for value in tuple(self.short):  # a copy: another thread may register while this one scrubs
            at = folded.find(value)
            while at >= 0:
                found.append((at, at + len(value)))
                at = folded.find(value, at + len(value))
        return found


_credentials = _Values()
_cut = _Values()  # the pieces of URL passwords that a separator of the user's list cut out of their URL
# The registry as earlier code and the tests' fixtures name it.
_secrets, _windows, _short = _credentials.values, _credentials.windows, _credentials.short

# Line breaks to str.splitlines, though not control characters; and Unicode's Bidi_Control characters, which
# reorder what a terminal shows (a path holding U+202E reads backwards from there): quoted, they show as \u202e.
_EXTRA_CONTROL = "\u2028\u2029\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def register(*values: str) -> None:
    """Remember credential values so that ``foreign`` removes them (and any long enough piece of them)."""
    for value in values:
        _credentials.add(value)


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced; overlapping or adjacent spans are one."""
    if not spans:
        return text
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out: list[str] = []
    done = 0
    for start, end in merged:
        out += (text[done:start], REDACTED)
        done = end
    out.append(text[done:])
    return "".join(out)


def scrub(text: str) -> str:
    """``text`` with every fragment of ``FRAGMENT`` or more characters of a registered value, and every whole
    shorter value of ``SHORTEST`` or more, replaced, ignoring case (a store may echo a header upper-cased).

    For outside text only (``foreign``): never for a name or a location the command prints."""
    if not text or not (_credentials.values or _cut.values):
        return text
    folded = _fold(text)
    return _replace(text, _credentials.spans(folded) + _cut.spans(folded))


def foreign(text: str) -> str:
    """Text from outside (a store's, Vault's or a proxy's words, an echoed request) as a message may show
    it: URL passwords hidden and every piece of a registered value removed.  Not quoted: see ``shown``."""
    return scrub(urls_in(text))


def url(text: str, found: list[str] | None = None) -> str:
    """``text`` (a URL, a ``vault:`` location, a ``-creds`` item, a ``-proxy``) with its userinfo's password
    replaced, however malformed (the rules: :func:`publish.rules.userinfo.hidden`); each password hidden is appended
    to ``found``."""
    if "@" not in text and "%40" not in text:
        return text  # no userinfo, not even an escaped one: nothing to hide (and no re)
    from publish.rules.userinfo import hidden

    return hidden(text, found)


def register_userinfo(items: list[str], sep: str, values: bool = False) -> None:
    """Remember the URL passwords that a separator inside them cut out of their URL.

    ``items`` is a ``sep``-separated list as it was split (a ``-creds`` list; with ``values``, a query of
    ``key=value`` pairs).  An item holding an ``@`` after items without one is joined back to the last of
    those that holds a ``:`` (it may start a URL), and the passwords ``url`` finds in the join are remembered: ``echo`` then
    removes their pieces from a message showing one item alone.  Linear: the joins do not overlap.
    """
    if not any("@" in item for item in items):
        return
    start = -1  # the last item starting a URL since the last item holding an "@"
    for j, item in enumerate(items):
        if "@" in item:
            if start >= 0:
                joined = sep.join(items[start : j + 1])
                for password in _hidden(joined.partition("=")[2] if values else joined):
                    _cut.add(password)
            start = -1
        elif ":" in (item.partition("=")[2] if values else item).replace("%3A", ":").replace("%3a", ":"):
            start = j  # it may start a URL, however malformed


def _hidden(text: str) -> list[str]:
    """The passwords (or tokens) that ``url`` hides in ``text``."""
    found: list[str] = []
    url(text, found)
    return found


def echo(text: str) -> str:
    """A value the user gave that may be a URL (``-proxy``, a ``-creds`` item, a vault location, a root), as
    a message echoes it: its password hidden (``url``), and any piece of a password that a separator of its
    list cut out of it (``register_userinfo``) replaced.  Not quoted: see ``shown``."""
    return cut_pieces(url(text))


def cut_pieces(text: str) -> str:
    """``text`` (a message about the user's ``-creds`` list or vault query) with every piece of a password
    that a separator cut out of its URL replaced (``register_userinfo``)."""
    if not text or not _cut.values:
        return text
    return _replace(text, _cut.spans(_fold(text)))


def urls_in(text: str) -> str:
    """Free text with the userinfo of every ``scheme://user:pw@`` in it replaced."""
    if "@" not in text:
        return text
    from publish.rules.userinfo import hidden_in_text

    return hidden_in_text(text)


def _is_control(c: str) -> bool:
    return c < " " or "\x7f" <= c <= "\x9f" or c in _EXTRA_CONTROL


def has_control(value: str) -> bool:
    """True when ``value`` holds a control character (C0, DEL, C1), a Unicode line or paragraph break, or a
    bidirectional control (U+202E and its kin)."""
    return not value.isprintable() and any(_is_control(c) for c in value)


def shown(value: str) -> str:
    """``value`` as it is, or Go's ``%q`` of it when it holds a control character (so it stays one line)."""
    if not has_control(value):
        return value
    from publish.rules.go.gocompat import (
        go_quote,  # here: a line without a control character needs none of Go's rules
    )

    return go_quote(value)


def quoted(value: str) -> str:
    """Python's ``repr`` of ``value`` as messages have always shown it, or Go's ``%q`` when it holds a control
    character."""
    if not has_control(value):
        return repr(value)
    from publish.rules.go.gocompat import go_quote

    return go_quote(value)


def line(text: str) -> str:
    """A line the command prints, as it is, unless a raw control character is left in it (a line that shows
    its values with ``shown`` holds none): that is escaped as ``%q`` escapes it (without the quotes), so the
    line stays one line.  Nothing else is changed: the answer is never altered."""
    if has_control(text):
        from publish.rules.go.gocompat import go_quote

        text = "".join(go_quote(c)[1:-1] if _is_control(c) else c for c in text)
    return text
