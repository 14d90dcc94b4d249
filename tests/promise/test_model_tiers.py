"""The promise of two tiers, checked as a whole: a POSIX fast root mirrored to an S3 root (SeaweedFS), driven
through random sequences of what jobs and operators do, and after every step compared with a plain model.

The promise (docs/reference.md, "Two tiers: -mirror"): every entry in the mirror's pub/ names a save wholly
there, with exactly the bytes the fast root's save had when it was published; ``resolve -mirror`` prints the
newest (epoch, step) whose save exists on either tier (the fast root's at a tie, the mirror's when the fast
root is gone), or fails loudly when both tiers fail, and with ``-verify=deep`` passes over a fast save changed
since its publication (its mirror copy, if any, answers); a save published on the fast root and not yet
mirrored (pending) is never removed by a prune given the mirror (``prune -mirror``, ``run -keep`` with
``-mirror``), only by a plain ``prune``, which knows nothing of the mirror; nothing outside the two roots
changes; no step hangs and no process is left running.

Steps: a trainer writes saves (whole, or cut before its trainer_state.json); ``watch -mirror`` once, a
process stopped with SIGTERM or in-process told to stop before it starts (its last scan, then the uploads),
with or without ``-mirror-keep``; a watch given the fast root alone (what it publishes is pending);
``run -mirror -keep N [-mirror-keep M] -- true``; a watch -mirror killed with SIGKILL right after it published
a save on the fast root (mid upload, mostly); ``prune -mirror -keep N [-mirror-keep M]`` and a plain ``prune
-keep N``; an operator flips a byte of a published save's weights on the fast root (its size kept); the fast
root is lost (node-local disk gone), and a run recreates it.

The uploads run beside the scans, so a pass may start before a scan published every save.  With
``-mirror-keep`` which saves a pass uploads, and whether an upload that must fail is tried, depend on that
order: the model allows each outcome the spec allows, checks the one that happened, and goes on from it.

The oracle states the user's promise, never prune's plan: after a prune (``prune``, ``prune -mirror``, the
prunes of ``run -keep`` and of ``-mirror-keep``), each folder it said it removed is gone, the N newest
published saves that existed are there (``-keep N``; ``-mirror-keep M`` on the mirror), a save published on
the fast root and not on the mirror is there unless M newer saves are on the mirror, and ``resolve -mirror``
answers a save at least as new as before; which other folders it removed is its own business, and the model
then follows what the tiers hold.

A run is 25 examples of 25 steps (75 s measured on two cores under a load of 7 to 9), the hypothesis profile
``model-ci``'s other settings kept; with ``--hypothesis-profile=model-long``, a quarter of that profile's
examples with its steps.
"""

from __future__ import annotations

import random
import re
import signal
import uuid
from dataclasses import dataclass
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

from tests.support.model_support import MODEL_FILE, entry_name, fresh_registry
from tests.support.tiers_model import STATE_FILE, Files, TwoTiers, key, parts
from tests.support.trainer_saves import real_state

LONG = settings.get_current_profile_name() == "model-long"
# The long run takes longer than the suite's 600 s per test; a timeout in the middle would be replayed by
# Hypothesis as a flaky failure, not as a finding.
pytestmark = [pytest.mark.s3, *([pytest.mark.timeout(0)] if LONG else [])]

#: Each attempt's epoch: a later attempt has a greater one.
EPOCHS = {"A": 1, "B": 2, "C": 3}
STEPS = [10, 20, 30]
SHARDS = ["shard-0.bin", "shard-1.bin"]
FILES = [MODEL_FILE, STATE_FILE, *SHARDS]
#: The files bit rot may reach in the model: the weights, not the marker.  A watch reads trainer_state.json of
#: every save in its attempt, published or not, and stops on one that no longer parses (as for any faulty
#: marker); what it would answer for a damaged one that still parses depends on where the byte fell.
DATA_FILES = [MODEL_FILE, *SHARDS]
SIZES = [100, 150_000]
#: The attempt a job runs as: "" is the first with a save to publish, if any (else A).
ATTEMPTS = st.sampled_from([*sorted(EPOCHS), "", ""])
KEEPS = st.integers(1, 3)
MIRROR_KEEPS = st.one_of(st.none(), st.integers(1, 3))
PUBLISHED = re.compile(r"published (\S+) \(epoch (\d+), step (\d+), (.+)\)")


def pending_of(fast: Any, mirror: Any, keep: int | None) -> list[str]:
    """The pending names of ``fast`` (the fast root's entries), newest first: those the mirror (``mirror``, its
    entries) has no entry of, except, with -mirror-keep ``keep``, one not among the newest ``keep`` entries of
    both tiers (the mirror would prune it at once)."""
    todo = sorted((n for n in fast if n not in mirror), key=key, reverse=True)
    if keep is None:
        return todo
    newest = sorted(set(fast) | set(mirror), key=key, reverse=True)[:keep]
    return [n for n in todo if n in newest]


@dataclass
class Answer:
    """What ``resolve -mirror`` answers: the tier (``""``: nothing) and entry, whether the fast root failed
    (said on stderr), and the fast root's entries it passes over on the way (said on stderr)."""

    tier: str
    name: str | None
    fast_failed: bool
    passed_over: list[str]


class TiersModel(RuleBasedStateMachine):
    """A plain model of both tiers: the fast root's saves (path: files now), its entries with the files their
    save held when published, the mirror's entries with the files uploaded for them, and whether the mirror
    exists (any object under its prefix)."""

    def make_tiers(self) -> TwoTiers:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.t: Any = None

    @initialize(
        first=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3, unique=True),
        seed=st.integers(0, 2**32),
    )
    def start(self, first: list[int], seed: int) -> None:
        """Both tiers, the mirror not made yet; attempt A's trainer has written the saves of ``first``."""
        self.t = self.make_tiers()
        self.fast_exists = True
        self.saves: dict[str, Files] = {}
        self.fast: dict[str, Files] = {}
        self.mirror: dict[str, Files] = {}
        self.mirror_exists = False
        # Every path published on the fast root with its files each time, and every name published there.
        self.versions: dict[str, list[Files]] = {}
        self.ever: set[str] = set()
        self.trainer_writes("A", [(step, "whole", SIZES[0]) for step in first], seed)

    # -- the model ----------------------------------------------------------------------------------------

    def whole(self, path: str) -> bool:
        """The save at ``path`` holds trainer_state.json as Trainer writes it last, for its step."""
        files = self.saves.get(path)
        return files is not None and files.get(STATE_FILE) == real_state(int(path.rsplit("-", 1)[1]))

    def intact(self, name: str) -> bool:
        """The fast root's save of ``name`` is as it was published."""
        return self.saves.get(parts(name)[2]) == self.fast[name]

    def candidates(self, attempt: str) -> list[str]:
        """The names a scan of ``attempt`` publishes on the fast root: its whole saves not yet published, by
        step."""
        found = []
        for step in STEPS:
            path = f"exec/{attempt}/checkpoint-{step}"
            name = entry_name(EPOCHS[attempt], step, path)
            if self.whole(path) and name not in self.fast:
                found.append(name)
        return found

    def choose(self, attempt: str) -> str:
        """``attempt``, or for "" the first attempt with a save to publish (A when none has one)."""
        return attempt or next((a for a in sorted(EPOCHS) if self.candidates(a)), "A")

    def publish_on_fast(self, name: str) -> None:
        path = parts(name)[2]
        self.fast[name] = dict(self.saves[path])
        self.versions.setdefault(path, []).append(self.fast[name])
        self.ever.add(name)

    def remove_from_fast(self, names: list[str]) -> None:
        for n in names:
            del self.fast[n]
            self.saves.pop(parts(n)[2], None)

    def fails_loudly(self, r: Any) -> None:
        """Exit 1, nothing on stdout, a ``publish: `` message."""
        assert r.code == 1, f"exit {r.code}, expected 1; stdout {r.out!r} stderr {r.err!r}"
        assert r.out == "", r.out
        assert r.err.startswith("publish: "), r.err

    def said_plainly(self, err: str) -> None:
        assert all(line.startswith("publish: ") for line in err.splitlines()), err

    def split_output(self, out: str) -> dict[str, list[str]]:
        """A watch's or run's stdout by kind: the names published on each tier, the paths removed from each;
        any other line fails."""
        got: dict[str, list[str]] = {"fast": [], "mirror": [], "fast removed": [], "mirror removed": []}
        fast, mirror = self.t.fast_location(""), self.t.mirror_location("")
        for line in out.splitlines():
            m = PUBLISHED.fullmatch(line)
            if m:
                name, loc = m.group(1), m.group(4)
                epoch, step, path = parts(name)
                assert (int(m.group(2)), int(m.group(3))) == (epoch, step), line
                tier = {fast + path: "fast", mirror + path: "mirror"}.get(loc)
                assert tier is not None, f"a published line naming neither tier's save: {line!r}"
                got[tier].append(name)
            elif line.startswith(f"removed {fast}"):
                got["fast removed"].append(line[len(f"removed {fast}") :])
            elif line.startswith(f"removed {mirror}"):
                got["mirror removed"].append(line[len(f"removed {mirror}") :])
            else:
                raise AssertionError(f"an unexpected line: {line!r}")
        return got

    def uploads(self, code: int, uploaded: list[str], removed: list[str], err: str, keep: int | None) -> None:
        """Check what the uploads of a watch or a run did (to the end: every pending save uploaded, then the
        mirror pruned to -mirror-keep ``keep``), and bring the mirror's model up to date.

        What may be uploaded: a fast entry the mirror had no entry of, whose save is as published.  What must
        be: the pending ones after the last scan (a pass before it may have uploaded more, which -mirror-keep
        then prunes).  The exit status is 1 when an upload that must be tried fails (a byte changed since the
        publication), 0 when none may, and either between, as the order of scans and passes fell."""
        before = set(self.mirror)
        may = set(self.fast) - before
        bad = {n for n in may if not self.intact(n)}
        must = set(pending_of(self.fast, before, keep))
        assert len(uploaded) == len(set(uploaded)), f"a save was mirrored twice: {uploaded}"
        up = set(uploaded)
        assert up <= may - bad, (
            f"mirrored, not pending or changed since published: {sorted(up - (may - bad))}"
        )
        assert must - bad <= up, f"pending saves left unmirrored: {sorted(must - bad - up)}"
        for n in up:
            self.mirror[n] = dict(self.fast[n])
        self.mirror_exists = True
        if keep is not None:  # the mirror's prune: its promise, whichever saves it chose
            self.after_mirror_prune(removed, keep)
        else:
            assert removed == [], f"the mirror was pruned without -mirror-keep: {removed}"
        failed = "not mirrored" in err
        if must & bad:
            assert code == 1 and failed, (code, err)
            for n in must & bad:
                path = parts(n)[2]
                changed = [f for f in FILES if self.saves[path].get(f) != self.fast[n].get(f)]
                assert any(f"{path}/{f}" in err for f in changed), f"{err!r} names none of {path}'s {changed}"
        elif not may & bad:
            assert code == 0 and not failed, (code, err)
        else:
            assert code == (1 if failed else 0), (code, err)
        self.said_plainly(err)

    def answer(self) -> tuple[tuple[int, int], str] | None:
        """What resolve -mirror answers, as the user knows it: (epoch, step) and the tier, or None."""
        want = self.expected_resolve(deep=False)
        if want is None or want.name is None:
            return None
        return parts(want.name)[:2], want.tier

    def after_fast_prune(
        self, removed: list[str], answer: Any, keep: int, mirrored: bool, mirror_keep: int | None = None
    ) -> None:
        """The user's promise after the fast root's prune, then the model follows the root: each folder it
        said it removed is gone; the ``keep`` newest published saves that existed are there; with the mirror
        given (``mirrored``), every published save not on the mirror is there, unless with -mirror-keep M
        the mirror holds M newer saves (it would not keep that one); resolve -mirror answers a save at least
        as new as before.  Which others it removed is the prune's business."""
        real = self.t.fast_saves()
        for path in removed:
            assert path not in real, f"prune said it removed {path}, which is there"
        existing = sorted((n for n in self.fast if parts(n)[2] in self.saves), key=key, reverse=True)
        for n in existing[:keep]:
            assert parts(n)[2] in real, f"-keep {keep} removed {parts(n)[2]}, one of the newest that existed"
        if mirrored:
            for n in existing:
                # the saves the mirror would keep before this one: those on it, and those of the fast root
                # still to go there (a save -mirror-keep would prune at once is not kept from -keep)
                newer = [m for m in self.mirror if key(m)[:2] > key(n)[:2]]
                newer += [m for m in existing if m not in self.mirror and key(m)[:2] > key(n)[:2]]
                if n not in self.mirror and (mirror_keep is None or len(newer) < mirror_keep):
                    assert parts(n)[2] in real, f"{parts(n)[2]}, not on the mirror, was removed"
        pub = self.t.fast_names("pub")
        assert pub <= set(self.fast), "a prune made an entry"
        gone = [n for n in self.fast if n not in pub or parts(n)[2] not in real]
        for n in gone:
            self.fast.pop(n, None)
        self.saves = {p: f for p, f in self.saves.items() if p in real}
        if answer is not None:
            now = self.answer()
            assert now is not None and now[0] >= answer[0], f"resolve answered {answer}, now {now}"

    def after_mirror_prune(self, removed: list[str], keep: int) -> None:
        """After the mirror's prune (-mirror-keep M): each folder it said it removed is gone from the mirror,
        the M newest saves the mirror held are there; the model follows the mirror."""
        objects = self.t.mirror_objects()
        for path in removed:
            assert not any(k.startswith(path + "/") for k in objects), f"{path} said removed, still there"
        names = {k[len("pub/") :] for k in objects if k.startswith("pub/")}
        for n in sorted(self.mirror, key=key, reverse=True)[:keep]:
            assert n in names, f"-mirror-keep {keep} removed {n}, one of the newest on the mirror"
        self.mirror = {n: f for n, f in self.mirror.items() if n in names}

    def expected_resolve(self, deep: bool) -> Answer | None:
        """What ``resolve -mirror [-verify=deep]`` answers; None when both tiers fail (exit 1).  The fast root
        fails when it is missing, or has entries and none names a save that exists (and with ``deep``, is as
        published); the mirror then answers, failing in turn when it does not exist (holds no object)."""
        newest_first = sorted(self.fast, key=key, reverse=True)
        ok = [n for n in newest_first if parts(n)[2] in self.saves and (not deep or self.intact(n))]
        first = ok[0] if ok else None
        over = newest_first[: newest_first.index(first)] if first else newest_first
        other = max(self.mirror, key=key) if self.mirror else None
        if not self.fast_exists or (self.fast and first is None):
            if other is None and not self.mirror_exists:
                return None
            return Answer("mirror" if other else "", other, True, over)
        if other is not None and (first is None or key(other)[:2] > key(first)[:2]):
            return Answer("mirror", other, False, over)
        return Answer("fast" if first else "", first, False, over)

    def location(self, answer: Answer) -> str:
        assert answer.name is not None
        path = parts(answer.name)[2]
        return str(self.t.fast_location(path) if answer.tier == "fast" else self.t.mirror_location(path))

    # -- what a trainer does ------------------------------------------------------------------------------

    @rule(
        attempt=st.sampled_from(sorted(EPOCHS)),
        saves=st.lists(
            st.tuples(
                st.sampled_from(STEPS), st.sampled_from(["whole", "whole", "cut"]), st.sampled_from(SIZES)
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda s: s[0],
        ),
        seed=st.integers(0, 2**32),
    )
    def trainer_writes(self, attempt: str, saves: list[tuple[int, str, int]], seed: int) -> None:
        """A trainer of ``attempt`` writes saves one after another, each whole or cut before its
        trainer_state.json.  It rewrites a save it has not finished, never a whole or a published one."""
        rng = random.Random(seed)
        published = {parts(n)[2] for n in self.fast}
        wrote = False
        for step, how, size in saves:
            path = f"exec/{attempt}/checkpoint-{step}"
            if self.whole(path) or path in published:
                continue
            shards = {s: rng.randbytes(size) for s in SHARDS}
            self.t.write_save(attempt, step, how == "whole", shards)
            files = {MODEL_FILE: b"w", **shards}
            if how == "whole":
                files[STATE_FILE] = real_state(step)
            self.saves[path] = files
            self.fast_exists = True  # its folders made, the root's too
            wrote = True
        assume(wrote)

    # -- what a job does ----------------------------------------------------------------------------------

    @rule(attempt=ATTEMPTS, keep=MIRROR_KEEPS, process=st.sampled_from([False, True]))
    def watch(self, attempt: str, keep: int | None, process: bool) -> None:
        """``watch -mirror [-mirror-keep M]`` once: a process stopped with SIGTERM, or in-process told to stop
        before it starts; either way its last scan, then the uploads."""
        attempt = self.choose(attempt)
        args = ["-framework", "hf", "-attempt", attempt, "-epoch", str(EPOCHS[attempt])]
        args += [] if keep is None else ["-mirror-keep", str(keep)]
        r = self.t.watch(*args) if process else self.t.run("watch", *args, last_scan=True)
        if not self.fast_exists:
            self.fails_loudly(r)
            return
        got = self.split_output(r.out)
        want = self.candidates(attempt)
        assert got["fast"] == want, f"watch published {got['fast']} on the fast root, expected {want}"
        assert got["fast removed"] == [], "a watch pruned the fast root"
        for n in want:
            self.publish_on_fast(n)
        self.uploads(r.code, got["mirror"], got["mirror removed"], r.err, keep)

    @rule(attempt=ATTEMPTS)
    def watch_fast_only(self, attempt: str) -> None:
        """A job given the fast root alone (no -mirror): what it publishes stays pending until a run or a watch
        given the mirror uploads it, as what a run cut off before its uploads leaves."""
        attempt = self.choose(attempt)
        args = ["-framework", "hf", "-attempt", attempt, "-epoch", str(EPOCHS[attempt])]
        r = self.t.run("watch", *args, mirror=False, last_scan=True)
        if not self.fast_exists:
            self.fails_loudly(r)
            return
        want = self.candidates(attempt)
        got = self.split_output(r.out)
        assert got == {"fast": want, "mirror": [], "fast removed": [], "mirror removed": []}, got
        assert r.code == 0, r
        self.said_plainly(r.err)
        for n in want:
            self.publish_on_fast(n)

    @rule(attempt=ATTEMPTS, keep=KEEPS, mirror_keep=MIRROR_KEEPS)
    def run(self, attempt: str, keep: int, mirror_keep: int | None) -> None:
        """``run -mirror -keep N [-mirror-keep M] -- true``: it resumes from resolve -mirror's answer (and
        makes a missing fast root, unless neither tier answers), publishes, uploads, prunes the mirror, then
        the fast root, keeping what is pending once the uploads are done."""
        attempt = self.choose(attempt)
        resume = self.expected_resolve(deep=False)
        answer = self.answer()
        more = [] if mirror_keep is None else ["-mirror-keep", str(mirror_keep)]
        r = self.t.run(
            "run", "-framework", "hf", "-attempt", attempt, "-epoch", str(EPOCHS[attempt]), "-interval", "100ms",
            "-keep", str(keep), *more, "--", "true",
        )  # fmt: skip
        if resume is None:  # neither tier to resume from: the fast root's failure
            self.fails_loudly(r)
            return
        created = f"publish: run: created {self.t.fast}\n" in r.err
        assert created == (not self.fast_exists), r.err
        self.fast_exists = True
        said = f"run: resuming from {self.location(resume)}" if resume.name else "run: no save to resume from"
        assert f"publish: {said}\n" in r.err, f"{r.err!r} does not say {said!r}"
        got = self.split_output(r.out)
        want = self.candidates(attempt)
        assert got["fast"] == want, f"run published {got['fast']} on the fast root, expected {want}"
        for n in want:
            self.publish_on_fast(n)
        self.uploads(r.code, got["mirror"], got["mirror removed"], r.err, mirror_keep)
        # Then the fast root's prune: the user's promise, whichever folders it chose.
        self.after_fast_prune(got["fast removed"], answer, keep, True, mirror_keep)

    @rule(attempt=ATTEMPTS, delay=st.integers(0, 50))
    def watch_killed(self, attempt: str, delay: int) -> None:
        """A watch -mirror killed with SIGKILL ``delay`` ms after it published a save on the fast root, mostly
        mid upload.  Which saves it had published on either tier by then is read back from the tiers; that
        each mirror entry names a whole save is the invariant's to check."""
        attempt = self.choose(attempt)
        want = self.candidates(attempt)
        assume(self.fast_exists and want)
        before_fast, before_mirror = set(self.fast), set(self.mirror)
        r = self.t.killed_watch(
            "-framework", "hf", "-attempt", attempt, "-epoch", str(EPOCHS[attempt]), delay=delay / 1000
        )
        assert r.code == -signal.SIGKILL, r
        got = self.split_output(r.out)
        assert got["fast removed"] == got["mirror removed"] == [], r.out
        # Killed at any point: on each tier, what it published before the kill, whole; nothing else.
        now = self.t.fast_names("pub")
        assert before_fast <= now and now - before_fast <= set(want), f"the fast root's pub/ holds {now}"
        assert got["fast"] and set(got["fast"]) <= now, got
        assert got["fast"] == [n for n in want if n in got["fast"]], got
        for n in want:
            if n in now:
                self.publish_on_fast(n)
        mirrored = self.t.mirror_objects()
        names = {k[len("pub/") :] for k in mirrored if k.startswith("pub/")}
        up = names - before_mirror
        assert before_mirror <= names, "a killed watch removed a mirror entry"
        assert up <= {n for n in set(self.fast) - before_mirror if self.intact(n)}, f"mirrored {up}"
        assert set(got["mirror"]) <= up, got
        for n in up:
            self.mirror[n] = dict(self.fast[n])
        self.mirror_exists = bool(mirrored)

    # -- what an operator does ----------------------------------------------------------------------------

    @rule(keep=KEEPS, mirror_keep=MIRROR_KEEPS)
    def prune_mirror(self, keep: int, mirror_keep: int | None) -> None:
        """``prune -mirror -keep N [-mirror-keep M]``: a fast root that is gone fails first, touching nothing;
        with M the mirror is pruned next (a mirror never made fails, and the fast root is left as it is), then
        the fast root, every pending save kept (the mirror's pub/ read after the root's)."""
        more = [] if mirror_keep is None else ["-mirror-keep", str(mirror_keep)]
        r = self.t.run("prune", "-keep", str(keep), *more)
        if not self.fast_exists:
            self.fails_loudly(r)
            return
        answer = self.answer()
        if mirror_keep is not None and not self.mirror_exists:  # the mirror's prune fails first
            self.fails_loudly(r)
            assert self.t.mirror.url in r.err, r.err
            return
        assert r.code == 0, r
        got = self.split_output(r.out)
        if mirror_keep is not None:
            self.after_mirror_prune(got["mirror removed"], mirror_keep)
        self.after_fast_prune(got["fast removed"], answer, keep, True, mirror_keep)

    @rule(keep=KEEPS)
    def prune_plain(self, keep: int) -> None:
        """A prune of the fast root alone: it knows nothing of the mirror, and may remove pending saves."""
        answer = self.answer()
        r = self.t.run("prune", "-keep", str(keep), mirror=False)
        if not self.fast_exists:
            self.fails_loudly(r)
            return
        assert r.code == 0, r
        got = self.split_output(r.out)
        self.after_fast_prune(got["fast removed"], answer, keep, mirrored=False)

    @rule(
        pick=st.integers(0, 1000),
        which=st.sampled_from(DATA_FILES),
        at=st.integers(0, 10**6),
        mask=st.integers(1, 255),
        pending=st.booleans(),
    )
    def operator_flips_a_byte(self, pick: int, which: str, at: int, mask: int, pending: bool) -> None:
        """Bit rot in a published save on the fast root, its size kept; with ``pending``, in one not yet on the
        mirror when there is one (its upload must then fail, and every prune given the mirror keep it)."""
        names = sorted(n for n in self.fast if parts(n)[2] in self.saves)
        assume(names)
        if pending:
            names = [n for n in names if n not in self.mirror] or names
        path = parts(names[pick % len(names)])[2]
        data = bytearray(self.saves[path][which])
        data[at % len(data)] ^= mask
        self.t.write(f"{path}/{which}", bytes(data))
        self.saves[path] = {**self.saves[path], which: bytes(data)}

    @precondition(lambda self: bool(getattr(self, "fast", None)))
    @rule()
    def fast_root_lost(self) -> None:
        """The node-local disk is gone, with what was published on it."""
        self.t.lose_fast()
        self.fast_exists = False
        self.saves, self.fast = {}, {}

    # -- the promise, after every step --------------------------------------------------------------------

    @invariant()
    def promise_kept(self) -> None:
        if self.t is None:
            return
        t = self.t
        assert t.sentinel_unchanged(), "something outside the two roots changed"
        assert not t.processes_left(), f"processes left running: {t.processes_left()}"
        assert t.fast_exists() == self.fast_exists, f"the fast root exists: {t.fast_exists()}"
        assert t.fast_names("pub") == set(self.fast), "the fast root's pub/ is not as modelled"
        assert set(self.fast) <= t.fast_names("man"), "a fast entry without its manifest"
        assert t.fast_names("tomb") == set(), "a tombstone left on the fast root"
        assert t.fast_saves() == self.saves, "the fast root's saves are not as modelled"
        self.check_mirror()
        self.check_resolve(deep=False)
        self.check_resolve(deep=True)

    def check_mirror(self) -> None:
        """Every mirror entry names a save wholly there, each object with the bytes its fast save had when
        published, its manifest beside it; nothing else is there but the root's own object, manifests of
        names published on the fast root, and what an upload cut off left of such a save."""
        t = self.t
        objects = t.mirror_objects()
        assert bool(objects) == self.mirror_exists, f"the mirror exists: {bool(objects)}"
        assert {k[4:] for k in objects if k.startswith("pub/")} == set(self.mirror), (
            "mirror pub/ not as modelled"
        )
        for name, files in self.mirror.items():
            path = parts(name)[2]
            held = {k[len(path) + 1 :]: etag for k, etag in objects.items() if k.startswith(path + "/")}
            assert set(held) == set(files), f"{name} names {path}, which holds {sorted(held)} on the mirror"
            for f, data in files.items():
                assert t.mirror_holds(f"{path}/{f}", held[f], data), (
                    f"{path}/{f} on the mirror is not as published"
                )
            assert f"man/{name}" in objects, f"{name} has no manifest on the mirror"
        entered = {parts(n)[2] for n in self.mirror}
        for k, etag in objects.items():
            if k == ".publish-root" or k.startswith("pub/"):
                continue
            if k.startswith("man/"):
                assert k[4:] in self.ever, f"a manifest on the mirror for {k[4:]}, never published"
                continue
            m = re.fullmatch(r"(exec/[^/]+/checkpoint-\d+)/([^/]+)", k)
            assert m is not None and m.group(1) in self.versions, f"an unexpected object on the mirror: {k}"
            if m.group(1) not in entered:  # left by a killed upload: bytes of a published version
                versions = [v[m.group(2)] for v in self.versions[m.group(1)] if m.group(2) in v]
                assert any(t.mirror_holds(k, etag, v) for v in versions), (
                    f"{k} on the mirror was never published"
                )

    def check_resolve(self, deep: bool) -> None:
        r = self.t.run("resolve", *(["-verify=deep"] if deep else []))
        want = self.expected_resolve(deep)
        if want is None:
            self.fails_loudly(r)
            return
        out = self.location(want) + "\n" if want.name else ""
        assert (r.code, r.out) == (0, out), f"resolve: {(r.code, r.out, r.err)!r}, expected {want!r}"
        if want.tier == "mirror":
            assert want.name is not None
            said = f"publish: answered from the mirror: {self.t.mirror_location('pub/' + want.name)}\n"
            assert said in r.err, f"{r.err!r} does not say {said!r}"
        else:
            assert "answered from the mirror" not in r.err, r.err
        assert (": answering from the mirror\n" in r.err) == want.fast_failed, r.err
        if self.fast_exists:
            for n in want.passed_over:
                assert f"passing over {self.t.fast_location('pub/' + n)}: " in r.err, (
                    f"{n} not said: {r.err!r}"
                )
        self.said_plainly(r.err)


def tiers_settings() -> settings:
    """25 examples of 25 steps, or with ``model-long`` a quarter of its examples, with its steps."""
    if LONG:
        base = settings.get_profile("model-long")
        examples, steps = max(8, base.max_examples // 4), base.stateful_step_count
    else:
        base = settings.get_profile("model-ci")
        examples, steps = 25, 25  # 75 s measured on two cores under a load of 7 to 9
    return settings(
        base,
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=settings.default.derandomize,
        database=settings.default.database,
    )


def test_model_two_tiers(weed: Any, tmp_path: Path) -> None:
    """Random sequences of the steps above, the promise checked after each (the module's docstring)."""
    restore = fresh_registry()

    class Tiers(TiersModel):
        def make_tiers(self) -> TwoTiers:
            return TwoTiers(weed, tmp_path / uuid.uuid4().hex[:8], restore)

    run_state_machine_as_test(Tiers, settings=tiers_settings())


@settings(max_examples=1, database=None, deadline=None)
@given(st.just(None))
def test_model_two_tiers_a_pending_save_whose_upload_fails(
    weed: Any, tmp_path_factory: pytest.TempPathFactory, _: None
) -> None:
    """One sequence, run every time because random ones rarely reach it: a save published on the fast root
    alone, then changed there, can never be uploaded; run -keep 1 -mirror uploads the newer one, exits 1
    naming the changed file, and its prune keeps the pending save though -keep alone would remove it; then
    resolve -mirror -verify=deep passes over it, and a plain prune, which knows nothing of the mirror, may
    remove it."""
    restore = fresh_registry()
    base = tmp_path_factory.mktemp("tiers")

    class Tiers(TiersModel):
        def make_tiers(self) -> TwoTiers:
            return TwoTiers(weed, base, restore)

    m = Tiers()
    m.start([10, 20], 0)
    m.promise_kept()
    m.watch_fast_only("A")  # both pending
    m.promise_kept()
    m.operator_flips_a_byte(0, "shard-0.bin", 7, 0x20, True)  # exec/A/checkpoint-10
    m.promise_kept()
    m.run("A", 1, None)
    assert len(m.fast) == 2 and len(m.mirror) == 1, (sorted(m.fast), sorted(m.mirror))
    m.promise_kept()
    m.watch("A", None, False)  # tried again, refused again
    m.promise_kept()
    m.prune_mirror(1, None)
    assert len(m.fast) == 2
    m.promise_kept()
    m.prune_plain(1)
    assert len(m.fast) == 1
    m.promise_kept()
