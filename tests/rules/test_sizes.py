"""SIZE as -keep-bytes and -mirror-keep-bytes read it (issue #34, "Capacity": "SIZE takes plain bytes and
the usual suffixes (500GB, 2TiB)"): one spelling means one number of bytes, whatever else is refused with
Go's flag words, and a size is always a whole number of bytes in [1, 2^63)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from publish.rules.sizes import LIMIT, UNITS, human, parse_size, spell


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("1", 1),
        ("500GB", 500 * 10**9),
        ("2TiB", 2 * 2**40),
        ("20TB", 20 * 10**12),
        ("1kB", 1000),
        ("1KiB", 1024),
        ("7B", 7),
        ("1.5TB", 1_500_000_000_000),
        ("1.1KiB", 1126),  # 1126.4: the fraction of a byte is dropped
        ("0.5kB", 500),
        ("007MB", 7 * 10**6),
        ("9223372036854775807", LIMIT - 1),
        ("8191PiB", 8191 * 2**50),
    ],
)
def test_the_usual_spellings(text: str, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "parse error"),
        ("-1", "parse error"),  # no sign: -1 is malformed, not small
        ("+5GB", "parse error"),
        (" 5GB", "parse error"),
        ("5GB ", "parse error"),
        ("5 GB", "parse error"),
        ("1e3GB", "parse error"),  # no exponent
        ("1e3", "parse error"),
        ("5_000", "parse error"),
        ("0x10", "parse error"),
        (".5GB", "parse error"),
        ("5.GB", "parse error"),
        ("1..5GB", "parse error"),
        ("\u0665GB", "parse error"),  # ARABIC-INDIC DIGIT FIVE: a digit to Python's int(), not to us
        ("\uff15GB", "parse error"),  # FULLWIDTH DIGIT FIVE
        ("5GB\n", "parse error"),
        ("5\x00", "parse error"),
        ("5gb", 'unknown unit "gb"'),  # b is a bit; the case of a unit matters
        ("5KB", 'unknown unit "KB"'),  # kilo is k; KiB is 1024
        ("5kib", 'unknown unit "kib"'),
        ("5EB", 'unknown unit "EB"'),
        ("5" + "x" * 10_000, "parse error"),  # never echoed back at length
        ("0", "must be at least 1"),
        ("0GiB", "must be at least 1"),
        ("0.0001kB", "must be at least 1"),  # a tenth of a byte
        ("1.5", "a fraction of a byte"),
        ("1.5B", "a fraction of a byte"),
        ("9223372036854775808", "value out of range"),  # 2^63: Go's int64 ends below it
        ("8192PiB", "value out of range"),
        ("9223372036854775808000B", "value out of range"),
        ("1" + "0" * 5000, "value out of range"),  # beyond Python's digit limit: refused by its length first
        ("9.3EiB", 'unknown unit "EiB"'),
    ],
)
def test_hostile_spellings_are_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_size(text)
    assert str(e.value).startswith(why)
    assert len(str(e.value)) < 200


@given(st.integers(1, LIMIT - 1))
def test_plain_bytes_and_the_spelling_the_command_prints_read_back_exactly(n: int) -> None:
    assert parse_size(str(n)) == n
    assert parse_size(spell(n)) == n
    assert len(spell(n)) <= len(str(n))


@given(st.integers(0, 10**7), st.sampled_from(sorted(UNITS)))
def test_a_whole_number_of_a_unit_is_that_many_times_it(k: int, unit: str) -> None:
    n = k * UNITS[unit]
    if n == 0:
        with pytest.raises(ValueError, match="must be at least 1"):
            parse_size(f"{k}{unit}")
    elif n >= LIMIT:
        with pytest.raises(ValueError, match="value out of range"):
            parse_size(f"{k}{unit}")
    else:
        assert parse_size(f"{k}{unit}") == n


@given(
    st.integers(0, 9999),
    st.text("0123456789", min_size=1, max_size=80),
    st.sampled_from([u for u in UNITS if u != "B"]),
)
def test_a_fraction_is_rounded_down_to_a_whole_byte(whole: int, fraction: str, unit: str) -> None:
    """Exact arithmetic, however many fraction digits (the parser drops those that cannot matter)."""
    exact = (whole + Fraction(int(fraction), 10 ** len(fraction))) * UNITS[unit]
    text = f"{whole}.{fraction}{unit}"
    if exact < 1:
        with pytest.raises(ValueError, match="must be at least 1"):
            parse_size(text)
    elif exact >= LIMIT:
        with pytest.raises(ValueError, match="value out of range"):
            parse_size(text)
    else:
        assert parse_size(text) == int(exact)  # int() of a positive Fraction rounds down


@given(st.text(max_size=30))
def test_any_text_is_a_size_in_range_or_a_value_error(text: str) -> None:
    try:
        n = parse_size(text)
    except ValueError:
        return
    assert 1 <= n < LIMIT
    assert text.isascii()


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (999, "999 B"), (1000, "1.00 kB"), (12_400_000_000, "12.4 GB"), (20 * 10**12, "20.0 TB")],
)
def test_human_sizes(n: int, text: str) -> None:
    assert human(n) == text
