"""prune's plan against the quadratic one it replaced, and the tombstone names of tomb/."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from publish.ops.retention import plan
from publish.rules import layout
from publish.rules.errors import Failure
from tests.support.reference_plan import quadratic_plan, related

common = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Elements that share prefixes and sort on either side of "/" ("-" and "." below it, "0" and "b" above), so a
# sibling can sort between a folder and the folders inside it.
element = st.sampled_from(["a", "a-1", "a.b", "a0", "ab", "b", "é", "a b"])
nested_paths = st.lists(element, min_size=1, max_size=4).map("/".join)
small = st.integers(min_value=0, max_value=3)
entry = st.builds(layout.Entry, small, st.integers(min_value=0, max_value=9), nested_paths)


@common
@given(st.lists(entry, max_size=30, unique_by=lambda e: e.name), st.integers(min_value=1, max_value=8))
def test_plan_matches_the_quadratic_reference(items: list[layout.Entry], keep: int) -> None:
    assert plan(items, keep) == quadratic_plan(items, keep)


@common
@given(st.lists(nested_paths, max_size=12), st.lists(nested_paths, min_size=1, max_size=12))
def test_nest_answers_as_related_does(paths: list[str], folders: list[str]) -> None:
    nest = layout.Nest(paths)
    for folder in folders:
        assert nest.related(folder) == any(related(folder, p) for p in paths), (folder, paths)


def test_nest_hand_picked() -> None:
    nest = layout.Nest(["exec/a/checkpoint-1", "exec/a-b", "exec/c"])
    assert nest.related("exec/a")  # around a path
    assert nest.related("exec/a/checkpoint-1/sub")  # inside one
    assert nest.related("exec/c")
    assert nest.related("exec")
    assert not nest.related("exec/a/checkpoint-10")
    assert not nest.related("exec/a-")
    assert not nest.related("exec/b")
    assert not layout.Nest([]).related("exec")


def test_plan_of_many_entries_in_one_folder_tree() -> None:
    items = [layout.Entry(0, i, f"exec/a/checkpoint-{i}") for i in range(2000)]
    items += [layout.Entry(0, 0, "exec/a"), layout.Entry(0, 5, "exec/a/checkpoint-1999/inner")]
    assert plan(items, 3) == quadratic_plan(items, 3)


# -- tombstone names ----------------------------------------------------------------------------------------


@common
@given(nested_paths)
def test_tomb_name_round_trip(path: str) -> None:
    name = layout.tomb_name(path)
    assert layout.parse_tomb(name) == path
    assert layout.name(0, 0, path).endswith("-" + name)  # the same encoding as an entry's path


@pytest.mark.parametrize(
    "text",
    [
        "",
        "MV4GKYY=",  # padding
        "mv4gkyy",  # lower case
        "MV4GKYZ",  # unused bits set
        "M",  # impossible length
        layout.tomb_name("exec/a") + "\n",
        layout.name(0, 1, "exec/a"),  # an entry's name is not a tombstone
        ".hidden",
        layout.tomb_name("exec") + "/x",
        "F5SXQZLD",  # "/exec": not a clean relative path
    ],
)
def test_non_canonical_tomb_names_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        layout.parse_tomb(text)


def test_parse_tombs_names_the_first_bad_one() -> None:
    good = layout.tomb_name("exec/a")
    assert layout.parse_tombs([good], "/r/tomb") == ["exec/a"]
    with pytest.raises(Failure, match=r"^/r/tomb/stray: not a tombstone \(not base32\)$"):
        layout.parse_tombs([good, "stray"], "/r/tomb")


def test_tomb_name_refuses_an_unclean_path() -> None:
    with pytest.raises(ValueError):
        layout.tomb_name("exec/../a")
