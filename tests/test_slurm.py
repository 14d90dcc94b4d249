"""The README's Slurm recipe (examples/slurm_job.sh) on a real one-node Slurm: every way a job ends.

In each case the save the trainer makes on SIGTERM is published, nothing half-written is, and the next
dispatch resumes from the newest whole save with a greater epoch; after a requeue the job comes back by itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.slurm import KILL_WAIT, Run, Slurm, end, slurm, slurm_publish  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm

SCRIPT = REPO / "examples" / "slurm_job.sh"


@pytest.fixture
def run(slurm: Slurm, slurm_publish: Path, tmp_path: Path) -> Run:  # noqa: F811
    return Run(slurm, slurm_publish, tmp_path, SCRIPT)


def test_readme_recipe_is_the_example_script() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("### Slurm, by hand\n", 1)[1].split("```bash\n", 1)[1].split("```\n", 1)[0]
    assert block == SCRIPT.read_text()


def test_a_job_that_runs_to_its_end(run: Run) -> None:
    job = run.submit(steps=6)
    record = run.slurm.ended(job, timeout=90)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), run.log(job)
    steps = [p.step for p in run.published(job)]
    assert steps == [2, 4, 6], run.log(job)
    assert run.log(job).count("already published") == 0
    run.check_root()
    assert run_cli("resolve", "-checkpoint", str(run.root)).out == f"{run.root}/exec/{job}.0/checkpoint-6\n"


def test_scontrol_requeue(run: Run) -> None:
    job = run.submit()
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scontrol", "requeue", job)
    run.slurm.requeued(job)
    saved = run.stopped_at(job, f"{job}.0")
    run.check_resumed(job, f"{job}.1", saved)
    assert saved in [p.save for p in run.published(job)]
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_scancel_then_resubmit(run: Run) -> None:
    job = run.submit()
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scancel", job)
    record = run.slurm.ended(job)
    assert record["JobState"] == "CANCELLED", record
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


@pytest.mark.parametrize("how", ["scancel -b --signal=TERM", "--time with --signal=B:TERM@N"])
def test_a_signal_to_the_batch_shell_requeues_the_job(run: Run, how: str) -> None:
    if how.startswith("scancel"):
        job = run.submit()
        run.slurm.running(job)
        run.wait_saved(job, f"{job}.0", 4)
        run.slurm.run("scancel", "-b", "--signal=TERM", job)
    else:
        # the warning comes up to a minute early ("the resolution of event handling"): within the first minute
        job = run.submit("--time=2", "--signal=B:TERM@90")
        run.slurm.running(job)
    back = run.slurm.requeued(job, timeout=150)
    assert back["JobState"] == "RUNNING"
    saved = run.stopped_at(job, f"{job}.0")
    run.check_resumed(job, f"{job}.1", saved)
    assert saved in [p.save for p in run.published(job)]
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_training_through_srun_gets_the_sigterm(run: Run) -> None:
    job = run.submit(srun=True)
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scancel", "-b", "--signal=TERM", job)
    run.slurm.requeued(job)
    saved = run.stopped_at(job, f"{job}.0")
    run.check_resumed(job, f"{job}.1", saved)
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_training_through_srun_saves_on_requeue(run: Run) -> None:
    """A job-wide signal reaches srun's task as SIGTERM: srun waits for it, and the trap leaves the job alone
    (a scancel of a requeued job would block this shell until KillWait killed it, before its last scan)."""
    job = run.submit(srun=True)
    run.slurm.running(job)
    run.wait_saved(job, f"{job}.0", 4)
    run.slurm.run("scontrol", "requeue", job)
    run.slurm.requeued(job)
    saved = run.stopped_at(job, f"{job}.0")
    assert saved in [p.save for p in run.published(job)], run.log(job)
    run.check_resumed(job, f"{job}.1", saved)
    end(run, job)
    run.check_whole(job)
    run.check_root()


def test_an_array_of_two_tasks_sharing_one_root(run: Run) -> None:
    job = run.submit("--array=0-1", steps=6)
    tasks = [f"{job}_0", f"{job}_1"]
    for t in tasks:
        assert run.slurm.ended(t, timeout=120)["JobState"] == "COMPLETED", run.log(t)
    published = {t: run.published(t) for t in tasks}
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


# --- repeated trials --------------------------------------------------------------------------------------------
# Each way a job is stopped, several times over: the races of a job script (a signal before the trap is set,
# wait cut short by the trap, a watch stopped before it can hear, the job-wide signal reaching watch at the same
# moment) show in one trial of many, not in one test.

TRIALS = int(os.environ.get("PUBLISH_SLURM_TRIALS", "2"))
REQUEUE_NOTE = "slurm_job.sh: asked Slurm to requeue job"
# what stops the job, and whether it comes back: by the script's own requeue, by Slurm's, or not at all
STOPS = {
    "scancel": ("scancel", "ended"),
    "scancel -b": ("scancel -b --signal=TERM", "script requeues"),
    "warning": ("--signal=B:TERM@90", "script requeues"),
    "scontrol requeue": ("scontrol requeue", "Slurm requeues"),
}


def first_dispatch(log: str) -> str:
    """The lines of dispatch 0 (the log is appended to: the next dispatch's lines follow)."""
    return log.split("trainer: resuming from ", 1)[0]


def check_stopped(run: Run, job: str, comes_back: str, prunes: bool = True) -> str:
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
    if prunes and len([p for p in published if f"/exec/{job}.0/" in p]) > 3:
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
        run.check_root()
    finally:
        record = end(run, job)
    assert record["Restarts"] == ("0" if comes_back == "ended" else "1"), record


def trials(tmp: Path, slurm: Slurm, bin_dir: Path, n: int) -> Iterator[Run]:  # noqa: F811
    for i in range(n):
        (tmp / str(i)).mkdir()
        yield Run(slurm, bin_dir, tmp / str(i), SCRIPT)


def report(failures: list[str], n: int) -> None:
    assert not failures, f"{len(failures)} of {n} trials failed:\n\n" + "\n\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("how", list(STOPS))
def test_repeated_stops(slurm: Slurm, slurm_publish: Path, tmp_path: Path, how: str) -> None:  # noqa: F811
    """PUBLISH_SLURM_TRIALS trials (2 unless set) of each stop, each on a root of its own: every time the
    SIGTERM save is published, prune ran, the job ends or comes back as expected, and only the script's own
    requeue after a signal to the batch shell shows its note. A longer campaign: PUBLISH_SLURM_TRIALS=25."""
    failures = []
    for i, run in enumerate(trials(tmp_path, slurm, slurm_publish, TRIALS)):
        try:
            one_stop(run, how)
        except AssertionError as e:
            failures.append(f"trial {i}: {e}"[:6000])
    report(failures, TRIALS)


@pytest.mark.slow
def test_repeated_time_limits(slurm: Slurm, slurm_publish: Path, tmp_path: Path) -> None:  # noqa: F811
    """The time limit itself, PUBLISH_SLURM_TRIALS trials (each a minute or more; submitted at once, two run
    side by side on the test node): every job ends TIMEOUT, not requeued, with its SIGTERM save published and
    pruned. The warning signal is sent as SIGURG, which the shell ignores: only the time limit stops training."""
    runs = list(trials(tmp_path, slurm, slurm_publish, TRIALS))
    jobs = [r.submit("--time=1", "--signal=B:URG@1", steps=40000) for r in runs]
    failures = []
    for i, (run, job) in enumerate(zip(runs, jobs)):
        try:
            record = run.slurm.ended(job, timeout=(i // 2 + 1) * 150)
            assert (record["JobState"], record["Restarts"]) == ("TIMEOUT", "0"), record
            saved = check_stopped(run, job, "ended")
            assert run_cli("resolve", "-checkpoint", str(run.root)).out == saved + "\n"
            run.check_root()
        except AssertionError as e:
            failures.append(f"trial {i} (job {job}): {e}"[:6000])
            end(run, job)
    report(failures, TRIALS)
