"""prune is crash-consistent: after a prune cut short at any point, one more prune leaves exactly the tree an
uninterrupted prune leaves (every path, every file's bytes, every link), tomb/ included.

Three ways of cutting it: at every step of its store calls in-process (each tombstone, entry, folder half
removed), with SIGKILL at random moments of a prune in a child process (PUBLISH_PRUNE_TRIALS, default
200, two at a time), and on SeaweedFS by refusing every request from the Nth on.  Also tomb/'s own rules.
"""

from __future__ import annotations

import os
import posix  # the POSIX store calls os's functions from posix, where a spy replaces them
import random
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from publish.ops import Say
from publish.ops.retention import plan, prune
from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import Watch, run_cli
from tests.support import dcp_shapes
from tests.support.crash import Cut, Driver, Killed, build, run, tree

SEED = int(os.environ.get("PUBLISH_CRASH_SEED", "20261201"))
TRIALS = int(os.environ.get("PUBLISH_PRUNE_TRIALS", "200"))


# -- a root, and its whole tree --------------------------------------------------------------------------


def prune_args(root: Path, keep: int) -> list[str]:
    return ["prune", "-checkpoint", str(root), "-keep", str(keep)]


def reference(base: Path, keep: int) -> dict[str, Any]:
    root, outside = build(base, f"ref-{keep}")
    code, _, err = run(*prune_args(root, keep))
    assert code == 0, err
    return tree(root, outside)


# -- tomb/'s rules --------------------------------------------------------------------------------------


def test_an_uninterrupted_prune_leaves_an_empty_tomb_and_no_orphan(tmp_path: Path) -> None:
    root, outside = build(tmp_path, "r")
    made = [layout.parse(n) for n in os.listdir(root / "pub")]
    gone, folders = plan(made, 2)
    code, out, err = run(*prune_args(root, 2))
    assert code == 0, err
    assert os.listdir(root / "tomb") == []
    assert err == (
        f"publish: prune: left {root}/exec/L/checkpoint-0 in place: {root}/exec/L is a symbolic link\n"
    )
    # A folder inside one removed before it is already gone, and not printed.
    printed = [f for i, f in enumerate(folders) if not any(f.startswith(g + "/") for g in folders[:i])]
    assert out.splitlines() == [f"removed {root}/{f}" for f in printed if f != "exec/L/checkpoint-0"]
    assert (outside / "checkpoint-0" / "w").read_bytes() == b"outside"


def test_tombstones_are_written_durably_before_any_entry_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = build(tmp_path, "r", folders=4)
    made = [layout.parse(n) for n in os.listdir(root / "pub")]
    gone, folders = plan(made, 1)
    events: list[str] = []
    real_fsync, real_unlink = os.fsync, os.unlink

    def fsync(fd: int) -> None:
        events.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def unlink(path: Any, *a: Any, **kw: Any) -> None:
        events.append(f"unlink {path}")
        real_unlink(path, *a, **kw)

    monkeypatch.setattr(posix, "fsync", fsync)
    monkeypatch.setattr(posix, "unlink", unlink)
    code, _, err = run(*prune_args(root, 1))
    assert code == 0, err
    names = {f"unlink {e.name}" for e in gone}  # entries are unlinked by name, relative to pub/'s descriptor
    first_entry = next(i for i, e in enumerate(events) if e in names)
    before = events[:first_entry]
    # The tombstones are empty files: the one fsync of tomb/ after they are made makes their names durable.
    assert before[-1] == f"fsync {root}/tomb"
    # Each tombstone goes after its folder, and tomb/ is fsynced after it.
    assert events[-2:] == [f"unlink {layout.tomb_name(folders[-1])}", f"fsync {root}/tomb"]


def test_a_recorded_folder_is_finished_and_reported(tmp_path: Path) -> None:
    root, _ = build(tmp_path, "r", folders=4)
    (root / "tomb").mkdir()
    (root / "exec" / "stray" / "x").mkdir(parents=True)  # what a killed prune left: no entry names it
    (root / "tomb" / layout.tomb_name("exec/stray")).touch()
    code, out, err = run(*prune_args(root, 100))  # nothing of its own to prune
    assert code == 0, err
    assert out == f"removed {root}/exec/stray\n"
    assert not (root / "exec" / "stray").exists() and os.listdir(root / "tomb") == []


@pytest.mark.parametrize("age", [7200, 60])
def test_a_recorded_folder_named_again_is_kept_and_its_old_tombstone_dropped(
    tmp_path: Path, age: int
) -> None:
    """A folder an interrupted prune recorded that a kept entry relates to stays; its tombstone goes once it
    is an hour old.  A younger one stays: the prune that wrote it may be about to remove that entry and the
    folder, and a publication of the folder meanwhile must see it (tests/promise/test_two_prunes.py)."""
    root, _ = build(tmp_path, "r", folders=4)
    (root / "tomb").mkdir()
    then = time.time() - age
    for folder in ("exec/a", "exec/b/checkpoint-3", "exec/b/checkpoint-3/nested/deeper"):
        (root / "tomb" / layout.tomb_name(folder)).touch()  # around, at, inside a kept entry's folder
        os.utime(root / "tomb" / layout.tomb_name(folder), (then, then))
    recorded = sorted(os.listdir(root / "tomb"))
    code, out, err = run(*prune_args(root, 100))
    assert code == 0, err
    assert out == ""
    assert (root / "exec" / "a" / "checkpoint-0" / "shard-0.bin").exists()
    assert (root / "exec" / "b" / "checkpoint-3" / "nested" / "state").exists()
    assert sorted(os.listdir(root / "tomb")) == ([] if age > 3600 else recorded)


def test_a_recorded_folder_through_a_link_is_left_in_place(tmp_path: Path) -> None:
    root, outside = build(tmp_path, "r", folders=4)
    (root / "pub" / layout.name(0, 0, "exec/L/checkpoint-0")).unlink()
    (root / "tomb").mkdir()
    (root / "tomb" / layout.tomb_name("exec/L/checkpoint-0")).touch()
    code, out, err = run(*prune_args(root, 100))
    assert code == 0 and out == ""
    assert err == (
        f"publish: prune: left {root}/exec/L/checkpoint-0 in place: {root}/exec/L is a symbolic link\n"
    )
    assert (outside / "checkpoint-0" / "w").exists() and os.listdir(root / "tomb") == []


@pytest.mark.parametrize("what", ["link", "dangling link", "file"])
def test_tomb_must_be_a_real_directory(tmp_path: Path, what: str) -> None:
    root, _ = build(tmp_path, "r", folders=4)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if what == "link":
        (root / "tomb").symlink_to(elsewhere)
    elif what == "dangling link":
        (root / "tomb").symlink_to(tmp_path / "missing")
    else:
        (root / "tomb").write_bytes(b"")
    before = tree(root)
    code, out, err = run(*prune_args(root, 1))
    said = "is a symbolic link" if "link" in what else "is not a directory"
    assert (code, out, err) == (1, "", f"publish: {root}/tomb {said}\n")
    assert tree(root) == before and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("name", ["stray", ".hidden", layout.tomb_name("exec/a") + "="])
def test_anything_else_in_tomb_is_an_error_naming_it(tmp_path: Path, name: str) -> None:
    root, _ = build(tmp_path, "r", folders=4)
    (root / "tomb").mkdir()
    (root / "tomb" / name).touch()
    before = tree(root)
    code, out, err = run(*prune_args(root, 1))
    assert code == 1 and out == ""
    assert err.startswith(f"publish: {root}/tomb/{name}: not a tombstone (")
    assert tree(root) == before


def test_resolve_and_watch_are_not_confused_by_tomb(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-1")).parent.mkdir(parents=True)
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-1")).touch()
    (root / "tomb" / "step_1").mkdir()  # not a tombstone, but neither resolve nor watch reads tomb/
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, "")
    (root / "exec" / "A" / "checkpoint-1").mkdir(parents=True)
    (root / "exec" / "A" / "checkpoint-1" / "w").write_bytes(b"w")
    # A folder a tombstone names is one a prune was removing: never published again (tests/promise/test_promise.py).
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/checkpoint-1"), "1")
    assert r.code == 1 and "a prune was removing it" in r.err, r
    (root / "exec" / "A" / "checkpoint-2").mkdir(parents=True)
    (root / "exec" / "A" / "checkpoint-2" / "w").write_bytes(b"w")
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/checkpoint-2"), "2")
    assert r.code == 0, r.err
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out, r.err) == (0, f"{root}/exec/A/checkpoint-2\n", "")
    # watch reads tomb/ only to pass over a save a tombstone names: a name there that is no tombstone
    # (step_1/) is no concern of its.
    (root / "exec" / "A" / "step_7").mkdir()
    dcp_shapes.write_save(root / "exec" / "A" / "step_7")
    w = Watch("-checkpoint", str(root), "-framework", "dcp", "-interval", "100ms", "-attempt", "A")
    assert w.next_line().startswith(f"published {layout.name(0, 7, 'exec/A/step_7')} ")
    code, err = w.stop()
    assert code == 0, err
    assert sorted(os.listdir(root / "pub")) == sorted(
        [layout.name(0, 2, "exec/A/checkpoint-2"), layout.name(0, 7, "exec/A/step_7")]
    )
    assert sorted(os.listdir(root / "tomb")) == sorted([layout.tomb_name("exec/A/checkpoint-1"), "step_1"])


# -- every cut point, in-process ------------------------------------------------------------------------


def test_a_prune_cut_at_every_step_is_finished_by_the_next(tmp_path: Path) -> None:
    for keep in (1, 3):
        want = reference(tmp_path, keep)
        root, outside = build(tmp_path, f"count-{keep}")
        full = Cut(PosixStore(str(root)), 10**9)
        prune(UNBOUNDED, full, Say(lambda s: None, lambda s: None), keep)  # type: ignore[arg-type]
        steps = full.steps
        assert steps > 20
        for budget in range(steps + 1):
            root, outside = build(tmp_path, f"cut-{keep}-{budget}")
            try:
                prune(
                    UNBOUNDED, Cut(PosixStore(str(root)), budget), Say(lambda s: None, lambda s: None), keep
                )  # type: ignore[arg-type]
            except Killed:
                assert budget < steps
            every_entry_has_its_manifest(root)
            code, _, err = run(*prune_args(root, keep))
            assert code == 0, err
            got = tree(root, outside)
            assert without_man(got) == without_man(want), f"keep {keep}, cut after {budget} of {steps} steps"
            every_entry_has_its_manifest(root)
            # A manifest whose entry the cut removed is left while its save is still there (a publication
            # may be between its manifest and its entry), and goes with its save.
            for name in set(os.listdir(root / "man")) - set(os.listdir(root / "pub")):
                assert (root / layout.parse(name).path).exists(), name
            shutil.rmtree(root.parent)


def without_man(t: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in t.items() if not k.startswith("0:man/")}


def every_entry_has_its_manifest(root: Path) -> None:
    entries = set(os.listdir(root / "pub"))
    missing = entries - set(os.listdir(root / "man"))
    assert not missing, f"entries without their manifest: {sorted(missing)}"


def test_an_uninterrupted_prune_removes_the_manifests_of_the_entries_it_removes(tmp_path: Path) -> None:
    root, _ = build(tmp_path, "r")
    code, _, err = run(*prune_args(root, 2))
    assert code == 0, err
    assert sorted(os.listdir(root / "man")) == sorted(os.listdir(root / "pub"))
    assert len(os.listdir(root / "pub")) == 2


# -- SIGKILL at random moments -----------------------------------------------------------------------------


def classify(root: Path, initial: dict[str, Any], final: dict[str, Any], snapshot: dict[str, Any]) -> str:
    if snapshot == initial:
        return "before any change"
    if snapshot == final:
        return "after the last change"
    pub = {k for k in snapshot if k.startswith("0:pub/")}
    tombs = {k for k in snapshot if k.startswith("0:tomb/")}
    if pub == {k for k in initial if k.startswith("0:pub/")}:
        return "tombstones written, no entry removed"
    if pub != {k for k in final if k.startswith("0:pub/")}:
        return "while removing entries"
    if not tombs:
        return "after the last tombstone"  # nothing of tomb/ left, yet not the final tree: never expected
    return "while removing folders"


def kill_trials(base: Path, trials: int, seed: int, workers: int = 2) -> tuple[Counter[str], int]:
    """Run ``trials`` prunes killed at random moments, then one more each; return where the kills landed.

    Every trial's tree after the second prune must equal the uninterrupted prune's."""
    rng = random.Random(seed)
    keeps = (1, 2, 4)
    initial = {}
    final = {}
    for keep in keeps:
        root, outside = build(base, f"initial-{keep}")
        initial[keep] = tree(root, outside)
        final[keep] = reference(base, keep)
    # The prune runs in a driver that has imported the command and starts it on a byte from the test
    # (tests/promise/test_crash.py), so the kill lands inside the verb rather than in the interpreter's start, whose
    # length moves with the machine's load far more than the prune's does.
    spans = []
    for i in range(3):
        root, _ = build(base, f"calibrate-{i}")
        d = Driver(*prune_args(root, 1))
        d.go()
        code, _, err = d.finish()
        assert code == 0, err
        spans.append(float(err.decode().rsplit("took ", 1)[1].split()[0]))
    span = min(spans)
    # The delays are drawn from a window that follows where the kills land: a kill before any change moves
    # its low end up, one after the last change moves its high end down.  The machine's load moves the
    # prune's length from one batch to the next; a fixed window would land most kills outside it.
    window = [0.0, span]
    states: Counter[str] = Counter()
    lock = threading.Lock()

    def trial(item: tuple[int, int, float]) -> None:
        i, keep, delay = item
        root, outside = build(base, f"t{i}")
        Driver(*prune_args(root, keep)).kill_after(delay)
        where = classify(root, initial[keep], final[keep], tree(root, outside))
        every_entry_has_its_manifest(root)  # killed anywhere: never an entry without its manifest
        code, _, err2 = run(*prune_args(root, keep))
        assert code == 0, err2
        got = tree(root, outside)
        assert without_man(got) == without_man(final[keep]), (
            f"seed {seed} trial {i} (keep {keep}, killed after {delay:.3f} s, {where})"
        )
        every_entry_has_its_manifest(root)
        with lock:
            states[where] += 1
            lo, hi = window
            if where == "before any change":
                lo = max(lo, delay * 0.9)
                if lo > hi * 0.8:  # the whole window lies before the prune's first change: reach further
                    hi = max(hi, delay * 1.5)
            elif where == "after the last change":
                hi = min(hi, delay * 1.1)
                if hi < lo * 1.25:  # the whole window lies after its last change: reach back
                    lo = hi * 0.7
            window[:] = [lo, max(hi, lo * 1.1 + 1e-4)]
        shutil.rmtree(root.parent)

    batch = 20
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, trials, batch):
            with lock:
                lo, hi = window
            plans = [
                (i, rng.choice(keeps), rng.uniform(lo, hi)) for i in range(start, min(trials, start + batch))
            ]
            list(pool.map(trial, plans))
    mid = sum(v for k, v in states.items() if k not in ("before any change", "after the last change"))
    return states, mid


@pytest.mark.slow
def test_prune_killed_at_random_moments_is_finished_by_the_next(tmp_path: Path) -> None:
    states, mid = kill_trials(tmp_path, TRIALS, SEED)
    report = ", ".join(f"{k}: {v}" for k, v in sorted(states.items()))
    print(f"{mid} of {TRIALS} kills landed inside prune (seed {SEED}); {report}")
    assert states["after the last tombstone"] == 0, report
    assert mid >= TRIALS // 3, report
    assert states["tombstones written, no entry removed"] >= 1, report
    assert states["while removing folders"] >= 1, report


# -- S3: every request refused from the Nth on -------------------------------------------------------------


@pytest.mark.s3
def test_s3_prune_cut_at_every_request_is_finished_by_the_next(weed: Any, tmp_path: Path) -> None:
    from tests.support.fault_proxy import Action, FaultProxy, Respond
    from tests.support.s3roots import Root

    proxy = FaultProxy(weed.endpoint)

    class LandThenRefuse(Action):
        def handle(self, p: FaultProxy, h: Any, req: Any) -> None:
            p.upstream_call(req)
            Respond(403, "AccessDenied").handle(p, h, req)

    def fill(root: Root) -> None:
        keys = []
        for k in range(5):
            keys += [f"exec/A/checkpoint-{k}/model.bin", f"exec/A/checkpoint-{k}/sub/o.bin"]
        keys += ["exec/B/checkpoint-9/w", "exec/A/checkpoint-10/keep"]
        root.put_many(keys)
        made = [layout.Entry(0, k, f"exec/A/checkpoint-{k}") for k in range(5)]
        made += [layout.Entry(0, 0, "exec/B"), layout.Entry(0, 1, "exec/A/checkpoint-1/sub")]
        from publish.rules import manifest

        for e in made:  # each save's manifest as publish writes it: a prune checks those it keeps, as -verify
            rows = [(k[len(e.path) + 1 :], 0, None) for k in keys if k.startswith(e.path + "/")]
            root.put(f"man/{e.name}", manifest.encode(e.name, sorted(rows)))
        root.put_many([f"pub/{e.name}" for e in made])

    try:
        ref = Root(weed, tmp_path, endpoint=proxy.endpoint)
        fill(ref)
        proxy.reset()
        r = ref.run("prune", "-keep", "2")
        assert r.code == 0, r.err
        requests = proxy.count()
        want = ref.keys()
        assert any("/tomb/" in s.path for s in proxy.seen)
        for n in range(requests):
            # Request n+1 refused before it reaches the store, or after it landed there (its answer lost).
            for action in [Respond(403, "AccessDenied"), LandThenRefuse()][n % 2 :][:1]:
                root = Root(weed, tmp_path, endpoint=proxy.endpoint)
                fill(root)
                proxy.reset()
                seen = [0]

                def from_nth(req: Any, n: int = n, seen: list[int] = seen) -> bool:
                    seen[0] += 1
                    return seen[0] > n

                proxy.add(action, match=from_nth)
                assert root.run("prune", "-keep", "2").code == 1
                cut = f"cut at request {n + 1} of {requests} ({type(action).__name__})"
                manifests = {k[len("man/") :] for k in root.keys("man/")}
                assert set(root.entries()) <= manifests, f"{cut}: an entry without its manifest"
                proxy.reset()
                r = root.run("prune", "-keep", "2")
                assert r.code == 0, r.err
                assert set(root.entries()) <= {k[len("man/") :] for k in root.keys("man/")}, cut
                # A manifest a cut left without its entry stays while its save is there (a publication may be
                # between the two) and goes with it.
                held = root.keys()
                assert [k for k in held if not k.startswith("man/")] == [
                    k for k in want if not k.startswith("man/")
                ], cut
                for k in root.keys("man/"):
                    if k not in want:
                        assert root.keys(layout.parse(k[len("man/") :]).path + "/"), (cut, k)
    finally:
        proxy.stop()
