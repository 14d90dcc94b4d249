"""A real one-node Slurm for the tests: munge, slurmctld and slurmd from Debian's packages, on loopback.

Fixtures (session-scoped, started only by a test that asks for them):

- ``slurm``: a running :class:`Slurm`: ``munged`` (as the ``munge`` user), ``slurmctld -D`` and ``slurmd -D``
  under a slurm.conf of their own in a temporary folder, with the node as ``slurmd -C`` reports it. Jobs run
  as the caller (root here). ``slurm.env`` holds ``SLURM_CONF``, which every client command (``sbatch``,
  ``scontrol``, ``scancel`` inside a job too: sbatch passes the environment on) needs.
- ``slurm_publish``: a folder holding a ``publish`` command for job scripts to find on PATH: the worktree's
  source (``python3 -m publish`` with PYTHONPATH set), or the binary ``PUBLISH_BIN`` names. Its ``watch``
  and ``run`` scan every 200ms unless the caller's own ``-interval`` says otherwise.

:class:`Run` submits a recipe's job script with the small trainer (examples/tiny_trainer.py), reads what its
jobs printed and checks the root; :func:`end` cancels a job and waits for its end. tests/jobs/test_slurm.py runs
both recipes (``publish run``'s and the one by hand) through them.

Helpers: :meth:`Slurm.sbatch` submits and returns the job id; :meth:`Slurm.job` is ``scontrol show job`` as a
dict; :meth:`Slurm.wait` polls it until a condition holds, with a deadline; :meth:`Slurm.running` waits for a
dispatch to run, :meth:`Slurm.requeued` for a requeued job to run again (without Slurm's two-minute hold),
:meth:`Slurm.ended` for a job to end for good. Every wait is bounded.

The packages come from ``tests/support/slurm_setup.sh`` (root, apt-get), which ``./test`` runs; the fixture runs it
too when the daemons are missing. Where they cannot be installed the tests skip, or fail under CI=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import REPO, base_env, command, need, run_cli
from tests.support.ports import free_port

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "squeue", "srun", "setpriv")
FINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE"}
# KillWait: the time between the job-wide SIGTERM and SIGKILL (scancel, requeue, the time limit)
KILL_WAIT = 30


def installed() -> bool:
    """True when every Slurm and munge program is there; tries tests/support/slurm_setup.sh once when not."""
    if all(shutil.which(t) for t in TOOLS):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["bash", str(REPO / "tests" / "support" / "slurm_setup.sh")], capture_output=True, timeout=900
        )
    return all(shutil.which(t) for t in TOOLS)


def parse_show(text: str) -> list[dict[str, str]]:
    """``scontrol -o show job`` output: one job a line, ``Key=Value`` pairs (a value may hold spaces)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        pairs = re.split(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)", line.strip())
        jobs.append(dict(p.split("=", 1) for p in pairs if "=" in p))
    return jobs


class Slurm:
    """A running one-node cluster; its daemons are stopped by PID in :meth:`stop`."""

    def __init__(self, base: Path) -> None:
        self.dir = base
        self.conf = base / "slurm.conf"
        self.env = {**base_env(), "SLURM_CONF": str(self.conf)}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.node = ""
        self.munge_socket = base / "munge" / "munge.socket"
        self.munge_pid = Path("/run/munge") / f"test-{os.getpid()}-{base.name}.pid"

    # --- start and stop -------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start_munge()
            self._write_conf()
            (self.dir / "state").mkdir()
            (self.dir / "spool").mkdir()
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
            self.wait_for(self._node_idle, 60, "the node to come up idle")
        except BaseException:
            self.stop()
            raise

    def _start_munge(self) -> None:
        mdir = self.dir / "munge"
        mdir.mkdir()
        mdir.chmod(0o755)  # munged wants its socket's folder searchable by all
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(mdir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        run_dir = Path("/run/munge")
        run_dir.mkdir(mode=0o755, exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        self._spawn(
            "munged",
            [
                "setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                "munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
                f"--pid-file={self.munge_pid}", f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'munged.seed'}",
            ],
        )  # fmt: skip
        self.wait_for(lambda: self.check_daemons() or self.munge_socket.exists(), 30, "munged's socket")

    def _write_conf(self) -> None:
        node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True)
        line = node.stdout.splitlines()[0]  # NodeName=... CPUs=... RealMemory=...
        self.node = line.split()[0].split("=", 1)[1]
        d = self.dir
        self.conf.write_text(
            f"""ClusterName=publishtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait={KILL_WAIT}
MinJobAge=3600
MailProg=/bin/true
{line.split(" UpTime=")[0]} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "wb")  # noqa: SIM115 (the daemon keeps it)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dir)
        log.close()
        self.procs.append((name, proc))

    def stop(self) -> None:
        """Cancel what is left and let it end (a job outlives a stopped slurmd), then stop the daemons (last
        started first) by PID; each wait bounded."""
        if all(p.poll() is None for _, p in self.procs) and len(self.procs) == 3:
            with contextlib.suppress(subprocess.SubprocessError, OSError, AssertionError):
                self.run("scancel", "--user", str(os.getuid()), check=False)
                self.wait_for(
                    lambda: self.run("squeue", "-h", check=False).stdout.strip() == "",
                    KILL_WAIT + 30,
                    "the cancelled jobs to end",
                )
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
        self.procs.clear()
        with contextlib.suppress(OSError):
            self.munge_pid.unlink()

    def _node_idle(self) -> bool:
        self.check_daemons()
        r = self.run("sinfo", "-h", "-o", "%t", check=False)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def check_daemons(self) -> None:
        """Fail at once, with its log, when a daemon has died."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                out = (self.dir / f"{name}.out").read_text(errors="replace")
                log = self.dir / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{out}\n{tail}")

    # --- client commands ------------------------------------------------------------------------------
    def run(
        self, *argv: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            argv, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=60, cwd=self.dir
        )
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Submit (``sbatch --parsable ARGS``) with ``env`` on top of :attr:`env`; the job id."""
        r = self.run("sbatch", "--parsable", *args, env=env)
        return r.stdout.strip().split(";")[0]

    def jobs(self, job: str) -> list[dict[str, str]]:
        """``scontrol show job JOB`` as dicts: one, or one per task of an array."""
        r = self.run("scontrol", "-o", "show", "job", job, check=False)
        if r.returncode != 0:
            return []
        return parse_show(r.stdout)

    def job(self, job: str) -> dict[str, str]:
        found = self.jobs(job)
        assert len(found) == 1, (job, found)
        return found[0]

    def wait_for(self, condition: Callable[[], object], timeout: float, what: str) -> None:
        """Poll ``condition`` every 0.1 s until it holds; fail naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.1)

    def wait(
        self, job: str, condition: Callable[[dict[str, str]], bool], timeout: float = 60, what: str = ""
    ) -> dict[str, str]:
        """Poll ``scontrol show job`` until ``condition`` holds for the job; its record then."""
        seen: dict[str, str] = {}

        def holds() -> bool:
            nonlocal seen
            self.check_daemons()
            found = self.jobs(job)
            if len(found) != 1:
                return False
            seen = found[0]
            return condition(seen)

        try:
            self.wait_for(holds, timeout, what or f"job {job}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {seen}\n{self.log_tail()}") from None
        return seen

    def log_tail(self, size: int = 4000) -> str:
        """The end of slurmctld's and slurmd's logs, for a failure's message."""
        parts = []
        for name in ("slurmctld", "slurmd"):
            log = self.dir / f"{name}.log"
            if log.exists():
                parts.append(f"--- {name}.log\n" + log.read_text(errors="replace")[-size:])
        return "\n".join(parts)

    def running(self, job: str, restarts: int = 0, timeout: float = 60) -> dict[str, str]:
        """Wait until the job's dispatch number ``restarts`` is running."""
        return self.wait(
            job,
            lambda j: j.get("JobState") == "RUNNING" and j.get("Restarts") == str(restarts),
            timeout,
            f"job {job} to run (restart {restarts})",
        )

    def requeued(self, job: str, restarts: int = 1, timeout: float = 60) -> dict[str, str]:
        """Wait until the job is back in the queue for dispatch ``restarts``, then until it runs.

        Slurm holds a requeued job for two minutes (its BeginTime); once it is pending again, that start time
        is moved to two seconds from now, so the test does not sit out the delay. (Not to now: slurmd refuses
        a launch credential issued in the same second as the old dispatch's was revoked.)"""
        back = self.wait(
            job,
            lambda j: j.get("Restarts") == str(restarts) and j.get("JobState") in ("PENDING", "RUNNING"),
            timeout,
            f"job {job} to be requeued (restart {restarts})",
        )
        if back["JobState"] == "PENDING":
            self.run("scontrol", "update", f"JobId={job}", "StartTime=now+2", check=False)
        return self.running(job, restarts, timeout)

    def ended(self, job: str, timeout: float = 60) -> dict[str, str]:
        """Wait until the job has ended for good (a final state, not requeued, not completing)."""
        return self.wait(
            job,
            lambda j: j.get("JobState") in FINAL and "COMPLETING" not in j.get("JobState", ""),
            timeout,
            f"job {job} to end",
        )


TRAINER = [sys.executable, str(REPO / "examples" / "tiny_trainer.py")]
PUBLISHED = re.compile(r"^published (\S+) \(epoch (\d+), step (\d+), (.+)\)$")


@dataclass
class Published:
    entry: str
    epoch: int
    step: int
    save: str


class Run:
    """Jobs of one recipe (a job script) on one checkpoint root: submit them, signal them, read their logs."""

    def __init__(self, cluster: Slurm, bin_dir: Path, tmp: Path, script: Path) -> None:
        self.slurm = cluster
        self.script = script
        self.root = tmp / "ckpt"
        self.root.mkdir()
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.env = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "CHECKPOINT": str(self.root),
        }

    def submit(self, *options: str, steps: int = 400, srun: bool = False) -> str:
        trainer = [*(["srun", "--ntasks=1"] if srun else []), *TRAINER, "--steps", str(steps)]
        array = any(o.startswith("--array") for o in options)
        return self.slurm.sbatch(
            f"--output={self.logs}/{'%A_%a' if array else '%j'}.out",
            f"--chdir={self.root}",
            "--ntasks=1",
            *options,
            str(self.script),
            *trainer,
            env=self.env,
        )

    def log(self, job: str) -> str:
        path = self.logs / f"{job}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def published(self, job: str) -> list[Published]:
        found = []
        for line in self.log(job).splitlines():
            m = PUBLISHED.match(line)
            if m:
                found.append(Published(m[1], int(m[2]), int(m[3]), m[4]))
        return found

    def wait_saved(self, job: str, attempt: str, step: int, timeout: float = 60) -> None:
        """Until watch has published the attempt's checkpoint-<step> (training is well under way)."""
        want = f"{self.root}/exec/{attempt}/checkpoint-{step}"
        self.slurm.wait_for(
            lambda: any(p.save == want for p in self.published(job)) or self.slurm.check_daemons(),
            timeout,
            f"{want} to be published; log:\n{self.log(job)}",
        )

    def wait_log(self, job: str, text: str, timeout: float = 60) -> None:
        self.slurm.wait_for(lambda: text in self.log(job), timeout, f"{text!r} in the log of {job}")

    def stopped_at(self, job: str, attempt: str) -> str:
        """The save the trainer of ``attempt`` made on SIGTERM."""
        m = re.findall(r"^trainer: stopped by SIGTERM at step (\d+)$", self.log(job), re.M)
        assert m, f"the trainer did not save on SIGTERM:\n{self.log(job)}"
        return f"{self.root}/exec/{attempt}/checkpoint-{m[0]}"

    def check_root(self) -> None:
        """Every entry left names a whole save; resolve answers the greatest (epoch, step)."""
        names = sorted(os.listdir(self.root / "pub"))
        assert names, "nothing published"
        entries = [layout.parse(n) for n in names]
        for e in entries:
            state = json.loads((self.root / e.path / "trainer_state.json").read_text())
            assert state["global_step"] == e.step, e
        assert len(entries) <= 3  # pruned
        latest = max(entries, key=lambda e: (e.epoch, e.step))
        assert run_cli("resolve", "-checkpoint", str(self.root)).out == f"{self.root}/{latest.path}\n"

    def check_whole(self, job: str) -> None:
        """Nothing half-written was ever published: each save the log names is whole, or pruned since."""
        for p in self.published(job):
            state = Path(p.save) / "trainer_state.json"
            if state.exists():
                assert json.loads(state.read_text())["global_step"] == p.step, p

    def check_resumed(self, job: str, attempt: str, saved: str) -> None:
        """The dispatch ``attempt`` resumed from ``saved``, and publishes with a greater epoch than it."""
        self.wait_log(job, f"trainer: resuming from {saved} at step")
        self.wait_saved(job, attempt, (int(saved.rsplit("-", 1)[1]) // 2 + 1) * 2)  # its next save
        old = {p.epoch for p in self.published(job) if f"/exec/{attempt}/" not in p.save}
        new = {p.epoch for p in self.published(job) if f"/exec/{attempt}/" in p.save}
        assert len(new) == 1 and min(new) > max(old), (old, new)


def end(run: Run, job: str) -> dict[str, str]:
    """Cancel the job and wait until it has ended."""
    run.slurm.run("scancel", job, check=False)
    return run.slurm.ended(job)


_RUNNING: list[Slurm] = []  # the session's one cluster, whichever module's fixture started it


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    """Each test module that imports this fixture gets a session fixture of its own: the first one started
    starts the cluster and stops it at the session's end (its teardown comes last), the others share it."""
    if _RUNNING:
        yield _RUNNING[0]
        return
    need(os.geteuid() == 0, "the Slurm tests start munged and Slurm's daemons, which needs root")
    need(installed(), "Slurm (slurm-wlm) and munge: run tests/support/slurm_setup.sh as root")
    base = Path(tempfile.mkdtemp(prefix="publish-slurm-"))
    base.chmod(0o755)  # munged, as the munge user, must reach its folder
    cluster = Slurm(base)
    cluster.start()
    _RUNNING.append(cluster)
    try:
        yield cluster
    finally:
        _RUNNING.clear()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_publish(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a ``publish`` command in it: the worktree's source, or the binary PUBLISH_BIN names."""
    bin_dir = tmp_path_factory.mktemp("slurm-bin")
    bin_dir.chmod(0o755)
    cmd = command()
    if cmd is None:
        body = f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m publish "$@"'
    else:
        body = "exec " + " ".join(f'"{w}"' for w in cmd) + ' "$@"'
    shim = bin_dir / "publish"
    # watch and run get short scans first; an -interval the script gives comes later, and wins
    shim.write_text(
        f'#!/bin/sh\ncase $1 in watch | run) verb=$1; shift; set -- "$verb" -interval 200ms "$@" ;; esac\n{body}\n'
    )
    shim.chmod(0o755)
    return bin_dir
