"""Which saves are pending with -mirror-keep M when the mirror holds entries whose saves are gone.

The mirror's own prune counts only saves that exist (its retention agrees with resolve); what the fast
root keeps as pending must be judged the same way, or -keep removes a save the mirror would have kept and
that is then on neither tier."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout
from tests.conftest import run_cli
from tests.support.s3roots import Root
from tests.support.trainer_saves import hf_save

pytestmark = pytest.mark.s3

#: Another node's attempt, whose saves a prefix lifecycle rule (or a hand) deleted on the mirror (a leading
#: dash, a space, an escape's look and a plus; an attempt holds no control character).
LOST = "-b %2F+"


class Tiers:
    """A POSIX root with its saves under exec/a/, and an S3 mirror."""

    def __init__(self, server: Any, tmp: Path) -> None:
        self.fast = tmp / "fast"
        self.saves = self.fast / "exec" / "a"
        self.saves.mkdir(parents=True)
        self.mirror = Root(server, tmp, init=False)

    def flags(self, *more: str) -> list[str]:
        return ["-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds, *more]

    def save(self, step: int) -> Path:
        folder = hf_save(self.saves, step)
        (folder / "shard-0.bin").write_bytes(bytes(range(256)) * step)
        return folder

    def fast_entries(self) -> list[str]:
        pub = self.fast / "pub"
        return sorted(os.listdir(pub)) if pub.exists() else []

    def files(self, path: str) -> dict[str, bytes]:
        """The files of the fast root's save ``path`` now, by name below it, with their bytes."""
        top = self.fast / path
        return {f.relative_to(top).as_posix(): f.read_bytes() for f in top.rglob("*") if f.is_file()}

    def on_mirror(self, path: str) -> dict[str, bytes]:
        """The objects of the save ``path`` on the mirror, by name below it, with their bytes."""
        got = {}
        for key in self.mirror.keys(path + "/"):
            body = self.mirror.s3.get_object(Bucket=self.mirror.bucket, Key=f"{self.mirror.prefix}/{key}")
            got[key[len(path) + 1 :]] = body["Body"].read()
        return got


def _on_a_tier(t: Tiers, path: str, files: dict[str, bytes]) -> bool:
    """The save ``path``, which held ``files``, is published and whole on the fast root or on the mirror."""
    if path in [layout.parse(e).path for e in t.fast_entries()] and t.files(path) == files:
        return True
    return path in [layout.parse(e).path for e in t.mirror.entries()] and t.on_mirror(path) == files


def test_mirror_entries_whose_saves_are_gone_count_for_nothing(weed: Any, tmp_path: Path) -> None:
    """Issue #31, retention agrees with resolve, on the mirror (-mirror-keep): the mirror holds the two
    newest entries, but their saves were deleted there by hand; the fast root holds two older whole saves
    not yet mirrored.  ``run -keep 1 -mirror-keep 2``: the mirror would keep both older saves (the gone
    ones count for nothing), so both are pending and uploaded before -keep prunes the root.  After it,
    each save resolve -mirror could answer before is on a tier, the newest on the mirror, and with the node
    lost resolve -mirror still answers it.  (On the code before, the gone entries counted: neither save was
    pending, -keep 1 removed step 1 from the only tier holding it, and nothing reached the mirror.)"""
    t = Tiers(weed, tmp_path)
    other = tmp_path / "other-node"
    for step in (3, 4):
        hf_save(other / "exec" / LOST, step)
    r = run_cli(
        "run", "-checkpoint", str(other), "-mirror", t.mirror.url, "-creds", t.mirror.creds,
        "-framework", "hf", "-attempt", LOST, "-epoch", "1", "--", "true",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert len(t.mirror.entries()) == 2
    for step in (3, 4):  # a lifecycle rule expires the other node's saves on the mirror, not their entries
        for key in t.mirror.keys(f"exec/{LOST}/checkpoint-{step}/"):
            t.mirror.s3.delete_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/{key}")
    assert not t.mirror.keys(f"exec/{LOST}/")
    for step in (1, 2):
        r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "1", str(t.save(step)), str(step))
        assert r.code == 0, r.err
    r = run_cli("resolve", *t.flags())
    assert r.code == 0, r.err
    assert r.out.strip() == str(t.fast / "exec/a/checkpoint-2")
    before = ["exec/a/checkpoint-2", "exec/a/checkpoint-1"]  # what it answers, then once 2 is gone
    files = {path: t.files(path) for path in before}

    r = run_cli(
        "run",
        *t.flags("-framework", "hf", "-attempt", "a", "-epoch", "1", "-keep", "1", "-mirror-keep", "2"),
        "--",
        "true",
    )
    for path in before:
        assert _on_a_tier(t, path, files[path]), f"{path} is on neither tier: {r.out}{r.err}"
    assert r.code == 0, r.err
    newest = before[0]
    doc = json.loads(run_cli("status", *t.flags("-json")).out)
    pending = [layout.parse(n).path for n in doc["pending"]]
    on_mirror = [layout.parse(e).path for e in t.mirror.entries()]
    assert newest in on_mirror or newest in pending
    shutil.rmtree(t.fast)  # the node is lost: the mirror answers
    r = run_cli("resolve", *t.flags())
    assert r.code == 0, r.err
    assert r.out.strip() == f"{t.mirror.url}/{newest}"


def test_pending_asks_the_mirror_only_as_far_as_needed(weed: Any, tmp_path: Path) -> None:
    """Issue #31, retention agrees with resolve, and its cost: pending is judged by asking the mirror
    whether its entries' saves exist, newest first as its prune asks, and only down to the M-th one that
    exists: M questions when the newest saves are there, whatever the number of entries; a gone save
    above them counts for nothing (one question more, and one for its folder).  (On the code before, gone
    ones counted: the fast root's older saves were never pending.)"""
    import time

    from publish.ops import Say
    from publish.ops.tiers import Tiers as Pair
    from publish.rules.deadline import Deadline
    from publish.rules.roots import S3Root
    from publish.stores import open as open_store
    from publish.stores.posix import PosixStore

    t = Tiers(weed, tmp_path)
    mine = [layout.name(0, s, f"exec/a/checkpoint-{s}") for s in (1, 2)]
    for s in (1, 2):
        t.save(s)
    theirs = [layout.name(0, s, f"exec/c/checkpoint-{s}") for s in range(3, 33)]
    t.mirror.put_many([f"pub/{n}" for n in theirs] + [f"{layout.parse(n).path}/x" for n in theirs])
    mirror = open_store(
        S3Root(t.mirror.bucket, t.mirror.prefix), env={}, deadline=time.monotonic() + 60, creds=t.mirror.creds
    ).store
    asked: list[str] = []
    real = mirror.holds

    def holds(dl: Deadline, path: str) -> bool:
        asked.append(path)
        return real(dl, path)

    mirror.holds = holds  # type: ignore[method-assign]
    pair = Pair(PosixStore(str(t.fast)), mirror, Say(print, print), 30.0, keep=2)
    entries = [layout.parse(n) for n in mine]
    dl = Deadline(60)

    def gone(names: list[str]) -> None:
        for n in names:
            for key in t.mirror.keys(layout.parse(n).path + "/"):
                t.mirror.s3.delete_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/{key}")

    # every save on the mirror is there: its two newest are what it keeps, mine are not pending
    assert pair.protected(dl, entries) == set()
    assert asked == [layout.parse(n).path for n in theirs[:-3:-1]], asked
    # its two newest saves gone: they count for nothing, the two below them are kept; mine still not
    gone(theirs[-2:])
    asked.clear()
    assert pair.protected(dl, entries) == set()
    assert len(asked) == 2 + 1 + 2, asked  # the two gone, their folder (there), the two that exist
    # every save of theirs gone: mine are the newest whole saves the mirror would keep, so both pending
    gone(theirs[:-2])
    assert pair.protected(dl, entries) == set(mine)


@pytest.mark.parametrize("deleted", ["every file", "one file"])
def test_a_save_deleted_by_hand_on_the_mirror_stays_on_the_root_until_uploaded_again(
    weed: Any, tmp_path: Path, deleted: str
) -> None:
    """A tier is lost under an entry: both saves were mirrored, then the older one's objects (all, or one
    of them) were deleted on the mirror (by hand, by a lifecycle rule), its mirror entry left in place.  The user's promise: a
    prune of the fast root never leaves a save that was on a tier on none, so ``prune -keep 1 -mirror``
    keeps it on the root (status shows it pending), and the next ``run -mirror`` puts it back on the
    mirror under the entry that is there (a ``published`` line naming the mirror's save), after which
    -keep may take it from the root.  (On the code before, the entry alone counted as mirrored: -keep 1
    removed the save from the only tier that held it whole.)"""
    t = Tiers(weed, tmp_path)
    for step in (1, 2):
        t.save(step)
    run = ("run", *t.flags("-framework", "hf", "-attempt", "a", "-epoch", "1"))
    r = run_cli(*run, "--", "true")
    assert r.code == 0, r.err
    saves = ["exec/a/checkpoint-2", "exec/a/checkpoint-1"]
    files = {path: t.files(path) for path in saves}
    assert all(t.on_mirror(path) == files[path] for path in saves)
    lost = saves[1]
    keys = t.mirror.keys(lost + "/")
    for key in keys if deleted == "every file" else [k for k in keys if k.endswith("/shard-0.bin")]:
        t.mirror.s3.delete_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/{key}")
    assert len(t.mirror.entries()) == 2 and t.on_mirror(lost) != files[lost]

    r = run_cli("prune", *t.flags("-keep", "1"))
    assert r.code == 0, r.err
    for path in saves:
        assert _on_a_tier(t, path, files[path]), f"{path} is on neither tier: {r.out}{r.err}"
    doc = json.loads(run_cli("status", *t.flags("-json")).out)
    assert [layout.parse(n).path for n in doc["pending"]] == [lost]

    r = run_cli(*run, "-keep", "1", "--", "true")
    assert r.code == 0, r.err
    assert f"{t.mirror.url}/{lost})" in r.out, r.out
    assert "uploaded again" in r.err, r.err
    assert t.on_mirror(lost) == files[lost]
    for path in saves:
        assert _on_a_tier(t, path, files[path]), f"{path} is on neither tier: {r.out}{r.err}"
    doc = json.loads(run_cli("status", *t.flags("-json")).out)
    assert doc["pending"] == []
    r = run_cli("prune", *t.flags("-keep", "1"))
    assert r.code == 0, r.err
    assert [layout.parse(e).path for e in t.fast_entries()] == [saves[0]]
    shutil.rmtree(t.fast)  # the node is lost: the mirror holds both, whole
    r = run_cli("resolve", *t.flags("-verify"))
    assert r.code == 0, r.err
    assert r.out.strip() == f"{t.mirror.url}/{saves[0]}"
    assert all(t.on_mirror(path) == files[path] for path in saves)


def test_a_run_asks_once_whether_a_mirrored_save_is_there_and_its_prune_asks_afresh(
    weed: Any, tmp_path: Path
) -> None:
    """What finding a save gone on the mirror costs a run, and that it is found: a pass asks the mirror
    once for each save of both tiers, then remembers it there (a pass every -interval asks nothing more);
    the fast root's prune asks afresh each time, and a save it finds gone is kept on the root and pending
    for the next pass, which uploads it again under the entry that is there."""
    import time

    from publish.ops import Say
    from publish.ops.tiers import Tiers as Pair
    from publish.rules.deadline import Deadline
    from publish.rules.roots import S3Root
    from publish.stores import open as open_store
    from publish.stores.posix import PosixStore

    t = Tiers(weed, tmp_path)
    for step in (1, 2):
        r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "1", str(t.save(step)), str(step))
        assert r.code == 0, r.err
    mirror = open_store(
        S3Root(t.mirror.bucket, t.mirror.prefix), env={}, deadline=time.monotonic() + 60, creds=t.mirror.creds
    ).store
    asked: list[str] = []  # the saves whose files were listed on the mirror
    real = mirror.check_rows

    def check_rows(dl: Deadline, path: str, rows: Any, deep: bool) -> Any:
        asked.append(path)
        return real(dl, path, rows, deep)

    mirror.check_rows = check_rows  # type: ignore[method-assign]
    out: list[str] = []
    pair = Pair(PosixStore(str(t.fast)), mirror, Say(out.append, out.append), 30.0)
    dl = Deadline(60)
    assert pair.sync() == 2  # both uploaded: now on the mirror
    entries = [layout.parse(n) for n in t.fast_entries()]
    asked.clear()
    assert pair.pending(dl) == [] and pair.pending(dl) == []
    assert asked == [], asked  # remembered: what this process put there and checked
    lost = "exec/a/checkpoint-1"
    for key in t.mirror.keys(lost + "/"):
        t.mirror.s3.delete_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/{key}")
    assert pair.protected(dl, entries) == {e.name for e in entries if e.path == lost}
    assert sorted(asked) == sorted(e.path for e in entries), asked  # each save of both tiers, afresh
    asked.clear()
    assert [e.path for e in pair.pending(dl)] == [lost]
    assert asked == [lost], asked  # only the forgotten one is asked again
    out.clear()
    assert pair.sync() == 1
    assert any(line.startswith("published ") and line.endswith(f"{t.mirror.url}/{lost})") for line in out), (
        out
    )
    assert t.on_mirror(lost) == t.files(lost)
    assert pair.protected(dl, entries) == set() and pair.pending(dl) == []


def test_a_damaged_mirror_save_counts_for_nothing_in_what_is_pending(weed: Any, tmp_path: Path) -> None:
    """-mirror-keep meets -verify: the mirror's newest save (another node's) lost bytes of a file after its
    upload, so ``resolve -mirror -verify`` passes it over and the mirror's prune counts it for nothing; the
    fast root's two older saves are then both among the two the mirror would keep, so both are pending and
    ``prune -keep 1 -mirror-keep 2`` of the fast root keeps both.  (On the code before, the damaged save
    counted: only the newer fast save was pending and -keep 1 removed the older, which the mirror would
    have kept, from the only tier holding it.)"""
    t = Tiers(weed, tmp_path)
    other = tmp_path / "other-node"
    hf_save(other / "exec" / LOST, 9)
    r = run_cli(
        "run", "-checkpoint", str(other), "-mirror", t.mirror.url, "-creds", t.mirror.creds,
        "-framework", "hf", "-attempt", LOST, "-epoch", "2", "--", "true",
    )  # fmt: skip
    assert r.code == 0, r.err
    damaged = next(k for k in t.mirror.keys(f"exec/{LOST}/checkpoint-9/") if k.endswith(".json"))
    t.mirror.put(damaged, b"{}")  # shorter than its manifest says
    for step in (1, 2):
        r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "1", str(t.save(step)), str(step))
        assert r.code == 0, r.err
    r = run_cli("resolve", *t.flags("-verify"))
    assert r.code == 0, r.err
    assert r.out.strip() == str(t.fast / "exec/a/checkpoint-2")
    r = run_cli("prune", *t.flags("-keep", "1", "-mirror-keep", "2"))
    assert r.code == 0, r.err
    assert [layout.parse(e).path for e in t.fast_entries()] == ["exec/a/checkpoint-1", "exec/a/checkpoint-2"]
    assert (t.fast / "exec/a/checkpoint-1/shard-0.bin").is_file()
