"""trainer_state.json as Hugging Face Trainer writes it: complete, still being written, or at fault."""

from __future__ import annotations

import codecs
import json
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_NUMBER_PREFIX = re.compile(r"-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_WS = " \t\n\r"


class Incomplete(Exception):
    """The file is cut off before its end: a save still being written."""


def parse(data: bytes) -> Any:
    """The document in ``data`` (Python's json: bare NaN, Infinity and -Infinity accepted).

    Raises Incomplete when ``data`` is a proper prefix of some document (an empty file included), and
    ValueError with json's reason for any other fault (a syntax error, data after the document).
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    cut_in_character = bool(decoder.getstate()[0])
    if text.startswith("\ufeff"):
        text = text[1:]
    if not cut_in_character:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            error: ValueError = ValueError(f"{e.msg}: line {e.lineno} column {e.colno} (char {e.pos})")
    else:
        error = ValueError("cut inside a character")
    if is_prefix(text):
        raise Incomplete()
    raise error


def is_prefix(text: str) -> bool:
    """True when ``text`` can be continued into one JSON document (Python's dialect) and is not one yet."""
    i, n = 0, len(text)
    stack: list[str] = []  # "{" expecting key, ":" expecting colon, "v" value in object, "[" value in array
    expect = "value"  # value | key | colon | after (a value ended)

    def skip(j: int) -> int:
        while j < n and text[j] in _WS:
            j += 1
        return j

    while True:
        i = skip(i)
        if i == n:
            return expect != "after" or bool(stack)
        c = text[i]
        if expect == "value":
            if c == "{":
                stack.append("{")
                expect, i = "key_or_close", i + 1
            elif c == "[":
                stack.append("[")
                expect, i = "value_or_close", i + 1
            elif c == '"':
                j = _string_end(text, i)
                if j < 0:
                    return j == -1
                expect, i = "after", j
            else:
                j = _scalar_end(text, i)
                if j < 0:
                    return j == -1
                expect, i = "after", j
        elif expect == "value_or_close":
            if c == "]":
                stack.pop()
                expect, i = "after", i + 1
            else:
                expect = "value"
        elif expect in ("key", "key_or_close"):
            if c == "}" and expect == "key_or_close":
                stack.pop()
                expect, i = "after", i + 1
            elif c == '"':
                j = _string_end(text, i)
                if j < 0:
                    return j == -1
                expect, i = "colon", j
            else:
                return False
        elif expect == "colon":
            if c != ":":
                return False
            expect, i = "value", i + 1
        else:  # after a value
            if not stack:
                return False  # data after the document
            top = stack[-1]
            if c == ",":
                expect, i = ("key" if top == "{" else "value"), i + 1
            elif (c == "}" and top == "{") or (c == "]" and top == "["):
                stack.pop()
                i += 1
            else:
                return False


def _string_end(text: str, i: int) -> int:
    """Index after the string starting at ``i``; -1 when the text ends inside it; -2 when it is invalid."""
    n, j = len(text), i + 1
    while j < n:
        c = text[j]
        if c == '"':
            return j + 1
        if c == "\\":
            if j + 1 == n:
                return -1
            e = text[j + 1]
            if e == "u":
                hexpart = text[j + 2 : j + 6]
                if not all(h in "0123456789abcdefABCDEF" for h in hexpart):
                    return -2
                if len(hexpart) < 4:
                    return -1
                j += 6
                continue
            if e not in '"\\/bfnrt':
                return -2
            j += 2
            continue
        if ord(c) < 0x20:
            return -2
        j += 1
    return -1


def _scalar_end(text: str, i: int) -> int:
    """Index after the number or literal at ``i``; -1 when the text ends inside one; -2 when invalid."""
    n = len(text)
    for literal in _LITERALS:
        if text.startswith(literal, i):
            return i + len(literal)
        if literal.startswith(text[i:]):
            return -1
    m = _NUMBER_PREFIX.match(text, i)
    j = m.end() if m else i
    if j == i:
        return -2
    token = text[i:j]
    if j == n:
        return -1 if not _complete_number(token) else -1
    if not _complete_number(token):
        return -2
    return j


def _complete_number(token: str) -> bool:
    return re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", token) is not None
