"""The README's Slurm job script outside Slurm: its shell gets SIGTERM (as before a time limit), it resumes.

tests/jobs/test_slurm.py runs the same script on a real Slurm, in every way a job ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, base_env, command, run_cli

SCRIPT = REPO / "examples" / "slurm_job.sh"
TRAINER = REPO / "examples" / "tiny_trainer.py"


def job_env(tmp: Path, root: Path, restart: int) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "publish"
    cmd = " ".join(command() or [sys.executable, "-m", "publish"])
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec {cmd} "$@"\n')
    shim.chmod(0o755)
    env = base_env()
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '')}",
        CHECKPOINT=str(root),
        SLURM_JOB_ID="4242",
        SLURM_RESTART_COUNT=str(restart),
    )
    return env


def test_preempted_job_publishes_its_last_save_and_the_requeued_one_resumes(
    root: Path, tmp_path: Path
) -> None:
    trainer = [sys.executable, str(TRAINER), "--steps", "400", "--save-every", "2"]
    job = subprocess.Popen(
        ["bash", str(SCRIPT), *trainer],
        env=job_env(tmp_path, root, 0),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    saves = root / "exec" / "4242.0"
    deadline = time.monotonic() + 60
    while not (saves / "checkpoint-6" / "trainer_state.json").exists():
        assert time.monotonic() < deadline and job.poll() is None, job.stderr.read() if job.stderr else ""
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)  # what Slurm sends the batch shell before the time limit
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err  # stopped to come back (outside Slurm there is nothing to requeue)
    stopped = [line for line in out.splitlines() if line.startswith("trainer: stopped by SIGTERM at step ")]
    assert stopped, out  # the trainer got the SIGTERM and saved once more
    published = [line for line in out.splitlines() if line.startswith("published ")]
    assert published, out
    latest = run_cli("resolve", "-checkpoint", str(root)).out.strip()
    assert latest == published[-1].rsplit(", ", 1)[1].rstrip(")")
    assert latest == f"{saves}/checkpoint-{stopped[0].rsplit(' ', 1)[1]}"  # that save, published
    assert len(os.listdir(root / "pub")) <= 3  # pruned to the latest three

    # Requeued: the same job id, the next restart count; it resumes from what resolve printed.
    trainer = [sys.executable, str(TRAINER), "--steps", "2", "--save-every", "2"]
    again = subprocess.run(
        ["bash", str(SCRIPT), *trainer],
        env=job_env(tmp_path, root, 1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert f"trainer: resuming from {latest} at step" in again.stdout
    newest = run_cli("resolve", "-checkpoint", str(root)).out.strip()
    assert newest.startswith(f"{root}/exec/4242.1/checkpoint-")
