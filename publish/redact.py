"""What a message may show: no URL password, no credential value, no raw control character.

- ``url(text)``: the password (or a lone token) of a URL's userinfo replaced, however malformed the URL.
- ``register(value)`` when a credential value is read; ``scrub(text)`` then replaces every fragment of 8 or
  more characters of any registered value (and a whole shorter one) with ``[redacted]``.
- ``register_userinfo(items, sep)`` for a list split at a separator (``-creds``, a query): a URL password
  that the separator cut is registered, so ``scrub`` removes its pieces from a message showing one item.
- ``shown(value)``: the value as it is, or Go's ``%q`` of it when it holds a control character.
"""

from __future__ import annotations

from publish.gocompat import go_quote

REDACTED = "[redacted]"
PASSWORD = "xxxxx"
FRAGMENT = 8  #: the shortest piece of a secret that is never shown
SHORTEST = 4  #: a secret shorter than FRAGMENT is replaced whole when it has at least this many characters

_secrets: set[str] = set()
_windows: set[str] = set()  # every FRAGMENT-long piece of every registered secret
_short: set[str] = set()

# re is imported only once a URL is looked at: a POSIX resolve prints its lines without it.
# A scheme-ish head (``vault:``, ``https:``, ``vault:https:``, even ``u:`` of ``u:pw@h``), then any slashes.
_HEAD = r"(?:[A-Za-z][A-Za-z0-9+.-]*:)+[/\\]*"
# A URL inside free text: scheme://authority-with-@.  It is tried only where a run of scheme characters
# begins (the lookbehind), its leading non-letters skipped (group 1), so a long run is scanned once, not
# once from each of its characters.
_IN_TEXT = r"(?<![A-Za-z0-9+.-])([0-9+.-]*)([A-Za-z][A-Za-z0-9+.-]*:[/\\]+[^\s/\\@]*(?:@[^\s/\\@]*)*@)"
# Line breaks to str.splitlines, though not control characters; and Unicode's Bidi_Control characters, which
# reorder what a terminal shows (a path holding U+202E reads backwards from there): quoted, they show as \u202e.
_EXTRA_CONTROL = "\u2028\u2029\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def register(*values: str) -> None:
    """Remember credential values so that ``scrub`` removes them (and any long enough piece of them)."""
    for value in values:
        if not value or value in _secrets:
            continue
        _secrets.add(value)
        if len(value) >= FRAGMENT:
            _windows.update(value[i : i + FRAGMENT] for i in range(len(value) - FRAGMENT + 1))
        elif len(value) >= SHORTEST:
            _short.add(value)


def scrub(text: str) -> str:
    """``text`` with every fragment of ``FRAGMENT`` or more characters of a registered value replaced.

    Linear: each position is looked up once in the set of the secrets' ``FRAGMENT``-long pieces; a run of
    overlapping hits is one fragment, replaced once.
    """
    if not _secrets or not text:
        return text
    out: list[str] = []
    if _windows and len(text) >= FRAGMENT:
        windows, start, end, done = _windows, -1, -1, 0
        for i in range(len(text) - FRAGMENT + 1):
            if text[i : i + FRAGMENT] in windows:
                if i > end:  # a new run
                    if start >= 0:
                        out += (text[done:start], REDACTED)
                        done = end
                    start = i
                end = i + FRAGMENT
        if start >= 0:
            out += (text[done:start], REDACTED)
            done = end
        out.append(text[done:])
        text = "".join(out)
    for value in tuple(_short):  # a copy: another thread may register while this one prints
        text = text.replace(value, REDACTED)
    return text


def url(text: str, found: list[str] | None = None) -> str:
    """``text`` (a URL, a ``vault:`` location, a ``-creds`` item) with its userinfo's password replaced.

    The userinfo is everything up to the last ``@`` before the first ``/`` (or ``\\``) after the scheme and
    its slashes, whatever those look like (``https:/u:pw@h``, ``u:pw@h``, ``vault:https:u:pw@h``, a password
    holding ``?`` or ``#``); when that holds no ``@``, up to the last ``@`` before the query, if what precedes
    it holds a ``:`` (a password holding ``/`` or ``\\``).  A userinfo with a ``:`` keeps its user name (``u:xxxxx@h``); one without is a
    token (``xxxxx@h``).  Query values are URLs too (``proxy=http%3A%2F%2Fu%3Apw%40p``).  Each password
    hidden is appended to ``found``.
    """
    if "@" not in text and "%40" not in text:
        return text  # no userinfo, not even one escaped in a query value: nothing to hide (and no re)
    import re
    from urllib.parse import quote, unquote

    head, q, query = _one(text, found).partition("?")
    if not q:
        return head
    parts = []
    for part in re.split(r"([&;#])", query):
        key, eq, value = part.partition("=")
        if eq:
            decoded = unquote(value)
            redacted = _one(decoded, found)
            if redacted != decoded:
                value = quote(redacted, safe="") if "%" in value else redacted
        parts.append(key + eq + value)
    return head + q + "".join(parts)


def _one(text: str, found: list[str] | None = None) -> str:
    """``text`` with the password of the URL it starts with hidden; that password is appended to ``found``."""
    import re

    m = re.match(_HEAD, text)
    if not m:
        return text
    rest = text[m.end() :]
    authority = re.split(r"[/\\]", rest, maxsplit=1)[0]
    if "@" not in authority:
        # A password holding "/" or "\\" ends the authority early, as RFC 3986 reads it: "user:pa/ss@h" is
        # then the host "user". What comes before an "@" ahead of the query, when it holds a ":", is hidden
        # all the same, so no reading of a malformed URL shows it.
        wide = re.split(r"[?#]", rest, maxsplit=1)[0]
        if ":" in wide.rpartition("@")[0]:
            authority = wide
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return text
    user, colon, password = userinfo.partition(":")
    if found is not None:
        found.append(password if colon else userinfo)
    shown = f"{user}:{PASSWORD}" if colon else PASSWORD
    return text[: m.end()] + shown + "@" + host + rest[len(authority) :]


def register_userinfo(items: list[str], sep: str, values: bool = False) -> None:
    """Register as secrets the URL passwords that a separator inside them cut out of their URL.

    ``items`` is a ``sep``-separated list as it was split (a ``-creds`` list; with ``values``, a query of
    ``key=value`` pairs).  An item holding an ``@`` after items without one is joined back to the last of
    those that starts a URL, and the passwords ``url`` finds in the join are registered: a message showing
    one item alone then has their pieces scrubbed.  Linear: the joins do not overlap.
    """
    if not any("@" in item for item in items):
        return
    import re

    start = -1  # the last item starting a URL since the last item holding an "@"
    for j, item in enumerate(items):
        if "@" in item:
            if start >= 0:
                joined = sep.join(items[start : j + 1])
                for password in _hidden(joined.partition("=")[2] if values else joined):
                    register(password)
            start = -1
        elif re.match(_HEAD, item.partition("=")[2] if values else item):
            start = j


def _hidden(text: str) -> list[str]:
    """The passwords (or tokens) that ``url`` hides in ``text``."""
    found: list[str] = []
    url(text, found)
    return found


def urls_in(text: str) -> str:
    """Free text with the userinfo of every ``scheme://user:pw@`` in it replaced (a last guard)."""
    if "@" not in text:
        return text
    import re

    def one(m: re.Match[str]) -> str:
        return m.group(1) + _one(m.group(2) + "h")[:-1]

    return re.sub(_IN_TEXT, one, text)


def _is_control(c: str) -> bool:
    return c < " " or "\x7f" <= c <= "\x9f" or c in _EXTRA_CONTROL


def has_control(value: str) -> bool:
    """True when ``value`` holds a control character (C0, DEL, C1), a Unicode line or paragraph break, or a
    bidirectional control (U+202E and its kin)."""
    return not value.isprintable() and any(_is_control(c) for c in value)


def shown(value: str) -> str:
    """``value`` as it is, or Go's ``%q`` of it when it holds a control character (so it stays one line)."""
    return go_quote(value) if has_control(value) else value


def quoted(value: str) -> str:
    """Python's ``repr`` of ``value`` as messages have always shown it, or Go's ``%q`` when it holds a control
    character."""
    return go_quote(value) if has_control(value) else repr(value)


def line(text: str) -> str:
    """A line the command prints, as the last guard: secrets scrubbed, URL passwords removed, and any
    control character left in it escaped as ``%q`` escapes it (without the quotes)."""
    text = scrub(urls_in(text))
    if has_control(text):
        text = "".join(go_quote(c)[1:-1] if _is_control(c) else c for c in text)
    return text
