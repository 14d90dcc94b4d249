"""The promise `publish` makes a training job, checked as a whole: one root, POSIX or S3, driven through random
sequences of what jobs, operators and neighbours do, and after every step compared with a plain model.

The promise: resolve answers with the newest published save that exists (and that save is whole, unless it
was published by hand while not whole), or fails loudly (exit 1, a ``publish: `` message); nothing a job still
needs is deleted, and nothing outside the root is touched; no step hangs; no secret is printed, and what is
printed as data (entry names, locations) is exactly the data, even where a credential overlaps it.

Steps: a trainer writes a save (whole, its trainer_state.json cut off, or without one); a watch makes its last
scan (or runs as a process and is stopped with SIGTERM); ``publish publish`` of a save, a missing folder, or a
reserved path; prune, and a prune cut short that a later prune finishes; ``publish init``; a neighbour plants
a bad name in pub/ or tomb/, and an operator removes them; a link loop among the saves (POSIX); an operator
deletes a published save; a byte of a published save flips; the credentials change to ones that overlap the
data (S3).  After every step, ``resolve -verify=deep`` answers with the newest save that matches the manifest
written when it was published (every entry has one).

The prune steps state the user's promise, never prune's plan: each ``removed`` line names a folder now gone,
``-keep N`` leaves the N newest published saves that existed (a prune cut short need not), and the save
``resolve`` answered before is there unless ``resolve`` now answers a newer one; which other folders and
entries a prune removed is its own business, and the model then follows what the root holds.  On the code
before, a sequence that deletes the newest published save by hand and then prunes with ``-keep 1`` fails
here (item (a) of tests/promise/test_model_interleaved.py); the ``model-ci`` run does not always draw it,
the interleaved module's constructed test does.

The examples and steps per run are the hypothesis profile ``model-ci`` (registered in tests/conftest.py) or,
with ``--hypothesis-profile=model-long``, that longer one.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.support.model_support import (
    MODEL_FILE,
    OVERLAP_ACCESS_KEY,
    OVERLAP_SECRET_KEY,
    STATE_FILE,
    PosixRoot,
    S3Root,
    b32,
    entry_name,
    fresh_registry,
    unb32,
)
from tests.support.trainer_saves import real_state

#: Each attempt's epoch: a later attempt has a greater one.  The last is also the overlapping access key.
EPOCHS = {"A": 1, "B": 2, OVERLAP_ACCESS_KEY: 3}
STEPS = [10, 20, 30, 40]
LOOP_STEP = 77  # a link loop named like a save; no trainer writes this step
RESERVED = ["", "pub", "pub/x", "tomb", "tomb/x", "man", "man/x", "exec"]
_FULL = {step: real_state(step) for step in STEPS}


def full_state(step: int) -> bytes:
    return _FULL[step]


class RootModel(RuleBasedStateMachine):
    """A plain model of one root: its saves (folder: files), entries (name: (epoch, step, path)), tombstones
    left by a cut prune, and what neighbours planted."""

    def make_root(self, exists: bool) -> Any:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.root: Any = None

    # -- the model ----------------------------------------------------------------------------------------

    @initialize(exists=st.booleans())
    def start(self, exists: bool) -> None:
        self.root = self.make_root(exists)
        self.s3 = self.root.kind == "s3"
        self.dir_exists = exists  # POSIX: the root directory
        self.readme = exists and self.s3  # S3: an object that makes the root exist
        self.marker = False  # S3: PREFIX/.publish-root, made by init
        self.saves: dict[str, dict[str, bytes]] = {}
        self.entries: dict[str, tuple[int, int, str]] = {}
        self.planted_pub: set[str] = set()
        self.planted_tomb: set[str] = set()
        self.tombs: set[str] = set()
        self.deleted: set[str] = set()  # saves an operator deleted while published
        self.loops: set[str] = set()
        self.hand_unwhole: set[str] = set()  # entries published by hand while their save was not whole
        self.manifests: dict[str, dict[str, bytes]] = {}  # entry: the save's files when it was published
        self.rotted: set[str] = set()  # published saves a byte of which flipped since (bit rot, a bad disk)

    @property
    def root_exists(self) -> bool:
        if not self.s3:
            return self.dir_exists
        return bool(
            self.readme
            or self.marker
            or self.saves
            or self.entries
            or self.planted_pub
            or self.planted_tomb
            or self.tombs
        )

    def whole(self, path: str) -> bool:
        m = re.fullmatch(r"exec/[^/]+/checkpoint-(\d+)", path)
        files = self.saves.get(path)
        if m is None or files is None or int(m.group(1)) not in _FULL:
            return False
        return files == {MODEL_FILE: b"w", STATE_FILE: full_state(int(m.group(1)))}

    def newest_first(self) -> list[tuple[str, tuple[int, int, str]]]:
        return sorted(self.entries.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[0]), reverse=True)

    def answer(self) -> tuple[tuple[int, int], str] | None:
        """The save resolve answers with, as the user knows it: the newest published save that exists (its
        epoch and step, and its path)."""
        for _, (epoch, step, path) in self.newest_first():
            if path in self.saves:
                return (epoch, step), path
        return None

    def newest_existing(self, keep: int) -> list[str]:
        """The ``keep`` newest published saves that exist: what ``-keep N`` promises to leave."""
        found: list[str] = []
        for _, (_, _, path) in self.newest_first():
            if path in self.saves and path not in found:
                found.append(path)
        return found[:keep]

    def after_prune(
        self, out: str, answer: tuple[tuple[int, int], str] | None, newest: list[str], whole: bool
    ) -> None:
        """The user's promise after a prune (``whole``: one that was not cut short), then the model follows
        the root: every ``removed`` line names a folder now gone; the N newest published saves that existed
        are there (a whole prune); the save resolve answered before is there unless resolve now answers a
        newer one.  Which other folders and entries it removed is the prune's business."""
        real, _ = self.root.saves()
        for line in out.splitlines():
            assert line.startswith(f"removed {self.root.location('')}/"), f"an unexpected line {line!r}"
            folder = line[len(f"removed {self.root.location('')}/") :]
            assert folder not in real, f"prune said it removed {folder}, which is there"
        if whole:
            for path in newest:
                assert path in real, f"-keep {len(newest)} left {path} gone, one of the newest that existed"
        for folder in list(self.saves):
            if folder not in real:
                del self.saves[folder]
            elif set(real[folder]) != set(self.saves[folder]):
                assert set(real[folder]) <= set(self.saves[folder]), f"a prune added files to {folder}"
                self.saves[folder] = {n: self.saves[folder][n] for n in real[folder]}
        pub = self.root.names("pub")
        assert pub <= set(self.entries) | self.planted_pub, "a prune made an entry"
        self.entries = {n: e for n, e in self.entries.items() if n in pub}
        self.tombs = {t for t in (unb32(n) for n in self.root.names("tomb")) if t is not None}
        if answer is not None and answer[1] not in self.saves:
            now = self.answer()
            assert now is not None and now[0] > answer[0], (
                f"prune removed {answer[1]}, resolve's answer before it; resolve now answers {now}"
            )

    def every_save_gone(self) -> bool:
        """Entries, and none of their saves is there: a prune removes nothing and fails."""
        return bool(self.entries) and not any(p in self.saves for _, _, p in self.entries.values())

    def fails_loudly(self, r: Any, *naming: str) -> None:
        assert r.code == 1, f"exit {r.code}, expected 1; stdout {r.out!r} stderr {r.err!r}"
        assert r.out == "", r.out
        assert r.err.startswith("publish: "), r.err
        if naming:
            assert any(n in r.err for n in naming), f"{r.err!r} names none of {sorted(naming)}"

    # -- what a trainer does ----------------------------------------------------------------------------

    @rule(
        attempt=st.sampled_from(sorted(EPOCHS)),
        step=st.sampled_from(STEPS),
        how=st.sampled_from(["whole", "whole", "cut", "absent"]),
        at=st.integers(0, 10**6),
    )
    def trainer_writes(self, attempt: str, step: int, how: str, at: int) -> None:
        path = f"exec/{attempt}/checkpoint-{step}"
        # A trainer rewrites a save it has not finished, never a whole one, nor one a prune is removing.
        assume(not self.whole(path) and path not in self.tombs)
        state = full_state(step)
        self.root.write(f"{path}/{MODEL_FILE}", b"w")
        files = {**self.saves.get(path, {}), MODEL_FILE: b"w"}
        if how == "absent":
            self.root.unlink(f"{path}/{STATE_FILE}")
            files.pop(STATE_FILE, None)
        else:
            # Cut anywhere before its closing brace: what a trainer killed mid-write leaves.
            data = state if how == "whole" else state[: at % (len(state) - 1)]
            self.root.write(f"{path}/{STATE_FILE}", data)
            files[STATE_FILE] = data
        self.saves[path] = files
        self.deleted.discard(path)
        self.dir_exists = True

    @rule(attempt=st.sampled_from(sorted(EPOCHS)), process=st.sampled_from([False, False, False, True]))
    def watch(self, attempt: str, process: bool) -> None:
        epoch = EPOCHS[attempt]
        args = ["-framework", "hf", "-attempt", attempt, "-epoch", str(epoch)]
        r = self.root.watch_process(*args) if process else self.root.run("watch", *args, last_scan=True)
        if not self.root_exists:
            if self.s3:  # nothing there to publish
                assert r.out == "" and r.code in (0, 1), (r.code, r.out, r.err)
            else:
                self.fails_loudly(r)
            return
        candidates = []
        for path, files in self.saves.items():
            m = re.fullmatch(rf"exec/{re.escape(attempt)}/checkpoint-(\d+)", path)
            if m and files.get(STATE_FILE) == full_state(int(m.group(1))):
                candidates.append((int(m.group(1)), path))
        # A folder a cut prune is still removing (a tombstone names it, a folder around it or inside it) is
        # never published again, however whole what is left of it looks: the next prune finishes it.
        lines = []
        for step, path in sorted(candidates):
            name = entry_name(epoch, step, path)
            doomed = any(
                t == path or path.startswith(t + "/") or t.startswith(path + "/") for t in self.tombs
            )
            if name not in self.entries and not doomed:
                lines.append(f"published {name} (epoch {epoch}, step {step}, {self.root.location(path)})\n")
        assert r.code == 0, f"watch exited {r.code}: {r.err!r}"
        printed = r.out.splitlines(keepends=True)
        assert printed == lines, f"watch printed {r.out!r}, expected {lines!r}"
        for line in printed:
            name = line.split()[1]
            self.entries[name] = (epoch, int(name[21:41]), unb32(name[42:]) or "")
            self.manifests[name] = dict(self.saves[self.entries[name][2]])
        assert all(line.startswith("publish: ") for line in r.err.splitlines()), r.err
        loop = f"exec/{attempt}/checkpoint-{LOOP_STEP}"
        if loop in self.loops:
            said = [x for x in r.err.splitlines() if f"checkpoint-{LOOP_STEP}" in x]
            assert len(said) == 1, f"the link loop is not said once: {r.err!r}"

    # -- what an operator does --------------------------------------------------------------------------

    @rule(
        what=st.sampled_from(["save", "save", "save", "missing", *RESERVED, ".publish-root"]),
        pick=st.integers(0, 1000),
        step=st.sampled_from([*STEPS, 5]),
        epoch=st.integers(0, 3),
    )
    def publish(self, what: str, pick: int, step: int, epoch: int) -> None:
        names = {"pub": sorted(set(self.entries) | self.planted_pub), "tomb": sorted(self.tombs_listed())}
        reserved = what in RESERVED or (what == ".publish-root" and self.s3)
        if what in ("pub/x", "tomb/x"):
            top = what.split("/")[0]
            there = names[top]
            path = f"{top}/{there[pick % len(there)]}" if there else what  # one that exists, if any
        elif what == "save" and self.saves:
            path = sorted(self.saves)[pick % len(self.saves)]
        elif what in ("save", "missing", ".publish-root"):
            path = "exec/A/checkpoint-999" if what != ".publish-root" else what
        else:
            path = what
        loc = self.root.location(path)
        r = self.root.run("publish", "-epoch", str(epoch), loc, str(step))
        if reserved:
            self.fails_loudly(r, loc)
            return
        if not self.root_exists or path not in self.saves:
            self.fails_loudly(r)
            return
        name = entry_name(epoch, step, path)
        line = f"{name} (epoch {epoch}, step {step}, {loc})"
        if name in self.entries:
            assert (r.code, r.out) == (0, ""), (r.code, r.out, r.err)
            assert f"publish: {name} already published (epoch {epoch}, step {step}, {loc})\n" in r.err, r.err
            return
        assert (r.code, r.out) == (0, f"published {line}\n"), (r.code, r.out, r.err)
        self.entries[name] = (epoch, step, path)
        self.manifests[name] = dict(self.saves[path])
        if not self.whole(path):
            self.hand_unwhole.add(name)

    def tombs_listed(self) -> set[str]:
        return {b32(t) for t in self.tombs} | self.planted_tomb

    @rule(keep=st.integers(1, 3))
    def prune(self, keep: int) -> None:
        answer, newest = self.answer(), self.newest_existing(keep)
        r = self.root.run("prune", "-keep", str(keep))
        if not self.root_exists:
            if self.s3:
                assert r.out == "" and r.code in (0, 1), (r.code, r.out, r.err)
            else:
                self.fails_loudly(r)
            return
        if self.planted_pub or self.planted_tomb:
            self.fails_loudly(r, *self.planted_pub, *self.planted_tomb)
            return
        if self.every_save_gone():
            self.fails_loudly(r, "removed nothing")
            return
        assert r.code == 0, f"prune: {(r.code, r.out, r.err)!r}"
        self.after_prune(r.out, answer, newest, whole=True)

    @rule(keep=st.integers(1, 3), cut=st.integers(0, 40), land=st.booleans())
    def prune_cut_short(self, keep: int, cut: int, land: bool) -> None:
        """A prune killed after ``cut`` of its steps: the user's promise holds as after a whole one (the save
        resolve answered stays unless a newer one is answered), and a prune after it ends the same way."""
        assume(self.root_exists and not self.planted_pub and not self.planted_tomb)
        assume(not self.every_save_gone())
        answer, newest = self.answer(), self.newest_existing(keep)
        killed, r = self.root.cut_prune(keep, cut, land)
        self.after_prune(r.out, answer, newest, whole=not killed)

    @rule()
    def init(self) -> None:
        r = self.root.run("init")
        if self.root_exists:
            assert (r.code, r.out, r.err) == (
                0,
                "",
                f"publish: checkpoint root {self.root.loc} already exists\n",
            ), r
            if self.s3:
                self.marker = self.root.has_marker()
        else:
            assert (r.code, r.out, r.err) == (0, f"created {self.root.loc}\n", ""), r
            self.dir_exists = True
            self.marker = self.s3

    @rule(pick=st.integers(0, 1000))
    def a_published_save_rots(self, pick: int) -> None:
        """A byte of a published save's model file flips, its size unchanged: resolve still answers it, and
        resolve -verify=deep passes over it (on S3, whose manifests hold sizes only, it still answers)."""
        published = sorted(
            p for _, _, p in self.entries.values() if p in self.saves and MODEL_FILE in self.saves[p]
        )
        assume(published)
        path = published[pick % len(published)]
        data = bytes([self.saves[path][MODEL_FILE][0] ^ 1])
        self.root.write(f"{path}/{MODEL_FILE}", data)
        self.saves[path] = {**self.saves[path], MODEL_FILE: data}
        self.rotted.add(path)

    @rule(pick=st.integers(0, 1000))
    def operator_deletes_a_published_save(self, pick: int) -> None:
        published = sorted({p for _, _, p in self.entries.values()} & set(self.saves))
        assume(published)
        path = published[pick % len(published)]
        self.root.delete_folder(path)
        del self.saves[path]
        self.deleted.add(path)

    # -- what a neighbour does --------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(
            [
                "stray",
                ".hidden",
                "00000000000000000001-00000000000000000002-",
                entry_name(9, 99, "pub"),  # ...-OB2WE
                entry_name(9, 99, "exec"),
                entry_name(9, 99, "tomb"),
                entry_name(9, 99, "pub/x"),
                entry_name(9, 99, "tomb/x"),
                entry_name(0, 0, "exec"),  # the oldest entry, not the newest
                entry_name(9, 99, ".publish-root"),  # reserved on S3 only
            ]
        )
    )
    def plant_in_pub(self, name: str) -> None:
        assume(self.s3 or ".publish-root" not in (unb32(name[42:]) or ""))
        self.root.plant("pub", name)
        self.planted_pub.add(name)
        self.dir_exists = True

    @rule(
        name=st.sampled_from(
            ["OB2WE", b32("exec"), b32("tomb"), b32("pub/x"), "garbage!", b32(".publish-root")]
        )
    )
    def plant_in_tomb(self, name: str) -> None:
        assume(self.s3 or name != b32(".publish-root"))
        self.root.plant("tomb", name)
        self.planted_tomb.add(name)
        self.dir_exists = True

    @precondition(lambda self: self.planted_pub or self.planted_tomb)
    @rule()
    def operator_removes_planted_names(self) -> None:
        for n in self.planted_pub:
            self.root.unlink(f"pub/{n}")
        for n in self.planted_tomb:
            self.root.unlink(f"tomb/{n}")
        self.planted_pub, self.planted_tomb = set(), set()

    @precondition(lambda self: not self.s3)
    @rule(attempt=st.sampled_from(sorted(EPOCHS)), name=st.sampled_from(["loop", f"checkpoint-{LOOP_STEP}"]))
    def link_loop_in_saves(self, attempt: str, name: str) -> None:
        rel = f"exec/{attempt}/{name}"
        assume(rel not in self.loops)
        self.root.loop(rel)
        self.loops.add(rel)
        self.dir_exists = True

    @precondition(lambda self: self.s3 and self.root.creds == self.root.admin_creds)
    @rule()
    def credentials_overlap_the_data(self) -> None:
        self.root.creds = self.root.overlap_creds

    # -- the promise, after every step ------------------------------------------------------------------

    @invariant()
    def promise_kept(self) -> None:
        if self.root is None:
            return
        assert self.root.sentinel_unchanged(), "something outside the root changed"
        assert self.root.exists() == self.root_exists, f"the root exists: {self.root.exists()}"
        assert self.root.names("pub") == set(self.entries) | self.planted_pub, "pub/ is not as modelled"
        assert self.root.names("tomb") == self.tombs_listed(), "tomb/ is not as modelled"
        saves, links = self.root.saves()
        want = {p: {n: self.root.digest(b) for n, b in f.items()} for p, f in self.saves.items()}
        assert saves == want, "the saves are not as modelled (one was deleted or changed)"
        assert links == self.loops
        if self.s3:
            assert self.root.has_marker() == self.marker, "PREFIX/.publish-root is not as modelled"
        for name, (_, _, path) in self.entries.items():
            assert path in self.saves or path in self.deleted, f"{name} names {path}, which is gone"
        assert set(self.entries) <= self.root.names("man"), "an entry without its manifest"
        self.check_resolve()
        self.check_resolve(deep=True)

    def check_resolve(self, deep: bool = False) -> None:
        """resolve (``deep``: resolve -verify=deep) answers with the newest entry whose save exists (and
        matches the manifest of its publication), or fails loudly."""
        flags = ["-verify=deep"] if deep else []
        r = self.root.run("resolve", *flags)
        if not self.root_exists:
            self.fails_loudly(r)
            return
        if self.planted_pub:
            self.fails_loudly(r, *self.planted_pub)
            return
        for name, (_, _, path) in self.newest_first():
            if path in self.saves and (not deep or self.matches_manifest(name, path)):
                want = self.root.location(path) + "\n"
                got = (r.code, r.out, r.err)
                assert (r.code, r.out) == (0, want), f"resolve {flags}: {got!r}, expected {want!r}"
                assert deep or self.whole(path) or name in self.hand_unwhole or path in self.rotted, (
                    f"resolve answered {path}, not whole"
                )
                return
        if self.entries:
            self.fails_loudly(r)
        else:
            assert (r.code, r.out) == (0, ""), (r.code, r.out, r.err)

    def matches_manifest(self, name: str, path: str) -> bool:
        """What resolve -verify=deep finds of the save of ``name``: every file its manifest lists is there,
        with the same bytes (on S3, whose manifests hold no digest, the same size: ``digest`` is the size)."""
        listed = self.manifests.get(name)
        if listed is None:
            return True  # no manifest: passes, with a note
        now = self.saves[path]
        digest = self.root.digest
        return all(f in now and digest(now[f]) == digest(data) for f, data in listed.items())

    def teardown(self) -> None:
        pass


def model_settings(share: float) -> settings:
    """The chosen profile (``model-long`` when selected, else ``model-ci``) with ``share`` of its examples."""
    name = "model-long" if settings.get_current_profile_name() == "model-long" else "model-ci"
    base = settings.get_profile(name)
    return settings(
        base,
        max_examples=max(3, round(base.max_examples * share)),
        derandomize=settings.default.derandomize,
        database=settings.default.database,
    )


def test_model_posix(tmp_path: Path) -> None:
    restore = fresh_registry()

    class Posix(RootModel):
        def make_root(self, exists: bool) -> Any:
            return PosixRoot(tmp_path / uuid.uuid4().hex[:8], exists, restore)

    run_state_machine_as_test(Posix, settings=model_settings(1.0))


@pytest.mark.s3
def test_model_s3(weed: Any, tmp_path: Path) -> None:
    from tests.support.fault_proxy import FaultProxy

    restore = fresh_registry()
    weed.set_identity("model-overlap", OVERLAP_ACCESS_KEY, OVERLAP_SECRET_KEY)
    proxy = FaultProxy(weed.endpoint)

    class S3(RootModel):
        def make_root(self, exists: bool) -> Any:
            return S3Root(weed, proxy, tmp_path, exists, restore)

    try:
        run_state_machine_as_test(S3, settings=model_settings(0.4))
    finally:
        proxy.stop()
        weed.remove_identity("model-overlap")


def started_posix_model(tmp_path_factory: pytest.TempPathFactory) -> RootModel:
    """The POSIX model, started on a root that exists, for a fixed sequence of steps."""
    restore = fresh_registry()
    base = tmp_path_factory.mktemp("model")

    class Posix(RootModel):
        def make_root(self, exists: bool) -> Any:
            return PosixRoot(base, exists, restore)

    m = Posix()
    m.start(True)
    return m


@settings(max_examples=1, database=None, deadline=None)
@given(st.just(None))
def test_model_posix_a_save_half_removed_by_a_cut_prune(
    tmp_path_factory: pytest.TempPathFactory, _: None
) -> None:
    """One sequence the model found: a prune killed inside a folder's removal leaves trainer_state.json (its
    files go in name order), a watch of that attempt started again publishes the folder once more, and when
    the newer save is gone resolve answers with the half-removed one."""
    m = started_posix_model(tmp_path_factory)
    m.trainer_writes("A", 10, "whole", 0)
    m.trainer_writes("A", 20, "whole", 0)
    m.watch("A", False)
    m.promise_kept()
    m.prune_cut_short(1, 3, False)  # its tombstone, its entry, half of checkpoint-10's files
    m.promise_kept()
    m.watch("A", False)
    m.promise_kept()
    m.operator_deletes_a_published_save(1)  # checkpoint-20
    m.promise_kept()


@settings(max_examples=1, database=None, deadline=None)
@given(st.just(None))
def test_model_posix_a_rotted_save_is_passed_over_by_verify(
    tmp_path_factory: pytest.TempPathFactory, _: None
) -> None:
    """A sequence every run goes through, whatever the random ones draw: a published save whose byte flips
    is still resolve's answer, and resolve -verify=deep passes over it to the older save."""
    m = started_posix_model(tmp_path_factory)
    m.trainer_writes("A", 10, "whole", 0)
    m.watch("A", False)
    m.trainer_writes("A", 20, "whole", 0)
    m.watch("A", False)
    m.promise_kept()
    m.a_published_save_rots(1)  # checkpoint-20
    assert m.rotted == {"exec/A/checkpoint-20"}
    m.promise_kept()
