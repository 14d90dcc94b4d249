"""A URL's password found and hidden however malformed the URL: the rules of :func:`publish.rules.redact.url` and
:func:`publish.rules.redact.urls_in`, which look here only for a text that holds an ``@`` (or an escaped one), so
a POSIX resolve loads neither this nor re."""

from __future__ import annotations

#: What a hidden password reads as.
PASSWORD = "xxxxx"

# The head of a URL, however malformed: anything up to a ":" (a scheme, ``vault:https:``, even `` u:`` of
# `` u:pw@h`` or ``éu:pw@h``), repeated, then any slashes.  Each repeat ends at the first ":" it meets, so
# the match is linear.
_HEAD = r"(?:[^@/\\:?#]*:)+[/\\]*"
# A URL inside free text: scheme://authority-with-@.  It is tried only where a run of scheme characters
# begins (the lookbehind), its leading non-letters skipped (group 1), so a long run is scanned once, not
# once from each of its characters.
_IN_TEXT = r"(?<![A-Za-z0-9+.-])([0-9+.-]*)([A-Za-z][A-Za-z0-9+.-]*:[/\\]+[^\s/\\@]*(?:@[^\s/\\@]*)*@)"
# Escapes read as the delimiters they stand for when looking for a userinfo: "http://u:pw%40h" hides "pw".
_ESCAPES = {"%40": "@", "%3a": ":", "%2f": "/", "%5c": "\\", "%3f": "?", "%23": "#"}


def hidden(text: str, found: list[str] | None = None) -> str:
    """``text`` (a URL, a ``vault:`` location, a ``-creds`` item, a ``-proxy``) with its userinfo's password
    replaced, however malformed.

    The head is everything up to the last of a run of ``:``-ended words (a scheme, ``vault:https:``, ``u:`` of
    ``u:pw@h``, `` u:`` or ``éu:`` with whatever comes before) and the slashes after it, or nothing.  The
    userinfo is everything from there up to the last ``@`` before the first ``/`` (or ``\\``); when that holds
    no ``@``, up to the last ``@`` before the query, if what precedes it holds a ``:`` (a password holding
    ``/`` or ``\\``).  ``%40``, ``%3A``, ``%2F``, ``%5C``, ``%3F`` and ``%23`` count as the characters they
    stand for.  A userinfo with a ``:`` keeps its user name (``u:xxxxx@h``); one without is a token
    (``xxxxx@h``), and so is a text without a head (``TOKEN@h``).  Query values are URLs too
    (``proxy=http%3A%2F%2Fu%3Apw%40p``), though one without a head only as ``proxy=``.  Each password hidden is
    appended to ``found``.
    """
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
            redacted = _one(decoded, found, bare=key.strip().lower() == "proxy")
            if redacted != decoded:
                value = quote(redacted, safe="") if "%" in value else redacted
        parts.append(key + eq + value)
    return head + q + "".join(parts)


def _one(text: str, found: list[str] | None = None, bare: bool = True) -> str:
    """``text`` with the password of the URL it is hidden; that password is appended to ``found``.  Without
    ``bare``, a text with no head (``a@b``, a query value) is left as it is."""
    import re

    units: str | list[str] = text  # one item a character, or a %XX escape
    plain = text  # one character a unit: an escape as the delimiter it stands for, else "%"
    if "%" in text:
        units = re.findall(r"%[0-9A-Fa-f]{2}|.", text, re.S)
        plain = "".join(_ESCAPES.get(u.lower(), "%") if len(u) == 3 else u for u in units)
    if "@" not in plain:
        return text
    m = re.match(_HEAD, plain)
    if not m and not bare:
        return text
    start = m.end() if m else 0
    rest = plain[start:]
    end = start + len(re.split(r"[/\\]", rest, maxsplit=1)[0])
    at = plain.rfind("@", start, end)
    if at < 0:
        # A password holding "/" or "\\" ends the authority early, as RFC 3986 reads it: "user:pa/ss@h" is
        # then the host "user". What comes before an "@" ahead of the query, when it holds a ":", is hidden
        # all the same, so no reading of a malformed URL shows it.
        end = start + len(re.split(r"[?#]", rest, maxsplit=1)[0])
        at = plain.rfind("@", start, end)
        if at < 0 or ":" not in plain[start:at]:
            return text
    # The user name ends at the first ":" written as one; an escaped one is part of a token.
    colon = next((i for i in range(start, at) if units[i] == ":"), -1)
    first = colon + 1 if colon >= 0 else start
    if found is not None:
        found.append("".join(units[first:at]))
    return "".join(units[:first]) + PASSWORD + "".join(units[at:])


def hidden_in_text(text: str) -> str:
    """Free text with the userinfo of every ``scheme://user:pw@`` in it replaced."""
    import re

    def one(m: re.Match[str]) -> str:
        return m.group(1) + _one(m.group(2) + "h")[:-1]

    return re.sub(_IN_TEXT, one, text)
