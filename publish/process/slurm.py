"""The batch system around ``publish run``: Slurm, asked through its own commands (scancel, squeue, scontrol).

subprocess and selectors are imported when a command is run, not with the module: ``publish run`` starts
without them (publish.process.child), and asks Slurm only after a signal, or to requeue."""

from __future__ import annotations

import os
import time

from publish.rules.errors import Failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# squeue's states of a job still running: SIGNALING while slurmctld sends the --signal warning
LIVE = ("RUNNING", "SIGNALING")

# A command is read up to these limits, then killed: one that never stops writing must not fill memory until its
# timeout. The longest answer parsed is squeue -s's step ids of one job, one a line: a job makes at most
# MaxStepCount steps (40000 by default), an id with its newline is under 20 bytes (a job id of at most 8 digits,
# MaxJobId being 67108863, a het job's "+offset", "." and a step number under 40000, or batch, extern,
# interactive), so under 800 KB, which 1 MiB cannot cut. squeue -o %T prints one word, scancel and scontrol
# requeue nothing. stderr is only shown, cut to 500 characters, after a failure.
STDOUT_LIMIT = 1 << 20
STDERR_LIMIT = 64 << 10


def signame(signum: int) -> str:
    """``signal.Signals(signum).name`` (``SIGTERM``), or ``signal N``: publish.process.signals.name."""
    from publish.process.signals import name

    return name(signum)


class Batch:
    """The batch system around ``publish run``: Slurm when ``SLURM_JOB_ID`` is set, else nothing."""

    def __init__(self, env: Mapping[str, str], timeout: float) -> None:
        self.env = dict(env)
        self.job = env.get("SLURM_JOB_ID", "")
        self.timeout = timeout

    def _run(self, *argv: str, limit: float = 10, ended: bool = False) -> str:
        """``argv``'s stdout; a Failure when it fails.  ``ended``: its end by SIGTERM is no failure when the job
        no longer runs (scontrol requeue: the requeue it asked for ends the job, and Slurm's SIGTERM to the
        job's processes may reach scontrol, one of them, before it exits)."""
        import subprocess

        try:
            code, out, err = bounded(argv, self.env, min(self.timeout, limit))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Failure(f"{argv[0]}: {e}") from None
        if code != 0 and not (ended and code == -15 and self.state() not in LIVE):
            raise Failure(f"{' '.join(argv)}: exit {code}: {err.strip()[:500]}")
        return out

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
        self._run("scontrol", "requeue", self.job, limit=60, ended=True)


def bounded(argv: tuple[str, ...], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run ``argv`` as ``subprocess.run(capture_output=True, text=True, timeout=timeout)`` does, but stop it
    (killed and reaped) with a Failure as soon as its stdout or stderr is over its limit."""
    import io
    import subprocess

    deadline = time.monotonic() + timeout
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        files = (p.stdout, p.stderr)
        try:
            got = _read(argv, deadline, timeout, {f.fileno(): bytearray() for f in files if f is not None})
            try:
                code = p.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                raise subprocess.TimeoutExpired(argv, timeout) from None
        except BaseException:
            p.kill()
            p.wait()
            raise
        # decoded as subprocess.run(text=True) decodes, but a byte the locale's encoding cannot read (a job
        # or node name) becomes U+FFFD instead of an exception
        out, err = (
            bytes(got[f.fileno()]).decode(f.encoding, "replace").replace("\r\n", "\n").replace("\r", "\n")
            for f in files
            if isinstance(f, io.TextIOWrapper)
        )
    return code, out, err


def _read(
    argv: tuple[str, ...], deadline: float, timeout: float, got: dict[int, bytearray]
) -> dict[int, bytearray]:
    """Read both pipes (stdout's fd first in ``got``) to their end, each up to its limit, until ``deadline``."""
    import selectors
    import subprocess

    stdout, stderr = got
    caps = {stdout: ("stdout", STDOUT_LIMIT), stderr: ("stderr", STDERR_LIMIT)}
    with selectors.DefaultSelector() as sel:
        for fd in got:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, timeout)
            for key, _ in sel.select(left):
                name, cap = caps[key.fd]
                data = os.read(key.fd, min(32768, cap + 1 - len(got[key.fd])))  # so never over cap + 1 held
                if not data:
                    sel.unregister(key.fd)
                elif len(got[key.fd]) + len(data) > cap:
                    raise Failure(f"{' '.join(argv)}: {name} is over {cap} bytes")
                else:
                    got[key.fd] += data
    return got
