"""Percent-encoding (RFC 3986) as SigV4 and S3's ``encoding-type=url`` listings use it.  Pure, linear, and
without urllib.parse, whose import brings re, collections and functools into an S3 verb's start-up.
"""

from __future__ import annotations

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
_ESCAPED = tuple(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in range(256))
_ESCAPED_KEEP_SLASH = tuple("/" if b == 0x2F else e for b, e in enumerate(_ESCAPED))
_HEX = frozenset("0123456789abcdefABCDEF")


def encode(text: str, *, keep_slash: bool = False) -> str:
    """The UTF-8 bytes of ``text`` with every byte but A-Z a-z 0-9 - _ . ~ (and '/' when asked) written as
    ``%XX`` (upper-case hex); UnicodeEncodeError for a lone surrogate, as urllib.parse.quote."""
    table = _ESCAPED_KEEP_SLASH if keep_slash else _ESCAPED
    return "".join([table[b] for b in text.encode("utf-8")])


def decode_plus(text: str) -> str:
    """``text`` with '+' as a space and each ``%XX`` as its byte, the bytes read as UTF-8 (strict: a
    UnicodeDecodeError when they are not); a '%' not followed by two hex digits stays as it is.  As
    urllib.parse.unquote_plus(text, errors="strict")."""
    text = text.replace("+", " ")
    if "%" not in text:
        return text
    head, *pieces = text.split("%")
    out = bytearray(head.encode("utf-8", "surrogatepass"))
    for piece in pieces:
        if len(piece) >= 2 and piece[0] in _HEX and piece[1] in _HEX:
            out.append(int(piece[:2], 16))
            out += piece[2:].encode("utf-8", "surrogatepass")
        else:
            out += b"%" + piece.encode("utf-8", "surrogatepass")
    return out.decode("utf-8")
