"""``run -requeue -max-idle-requeues K``: requeue only while training advances (publish/ops/idle.py).

Dispatches of one job, each a call of ``publish run`` with a Slurm job that is RUNNING (a fake: its state
and its requeues), stopped by SIGTERM as the warning signal stops it. A dispatch after which ``resolve``
answers what it resumed from is idle; K idle dispatches in a row are requeued (each leaving a mark in exec/),
the next is not and exits non-zero. The count comes from the root alone: not from the epochs (clocks), the
attempt names, or folders other jobs left. tests/jobs/test_slurm.py runs it on a real Slurm.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from publish import stores
from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.ops.idle import MARK, mark_prefix
from publish.ops.tiers import Tiers
from publish.rules import layout, roots
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure
from publish.stores.base import Store
from publish.stores.posix import PosixStore
from publish.verbs import run as run_verb
from tests.conftest import REPO, base_env, run_cli
from tests.support.ports import dead_port
from tests.support.s3roots import Root
from tests.support.servers import Weed
from tests.support.trainer_saves import hf_save

IDLE = ["sleep", "30"]  # killed by the SIGTERM passed on: 143, having saved nothing
# exits 0 on SIGTERM, having saved nothing; it makes $READY once its trap is in place
IDLE_CLEAN = ["sh", "-c", 'trap "exit 0" TERM; : >"$READY"; sleep 30 & wait']
# saves on SIGTERM (published by the last scan only: an hour between scans), then exits 143; it makes
# $READY once its handler is in place
SAVES = [
    sys.executable, "-c",
    f"import os, signal, sys, time; sys.path.insert(0, {str(REPO / 'examples')!r}); "
    "from tiny_trainer import save\n"
    "stop = []; signal.signal(signal.SIGTERM, lambda *a: stop.append(1)); open(os.environ['READY'], 'w').close()\n"
    "while not stop: time.sleep(0.02)\n"
    "save(os.environ['PUBLISH_SAVES'], 7, [1.0] * 7); sys.exit(143)\n",
]  # fmt: skip


class Job(run_verb.Batch):
    """A Slurm job in ``state``; its requeues are counted, not sent."""

    def __init__(self, state: str = "RUNNING") -> None:
        super().__init__({"SLURM_JOB_ID": "5"}, 10)
        self._state = state
        self.requeues = 0

    def state(self) -> str:
        return self._state

    def requeue(self) -> None:
        self.requeues += 1


def dispatch(
    store: Store, job: Job, command: list[str], *, k: int, attempt: str = "a", epoch: int = 1,
    before_start: bool = False, mirror: Store | None = None,
) -> tuple[int, list[str], list[str]]:  # fmt: skip
    """One dispatch: COMMAND started, then SIGTERM (or SIGTERM before it could start); (status, out, err).
    ``mirror``: run -mirror's second tier."""
    out: list[str] = []
    err: list[str] = []
    tiers = None if mirror is None else Tiers(store, mirror, Say(out.append, err.append), 30)
    signals = run_verb.Signals()
    if before_start:
        signals.note(signal.SIGTERM)

    def launch(argv: list[str], env: dict[str, str]) -> run_verb.Process:
        with tempfile.TemporaryDirectory(prefix="publish-ready-") as where:
            ready = Path(where) / "ready"
            env["READY"] = str(ready)
            proc = run_verb.Process(argv, env, None)
            deadline = time.monotonic() + 30
            while argv in (SAVES, IDLE_CLEAN) and not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # stopped once its handler is in place
        signals.note(signal.SIGTERM)
        return proc

    try:
        settings = run_verb.Settings(store, FRAMEWORKS["hf"], attempt, epoch, command, base_env(), store.root)
        settings.interval, settings.timeout, settings.requeue, settings.batch = 3600, 30, True, job
        settings.max_idle_requeues, settings.tiers = k, tiers
        code = run_verb.Job(settings, UNBOUNDED, Say(out.append, err.append), signals, launch).run()
    finally:
        signals.close()
    return code, out, err


def marks(root: Path) -> list[str]:
    return (
        sorted(n for n in os.listdir(root / "exec") if n.startswith(MARK)) if (root / "exec").exists() else []
    )


def test_k_idle_dispatches_in_a_row_are_requeued_and_the_next_is_not(root: Path) -> None:
    store, job = PosixStore(str(root)), Job()
    for n in (1, 2):
        code, _, err = dispatch(store, job, IDLE, k=2, attempt=f"5.{n - 1}", epoch=n)
        assert (code, job.requeues) == (143, n), err
        assert (
            f"run: this dispatch published nothing (it had no save to resume from): idle requeue {n} of at most 2 in a row (-max-idle-requeues)"
            in err
        )
        assert err[-1] == "run: asked Slurm to requeue job 5"
    assert len(marks(root)) == 2 and all(m.startswith(mark_prefix(None)) for m in marks(root))
    # the third: not requeued, and non-zero even though COMMAND exited 0, so Slurm ends the job FAILED
    code, _, err = dispatch(store, job, IDLE_CLEAN, k=2, attempt="5.2", epoch=3)
    assert (code, job.requeues) == (1, 2), err
    assert err[-1] == (
        "run: job 5 not requeued: this dispatch and the 2 before it, each requeued, published nothing "
        "(it had no save to resume from) (-max-idle-requeues 2); exiting non-zero, so the job ends FAILED"
    )
    assert len(marks(root)) == 2  # a refused dispatch leaves none: a resubmitted job is refused at once too
    code, _, err = dispatch(store, Job(), IDLE, k=2, attempt="9.0", epoch=4)
    assert code == 143 and "run: job 5 not requeued" in err[-1], err


def test_a_dispatch_that_publishes_resets_the_count(root: Path) -> None:
    store, job = PosixStore(str(root)), Job()
    assert dispatch(store, job, IDLE, k=1, attempt="5.0", epoch=1)[0] == 143
    code, out, err = dispatch(store, job, SAVES, k=1, attempt="5.1", epoch=2)  # its SIGTERM save: progress
    assert (code, job.requeues) == (143, 2), err
    assert [line for line in out if line.startswith("published ")] and not [e for e in err if "idle" in e], (
        err
    )
    saved = run_cli("resolve", "-checkpoint", str(root)).out.strip()
    assert saved.startswith(f"{root}/exec/5.1/checkpoint-")
    assert len(marks(root)) == 1  # only the first dispatch's
    # resuming from the new save, the count starts again: one idle requeue, then none
    code, _, err = dispatch(store, job, IDLE, k=1, attempt="5.2", epoch=3)
    assert (code, job.requeues) == (143, 3), err
    assert (
        f"run: this dispatch published nothing newer than {saved}: idle requeue 1 of at most 1 in a row (-max-idle-requeues)"
        in err
    )
    code, _, err = dispatch(store, job, IDLE, k=1, attempt="5.3", epoch=4)
    assert (code, job.requeues) == (143, 3), err
    assert f"and the 1 before it, each requeued, published nothing newer than {saved} " in err[-1]


def test_a_dispatch_stopped_before_command_started_is_idle_too(root: Path) -> None:
    store, job = PosixStore(str(root)), Job()
    code, _, err = dispatch(store, job, IDLE, k=1, before_start=True)
    assert (code, job.requeues) == (143, 1), err
    code, _, err = dispatch(store, job, IDLE, k=1, attempt="b", before_start=True)
    assert (code, job.requeues) == (143, 1), err
    assert "run: job 5 not requeued: this dispatch and the 1 before it" in err[-1]


def test_zero_requeues_no_idle_dispatch(root: Path) -> None:
    job = Job()
    code, _, err = dispatch(PosixStore(str(root)), job, IDLE, k=0)
    assert (code, job.requeues) == (143, 0), err
    assert err[-1] == (
        "run: job 5 not requeued: this dispatch published nothing (it had no save to resume from) "
        "(-max-idle-requeues 0); exiting non-zero, so the job ends FAILED"
    )


def test_clocks_attempt_names_and_other_jobs_do_not_change_the_count(root: Path) -> None:
    """The save resumed from was published with an epoch far ahead (a node whose clock ran fast); the
    dispatches after it get smaller and smaller epochs (clocks behind), all under one attempt name given by
    hand; another job left an attempt with half a save and a mark of its own for another save."""
    save = hf_save(root / "exec" / "old" / "checkpoint-40", 40)
    assert run_cli("publish", "-checkpoint", str(root), "-epoch", str(10**19), str(save), "40").code == 0
    (root / "exec" / "other-job" / "checkpoint-50").mkdir(parents=True)
    (root / "exec" / f"{mark_prefix(layout.Entry(1, 2, 'exec/x/checkpoint-2'))}0123").write_bytes(b"")
    store, job = PosixStore(str(root)), Job()
    for n, epoch in enumerate((300, 200), 1):
        code, _, err = dispatch(store, job, IDLE, k=2, attempt="same", epoch=epoch)
        assert (code, job.requeues) == (143, n), err
        assert f"published nothing newer than {save}: idle requeue {n} of at most 2" in " ".join(err), err
    code, _, err = dispatch(store, job, IDLE, k=2, attempt="same", epoch=100)
    assert (code, job.requeues) == (143, 2), err
    assert "this dispatch and the 2 before it, each requeued" in err[-1]


def test_a_newer_entry_whose_save_is_gone_is_no_progress(root: Path) -> None:
    """resolve passes over an entry whose save does not exist; so does the count: the next dispatch would
    resume from the same save."""
    save = hf_save(root / "exec" / "old" / "checkpoint-40", 40)
    assert run_cli("publish", "-checkpoint", str(root), "-epoch", "1", str(save), "40").code == 0
    (root / "pub" / layout.name(9, 60, "exec/gone/checkpoint-60")).write_bytes(b"")
    job = Job()
    code, _, err = dispatch(PosixStore(str(root)), job, IDLE, k=0, epoch=5)
    assert (code, job.requeues) == (143, 0), err
    assert f"published nothing newer than {save} (-max-idle-requeues 0)" in err[-1]


def test_a_job_slurm_stopped_itself_is_not_judged(root: Path) -> None:
    """scancel, scontrol requeue: COMPLETING; run requeues nothing, so it counts nothing and marks nothing."""
    job = Job("COMPLETING")  # Slurm signalled COMMAND itself (here: nobody did; it ends by itself)
    code, _, err = dispatch(PosixStore(str(root)), job, ["sleep", "0.2"], k=0)
    assert (code, job.requeues, marks(root)) == (0, 0, []), err
    assert err[-1] == "run: job 5 is COMPLETING: not requeued"


class NoMarks(PosixStore):
    def create_mark(self, dl: Deadline, name: str) -> bool:
        raise Failure(f"{self.location('exec')}: no room")


def test_a_store_failing_while_counting_requeues_all_the_same(root: Path) -> None:
    job = Job()
    code, _, err = dispatch(NoMarks(str(root)), job, IDLE_CLEAN, k=2)
    assert (code, job.requeues) == (1, 1), err  # requeued; the status says publish failed
    assert f"run: could not count the idle requeues ({root}/exec: no room): requeued all the same" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-max-idle-requeues", "2"], "-max-idle-requeues applies to -requeue: give -requeue"),
        (["-requeue", "-max-idle-requeues", "-1"], "must be at least 0"),
        (["-requeue", "-max-idle-requeues", "x"], "invalid value"),
    ],
)
def test_usage_errors(root: Path, args: list[str], message: str) -> None:
    env = {**base_env(), "SLURM_JOB_ID": "5"}
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", *args, "--", "true", env=env)
    assert r.code == 2 and message in r.err and "usage: publish run" in r.err, r
    assert not os.listdir(root)


def test_on_s3_the_marks_are_objects_beside_the_attempts(weed: Weed, tmp_path: Path) -> None:
    """A dispatch that wrote nothing leaves nothing in the store but its mark, found by one listing."""
    s3 = Root(weed, tmp_path)
    store = stores.open(roots.parse_root(s3.url, "/"), env={}, deadline=1e12, creds=s3.creds).store
    job = Job()
    assert dispatch(store, job, IDLE, k=1, attempt="5.0")[0] == 143
    assert job.requeues == 1
    [mark] = s3.keys("exec/")
    assert mark.startswith("exec/" + mark_prefix(None))
    code, _, err = dispatch(store, job, IDLE, k=1, attempt="5.1")
    assert (code, job.requeues) == (143, 1), err
    assert "run: job 5 not requeued: this dispatch and the 1 before it" in err[-1]


# --- with -mirror: the count belongs to the job, not the node ----------------------------------------------


class TwoTiers:
    """A fast POSIX root (node-local storage: it can be lost between dispatches) and its S3 mirror; each
    dispatch opens both afresh, as a new process on a new node does."""

    def __init__(self, server: Weed, tmp: Path, endpoint: str | None = None) -> None:
        self.fast = tmp / "fast"
        self.mirror = Root(server, tmp, endpoint=endpoint, init=False)  # made by the first upload pass
        PosixStore(str(self.fast)).create_root(Deadline(30))  # publish init of the fast root

    def stores(self) -> tuple[Store, Store]:
        fast = PosixStore(str(self.fast))
        root = roots.parse_root(self.mirror.url, "/")
        return fast, stores.open(root, env={}, deadline=1e12, creds=self.mirror.creds).store

    def marks_on_mirror(self) -> list[str]:
        return [k.removeprefix("exec/") for k in self.mirror.keys("exec/") if k.startswith("exec/" + MARK)]

    def lose_fast_root(self) -> None:
        """The node's local storage is gone (a new node): rm -rf of the fast root."""
        shutil.rmtree(self.fast)


def test_with_a_mirror_the_count_survives_a_lost_fast_root(weed: Weed, tmp_path: Path) -> None:
    """Issue #31 item 1: the fast root, and its marks with it, is lost between dispatches (run -mirror makes
    it again). The marks are on the mirror too, so the second dispatch is idle requeue 2, not 1 again, and
    the third is refused: the job ends instead of being requeued for ever."""
    t, job = TwoTiers(weed, tmp_path), Job()
    for n in (1, 2):
        fast, mirror = t.stores()
        code, _, err = dispatch(fast, job, IDLE, k=2, attempt=f"5.{n - 1}", epoch=n, mirror=mirror)
        assert (code, job.requeues) == (143, n), err
        assert (
            f"run: this dispatch published nothing (it had no save to resume from): idle requeue {n} of at most 2 in a row (-max-idle-requeues)"
            in err
        )
        assert len(t.marks_on_mirror()) == n and set(marks(t.fast)) <= set(t.marks_on_mirror())
        t.lose_fast_root()
    fast, mirror = t.stores()
    code, _, err = dispatch(fast, job, IDLE_CLEAN, k=2, attempt="5.2", epoch=3, mirror=mirror)
    assert (code, job.requeues) == (1, 2), err
    assert f"run: created {t.fast}" in err
    assert err[-1] == (
        "run: job 5 not requeued: this dispatch and the 2 before it, each requeued, published nothing "
        "(it had no save to resume from) (-max-idle-requeues 2); exiting non-zero, so the job ends FAILED"
    )


def test_with_a_mirror_a_resume_from_a_save_only_the_mirror_holds_is_counted(
    weed: Weed, tmp_path: Path
) -> None:
    """Issue #31 item 1: the save resumed from is on the mirror only (the node that made it is gone, then the
    fast root holds no publication at all); a dispatch that adds nothing to it is idle, counted, and the
    next one refused, where before each such dispatch was progress and requeued without a mark."""
    t, job = TwoTiers(weed, tmp_path), Job()
    fast, mirror = t.stores()
    code, _, err = dispatch(fast, job, SAVES, k=1, attempt="5.0", epoch=1, mirror=mirror)  # progress: saved
    assert (code, job.requeues) == (143, 1), err
    assert [layout.parse(e).path for e in t.mirror.entries()] == ["exec/5.0/checkpoint-7"], err
    saved = f"{t.mirror.url}/exec/5.0/checkpoint-7"
    t.lose_fast_root()
    for n in (1, 2):
        fast, mirror = t.stores()
        code, _, err = dispatch(fast, job, IDLE, k=1, attempt=f"5.{n}", epoch=n + 1, mirror=mirror)
        assert f"run: resuming from {saved}" in err, err
        assert code == 143, err
    # the first was requeued with its mark (on both tiers), the second, resuming from the same save, was not
    assert job.requeues == 2, err
    assert err[-1] == (
        f"run: job 5 not requeued: this dispatch and the 1 before it, each requeued, published nothing newer "
        f"than {saved} (-max-idle-requeues 1); exiting non-zero, so the job ends FAILED"
    )
    [mark] = t.marks_on_mirror()
    assert mark.startswith(mark_prefix(layout.parse(t.mirror.entries()[0]))) and marks(t.fast) == [mark]


def test_with_a_mirror_that_fails_the_root_counts_alone_and_says_so(weed: Weed, tmp_path: Path) -> None:
    """The union of the tiers' marks, with one tier refusing connections: the root's marks are counted and
    the new one made there, the mirror's failure is named, and the exit status is 1 where COMMAND's was 0."""
    t, job = TwoTiers(weed, tmp_path, endpoint=f"http://127.0.0.1:{dead_port()}"), Job()
    fast, mirror = t.stores()
    code, _, err = dispatch(fast, job, IDLE_CLEAN, k=2, attempt="5.0", mirror=mirror)
    assert (code, job.requeues) == (1, 1), err
    assert len(marks(t.fast)) == 1, err
    assert [
        e for e in err
        if e.startswith(f"run: the idle marks in {t.mirror.url}/exec could not be read (") and e.endswith("): counted without them")
    ], err  # fmt: skip
    assert (
        "run: this dispatch published nothing (it had no save to resume from): idle requeue 1 of at most 2 in a row (-max-idle-requeues)"
        in err
    )


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (["-requeue", "-max-idle-requeues", "9223372036854775807"], 0, ""),  # Go's greatest int
        (
            ["-requeue", "-max-idle-requeues", "9223372036854775808"],
            2,
            'invalid value "9223372036854775808" for flag -max-idle-requeues: value out of range',
        ),
        (
            ["-requeue", "-max-idle-requeues", "-9223372036854775809"],
            2,
            'invalid value "-9223372036854775809" for flag -max-idle-requeues: value out of range',
        ),
        (
            ["-requeue", "-max-idle-requeues", "-1"],
            2,
            'invalid value "-1" for flag -max-idle-requeues: must be at least 0',
        ),
        (["-keep", "9223372036854775807"], 0, ""),
        (
            ["-keep", "9223372036854775808"],
            2,
            'invalid value "9223372036854775808" for flag -keep: value out of range',
        ),
        (
            ["-mirror-keep", "18446744073709551616"],
            2,
            'invalid value "18446744073709551616" for flag -mirror-keep: value out of range',
        ),
    ],
)
def test_counts_keep_gos_int_range(tmp_path: Path, flags: list[str], code: int, message: str) -> None:
    """Issue #31 (-max-idle-requeues accepts 2^63 and more): run's counts are Go ints, as prune's -keep is: up
    to 2^63-1 taken, beyond it Go's ``value out of range`` (exit 2) before anything runs."""
    root = tmp_path / "ckpt"
    root.mkdir()
    ran = tmp_path / "ran"
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", *flags,
                "--", "sh", "-c", f": > {ran}", env={"SLURM_JOB_ID": "5"})  # fmt: skip
    assert r.code == code, r
    if code:
        assert r.err.startswith(f"publish: {message}\n") and "usage: publish run" in r.err, r.err
    assert ran.exists() == (code == 0)
