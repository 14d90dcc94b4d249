"""A prune removing an entry and a publication re-creating an entry of the same name, overlapping: no entry
is left without its manifest (issue #31, "Overlapping commands end cleanly"; addendum section 15).

A prune removes the entries it cuts, then their manifests by name.  A publication of the same save, epoch
and step (a hand ``publish``, a second process mirroring what a -mirror-keep prune just removed) writes its
manifest, then makes its entry: the prune may remove that fresh manifest, and ``resolve -verify`` would
then pass the entry unverified.  The save's folder stays (a newer entry names the same save), so nothing
makes the publication withdraw.

The two commands take turns at their store calls (tests/support/turns.py): every interleaving, either one
first.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from publish.rules import layout, manifest
from tests.conftest import run_cli
from tests.support.turns import Ran, Turns

SAVE = "exec/A/checkpoint-5"
FILES = {"model.safetensors": b"m" * 3000, "-leading dash": b"-", "sub/optimizer.pt": b"o" * 700}
#: The entry the prune removes and the publication makes again; and the newer one naming the same save.
AGAIN = layout.name(0, 5, SAVE)
NEWER = layout.name(1, 5, SAVE)


def make_root(base: Path) -> Path:
    root = base / "ckpt"
    for rel, body in FILES.items():
        (root / SAVE / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / SAVE / rel).write_bytes(body)
    for epoch in ("0", "1"):
        r = run_cli("publish", "-checkpoint", str(root), "-epoch", epoch, str(root / SAVE), "5")
        assert r.code == 0, r.err
    return root


def commands(root: Path) -> dict[str, list[str]]:
    return {
        "publish": ["publish", "-checkpoint", str(root), "-epoch", "0", str(root / SAVE), "5"],
        "prune": ["prune", "-checkpoint", str(root), "-keep", "1"],
    }


def race(
    monkeypatch: pytest.MonkeyPatch, root: Path, order: tuple[str, str], i: float, j: float
) -> dict[str, Ran]:
    with monkeypatch.context() as m:
        turns = Turns(m, str(root))
        for actor, argv in commands(root).items():
            turns.start(actor, argv)
        turns.let(order[0], 0)
        turns.let(order[1], 0)
        turns.let(order[0], i)
        turns.let(order[1], j)
        turns.let(order[0])
        turns.let(order[1])
        turns.finish()
    return turns.ran


def solo(monkeypatch: pytest.MonkeyPatch, root: Path, actor: str) -> int:
    with monkeypatch.context() as m:
        turns = Turns(m, str(root))
        turns.start(actor, commands(root)[actor])
        turns.finish()
    assert turns.ran[actor].code == 0, turns.ran[actor].err
    return len(turns.ran[actor].calls)


def promise_kept(root: Path, ran: dict[str, Ran], where: str) -> None:
    """The user's view: every entry has its manifest, recording the save as it is; resolve -verify=deep
    answers what resolve answers; a ``published`` line names an entry that is there."""
    said = f"{where}: {ran['publish'].out}{ran['publish'].err}{ran['prune'].out}{ran['prune'].err}"
    assert ran["prune"].code == 0, said
    entries = sorted(p.name for p in (root / "pub").iterdir())
    assert NEWER in entries, said
    for name in entries:
        data = (root / "man" / name).read_bytes() if (root / "man" / name).exists() else None
        assert data is not None, f"{name} has no manifest: {said}"
        rows = manifest.decode(name, data, str(root / "man" / name))
        assert {r[0]: r[1] for r in rows} == {k: len(v) for k, v in FILES.items()}, said
    if ran["publish"].code == 0 and "published" in ran["publish"].out:
        assert AGAIN in entries, said
    plain = run_cli("resolve", "-checkpoint", str(root))
    deep = run_cli("resolve", "-checkpoint", str(root), "-verify=deep")
    assert (plain.code, plain.out) == (deep.code, deep.out) == (0, f"{root / SAVE}\n"), (plain, deep, said)


@pytest.mark.parametrize("order", [("publish", "prune"), ("prune", "publish")])
def test_a_prune_and_a_publication_of_the_same_name_leave_no_entry_without_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, str]
) -> None:
    """Issue #31, overlapping commands end cleanly: `prune -keep 1` removes the entry of epoch 0 (the save
    stays: the entry of epoch 1 names it) while `publish -epoch 0` of the same save makes that entry again,
    at every interleaving of their store calls.  After both, every entry in pub/ has its manifest and
    resolve -verify=deep answers what resolve answers.  (On the code before: the prune removed the fresh
    manifest after the publication made its entry, an entry without a manifest.)"""
    counts = {actor: solo(monkeypatch, make_root(tmp_path / f"solo-{actor}"), actor) for actor in order}
    republished = 0
    for n, i in enumerate(range(1, counts[order[0]] + 2)):
        for j in [*range(counts[order[1]] + 2), math.inf]:
            root = make_root(tmp_path / f"r{n}-{j}")
            ran = race(monkeypatch, root, order, i, j)
            promise_kept(root, ran, f"{order} {i} {j}")
            republished += AGAIN in [p.name for p in (root / "pub").iterdir()]
            shutil.rmtree(root.parent)
    assert republished  # the publication made the entry again after the prune removed it, among them
