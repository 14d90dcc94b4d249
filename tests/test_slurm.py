"""The README's Slurm recipe (examples/slurm_job.sh) on a real one-node Slurm: every way a job ends.

In each case the save the trainer makes on SIGTERM is published, nothing half-written is, and the next
dispatch resumes from the newest whole save with a greater epoch; after a requeue the job comes back by itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.slurm import Run, Slurm, end, slurm, slurm_publish  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm

SCRIPT = REPO / "examples" / "slurm_job.sh"


@pytest.fixture
def run(slurm: Slurm, slurm_publish: Path, tmp_path: Path) -> Run:  # noqa: F811
    return Run(slurm, slurm_publish, tmp_path, SCRIPT)


def test_readme_recipe_is_the_example_script() -> None:
    readme = (REPO / "docs" / "jobs.md").read_text()
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
