"""The promise as the user states it, checked with two commands at once, interleaved at every store operation.

The oracle knows only what a user knows: the saves the trainer wrote (their bytes), which ones were deleted by
hand, what each command printed and its exit status.  It reads the roots with plain ``os`` (and boto3 for the
mirror), and asks the real ``resolve`` and ``resolve -verify=deep``; it never computes a plan of prune's.
The invariants, each checked after every round:

1. ``resolve`` (``-verify=deep`` too) answers with the newest whole save that exists among those the user
   was promised (printed in a ``published`` line, or lying whole in an attempt a ``watch`` or ``run`` made its
   last scan of, exec/ there: a scan of an exec/ out of reach saw no save and promised none), or answers
   nothing when none exists.
2. A ``published`` line names a save that is there, with the bytes the trainer wrote, at the moment it is
   printed (checked then, no other thread running), and kept: only a ``-keep N`` prune of the same round
   may remove it, and then N newer promised saves exist.
3. No prune removes the save ``resolve`` answered just before it unless ``resolve`` now answers a newer one.
4. Nothing outside the root (the mirror's prefix) changes.
5. On the mirror (SeaweedFS): a ``published`` line naming the mirror names a save there with the bytes of
   the fast root's, and a ``run -mirror`` that exits 0 left every save it published on the fast root on the
   mirror (or pruned there by its own ``-mirror-keep``).
6. A job that does not advance is not requeued for ever (``run -requeue -max-idle-requeues K``): the
   dispatches that resume from the same save and publish nothing are requeued K times, then not.
7. Every failure names the thing at fault: no command ends in ``publish: internal error``.
8. With exec/ out of reach (an empty folder in its place, as an unmounted filesystem leaves; or a file),
   nothing is published and nothing removed: a prune says why (exit non-zero, or a message naming exec/);
   ``resolve`` does not answer as if the saves were gone for good (exit 1 when it answered a save before);
   once exec/ is back, ``resolve`` answers what it answered before, and every save published before is
   still published (deleted by hand newest first, each next one is the answer).

A round runs two actors at once, in one process, through ``publish.cli.main`` (tests/support/interleave.py):
publication (``publish``, ``watch``, ``run``, and with the mirror their uploads) against a prune (``-keep``,
``-orphans``, ``-mirror-keep``) or a second mirroring process.  Which thread goes at each store operation is
drawn by Hypothesis, so a failing order shrinks and replays.  The state a round starts from is drawn too:
saves whole or cut, published by hand or not, deleted by hand behind their entries, files named with any
bytes a filesystem allows (not UTF-8, newline, ``%``, ``+``, ``\\``, a leading dash, 255 bytes), attempts
with a leading dash, ``%``, ``+`` and ``\\``, leftover folders (attempts and saves) named with such bytes,
and exec/ out of reach while the round runs.  What only real processes show (kill -9 mid upload, SIGTERM)
stays in tests/promise/test_model.py and test_model_tiers.py.

Each defect below fails this module on the code before its fix (the fixes are separate changes):

(a) ``-keep N`` counted entries whose saves were deleted by hand, so a prune removed the save ``resolve``
    answered.  Minimal example: saves A/10 and A/20 published, A/20 deleted by hand, then ``run -keep 1``
    (or ``prune -keep 1``): A/10 is removed and ``resolve`` answers nothing.  Breaks invariant 3.
    ``test_keep_counts_only_saves_that_exist`` (constructed), and the drawn rounds.
(b) A file name that is not UTF-8 (``bad\\377.bin``) inside one save made every scan fail, so a whole save
    beside it was never published.  Minimal example: A/10 whole holding ``bad\\377.bin``, A/20 whole; ``watch``
    publishes nothing, and ``resolve`` answers nothing.  Breaks invariant 1.
    ``test_a_name_that_is_not_utf8_stops_no_other_save`` (constructed), and the drawn rounds.
(c) A hand ``publish`` racing ``prune -orphans`` (or a ``-keep`` prune) printed ``published`` for a save the
    prune then removed.  Minimal example: an unpublished whole save B/10, ``publish`` of it and ``prune -keep 1
    -orphans -orphans-age 1ms`` at once; the prune lists pub/ and the saves before the publish makes its
    entry, then removes B/10: ``published ... B/checkpoint-10`` printed, the folder gone.  Breaks invariant 2.
    ``test_publication_against_prune`` (drawn).  The mirror half: a mirror upload racing a second mirroring
    process whose ``-mirror-keep`` prunes the mirror (or a ``prune -mirror -mirror-keep``) printed
    ``published`` for a mirror entry whose files were gone as it was printed.  Minimal example: A/10
    published on the fast root, A/20 whole in A; process 0 (``watch -mirror -attempt=B``) uploads A/10's
    objects and finds no tombstone on the mirror; process 1 (``watch -mirror -attempt=A -mirror-keep 1``)
    uploads A/10 and enters it, publishes and uploads A/20, and prunes A/10 from the mirror (tombstone,
    entry, manifest, objects); process 0 then writes A/10's manifest and creates its entry: ``published
    ... s3://.../exec/A/checkpoint-10`` printed, no object under it.  Breaks invariant 2 ("at that moment",
    checked as each line is printed).  ``test_mirror_upload_against_a_second_mirroring_process``
    (constructed), and ``test_mirror_uploads_against_prune_and_each_other`` (drawn).
(d) The idle count (``run -requeue -max-idle-requeues``) with a mirror was kept on the fast root alone: lost
    with it, and a dispatch that resumed from the mirror was taken to have advanced.  Minimal example: A/10
    published and mirrored, the fast root lost, then two idle dispatches with ``-max-idle-requeues 1``: both
    requeued.  Breaks invariant 6.  ``test_idle_count_survives_a_lost_fast_root``.
(e) ``run`` exited 0 when its last mirror uploads did not finish.  Minimal example: ``run -mirror -- true``
    with a whole save, the uploads' last pass not done when run's wait for it runs out: exit 0, the save not
    on the mirror.  Breaks invariant 5.  ``test_run_says_unfinished_uploads`` (the order chosen on purpose;
    the drawn mirror rounds may take it too).

(f) ``prune -orphans`` ended in ``publish: internal error: UnicodeEncodeError`` (exit 1, nothing pruned)
    when exec/ held a folder whose name is not UTF-8.  Minimal example: A/10 published, leftovers
    ``exec/bad\\377/checkpoint-40`` and ``exec/nl\\nx/checkpoint-40``, ``prune -keep 1 -orphans``.  Breaks
    invariant 7.  ``test_prune_orphans_beside_folders_named_with_any_bytes`` (constructed), and the drawn
    rounds.
(g) ``prune -keep N`` with exec/ unmounted (an empty folder in its place) exited 0 saying nothing and
    removed every entry but the newest N: once exec/ was back, the older saves were no longer published.
    Minimal example: A/10 and A/20 published, exec/ unmounted, ``prune -keep 1``; then A/20 deleted by
    hand: ``resolve`` answers nothing.  Breaks invariant 8.
    ``test_prune_with_exec_unmounted_removes_nothing`` (constructed), and the drawn rounds.

The examples are the hypothesis profile ``model-ci`` (tests/conftest.py), or ``model-long`` when chosen.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Result
from tests.support.crash import tree
from tests.support.interleave import Actor, gated_stores, together
from tests.support.model_support import MODEL_FILE, STATE_FILE, call, fresh_registry
from tests.support.trainer_saves import real_state

#: Attempt names a job may be given, and each one's epoch: a later attempt has a greater one.
EPOCHS = {"A": 1, "-dash": 2, "p%2B+q": 3, "back\\slash": 4}
STEPS = [10, 20, 30]
#: File names a save may hold beside its model and state: any bytes a POSIX name may hold.
HOSTILE = [b"bad\xff.bin", b"line\nbreak", b"100%", b"a+b", b"back\\slash", b"-lead", b"n" * 255]
#: Folders under exec/ whose names hold any bytes a POSIX name may hold, each holding a whole save's files: a
#: leftover no one published (a step a framework cannot read in its name, an attempt no job is given).
HOSTILE_FOLDERS = [
    b"exec/A/checkpoint-30\xff",
    b"exec/A/line\nbreak",
    b"exec/A/" + b"c" * 255,
    b"exec/bad\xff/checkpoint-40",
    b"exec/nl\nx/checkpoint-40",
    b"exec/-lead%+\\/checkpoint-40",
]
#: How exec/ is while a round runs: there, an empty folder in its place (a filesystem not mounted: every save
#: looks gone), or a plain file in its place.
EXEC_STATES = ["there", "there", "there", "unmounted", "file"]
#: ``-orphans-age``: the shortest there is, so a save the trainer wrote before the round is a leftover.
ORPHANS_AGE = "1ms"


def model_settings(share: float = 1.0) -> settings:
    """The chosen profile (``model-long`` when selected, else ``model-ci``), ``share`` of its examples."""
    name = "model-long" if settings.get_current_profile_name() == "model-long" else "model-ci"
    base = settings.get_profile(name)
    return settings(
        base,
        max_examples=max(3, round(base.max_examples * share)),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


Files = dict[bytes, bytes]


@dataclass
class Save:
    attempt: str
    step: int
    files: Files
    whole: bool

    @property
    def path(self) -> str:
        return f"exec/{self.attempt}/checkpoint-{self.step}"

    @property
    def key(self) -> tuple[int, int]:
        return EPOCHS[self.attempt], self.step


@dataclass
class World:
    """A POSIX root at BASE/ckpt with neighbours nothing may touch (BASE/ckptx laid out as a root,
    BASE/outside), and what the user knows of it."""

    base: Path
    restore: Any
    saves: dict[str, Save] = field(default_factory=dict)
    promised: set[str] = field(default_factory=set)  # paths a published line (or a finished scan) promised
    moments: list[str] = field(default_factory=list)  # published lines whose save was not there as printed

    def __post_init__(self) -> None:
        self.root = self.base / "ckpt"
        self.root.mkdir(parents=True)
        sib = self.base / "ckptx" / "exec" / "A" / "checkpoint-10"
        sib.mkdir(parents=True)
        (sib / MODEL_FILE).write_bytes(b"neighbour")
        (sib / STATE_FILE).write_bytes(real_state(10))
        (self.base / "outside").mkdir()
        (self.base / "outside" / "note").write_bytes(b"outside")
        self.sentinel = tree(self.base / "ckptx", self.base / "outside")

    def loc(self, path: str) -> str:
        return f"{self.root}/{path}"

    def write(self, save: Save) -> None:
        folder = os.fsencode(str(self.root / save.path))
        os.makedirs(folder, exist_ok=True)
        for name, data in save.files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        self.saves[save.path] = save

    def leftover(self, rel: bytes) -> None:
        """A folder no one publishes, named with any bytes, holding a whole save's files."""
        folder = os.path.join(os.fsencode(str(self.root)), rel)
        os.makedirs(folder, exist_ok=True)
        for name, data in save_files(40, True, []).items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)

    def take_exec(self, how: str) -> None:
        """exec/ out of reach for a while: ``unmounted`` (an empty folder where it was) or ``file``."""
        if how == "there":
            return
        (self.root / "exec").rename(self.root / "exec.away")
        if how == "unmounted":
            (self.root / "exec").mkdir()
        else:
            (self.root / "exec").write_bytes(b"not a folder")

    def give_exec(self) -> None:
        """exec/ back as it was (what a command made in the stand-in goes with it)."""
        away = self.root / "exec.away"
        if not away.exists():
            return
        stand_in = self.root / "exec"
        if stand_in.is_dir() and not stand_in.is_symlink():
            shutil.rmtree(stand_in)
        elif stand_in.exists() or stand_in.is_symlink():
            stand_in.unlink()
        away.rename(stand_in)

    def delete_by_hand(self, path: str) -> None:
        shutil.rmtree(self.root / path)

    def there(self, path: str) -> bool:
        """The save at ``path`` holds exactly the files the trainer wrote (read with os, as bytes)."""
        folder = os.fsencode(str(self.root / path))
        save = self.saves.get(path)
        if save is None or not os.path.isdir(folder):
            return False
        got: Files = {}
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                got[name] = f.read()
        return got == save.files

    def run(self, *argv: str) -> Result:
        return call(list(argv), (), self.restore)

    def args(self) -> list[str]:
        return ["-checkpoint", str(self.root)]

    def resolve(self, deep: bool = False) -> Result:
        return self.run("resolve", *self.args(), *(["-verify=deep"] if deep else []))

    def answered(self) -> str | None:
        """The path resolve answers with (None: nothing)."""
        r = self.resolve()
        if r.code != 0 or not r.out:
            return None
        loc = r.out.rstrip("\n")
        assert loc.startswith(f"{self.root}/"), r
        return loc[len(f"{self.root}/") :]

    def newest_promised(self) -> Save | None:
        live = [
            self.saves[p] for p in self.promised if p in self.saves and self.saves[p].whole and self.there(p)
        ]
        return max(live, key=lambda s: s.key, default=None)


def save_files(step: int, whole: bool, extra: list[bytes]) -> Files:
    files: Files = {MODEL_FILE.encode(): b"weights-%d" % step}
    files.update({name: b"x%d" % i for i, name in enumerate(extra)})
    state = real_state(step)
    files[STATE_FILE.encode()] = state if whole else state[: len(state) // 2]
    return files


def published_paths(world_root: str, out: str) -> list[str]:
    """The paths the ``published`` lines of ``out`` name below ``world_root``; any other location fails."""
    found = []
    for line in out.splitlines():
        if not line.startswith("published "):
            continue
        loc = line.rsplit(", ", 1)[1].rstrip(")")
        assert loc.startswith(world_root + "/"), f"a published line names {loc!r}, outside the root"
        found.append(loc[len(world_root) + 1 :])
    return found


# -- the state a round starts from ----------------------------------------------------------------------------

SAVE = st.tuples(
    st.sampled_from(sorted(EPOCHS)),
    st.sampled_from(STEPS),
    st.sampled_from(["whole", "whole", "cut"]),
    st.lists(st.sampled_from(HOSTILE), max_size=2, unique=True),
    st.sampled_from(["no", "no", "published", "published then deleted"]),
)


def prepare(world: World, drawn: list[tuple[str, int, str, list[bytes], str]]) -> None:
    """The trainer writes the saves; the operator publishes some by hand, then deletes some of those."""
    for attempt, step, how, extra, fate in drawn:
        save = Save(attempt, step, save_files(step, how == "whole", extra), how == "whole")
        if save.path in world.saves:
            continue
        world.write(save)
        if fate != "no" and save.whole:
            r = world.run(
                "publish",
                "-checkpoint",
                str(world.root),
                "-epoch",
                str(EPOCHS[attempt]),
                world.loc(save.path),
                str(step),
            )
            world.promised |= set(published_paths(str(world.root), r.out))  # promised only what it said
    for attempt, step, how, _, fate in drawn:
        path = f"exec/{attempt}/checkpoint-{step}"
        if fate == "published then deleted" and how == "whole" and os.path.isdir(world.root / path):
            world.delete_by_hand(path)


def publisher(world: World, kind: str, attempt: str, keep: int, pick: int) -> Actor:
    e = str(EPOCHS[attempt])
    if kind == "watch":
        return Actor(
            "watch", ["watch", *world.args(), "-framework", "hf", f"-attempt={attempt}", "-epoch", e]
        )
    if kind == "run":
        from publish.verbs.run import Signals

        return Actor(
            "run",
            [
                "run",
                *world.args(),
                "-framework",
                "hf",
                f"-attempt={attempt}",
                "-epoch",
                e,
                "-keep",
                str(keep),
                "--",
                "true",
            ],
            stop=Signals,
        )
    paths = sorted(p for p, s in world.saves.items() if s.whole and os.path.isdir(world.root / p))
    path = paths[pick % len(paths)] if paths else "exec/A/checkpoint-99"  # a missing save: fails loudly
    a, step = path.split("/")[1], path.rsplit("-", 1)[1]
    return Actor("publish", ["publish", *world.args(), "-epoch", str(EPOCHS[a]), world.loc(path), step])


def pruner(world: World, kind: str, keep: int) -> Actor:
    more = ["-orphans", "-orphans-age", ORPHANS_AGE] if kind == "orphans" else []
    return Actor("prune", ["prune", *world.args(), "-keep", str(keep), *more])


def at_the_moment(world: World, actors: list[Actor]) -> list[Actor]:
    """``actors``, each ``published`` line they print checked as it is written, no other thread running (the
    promise holds "at that moment"): the save it names is there with the trainer's bytes, on the tier it
    names.  What is not is kept in ``world.moments``."""
    fast = str(world.root)
    mirror = world.mirror.url if isinstance(world, Tiers) else "\0"

    def check(line: str) -> None:
        if not line.startswith("published "):
            return
        loc = line.rsplit(", ", 1)[1].rstrip(")")
        if isinstance(world, Tiers) and loc.startswith(mirror + "/"):
            path = loc[len(mirror) + 1 :]
            if not world.on_mirror(path):
                world.moments.append(f"{line!r}: the mirror holds {sorted(world.mirror_files(path))} there")
        elif loc.startswith(fast + "/"):
            path = loc[len(fast) + 1 :]
            if not world.there(path):
                world.moments.append(f"{line!r}: the fast root does not hold that save whole")
        else:
            world.moments.append(f"{line!r} names neither root")

    for a in actors:
        a.on_line = check
    return actors


def check_round(
    world: World, actors: list[Actor], before: str | None, trace: list[str], seen: bool = True
) -> None:
    """The invariants of the module's docstring, 1 to 4, after a round.  ``seen``: exec/ was there while the
    round ran (else a scan that ended clean saw no save, and promised none of those exec/ holds again)."""
    why = f"\nactors: {[(a.argv, a.result) for a in actors]}\norder: {trace}"
    assert not world.moments, (
        "a published line named a save not there as it was printed:\n" + "\n".join(world.moments) + why
    )
    assert tree(world.base / "ckptx", world.base / "outside") == world.sentinel, (
        "outside the root changed" + why
    )
    for a in actors:  # 7. every failure names the thing at fault
        assert a.result is not None and "internal error" not in a.result.err, "an internal error" + why
    prunes = [a for a in actors if a.argv[0] == "prune" or (a.argv[0] == "run" and "-keep" in a.argv)]
    printed: list[str] = []
    for a in actors:
        assert a.result is not None
        printed += published_paths(str(world.root), a.result.out)
        if seen and a.argv[0] in ("watch", "run") and "did not finish" not in a.result.err:
            attempt = next(x.split("=", 1)[1] for x in a.argv if x.startswith("-attempt="))
            # A scan promises the whole saves of its attempt when it ended clean, or when each thing it
            # said names one of them (that save is left out); a scan that failed on the root or on exec/
            # itself (out of reach) promised nothing.
            said = [
                line
                for line in a.result.err.splitlines()
                if line.startswith("publish: ") and not line.startswith("publish: run: ")  # run's notes
            ]
            inside = f"{world.root}/exec/{attempt}/"
            if a.result.code == 0 or all(inside in line for line in said):
                world.promised |= {
                    p
                    for p, s in world.saves.items()
                    if s.attempt == attempt
                    and s.whole
                    and world.there(p)
                    and not any(world.loc(p) in line for line in said)
                }
    world.promised |= set(printed)
    newest = world.newest_promised()
    # 2. a published line names a save that is there, whole, and kept
    for path in printed:
        if world.there(path):
            continue
        save = world.saves.get(path)
        assert save is not None, f"published {path}, which the trainer never wrote" + why
        newer = [p for p in world.promised if world.there(p) and world.saves[p].key > save.key]
        allowed = any(len(newer) >= int(a.argv[a.argv.index("-keep") + 1]) for a in prunes)
        assert allowed, f"published {path}, which is gone after the round (a prune removed it)" + why
    # 1. resolve answers the newest whole save promised that exists
    for deep in (False, True):
        r = world.resolve(deep)
        want = "" if newest is None else world.loc(newest.path) + "\n"
        assert r.out == want, f"resolve{' -verify=deep' if deep else ''}: {r}, expected {want!r}" + why
        assert r.code == 0 or (r.code == 1 and want == ""), r
    # 3. no prune removes the save resolve answered just before it, unless a newer one is answered now
    if before is not None and not world.there(before):
        now = world.answered()
        assert now is not None and world.saves[now].key > world.saves[before].key, (
            f"resolve answered {before} before the round; it is gone and resolve now answers {now}" + why
        )


def out_of_reach(world: World, actors: list[Actor], before: str | None, trace: list[str]) -> None:
    """Invariant 8, after a round run while exec/ was out of reach (then put back): no save could be seen,
    so none was published and none removed: every prune of the round said why it removed nothing (exit
    non-zero or a message), ``resolve`` meanwhile does not answer as if the saves were gone for good (exit 1
    when it answered a save before), and once exec/ is back it answers the same save as before, and every
    save published before is still published (deleted by hand one after another, newest first, each next one
    is resolve's answer)."""
    why = f"\nactors: {[(a.argv, a.result) for a in actors]}\norder: {trace}"
    for a in actors:
        assert a.result is not None
        assert not published_paths(str(world.root), a.result.out), "published with exec/ out of reach" + why
        # With no publication, a prune has nothing to judge: an empty exec/ is also a new root's.
        published = (world.root / "pub").is_dir() and bool(os.listdir(world.root / "pub"))
        if published and (a.argv[0] == "prune" or (a.argv[0] == "run" and "-keep" in a.argv)):
            said = [x for x in a.result.err.splitlines() if "exec" in x]
            assert a.result.code != 0 or said, "a prune with exec/ out of reach did not say why" + why
    r = world.resolve()
    if before is not None:
        assert r.code == 1 and r.out == "", f"resolve with exec/ out of reach: {r}" + why
    world.give_exec()
    assert world.answered() == before, "resolve answers another save once exec/ is back" + why


def still_published(world: World, why: str) -> None:
    """Every save published and there is still published: deleted by hand one after another, newest first,
    each next one is resolve's answer (used after a round that could publish nothing and remove nothing)."""
    kept = sorted(
        (s for p, s in world.saves.items() if p in world.promised and world.there(p)), key=lambda s: s.key
    )
    while kept:
        newest = kept.pop()
        if not newest.whole:
            continue
        assert world.answered() == newest.path, f"{newest.path} is no longer published" + why
        world.delete_by_hand(newest.path)
        world.promised.discard(newest.path)


def chooser(data: Any) -> Any:
    return lambda offered: data.draw(st.integers(0, len(offered) - 1))


# -- the tests -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gated() -> Any:
    with gated_stores():
        yield


@settings(model_settings())
@given(
    start=st.lists(SAVE, min_size=1, max_size=5),
    folders=st.lists(st.sampled_from(HOSTILE_FOLDERS), max_size=2, unique=True),
    exec_state=st.sampled_from(EXEC_STATES),
    one=st.sampled_from(["publish", "watch", "run"]),
    other=st.sampled_from(["keep", "orphans", "watch", "publish"]),
    attempt=st.sampled_from(sorted(EPOCHS)),
    keep=st.integers(1, 2),
    pick=st.integers(0, 100),
    data=st.data(),
)
def test_publication_against_prune(
    gated: None,
    tmp_path: Path,
    start: Any,
    folders: list[bytes],
    exec_state: str,
    one: str,
    other: str,
    attempt: str,
    keep: int,
    pick: int,
    data: Any,
) -> None:
    """Invariants 1 to 4 and 7 (items (a), (b), (c), (f) and (g) of the docstring): a publication and a prune
    (or a second publication) at once on one POSIX root; with ``exec_state`` not "there", exec/ is out of
    reach while they run (invariant 8)."""
    world = World(tmp_path / uuid.uuid4().hex[:8], fresh_registry())
    prepare(world, start)
    for rel in folders:
        world.leftover(rel)
    before = world.answered()
    world.take_exec(exec_state)
    first = publisher(world, one, attempt, keep, pick)
    second = (
        pruner(world, other, keep)
        if other in ("keep", "orphans")
        else publisher(world, other, sorted(EPOCHS)[pick % len(EPOCHS)], keep, pick + 1)
    )
    actors = at_the_moment(world, [first, second])
    trace = together(actors, chooser(data), world.restore)
    if exec_state != "there":
        out_of_reach(world, actors, before, trace)
    check_round(world, actors, before, trace, seen=exec_state == "there")
    if exec_state != "there":
        still_published(world, f"\nactors: {[(a.argv, a.result) for a in actors]}\norder: {trace}")


def test_keep_counts_only_saves_that_exist(gated: None, tmp_path: Path) -> None:
    """Item (a): ``run -keep 1`` after the newest save was deleted by hand keeps the only good save."""
    world = World(tmp_path, fresh_registry())
    prepare(world, [("A", 10, "whole", [], "published"), ("A", 20, "whole", [], "published then deleted")])
    before = world.answered()
    assert before == "exec/A/checkpoint-10"
    actors = [publisher(world, "run", "A", 1, 0)]
    check_round(world, actors, before, together(actors, lambda offered: 0, world.restore))


def test_a_name_that_is_not_utf8_stops_no_other_save(gated: None, tmp_path: Path) -> None:
    """Item (b): a save holding ``bad\\377.bin`` beside a whole save; the watch publishes both."""
    world = World(tmp_path, fresh_registry())
    prepare(world, [("A", 10, "whole", [b"bad\xff.bin"], "no"), ("A", 20, "whole", [], "no")])
    actors = [publisher(world, "watch", "A", 1, 0)]
    check_round(world, actors, None, together(actors, lambda offered: 0, world.restore))


def test_prune_with_exec_unmounted_removes_nothing(gated: None, tmp_path: Path) -> None:
    """Item (g), invariant 8: A/10 and A/20 published, exec/ replaced by an empty folder (its filesystem not
    mounted); ``prune -keep 1`` sees every save gone.  It must remove nothing and say why; once exec/ is
    back, A/20 deleted by hand leaves A/10 resolve's answer.  On the code before, the prune exits 0 saying
    nothing and removes A/10's entry: resolve then answers nothing."""
    world = World(tmp_path, fresh_registry())
    prepare(world, [("A", 10, "whole", [], "published"), ("A", 20, "whole", [], "published")])
    before = world.answered()
    assert before == "exec/A/checkpoint-20"
    world.take_exec("unmounted")
    actors = [pruner(world, "keep", 1)]
    trace = together(actors, lambda offered: 0, world.restore)
    out_of_reach(world, actors, before, trace)
    check_round(world, actors, before, trace, seen=False)
    still_published(world, f"\n{actors[0].result}")


def test_prune_orphans_beside_folders_named_with_any_bytes(gated: None, tmp_path: Path) -> None:
    """Item (f), invariant 7: leftovers in exec/ named ``bad\\377`` and ``nl\\nx`` (attempts no job is
    given), A/10 published.  ``prune -orphans`` ends without an internal error, and A/10 stays resolve's
    answer.  On the code before: ``publish: internal error: UnicodeEncodeError``, exit 1."""
    world = World(tmp_path, fresh_registry())
    prepare(world, [("A", 10, "whole", [], "published")])
    for rel in (b"exec/bad\xff/checkpoint-40", b"exec/nl\nx/checkpoint-40"):
        world.leftover(rel)
    before = world.answered()
    actors = [pruner(world, "orphans", 1)]
    check_round(world, actors, before, together(actors, lambda offered: 0, world.restore))


# -- two tiers: a POSIX fast root and its SeaweedFS mirror --------------------------------------------------------


class Tiers(World):
    """The world above with a mirror: a fresh prefix of the server's shared bucket, read with boto3."""

    def __init__(self, base: Path, restore: Any, server: Any) -> None:
        super().__init__(base, restore)
        from tests.support.s3roots import Root

        self.mirror = Root(server, base, init=False)
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        s3.put_object(Bucket=bucket, Key=f"{prefix}x/exec/A/checkpoint-10/{MODEL_FILE}", Body=b"neighbour")
        self.mirror_sentinel = self.beside_mirror()

    def args(self) -> list[str]:
        return ["-checkpoint", str(self.root), "-mirror", self.mirror.url, "-creds", self.mirror.creds]

    def beside_mirror(self) -> dict[str, str]:
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        got = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "x/").get("Contents", [])
        return {o["Key"]: o["ETag"] for o in got}

    def on_mirror(self, path: str) -> bool:
        """The mirror holds the save at ``path`` with exactly the bytes the trainer wrote."""
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        save = self.saves.get(path)
        if save is None:
            return False
        under = f"{prefix}/{path}/"
        got = s3.list_objects_v2(Bucket=bucket, Prefix=under).get("Contents", [])
        files = {
            o["Key"][len(under) :].encode(): s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            for o in got
        }
        return files == save.files

    def mirror_files(self, path: str) -> list[str]:
        """The keys under the mirror's folder of ``path``, relative to it."""
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        under = f"{prefix}/{path}/"
        got = s3.list_objects_v2(Bucket=bucket, Prefix=under).get("Contents", [])
        return [o["Key"][len(under) :] for o in got]


def check_tiers(world: Tiers, actors: list[Actor], trace: list[str]) -> None:
    """Invariants 2, 4 and 5 on the mirror after a round."""
    why = f"\nactors: {[(a.argv, a.result) for a in actors]}\norder: {trace}"
    assert not world.moments, (
        "a published line named a save not there as it was printed:\n" + "\n".join(world.moments) + why
    )
    assert world.beside_mirror() == world.mirror_sentinel, "keys beside the mirror changed" + why
    keeps = [int(a.argv[a.argv.index("-mirror-keep") + 1]) for a in actors if "-mirror-keep" in a.argv]
    on_mirror = {p for p in world.saves if world.on_mirror(p)}

    def may_be_gone(path: str) -> bool:  # a -mirror-keep M of the round, and M newer saves on the mirror
        newer = [p for p in on_mirror if world.saves[p].key > world.saves[path].key]
        return any(len(newer) >= m for m in keeps)

    for a in actors:
        assert a.result is not None
        mirrored = published_paths(
            world.mirror.url, "\n".join(x for x in a.result.out.splitlines() if world.mirror.url in x)
        )
        for path in mirrored:
            assert path in on_mirror or may_be_gone(path), (
                f"published {path} on the mirror; it is not there" + why
            )
        if a.argv[0] == "run" and a.result.code == 0:
            fast = published_paths(
                str(world.root), "\n".join(x for x in a.result.out.splitlines() if world.mirror.url not in x)
            )
            for path in fast:
                assert path in on_mirror or may_be_gone(path), (
                    f"run exited 0; {path}, which it published, is not on the mirror" + why
                )


MIRRORING = st.sampled_from(["watch", "run"])


@pytest.mark.s3
@settings(model_settings(0.6))
@given(
    steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3, unique=True),
    one=MIRRORING,
    other=st.sampled_from(["mirror-keep", "watch", "run"]),
    mirror_keep=st.integers(1, 2),
    data=st.data(),
)
def test_mirror_uploads_against_prune_and_each_other(
    gated: None,
    weed: Any,
    tmp_path: Path,
    steps: list[int],
    one: str,
    other: str,
    mirror_keep: int,
    data: Any,
) -> None:
    """Invariants 2, 4 and 5 (items (c) and (e) of the docstring): a mirroring ``watch`` or ``run`` against a
    ``prune -mirror-keep`` or a second mirroring process, one fast root and its mirror."""
    world = Tiers(tmp_path / uuid.uuid4().hex[:8], fresh_registry(), weed)
    prepare(world, [("A", s, "whole", [b"100%", b"a+b", b"-lead"], "no") for s in steps])
    first = mirroring(world, one, mirror_keep)
    second = (
        Actor("prune", ["prune", *world.args(), "-keep", "3", "-mirror-keep", str(mirror_keep)])
        if other == "mirror-keep"
        else mirroring(world, other, None)
    )
    actors = at_the_moment(world, [first, second])
    trace = together(actors, chooser(data), world.restore)
    check_tiers(world, actors, trace)


def mirroring(world: Tiers, kind: str, mirror_keep: int | None) -> Actor:
    more = [] if mirror_keep is None else ["-mirror-keep", str(mirror_keep)]
    if kind == "watch":
        return Actor(
            "watch", ["watch", *world.args(), "-framework", "hf", "-attempt=A", "-epoch", "1", *more]
        )
    from publish.verbs.run import Signals

    argv = ["run", *world.args(), "-framework", "hf", "-attempt=A", "-epoch", "1", *more, "--", "true"]
    return Actor("run", argv, stop=Signals)


@pytest.mark.s3
def test_idle_count_survives_a_lost_fast_root(
    gated: None, weed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 6 (item (d) of the docstring): a job whose dispatches resume from the mirror's save after
    the fast root was lost, and publish nothing, is requeued ``-max-idle-requeues`` times, then not."""
    from publish.process import slurm
    from publish.verbs.run import Signals

    requeues: list[str] = []
    monkeypatch.setattr(slurm.Batch, "state", lambda self: "RUNNING")
    monkeypatch.setattr(slurm.Batch, "requeue", lambda self: requeues.append("requeued"))
    world = Tiers(tmp_path, fresh_registry(), weed)
    prepare(world, [("A", 10, "whole", [], "no")])
    watch = mirroring(world, "watch", None)
    together([watch], lambda offered: 0, world.restore)
    assert world.on_mirror("exec/A/checkpoint-10"), watch.result
    shutil.rmtree(world.root)  # the node-local disk is gone

    def stopped() -> Any:  # the job's warning signal came before COMMAND could start: nothing is saved
        import signal

        s = Signals()
        s.note(signal.SIGTERM)
        return s

    codes = []
    for n in range(3):
        argv = ["run", *world.args(), "-framework", "hf", f"-attempt=B{n}", "-epoch", "5", "-requeue",
                "-max-idle-requeues", "1", "--", "true"]  # fmt: skip
        job = Actor("run", argv, env={"SLURM_JOB_ID": "5"}, stop=stopped)
        together([job], lambda offered: 0, world.restore)
        assert job.result is not None
        codes.append((job.result.code, job.result.err))
        if n == 1:
            shutil.rmtree(world.root, ignore_errors=True)  # lost again between dispatches
    assert len(requeues) == 1, f"{len(requeues)} idle dispatches requeued, at most 1 allowed: {codes}"
    assert codes[-1][0] != 0, codes


@pytest.mark.s3
def test_run_says_unfinished_uploads(gated: None, weed: Any, tmp_path: Path) -> None:
    """Invariant 5 (item (e) of the docstring): ``run -mirror`` whose wait for its last uploads runs out
    before they finish exits non-zero; an order the drawn rounds may take, here taken on purpose."""
    world = Tiers(tmp_path, fresh_registry(), weed)
    prepare(world, [("A", 10, "whole", [], "no")])
    actors = [mirroring(world, "run", None)]

    def slow_uploads(offered: list[str]) -> int:  # time runs out for run's wait on the uploads, nothing else
        late = [i for i, x in enumerate(offered) if "wait in finish (time out)" in x]
        return late[0] if late else 0

    check_tiers(world, actors, together(actors, slow_uploads, world.restore))


def in_phases(*steps: tuple[str, str | None]) -> Any:
    """A chosen order, as a list of steps (actor, until): the threads of ``actor`` (its prefix, "0:") go,
    the first started of them first and a wait's time never running out while another can go, until one of them
    waits at the store operation ``until`` (None: until the actor has ended); then the next step.  Once
    the steps are done, the first thread offered goes."""
    todo = list(steps)

    def choose(offered: list[str]) -> int:
        while todo:
            who, until = todo[0]
            mine = [i for i, x in enumerate(offered) if x.startswith(who)]
            if not mine or (until is not None and any(offered[i].endswith(f":{until}") for i in mine)):
                todo.pop(0)
                continue
            ready = [i for i in mine if not offered[i].endswith("(time out)")]
            return (ready or mine)[0]
        return 0

    return choose


@pytest.mark.s3
def test_mirror_upload_against_a_second_mirroring_process(gated: None, weed: Any, tmp_path: Path) -> None:
    """Invariant 2 on the mirror (the mirror half of item (c)), an order chosen on purpose.

    A/10 is published on the fast root; A/20 lies whole in A, not yet published.  Two mirroring processes:
    0 (``watch -mirror -attempt=B``, which publishes nothing of its own) and 1 (``watch -mirror -attempt=A
    -mirror-keep 1``).  On the code before:

    1. process 0's pass finds A/10 pending: no mirror entry; it uploads A/10's objects, finds no tombstone on
       the mirror, and is about to write A/10's manifest and entry there;
    2. process 1's first pass uploads A/10 too and creates its mirror entry; its scan publishes A/20 on the
       fast root; its last pass uploads A/20, creates its entry, and prunes the mirror to 1: A/10's
       tombstone, entry and manifest go, then its objects;
    3. process 0 writes A/10's manifest and creates its entry (``If-None-Match: *`` succeeds: the entry is
       gone) and prints ``published ... exec/A/checkpoint-10`` naming the mirror: the mirror's entry names a
       save whose files are gone, at the moment the line is printed.

    The same happens with a ``prune -mirror -mirror-keep 1`` as a third process in step 2 (after a second
    uploader made the entry): the prune sees A/10 as an old entry's folder.  Neither the mirror's prune nor
    the upload looks at the other between the upload's tombstone check and its entry."""
    world = Tiers(tmp_path, fresh_registry(), weed)
    prepare(world, [("A", 10, "whole", [b"100%"], "published")])
    world.write(Save("A", 20, save_files(20, True, [b"-lead"]), True))
    first = Actor("watch", ["watch", *world.args(), "-framework", "hf", "-attempt=B", "-epoch", "2"])
    actors = at_the_moment(world, [first, mirroring(world, "watch", 1)])
    trace = together(actors, in_phases(("0:", "s3.write_manifest"), ("1:", None)), world.restore)
    why = f"\nactors: {[(a.argv, a.result) for a in actors]}\norder: {trace}"
    assert "0:watch:s3.create_entry" in trace, "the order was not the one described" + why
    check_tiers(world, actors, trace)
