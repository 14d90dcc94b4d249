"""The two Slurm recipes on a real one-node Slurm, every way a job ends: the one `publish run` makes
(examples/slurm_run.sh, the README's) and the one by hand (examples/slurm_job.sh, docs/jobs.md's).

Each common test runs once per recipe (the ``recipe`` fixture). In each case the save the trainer makes on
SIGTERM is published, nothing half-written is, and the next dispatch resumes from the newest whole save with a
greater epoch; after a requeue the job comes back by itself. What only one recipe has follows the common
tests: the races of a hand-written script's trap and its watch, and `publish run -max-idle-requeues`. The
repeated trials at the end (marker slow) run each way a hand-written job is stopped several times over.
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.support.s3roots import Root
from tests.support.servers import Weed
from tests.support.slurm import KILL_WAIT, Run, Slurm, end, slurm, slurm_publish  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm


@dataclass(frozen=True)
class Recipe:
    """A job script, the page that shows it (under ``heading``), and what it says that the tests look for."""

    script: Path
    page: Path
    heading: str
    #: the line the job prints when it asks Slurm to requeue it after a signal to the batch shell (then the id)
    requeue_note: str
    #: publish run says why it leaves a job-wide signal (scontrol requeue) alone; the script by hand says nothing
    says_completing: bool
    #: the attempt folder of an array task is ``<array job>_<task>.<restart>`` (publish run's -attempt default);
    #: the script by hand names it after $SLURM_JOB_ID, the task's own job id
    array_task_attempts: bool


BY_HAND = Recipe(
    script=REPO / "examples" / "slurm_job.sh",
    page=REPO / "docs" / "jobs.md",
    heading="### Slurm, by hand\n",
    requeue_note="slurm_job.sh: asked Slurm to requeue job",
    says_completing=False,
    array_task_attempts=False,
)
PUBLISH_RUN = Recipe(
    script=REPO / "examples" / "slurm_run.sh",
    page=REPO / "README.md",
    heading="### Slurm: `publish run`\n",
    requeue_note="publish: run: asked Slurm to requeue job",
    says_completing=True,
    array_task_attempts=True,
)
SCRIPT = BY_HAND.script  # the recipe the recipe-specific tests below and the repeated trials use


@pytest.fixture(params=[PUBLISH_RUN, BY_HAND], ids=["publish-run", "by-hand"])
def recipe(request: pytest.FixtureRequest) -> Recipe:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def run(slurm: Slurm, slurm_publish: Path, tmp_path: Path, recipe: Recipe) -> Run:  # noqa: F811
    return Run(slurm, slurm_publish, tmp_path, recipe.script)


# --- both recipes -------------------------------------------------------------------------------------------


def test_the_recipe_shown_is_the_example_script(recipe: Recipe) -> None:
    page = recipe.page.read_text()
    block = page.split(recipe.heading, 1)[1].split("```bash\n", 1)[1].split("```\n", 1)[0]
    assert block == recipe.script.read_text()


def test_a_job_that_runs_to_its_end(run: Run) -> None:
    job = run.submit(steps=6)
    record = run.slurm.ended(job, timeout=90)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), run.log(job)
    steps = [p.step for p in run.published(job)]
    assert steps == [2, 4, 6], run.log(job)
    assert run.log(job).count("already published") == 0
    run.check_root()
    assert run_cli("resolve", "-checkpoint", str(run.root)).out == f"{run.root}/exec/{job}.0/checkpoint-6\n"


@pytest.mark.parametrize("srun", [False, True], ids=["plain", "srun"])
def test_scontrol_requeue(run: Run, recipe: Recipe, srun: bool) -> None:
    """A job-wide SIGTERM: the save made on it is published, and the job comes back. Through srun, the signal
    reaches srun's task as SIGTERM: srun waits for it, and the job is left alone (a scancel of a requeued job
    would block the shell until KillWait killed it, before its last scan); publish run does not signal the
    job again."""
    job = run.submit(srun=srun)
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scontrol", "requeue", job)
    run.slurm.requeued(job)
    saved = run.stopped_at(job, f"{job}.0")
    assert saved in [p.save for p in run.published(job)], run.log(job)
    if recipe.says_completing:
        assert f"publish: run: job {job} is COMPLETING: not requeued" in run.log(job)  # Slurm brings it back
        # the trainer had the job-wide SIGTERM already: publish run did not send it again
        assert f"publish: run: job {job} is COMPLETING: Slurm signalled every process of it" in run.log(job)
    run.check_resumed(job, f"{job}.1", saved)
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_scancel_then_resubmit(run: Run) -> None:
    job = run.submit()
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scancel", job)
    record = run.slurm.ended(job)
    assert record["JobState"] == "CANCELLED", record  # not revived by a requeue
    saved = run.stopped_at(job, f"{job}.0")
    assert saved in [p.save for p in run.published(job)], run.log(job)
    run.check_whole(job)
    run.check_root()
    assert run_cli("resolve", "-checkpoint", str(run.root)).out == saved + "\n"

    again = run.submit(steps=2)
    assert run.slurm.ended(again, timeout=90)["JobState"] == "COMPLETED", run.log(again)
    assert f"trainer: resuming from {saved} at step" in run.log(again)
    old = max(p.epoch for p in run.published(job))
    assert all(p.epoch > old for p in run.published(again)), run.log(again)


@pytest.mark.parametrize(
    "how", ["scancel -b --signal=TERM", "scancel -b through srun", "--time with --signal=B:TERM@N"]
)
def test_a_signal_to_the_batch_shell_requeues_the_job(run: Run, recipe: Recipe, how: str) -> None:
    """Only the batch shell gets SIGTERM (publish run, which the shell execs): it passes it on to training
    (to srun's task as SIGTERM), then asks Slurm to requeue the job, saying so."""
    if how.startswith("scancel"):
        job = run.submit(srun="srun" in how)
        run.slurm.running(job)
        run.wait_saved(job, f"{job}.0", 4)
        run.slurm.run("scancel", "-b", "--signal=TERM", job)
    else:
        # the warning comes up to a minute early ("the resolution of event handling"): within the first minute
        job = run.submit("--time=2", "--signal=B:TERM@90")
        run.slurm.running(job)
    back = run.slurm.requeued(job, timeout=150)
    assert back["JobState"] == "RUNNING"
    assert f"{recipe.requeue_note} {job}" in run.log(job)
    saved = run.stopped_at(job, f"{job}.0")
    assert saved in [p.save for p in run.published(job)], run.log(job)
    run.check_resumed(job, f"{job}.1", saved)
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_an_array_of_two_tasks_sharing_one_root(run: Run, recipe: Recipe) -> None:
    job = run.submit("--array=0-1", steps=6)
    tasks = [f"{job}_0", f"{job}_1"]
    for t in tasks:
        assert run.slurm.ended(t, timeout=120)["JobState"] == "COMPLETED", run.log(t)
    published = {t: run.published(t) for t in tasks}
    if recipe.array_task_attempts:
        for t in tasks:
            assert {p.save.rsplit("/", 2)[1] for p in published[t]} == {
                f"{t}.0"
            }  # <array job>_<task>.<restart>
    epochs = {t: {p.epoch for p in ps} for t, ps in published.items()}
    assert all(len(e) == 1 for e in epochs.values()), epochs
    assert epochs[tasks[0]] != epochs[tasks[1]], epochs  # even when both started in the same second
    for t in tasks:
        assert [p.step for p in published[t]] == [2, 4, 6], run.log(t)
        run.check_whole(t)
    run.check_root()
    later = max(tasks, key=lambda t: max(epochs[t]))
    newest = published[later][-1].save
    assert run_cli("resolve", "-checkpoint", str(run.root)).out == newest + "\n"

    again = run.submit(steps=2)
    assert run.slurm.ended(again, timeout=90)["JobState"] == "COMPLETED", run.log(again)
    assert f"trainer: resuming from {newest} at step" in run.log(again)


# --- the recipe by hand: its trap and its watch -------------------------------------------------------------


def slowed(tmp_path: Path, bin_dir: Path, body: str) -> Path:
    """A folder with a ``publish`` that runs ``body`` (sh) first, then the real one."""
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    slow.chmod(0o755)
    (slow / "publish").write_text(f'#!/bin/sh\n{body}\nexec "{bin_dir}/publish" "$@"\n')
    (slow / "publish").chmod(0o755)
    return slow


def test_a_sigterm_before_training_starts_requeues_without_training(
    slurm: Slurm,  # noqa: F811
    slurm_publish: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The trap is set before resolve: a scancel -b while resolve runs is heard, training is not started, and
    the job is requeued (without the trap, the shell died of it and the job ended for good)."""
    marker = tmp_path / "resolving"
    body = f'[ "$1.${{SLURM_RESTART_COUNT:-0}}" = resolve.0 ] && {{ touch "{marker}"; sleep 5; }}'
    run = Run(slurm, slowed(tmp_path, slurm_publish, body), tmp_path, SCRIPT)
    job = run.submit(steps=2)
    slurm.wait_for(marker.exists, 60, "the first dispatch's resolve")
    slurm.run("scancel", "-b", "--signal=TERM", job)
    slurm.requeued(job)
    first = first_dispatch(run.log(job))
    assert "trainer:" not in first and f"{REQUEUE_NOTE} {job}" in first, run.log(job)
    assert slurm.ended(job, timeout=90)["JobState"] == "COMPLETED", run.log(job)
    assert "trainer: starting from step 0" in run.log(job)


def test_training_that_ends_before_watch_can_hear_is_still_published(
    slurm: Slurm,  # noqa: F811
    slurm_publish: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A watch slower to start than training is short: it is stopped before its handler is set and dies of
    SIGTERM unheard. The script scans once more, and the job still succeeds with every save published."""
    run = Run(slurm, slowed(tmp_path, slurm_publish, '[ "$1" = watch ] && sleep 3'), tmp_path, SCRIPT)
    job = run.submit(steps=2)
    record = slurm.ended(job, timeout=90)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), run.log(job)
    assert [p.step for p in run.published(job)] == [2], run.log(job)
    run.check_root()


# --- publish run: -max-idle-requeues ---------------------------------------------------------------------------


# Crashes on the stop signal before its first save (as one that cannot even load its data would): exit 1.
# One line: scontrol -o shows the job's command in its one line, newlines included.
CRASHES = [
    sys.executable, "-c",
    "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit('trainer: crashed before its first save')); "
    "print('trainer: loading', flush=True); time.sleep(600)",
]  # fmt: skip


def test_a_trainer_that_never_saves_is_requeued_k_times_then_the_job_fails(
    slurm: Slurm,  # noqa: F811
    slurm_publish: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """-max-idle-requeues 2: dispatches 0 and 1 publish nothing and are requeued, dispatch 2 is not: the job
    ends FAILED, where it would have been requeued for ever. Each dispatch is stopped by scancel -b (the
    batch shell's SIGTERM, as the warning signal before the time limit sends it)."""
    script = tmp_path / "slurm_run_idle.sh"
    script.write_text(PUBLISH_RUN.script.read_text().replace(" -requeue ", " -requeue -max-idle-requeues 2 "))
    script.chmod(0o755)
    run = Run(slurm, slurm_publish, tmp_path, script)
    j = slurm.sbatch(f"--output={run.logs}/%j.out", f"--chdir={run.root}", "--ntasks=1", str(script), *CRASHES,
                     env=run.env)  # fmt: skip
    for restarts in range(3):
        if restarts:
            slurm.requeued(j, restarts, timeout=90)
        else:
            slurm.running(j)
        slurm.wait_for(
            lambda n=restarts: run.log(j).count("trainer: loading") > n,
            60,
            f"dispatch {restarts} to start; log:\n{run.log(j)}",
        )
        slurm.run("scancel", "-b", "--signal=TERM", j)
    record = slurm.ended(j, timeout=90)
    log = run.log(j)
    assert (record["JobState"], record["Restarts"], record["ExitCode"]) == ("FAILED", "2", "1:0"), log
    assert log.count(f"publish: run: asked Slurm to requeue job {j}") == 2, log
    assert "idle requeue 1 of at most 2 in a row" in log and "idle requeue 2 of at most 2 in a row" in log
    assert (
        f"publish: run: job {j} not requeued: this dispatch and the 2 before it, each requeued, published "
        "nothing (it had no save to resume from) (-max-idle-requeues 2); exiting non-zero, so the job ends FAILED"
    ) in log
    assert len([n for n in (run.root / "exec").iterdir() if n.name.startswith(".idle-")]) == 2


def two_tier_recipe(tmp_path: Path, fast: Path, mirror: Root) -> Path:
    """The README's two-tier job script (its fast root, mirror and -creds filled in) with
    -max-idle-requeues 2, and first the loss of the node's local storage: each dispatch starts on a node
    whose fast root is empty."""
    block = (REPO / "README.md").read_text().split("## Two tiers: fast storage, mirrored to S3\n", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```\n", 1)[0]
    lines = []
    for line in block.splitlines():
        name = line.split("=", 1)[0].removeprefix("export ")
        value = {"CHECKPOINT": str(fast), "MIRROR": mirror.url, "CREDS": mirror.creds}.get(name)
        lines.append(line if value is None else f"{line.split('=', 1)[0]}={value}")
        if name == "CHECKPOINT":
            lines.append('rm -rf "$CHECKPOINT"  # a new node: its local storage holds nothing')
    body = "\n".join(lines).replace(" -requeue ", " -requeue -max-idle-requeues 2 ")
    assert " -mirror " in body and " -max-idle-requeues 2 " in body, body
    script = tmp_path / "slurm_two_tiers.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --requeue --open-mode=append\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_two_tier_trainer_that_never_saves_on_new_nodes_is_requeued_k_times_then_the_job_fails(
    slurm: Slurm,  # noqa: F811
    slurm_publish: Path,  # noqa: F811
    weed: Weed,
    tmp_path: Path,
) -> None:
    """Issue #31 item 1: the README's two-tier recipe, -max-idle-requeues 2, a trainer that crashes before
    its first save, each dispatch on a node whose fast root is lost (rm -rf, run -mirror makes it again).
    The save to resume from is on the mirror only (an earlier job's, on a node gone since). Dispatches 0
    and 1 resume from it, publish nothing and are requeued, each leaving its mark on the mirror too;
    dispatch 2 is not: the job ends FAILED. Before, a resume from the mirror was never counted idle, and a
    lost fast root took its marks with it: the job was requeued for ever."""
    fast = tmp_path / "nvme"
    mirror = Root(weed, tmp_path)  # publish init of the mirror, once, when the run starts
    make = (
        f"import os, sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
        "from tests.support.trainer_saves import hf_save; hf_save(Path(os.environ['PUBLISH_SAVES']), 5)"
    )
    r = run_cli("run", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework",
                "hf", "-attempt", "earlier", "--", sys.executable, "-c", make)  # fmt: skip
    assert r.code == 0, r.err
    shutil.rmtree(fast)  # that node is gone: the save is on the mirror only
    saved = f"{mirror.url}/exec/earlier/checkpoint-5"
    script = two_tier_recipe(tmp_path, fast, mirror)
    run = Run(slurm, slurm_publish, tmp_path, script)
    j = slurm.sbatch(f"--output={run.logs}/%j.out", f"--chdir={tmp_path}", "--ntasks=1", str(script), *CRASHES,
                     env=run.env)  # fmt: skip
    for restarts in range(3):
        if restarts:
            slurm.requeued(j, restarts, timeout=90)
        else:
            slurm.running(j)
        slurm.wait_for(
            lambda n=restarts: run.log(j).count("trainer: loading") > n,
            60,
            f"dispatch {restarts} to start; log:\n{run.log(j)}",
        )
        slurm.run("scancel", "-b", "--signal=TERM", j)
    record = slurm.ended(j, timeout=90)
    log = run.log(j)
    assert (record["JobState"], record["Restarts"], record["ExitCode"]) == ("FAILED", "2", "1:0"), log
    assert log.count(f"publish: run: resuming from {saved}") == 3, log
    assert log.count(f"publish: run: created {fast}") == 3, log
    assert log.count(f"publish: run: asked Slurm to requeue job {j}") == 2, log
    assert "idle requeue 1 of at most 2 in a row" in log and "idle requeue 2 of at most 2 in a row" in log
    assert (
        f"publish: run: job {j} not requeued: this dispatch and the 2 before it, each requeued, published "
        f"nothing newer than {saved} (-max-idle-requeues 2); exiting non-zero, so the job ends FAILED"
    ) in log
    assert len([k for k in mirror.keys("exec/") if k.startswith("exec/.idle-")]) == 2


# --- repeated trials ----------------------------------------------------------------------------------------
# Each way a job is stopped, several times over: the races of a job script (a signal before the trap is set,
# wait cut short by the trap, a watch stopped before it can hear, the job-wide signal reaching watch at the
# same moment) show in one trial of many, not in one test.

TRIALS = int(os.environ.get("PUBLISH_SLURM_TRIALS", "2"))
SIDE_BY_SIDE = 2  # trials at once: two jobs of one CPU each (the test node has two at least)
REQUEUE_NOTE = BY_HAND.requeue_note
# what stops the job, and whether it comes back: by the script's own requeue, by Slurm's, or not at all
STOPS = {
    "scancel": ("scancel", "ended"),
    "scancel -b": ("scancel -b --signal=TERM", "script requeues"),
    "warning": ("--signal=B:TERM@90", "script requeues"),
    "scontrol requeue": ("scontrol requeue", "Slurm requeues"),
}


def first_dispatch(log: str) -> str:
    """The lines of dispatch 0 (the log is appended to: the next dispatch's lines follow). Dispatch 0 ends at
    its requeue note (the script exits right after it), or else where the next dispatch resumes; a next
    dispatch with nothing to resume from says "starting from step 0", like dispatch 0 does."""
    first = log.split("trainer: resuming from ", 1)[0]
    at = first.find(REQUEUE_NOTE)
    if at >= 0:
        end = first.find("\n", at)
        first = first if end < 0 else first[: end + 1]
    return first


def check_stopped(run: Run, job: str, comes_back: str) -> str:
    """The checks every stopped dispatch 0 must pass; the SIGTERM save, or "" when the stop came before
    training started (the warning can come in the first second)."""
    log = first_dispatch(run.log(job))
    requeued = REQUEUE_NOTE in log
    assert requeued == (comes_back == "script requeues"), f"requeue note {requeued} for {comes_back}:\n{log}"
    if "trainer:" not in log:
        assert comes_back == "script requeues", f"training never started:\n{log}"
        return ""
    saved = run.stopped_at(job, f"{job}.0")
    published = [p.save for p in run.published(job)]
    assert saved in published, f"the SIGTERM save {saved} was not published:\n{log}"
    if len([p for p in published if f"/exec/{job}.0/" in p]) > 3:  # prune has something to remove
        assert "\nremoved " in log, f"no prune:\n{log}"
    run.check_whole(job)
    return saved


def one_stop(run: Run, how: str) -> None:
    """One trial: train until four saves are published, stop the job, check what came of it."""
    signal, comes_back = STOPS[how]
    if how == "warning":
        # the warning comes up to a minute early ("the resolution of event handling"): within the first minute
        job = run.submit("--time=2", signal, steps=4000)
        run.slurm.running(job)
    else:
        job = run.submit(steps=4000)
        run.slurm.running(job)
        run.wait_saved(job, f"{job}.0", 8)
        run.slurm.run(*signal.split(), job)
    try:
        if comes_back == "ended":
            record = run.slurm.ended(job, timeout=KILL_WAIT + 60)
            assert (record["JobState"], record["Restarts"]) == ("CANCELLED", "0"), record
            saved = check_stopped(run, job, comes_back)
            assert run_cli("resolve", "-checkpoint", str(run.root)).out == saved + "\n"
        else:
            run.slurm.requeued(job, timeout=150)
            saved = check_stopped(run, job, comes_back)
            if saved:
                run.check_resumed(job, f"{job}.1", saved)
    finally:
        record = end(run, job)
    assert record["Restarts"] == ("0" if comes_back == "ended" else "1"), record
    run.check_root()  # after the job's end: the next dispatch prunes only as it ends


def trials(tmp: Path, slurm: Slurm, bin_dir: Path, n: int) -> Iterator[Run]:  # noqa: F811
    for i in range(n):
        (tmp / str(i)).mkdir()
        yield Run(slurm, bin_dir, tmp / str(i), SCRIPT)


def failure(e: AssertionError) -> str:
    """What failed, and where (an assert of tests/support/slurm.py may carry no message)."""
    where = traceback.extract_tb(e.__traceback__)[-1]
    return f"{Path(where.filename).name}:{where.lineno}: {where.line}: {e}"[:6000]


def attempt(trial: Callable[[Run, str], None], run: Run, how: str) -> str:
    """One trial; what failed in it, or ""."""
    try:
        trial(run, how)
    except AssertionError as e:
        return failure(e)
    return ""


def report(failures: list[str], n: int) -> None:
    assert not failures, f"{len(failures)} of {n} trials failed:\n\n" + "\n\n".join(failures)


@pytest.mark.slow
@pytest.mark.timeout(max(600, TRIALS * 60))  # a trial of the warning takes half a minute
@pytest.mark.parametrize("how", list(STOPS))
def test_repeated_stops(slurm: Slurm, slurm_publish: Path, tmp_path: Path, how: str) -> None:  # noqa: F811
    """PUBLISH_SLURM_TRIALS trials (2 unless set) of each stop, two at a time, each on a root of its own:
    every time the SIGTERM save is published, prune ran, the job ends or comes back as expected, and only the
    script's own requeue after a signal to the batch shell shows its note.

    A longer campaign is one command: PUBLISH_SLURM_TRIALS=25 python -m pytest tests/jobs/test_slurm.py -k repeated
    """
    runs = list(trials(tmp_path, slurm, slurm_publish, TRIALS))
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:  # each job takes one CPU of the node
        done = list(pool.map(lambda r: attempt(one_stop, r, how), runs))
    report([f"trial {i}: {f}" for i, f in enumerate(done) if f], TRIALS)


@pytest.mark.slow
@pytest.mark.timeout(max(600, TRIALS * 90))
def test_repeated_time_limits(slurm: Slurm, slurm_publish: Path, tmp_path: Path) -> None:  # noqa: F811
    """The time limit itself, PUBLISH_SLURM_TRIALS trials (each a minute or more; submitted at once, two run
    side by side): every job ends TIMEOUT, not requeued, with its SIGTERM save published and pruned. The
    warning signal is sent as SIGURG, which the shell ignores: only the time limit stops training."""
    runs = list(trials(tmp_path, slurm, slurm_publish, TRIALS))
    jobs = [r.submit("--time=1", "--signal=B:URG@1", steps=40000) for r in runs]
    failures = []
    for i, (run, job) in enumerate(zip(runs, jobs)):
        try:
            record = run.slurm.ended(job, timeout=(i // SIDE_BY_SIDE + 1) * 150)
            assert (record["JobState"], record["Restarts"]) == ("TIMEOUT", "0"), record
            saved = check_stopped(run, job, "ended")
            assert run_cli("resolve", "-checkpoint", str(run.root)).out == saved + "\n"
            run.check_root()
        except AssertionError as e:
            failures.append(f"trial {i} (job {job}): {failure(e)}")
            end(run, job)
    report(failures, TRIALS)
