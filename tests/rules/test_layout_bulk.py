"""layout.all_canonical, the check of every entry name that a resolve of a large root runs in a few passes
over all names at once, takes exactly the lists whose every name layout.parse takes; layout.paths_of, status's
read of every entry's save at once, gives exactly the paths parse gives."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.rules import layout
from publish.rules.errors import Failure


def parses(name: str) -> bool:
    try:
        layout.parse(name)
    except ValueError:
        return False
    return True


def raw_name(epoch: int, step: int, path: bytes) -> str:
    """A name spelled for any bytes: NUL, '..', '//', bytes that are not UTF-8 (parse refuses those)."""
    encoded = base64.b32encode(path).decode("ascii").rstrip("=")
    return f"{epoch:020d}-{step:020d}-{encoded}"


elements = st.sampled_from(["a", "ckpt", ".", "..", "", "é", "x\0y", "checkpoint-100", "Ω≈", "-", " "])
paths = st.lists(elements, min_size=1, max_size=4).map("/".join).map(lambda p: p.encode("utf-8"))
bytes_paths = paths | st.binary(min_size=1, max_size=12)
numbers = st.integers(0, 10**20 - 1)
names = st.builds(raw_name, numbers, numbers, bytes_paths)
swaps = st.sampled_from(["-", "0", "9", "٣", "a", "=", "1", "8", "A", "Z", "é", ",", "/", "\0"])


@st.composite
def mutated(draw: st.DrawFn) -> str:
    name = draw(names)
    kind = draw(st.sampled_from(["keep", "swap", "cut", "drop", "add", "last"]))
    i = draw(st.integers(0, max(0, len(name) - 1)))
    if kind == "swap":
        name = name[:i] + draw(swaps) + name[i + 1 :]
    elif kind == "cut":
        name = name[:i]
    elif kind == "drop":
        name = name[:i] + name[i + 1 :]
    elif kind == "add":
        name = name[:i] + draw(swaps) + name[i:]
    elif kind == "last" and name:  # the last letter's unused bits set: not canonical
        last = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
        name = name[:-1] + last[(last.find(name[-1]) + 1) % 32]
    return name


@settings(max_examples=1500)
@given(st.lists(names, min_size=1, max_size=6) | st.lists(mutated(), min_size=1, max_size=6))
def test_all_canonical_is_every_name_parsing(listed: list[str]) -> None:
    assert layout.all_canonical(listed) == all(parses(n) for n in listed)


@settings(max_examples=1500)
@given(st.lists(names, min_size=1, max_size=6) | st.lists(mutated(), min_size=1, max_size=6))
def test_paths_of_is_each_names_parse(listed: list[str]) -> None:
    """status reads every entry's save at once: the paths parse reads, in order, or None when parse refuses
    any name (hostile ones too: NUL, '..', not UTF-8, reserved, not canonical)."""
    expected = [layout.parse(n).path for n in listed] if all(parses(n) for n in listed) else None
    assert layout.paths_of(listed) == expected


def test_paths_of_odd_paths() -> None:
    """A newline, a leading dash, a comma, non-ASCII letters, one letter, a long path: read as parse reads them."""
    saves = ["exec/-a\nä/-x\nsave é", "a", "exec/a,b/c", "é", "exec/" + "d/" * 60 + "f", "Ω≈/\u202e"]
    listed = [layout.name(3, s, p) for s, p in enumerate(saves)]
    assert layout.paths_of(listed) == saves
    assert layout.paths_of(listed + [raw_name(3, 9, b"pub/x")]) is None


@pytest.mark.parametrize(
    "path",
    [b"a/./b", b"a/../b", b"/a", b"a/", b"a//b", b".", b"..", b"a\0b", b"\xff", b"\xc3", b"\xed\xa0\x80"],
)
def test_one_bad_name_among_good_ones_is_found(path: bytes) -> None:
    good = [layout.name(1, s, f"exec/1/checkpoint-{s}") for s in range(50)]
    assert layout.all_canonical(good)
    assert not layout.all_canonical([*good[:25], raw_name(1, 999, path), *good[25:]])


@pytest.mark.parametrize("where", range(44))
@pytest.mark.parametrize("char", ["-", "0", "A", "٣", "é"])
def test_each_position_of_the_head_is_checked(where: int, char: str) -> None:
    good = [layout.name(1, s, f"exec/1/checkpoint-{s}") for s in range(3)]
    bad = good[1][:where] + char + good[1][where + 1 :]
    assert layout.all_canonical([good[0], bad, good[2]]) == parses(bad)


@pytest.mark.parametrize("count", [1, 2, 64, 65, 200])
@pytest.mark.parametrize("path", [None, b"a/../b", b"pub", b"\xff"])
def test_latest_of_answers_alike_on_either_side_of_the_few_it_parses_one_by_one(
    count: int, path: bytes | None
) -> None:
    """Up to _FEW names latest_of parses each, above it checks them at once: the same entry, or the same
    Failure naming the first bad name in sorted order."""
    listed = [layout.name(7, s, f"exec/1/checkpoint-{s}") for s in range(count)]
    if path is not None:
        listed[count // 2] = raw_name(
            7, 10**6 + count, path
        )  # the greatest name: the one latest_of would take
    try:
        found: object = layout.latest_of(listed, "/r/pub")
    except Failure as e:
        found = str(e)
    expected: object
    try:
        expected = max(layout.parse_all(listed, "/r/pub"), key=lambda e: e.name)
    except Failure as e:
        expected = str(e)
    assert found == expected
    assert (path is None) == isinstance(found, layout.Entry)
