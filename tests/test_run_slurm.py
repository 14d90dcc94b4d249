"""The ``publish run`` recipe (examples/slurm_run.sh) on a real one-node Slurm: every way a job ends.

In each case the save the trainer makes on SIGTERM is published, nothing half-written is, the next dispatch
resumes from the newest whole save with a greater epoch, and with ``-requeue`` a job stopped by the warning
signal comes back by itself. tests/test_slurm.py runs the manual recipe through the same cases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.slurm import Run, Slurm, end, slurm, slurm_publish  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm

SCRIPT = REPO / "examples" / "slurm_run.sh"


@pytest.fixture
def job(slurm: Slurm, slurm_publish: Path, tmp_path: Path) -> Run:  # noqa: F811
    """The same job and checks as the manual recipe's (tests/test_slurm.py), submitted through publish run."""
    return Run(slurm, slurm_publish, tmp_path, SCRIPT)


def test_readme_recipe_is_the_example_script() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("### Slurm: `publish run`\n", 1)[1].split("```bash\n", 1)[1].split("```\n", 1)[0]
    assert block == SCRIPT.read_text()


def test_a_job_that_runs_to_its_end(job: Run) -> None:
    j = job.submit(steps=6)
    record = job.slurm.ended(j, timeout=90)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), job.log(j)
    assert [p.step for p in job.published(j)] == [2, 4, 6], job.log(j)
    assert "already published" not in job.log(j)
    job.check_root()
    assert run_cli("resolve", "-checkpoint", str(job.root)).out == f"{job.root}/exec/{j}.0/checkpoint-6\n"


@pytest.mark.parametrize("srun", [False, True], ids=["plain", "srun"])
def test_scontrol_requeue(job: Run, srun: bool) -> None:
    """A job-wide SIGTERM: the save made on it is published; publish run does not signal the job again."""
    j = job.submit(srun=srun)
    job.slurm.running(j)
    job.wait_saved(j, f"{j}.0", 4)
    job.slurm.run("scontrol", "requeue", j)
    job.slurm.requeued(j)
    saved = job.stopped_at(j, f"{j}.0")
    assert saved in [p.save for p in job.published(j)], job.log(j)
    assert f"publish: run: job {j} is COMPLETING: not requeued" in job.log(j)  # Slurm brings it back itself
    # the trainer had the job-wide SIGTERM already: publish run did not send it again
    assert f"publish: run: job {j} is COMPLETING: Slurm signalled every process of it" in job.log(j)
    job.check_resumed(j, f"{j}.1", saved)
    end(job, j)
    job.check_whole(j)
    job.check_root()


def test_scancel_then_resubmit(job: Run) -> None:
    j = job.submit()
    job.slurm.running(j)
    job.wait_saved(j, f"{j}.0", 4)
    job.slurm.run("scancel", j)
    record = job.slurm.ended(j)
    assert record["JobState"] == "CANCELLED", record  # not revived by -requeue
    saved = job.stopped_at(j, f"{j}.0")
    assert saved in [p.save for p in job.published(j)], job.log(j)
    job.check_whole(j)
    job.check_root()
    assert run_cli("resolve", "-checkpoint", str(job.root)).out == saved + "\n"

    again = job.submit(steps=2)
    assert job.slurm.ended(again, timeout=90)["JobState"] == "COMPLETED", job.log(again)
    assert f"trainer: resuming from {saved} at step" in job.log(again)
    old = max(p.epoch for p in job.published(j))
    assert all(p.epoch > old for p in job.published(again)), job.log(again)


@pytest.mark.parametrize(
    "how", ["scancel -b --signal=TERM", "scancel -b through srun", "--time with --signal=B:TERM@N"]
)
def test_a_signal_to_the_batch_shell_requeues_the_job(job: Run, how: str) -> None:
    """Only publish run gets SIGTERM (exec): it passes it on (to srun's task as SIGTERM), then requeues."""
    if how.startswith("scancel"):
        j = job.submit(srun="srun" in how)
        job.slurm.running(j)
        job.wait_saved(j, f"{j}.0", 4)
        job.slurm.run("scancel", "-b", "--signal=TERM", j)
    else:
        # the warning comes up to a minute early ("the resolution of event handling"): within the first minute
        j = job.submit("--time=2", "--signal=B:TERM@90")
        job.slurm.running(j)
    back = job.slurm.requeued(j, timeout=150)
    assert back["JobState"] == "RUNNING"
    assert f"publish: run: asked Slurm to requeue job {j}" in job.log(j)
    saved = job.stopped_at(j, f"{j}.0")
    assert saved in [p.save for p in job.published(j)], job.log(j)
    job.check_resumed(j, f"{j}.1", saved)
    end(job, j)
    job.check_whole(j)
    job.check_root()


def test_an_array_of_two_tasks_sharing_one_root(job: Run) -> None:
    j = job.submit("--array=0-1", steps=6)
    tasks = [f"{j}_0", f"{j}_1"]
    for t in tasks:
        assert job.slurm.ended(t, timeout=120)["JobState"] == "COMPLETED", job.log(t)
    published = {t: job.published(t) for t in tasks}
    for t in tasks:
        assert {p.save.rsplit("/", 2)[1] for p in published[t]} == {f"{t}.0"}  # <array job>_<task>.<restart>
    epochs = {t: {p.epoch for p in ps} for t, ps in published.items()}
    assert all(len(e) == 1 for e in epochs.values()), epochs
    assert epochs[tasks[0]] != epochs[tasks[1]], epochs  # even when both started in the same second
    for t in tasks:
        assert [p.step for p in published[t]] == [2, 4, 6], job.log(t)
        job.check_whole(t)
    job.check_root()
    later = max(tasks, key=lambda t: max(epochs[t]))
    newest = published[later][-1].save
    assert run_cli("resolve", "-checkpoint", str(job.root)).out == newest + "\n"

    again = job.submit(steps=2)
    assert job.slurm.ended(again, timeout=90)["JobState"] == "COMPLETED", job.log(again)
    assert f"trainer: resuming from {newest} at step" in job.log(again)


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
    script.write_text(SCRIPT.read_text().replace(" -requeue ", " -requeue -max-idle-requeues 2 "))
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
