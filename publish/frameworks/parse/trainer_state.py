"""trainer_state.json as Hugging Face Trainer writes it: complete, still being written, or at fault.

One pass of ``json.loads`` decides a whole document.  When it fails, where and why it failed (json reads a
document strictly left to right, so everything before its error position is sound) says in constant extra
work whether the text ends inside the token json stopped at: a cut-off document.  Only a document json
cannot read at all (nested deeper than its recursion limit) is scanned again, by an iterative tokenizer.
Every path is linear in the size of the file.
"""

from __future__ import annotations

import codecs
import json
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_DIGITS = "0123456789"
_NUMBER_TAILS = (".", "e", "E", "e+", "e-", "E+", "E-")  # what json leaves unread at the end of a cut number
_CONTENT = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*'
_STRING_REST = re.compile(_CONTENT + r"(\\(?:u[0-9a-fA-F]{0,3})?)?\Z")  # a string's text cut before its quote
_TOKEN = re.compile(
    r'[ \t\n\r]*(?:([{}\[\]:,])|("' + _CONTENT + r'")'
    r"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?(?![0-9]))|(true|false|null|NaN|-?Infinity))"
)


class Incomplete(Exception):
    """The file is cut off before its end: a save still being written."""


def max_digits() -> int:
    """Python's limit on the digits of an integer read from text (0: none); a longer one is a fault."""
    get = getattr(sys, "get_int_max_str_digits", None)
    return int(get()) if get else 0


def parse(data: bytes) -> Any:
    """The document in ``data`` (Python's json: bare NaN, Infinity and -Infinity accepted).

    Raises Incomplete when ``data`` is a proper prefix of some document (an empty file included), and
    ValueError saying why for any other fault: a syntax error, data after the document, nesting json cannot
    read, or an integer of more digits than Python reads (``max_digits()``).
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    in_char = bool(decoder.getstate()[0])  # the data ends inside a multi-byte character
    if text.startswith("\ufeff"):
        text = text[1:]
    fault: str | None
    try:
        if in_char:
            fault = _fault(text, in_char)
        else:
            return json.loads(text)
    except json.JSONDecodeError as e:  # most cut-off files: decided from where json stopped
        fault = None if _cut_at(text, e.msg, e.pos, False) else _where(e)
    except (ValueError, RecursionError):  # an integer json will not read, or nesting it cannot
        fault = _fault(text, in_char)
    if fault is None:
        raise Incomplete()
    raise ValueError(fault)


def _where(e: json.JSONDecodeError) -> str:
    return f"{e.msg}: line {e.lineno} column {e.colno} (char {e.pos})"


def _fault(text: str, in_char: bool) -> str | None:
    """Why ``text`` (followed by part of a character when ``in_char``) is no document; None when it is a
    proper prefix of one."""
    limit, big = max_digits(), False

    def integer(s: str) -> int:
        nonlocal big
        if limit and len(s) - s.startswith("-") > limit:
            big = True
            return 0
        return int(s)

    try:
        json.loads(text, parse_int=integer)
    except json.JSONDecodeError as e:
        return None if _cut_at(text, e.msg, e.pos, in_char) else _where(e)
    except RecursionError:
        verdict = scan(text, in_char)
        if verdict == "prefix":
            return None
        if verdict == "complete":
            return "nested too deeply for Python's json to read"
        return verdict
    if in_char:
        return "a character after the document"
    if big:
        return f"an integer of more than {limit} digits"
    return "does not parse"  # json.loads failed, yet not on its own: cannot happen


def _cut_at(text: str, msg: str, pos: int, in_char: bool) -> bool:
    """True when json's error ``msg`` at ``pos`` is only the end of ``text`` arriving inside a token."""
    if msg == "Unterminated string starting at":
        return _in_string(text, pos + 1, in_char)
    if msg == "Invalid \\uXXXX escape":  # \\u followed by fewer than 4 hex digits, or a lone surrogate
        return pos > 0 and text[pos - 1] == "\\" and _in_string(text, pos - 1, in_char)
    if in_char:
        return False  # a multi-byte character stands only inside a string
    n = len(text)
    if msg == "Expecting value":
        rest = text[pos:]
        return len(rest) < 10 and any(lit.startswith(rest) and lit != rest for lit in _LITERALS)
    if msg in ("Expecting property name enclosed in double quotes", "Expecting ':' delimiter"):
        return pos == n
    if msg == "Expecting ',' delimiter":
        return pos == n or _number_goes_on(text, pos)
    if msg == "Extra data":
        return _number_goes_on(text, pos)
    return False


def _in_string(text: str, start: int, in_char: bool) -> bool:
    """True when ``text[start:]`` is the rest of a string cut before its closing quote (not inside an escape
    when a character follows)."""
    m = _STRING_REST.match(text, start)
    return m is not None and not (in_char and m.group(1))


def _number_goes_on(text: str, pos: int) -> bool:
    """True when json read a number that ends at ``pos`` and the rest of the text continues it (``1.``,
    ``1e``, ``1.5E-``)."""
    tail = text[pos:]
    if tail not in _NUMBER_TAILS or pos == 0 or text[pos - 1] not in _DIGITS:
        return False
    k = pos - 1
    while k > 0 and text[k - 1] in _DIGITS:
        k -= 1
    before = text[k - 1] if k > 0 else " "
    signed_exponent = before in "+-" and k > 1 and text[k - 2] in "eE"
    if before in "eE+" or signed_exponent:
        return False  # the number already has an exponent
    return not (tail == "." and before == ".")


def scan(text: str, in_char: bool = False) -> str:
    """``"complete"``, ``"prefix"`` or the fault, by an iterative tokenizer: for documents nested deeper than
    json reads."""
    stack: list[str] = []
    expect = "value"  # value | value_or_close | key | key_or_close | colon | after
    i, number_end = 0, -1
    while True:
        m = _TOKEN.match(text, i)
        if m is None:
            j = len(text) - len(text[i:].lstrip(" \t\n\r")) if i < len(text) else i
            return _scan_end(text, j, expect, stack, number_end, in_char)
        punct, string, number = m.group(1), m.group(2), m.group(3)
        at, i = m.start(m.lastindex or 0), m.end()
        value = punct is None
        number_end = i if number is not None else -1
        if expect in ("value", "value_or_close"):
            if punct == "]" and expect == "value_or_close":
                stack.pop()
                expect = "after"
            elif punct in ("{", "["):
                stack.append(punct)
                expect = "key_or_close" if punct == "{" else "value_or_close"
            elif value:
                expect = "after"
            else:
                return f"unexpected {text[at]!r} at char {at}"
        elif expect in ("key", "key_or_close"):
            if punct == "}" and expect == "key_or_close":
                stack.pop()
                expect = "after"
            elif string is not None:
                expect = "colon"
            else:
                return f"expecting a property name at char {at}"
        elif expect == "colon":
            if punct != ":":
                return f"expecting ':' at char {at}"
            expect = "value"
        else:
            if not stack:
                return f"data after the document at char {at}"
            top = stack[-1]
            if punct == ",":
                expect = "key" if top == "{" else "value"
            elif (punct == "}" and top == "{") or (punct == "]" and top == "["):
                stack.pop()
            else:
                return f"expecting ',' at char {at}"


def _scan_end(text: str, j: int, expect: str, stack: list[str], number_end: int, in_char: bool) -> str:
    """The verdict where no further token starts at ``j``."""
    n = len(text)
    if j == n and not in_char:
        return "complete" if expect == "after" and not stack else "prefix"
    if expect in ("value", "value_or_close", "key", "key_or_close") and j < n and text[j] == '"':
        return "prefix" if _in_string(text, j + 1, in_char) else f"a bad string at char {j}"
    if not in_char and j < n:
        rest = text[j:]
        if expect in ("value", "value_or_close") and any(
            lit.startswith(rest) and lit != rest for lit in _LITERALS
        ):
            return "prefix"
        if expect == "after" and number_end == j and _number_goes_on(text, j):
            return "prefix"
    return f"unexpected {'end' if j == n else repr(text[j])} at char {j}"
