"""Sizes in bytes as a person writes them (``-keep-bytes 500GB``, ``-mirror-keep-bytes 2TiB``), and as the
command prints them.  Pure: no I/O.

A size is ASCII digits, optionally a fraction (``.`` and ASCII digits), then optionally a unit written
exactly so (the case matters: ``b`` would be bits, ``m`` milli):

- ``B`` or nothing: bytes (a fraction needs a unit larger than a byte);
- ``kB``, ``MB``, ``GB``, ``TB``, ``PB``: powers of 1000;
- ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB``: powers of 1024.

No sign, no spaces, no exponent, no ``_``.  A fraction of a byte is dropped (``1.1KiB`` is 1126).  A size is
at least one byte and below 2^63 (Go's ``int64``): above it, Go's ``value out of range``.  Parsing is linear
in the text (a long run of digits is refused by its length before any arithmetic).
"""

from __future__ import annotations

from publish.rules.go.gocompat import ParseError, RangeError

#: The units, each with its number of bytes.
UNITS = {
    "B": 1,
    "kB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "PB": 1000**5,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
}
#: Every size is below this (Go's int64).
LIMIT = 1 << 63
#: The fraction digits that can matter: 1024^5 = 2^50, so a whole byte needs at most 50 of them (n / 2^50 has
#: at most 50 decimal places); more are dropped before any arithmetic, which changes no result.
_FRACTION_DIGITS = 60
_DIGITS = frozenset("0123456789")
_UNIT_HELP = "B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)"


def parse_size(text: str) -> int:
    """The bytes ``text`` says.  ``ValueError`` says why (the reason Go's flag package prints after
    ``invalid value "..." for flag -NAME: ``): ``parse error``, an unknown unit, ``value out of range``
    (2^63 bytes or more), ``must be at least 1``."""
    end = 0
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    whole = text[:end]
    fraction = ""
    if end < len(text) and text[end] == ".":
        start = end + 1
        end = start
        while end < len(text) and text[end] in _DIGITS:
            end += 1
        fraction = text[start:end]
        if not fraction:
            raise ParseError()
    if not whole:
        raise ParseError()
    unit = text[end:] or "B"
    if unit not in UNITS:
        if len(unit) > 8 or not unit.isascii() or not unit.isalpha():
            raise ParseError()
        raise ValueError(f'unknown unit "{unit}": use {_UNIT_HELP}')
    scale = UNITS[unit]
    if fraction and scale == 1:
        raise ValueError("a fraction of a byte: give whole bytes, or a larger unit")
    whole = whole.lstrip("0")
    if len(whole) > 19:  # 2^63 has 19 digits: longer is out of range whatever the unit
        raise RangeError()
    fraction = fraction[:_FRACTION_DIGITS].rstrip("0")
    n = int(whole or "0") * scale
    if fraction:
        n += int(fraction) * scale // 10 ** len(fraction)
    if n >= LIMIT:
        raise RangeError()
    if n < 1:
        raise ValueError("must be at least 1")
    return n


def spell(n: int) -> str:
    """``n`` bytes as :func:`parse_size` reads it back exactly: in the largest unit that divides it
    (``500GB``, ``2TiB``), else plain digits."""
    best = str(n)
    if n > 0:
        for unit, scale in UNITS.items():
            if scale > 1 and n % scale == 0:
                text = f"{n // scale}{unit}"
                if len(text) < len(best):
                    best = text
    return best


def human(n: int) -> str:
    """``n`` bytes for a person, in powers of 1000 with three significant digits: ``812 B``, ``1.50 kB``,
    ``12.4 GB``, ``20.0 TB``."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB", "TB", "PB", "EB"):
        value /= 1000
        if value < 999.5 or unit == "EB":
            digits = 2 if value < 9.995 else 1 if value < 99.95 else 0
            return f"{value:.{digits}f} {unit}"
    raise AssertionError("unreachable")
