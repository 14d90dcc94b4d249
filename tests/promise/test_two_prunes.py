"""Two prunes with different -keep at once, and a hand publication of a save the smaller -keep removes
(addendum section 15, "Overlapping commands end cleanly"; "A `published` line always names a save that is
there, whole and kept at that moment").

The user's promise: whatever the two prunes did, a publication that printed ``published`` left an entry
naming a save that is there and whole; one that did not failed naming the prune, and no entry names its
save.  The three commands take turns at their store calls (tests/support/turns.py).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import run_cli
from tests.support.turns import Turns

FILES = {"model.safetensors": b"m" * 2000, "config.json": b"{}"}
OLD = "exec/A/checkpoint-1"


def make_root(base: Path) -> Path:
    """A root with three saves of attempt A published (epoch 0, steps 1, 2, 3)."""
    root = base / "ckpt"
    for step in (1, 2, 3):
        folder = root / "exec" / "A" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        for name, body in FILES.items():
            (folder / name).write_bytes(body)
        assert run_cli("publish", "-checkpoint", str(root), str(folder), str(step)).code == 0
    return root


def files(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def until(turns: Turns, actor: str, call: str, times: int = 1) -> None:
    """Let ``actor`` go one store call at a time until it has made ``call`` ``times`` times."""
    ran = turns.ran[actor]
    while ran.calls.count(call) < times:
        assert ran.code is None, (actor, call, ran.calls, ran.err)
        turns.let(actor, 1)


def race(base: Path, monkeypatch: pytest.MonkeyPatch, large_ends: str, i: float) -> None:
    """``prune -keep 1`` (small) makes its tombstones; ``prune -keep 3`` (large) reads pub/ and tomb/ then,
    and runs to its end at ``large_ends``: before small removes the entries, or after small's second look
    at pub/.  Then a hand ``publish`` of checkpoint-1 at epoch 1 makes ``i`` store calls, small runs to its
    end, and the publication to its own.  The user's promise, checked after all three."""
    root = make_root(base)
    save = root / OLD
    before = files(save)
    with monkeypatch.context() as m:
        turns = Turns(m, str(root))
        turns.start("small", ["prune", "-checkpoint", str(root), "-keep", "1"])
        turns.start("large", ["prune", "-checkpoint", str(root), "-keep", "3"])
        turns.start("hand", ["publish", "-checkpoint", str(root), "-epoch", "1", str(save), "1"])
        for actor in ("small", "large", "hand"):
            turns.let(actor, 0)
        until(turns, "small", "create_tombs")  # its tombstones are durable
        until(turns, "large", "list_tombs")  # pub/ read before the entries went, tomb/ after
        if large_ends == "early":
            turns.let("large")
        until(turns, "small", "list_entries", 2)  # entries removed, pub/ read again: nothing new
        turns.let("large")
        turns.let("hand", i)
        turns.let("small")
        turns.let("hand")
        turns.finish()
    hand, small, large = turns.ran["hand"], turns.ran["small"], turns.ran["large"]
    where = (large_ends, i)
    assert small.code == 0 and large.code == 0, (where, small.err, large.err)
    name = layout.name(1, 1, OLD)
    entries = sorted(os.listdir(root / "pub"))
    if hand.code == 0:
        assert f"published {name}" in hand.out, (where, hand.out, hand.err)
        assert name in entries, (where, entries, small.out, large.err)
        assert files(save) == before, (where, "published, then removed", small.out, hand.out)
    else:
        assert hand.code == 1, (where, hand.err)
        assert "prune" in hand.err or "does not exist" in hand.err, (where, hand.err)  # gone before it began
        assert "published" not in hand.out, where
        assert name not in entries, (where, entries)
    for entry in entries:
        assert files(root / layout.parse(entry).path) == before, (where, entry, small.out)
    answer = run_cli("resolve", "-checkpoint", str(root))
    assert answer.code == 0 and answer.out.strip(), (where, answer.err)


@pytest.mark.parametrize("large_ends", ["early", "late"])
def test_a_publication_between_two_prunes_of_different_keep_is_published_and_kept_or_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large_ends: str
) -> None:
    """`prune -keep 1` records exec/A/checkpoint-1 for removal; `prune -keep 3`, which read pub/ before the
    first removed checkpoint-1's entry, keeps it and ends; a hand `publish` of checkpoint-1 at a newer epoch
    overlaps the first prune's removals at each of its store calls (all of them before: it used to print
    `published`, and the first prune then removed the save).  The publication either prints `published`
    and its save stays whole, or fails naming the prune with no entry left naming it."""
    for i in [*range(12), math.inf]:
        race(tmp_path / f"{large_ends}-{i}", monkeypatch, large_ends, i)
