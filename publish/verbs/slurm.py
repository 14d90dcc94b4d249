"""The batch system around ``publish run``: Slurm, asked through its own commands (scancel, squeue, scontrol)."""

from __future__ import annotations

import signal
import subprocess

from publish.errors import Failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# squeue's states of a job still running: SIGNALING while slurmctld sends the --signal warning
LIVE = ("RUNNING", "SIGNALING")


def signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Batch:
    """The batch system around ``publish run``: Slurm when ``SLURM_JOB_ID`` is set, else nothing."""

    def __init__(self, env: Mapping[str, str], timeout: float) -> None:
        self.env = dict(env)
        self.job = env.get("SLURM_JOB_ID", "")
        self.timeout = timeout

    def _run(self, *argv: str, limit: float = 10) -> str:
        try:
            r = subprocess.run(
                argv, env=self.env, capture_output=True, text=True, timeout=min(self.timeout, limit)
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Failure(f"{argv[0]}: {e}") from None
        if r.returncode != 0:
            raise Failure(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[:500]}")
        return r.stdout

    def signal_steps(self, signum: int) -> None:
        """Signal the job's steps, not its batch step (``scancel`` without ``-b`` or ``-f``)."""
        self._run("scancel", f"--signal={signame(signum)[3:]}", self.job)

    def steps_left(self) -> bool:
        """True while a step of the job other than the batch and extern steps is still listed."""
        out = self._run("squeue", "-h", "-s", "-j", self.job, "-o", "%i")
        return any(s and not s.endswith((".batch", ".extern")) for s in out.split())

    def state(self) -> str:
        return self._run("squeue", "-h", "-j", self.job, "-o", "%T").strip()

    def requeue(self) -> None:
        self._run("scontrol", "requeue", self.job, limit=60)
