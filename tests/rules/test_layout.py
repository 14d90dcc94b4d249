"""Entry names: encoding, parsing (canonical only), ordering."""

from __future__ import annotations

import pytest

from publish.rules import layout
from publish.rules.errors import Failure
from tests.support.reference_plan import latest
from tests.support.reference_plan import related as reference_related


def test_name_is_padded_epoch_step_and_base32_path() -> None:
    assert layout.name(3, 120, "exec/A/checkpoint-120") == (
        "00000000000000000003-00000000000000000120-MV4GKYZPIEXWG2DFMNVXA33JNZ2C2MJSGA"
    )


@pytest.mark.parametrize(
    "epoch, step, path",
    [(0, 0, "a"), (10**20 - 1, 10**20 - 1, "exec/x/y"), (5, 7, "exec/é/ü 1"), (1, 1, "a:b/c d")],
)
def test_round_trip(epoch: int, step: int, path: str) -> None:
    assert layout.parse(layout.name(epoch, step, path)) == layout.Entry(epoch, step, path)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        ".hidden",
        "0-0-ME",
        "00000000000000000000-00000000000000000001",
        "00000000000000000000-00000000000000000001-",
        "00000000000000000000-00000000000000000001-me",  # lower case
        "00000000000000000000-00000000000000000001-ME======",  # padding
        "00000000000000000000-00000000000000000001-MF",  # unused bits set ('a' is ME)
        "00000000000000000000-00000000000000000001-M",  # impossible length
        "00000000000000000000-00000000000000000001-ME0",  # not base32
        "000000000000000000000-0000000000000000001-ME",
        "00000000000000000000-00000000000000000001-ME.tmp",
        "00000000000000000000-00000000000000000001-" + "F4",  # "/"
        "00000000000000000000-00000000000000000001-" + "FYXQ",  # "./"
        "00000000000000000000-00000000000000000001-" + "FYXC6YI",  # "../a"
        "00000000000000000000-00000000000000000001-" + "MEXS6YQ",  # "a//b"
        "00000000000000000000-00000000000000000001-" + "74",  # 0xff: not UTF-8
        "00000000000000000000-00000000000000000001-" + "AA",  # NUL
    ],
)
def test_parse_refuses_non_canonical(bad: str) -> None:
    with pytest.raises(ValueError):
        layout.parse(bad)


def test_parse_all_names_the_entry_at_fault() -> None:
    good = layout.name(0, 1, "a")
    with pytest.raises(Failure, match=r"/r/pub/junk: not a publication entry"):
        layout.parse_all([good, "junk"], "/r/pub")


def test_latest_is_greatest_epoch_then_step_then_name() -> None:
    e = layout.Entry
    assert latest([e(0, 900, "a"), e(1, 5, "b"), e(1, 4, "c")]) == e(1, 5, "b")
    tie = [e(1, 5, "exec/A/x"), e(1, 5, "exec/B/x")]
    assert latest(tie) == max(tie, key=lambda x: x.name)
    assert latest([]) is None


def test_name_refuses_out_of_range_and_unclean() -> None:
    for args in [(-1, 0, "a"), (0, 10**20, "a"), (0, 0, "/a"), (0, 0, "a/../b"), (0, 0, "")]:
        with pytest.raises(ValueError):
            layout.name(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "a, b, related",
    [
        ("x/a", "x/a", True),
        ("x/a", "x/a/b", True),
        ("x/a/b", "x/a", True),
        ("x/a", "x/ab", False),
        ("x", "y", False),
    ],
)
def test_related(a: str, b: str, related: bool) -> None:
    assert layout.Nest([b]).related(a) is related
    assert reference_related(a, b) is related


def test_latest_of_names_equals_latest_of_entries() -> None:
    names = [layout.name(e, s, p) for e, s, p in [(0, 900, "a"), (1, 5, "b"), (1, 5, "c"), (1, 4, "z")]]
    assert layout.latest_of(names, "/r/pub") == latest(layout.parse_all(names, "/r/pub"))
    assert layout.latest_of([], "/r/pub") is None
    with pytest.raises(Failure, match="/r/pub/bad"):
        layout.latest_of([*names, "bad"], "/r/pub")
