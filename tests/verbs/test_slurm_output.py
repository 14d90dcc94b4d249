"""What publish run reads of Slurm's commands (squeue, scontrol, scancel), with stand-ins on PATH for the faults
no real Slurm produces: a command that never stops writing is stopped at the limit (killed and reaped) and
reported; ordinary answers, errors and timeouts read as before.

tests/jobs/test_slurm.py runs the same code against a real Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from publish.process.slurm import STDERR_LIMIT, STDOUT_LIMIT, Batch
from publish.rules.errors import Failure
from tests.conftest import REPO, base_env

# Run in a child process held to 1 GiB of address space, so a reader that keeps everything fails there instead of
# taking the machine's memory. It prints the Failure's message, then whether the stand-in (its pid in PIDFILE) is
# gone: killed and reaped, not left running or a zombie.
CHILD = """\
import os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from publish.rules.errors import Failure
from publish.process.slurm import Batch
b = Batch(dict(os.environ), timeout=float(sys.argv[2]))
try:
    getattr(b, sys.argv[1])()
    print("no failure")
except Failure as e:
    print(e)
try:
    os.kill(int(open(os.environ["PIDFILE"]).read()), 0)
    print("still there")
except ProcessLookupError:
    print("gone")
"""


def stand_in(tmp: Path, name: str, body: str) -> dict[str, str]:
    """An environment whose PATH finds ``name`` first as a shell script running ``body``, in a job with id 7."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho $$ > "$PIDFILE"\n{body}\n')
    script.chmod(0o755)
    env = base_env()
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", SLURM_JOB_ID="7", PIDFILE=str(tmp / "pid")
    )
    return env


def in_child(env: dict[str, str], method: str, timeout: float = 30) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, method, str(timeout)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.splitlines()


def test_a_command_that_floods_stdout_is_stopped_and_reported(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "squeue", "exec yes 7.0")
    assert in_child(env, "steps_left") == [
        f"squeue -h -s -j 7 -o %i: stdout is over {STDOUT_LIMIT} bytes",
        "gone",
    ]


def test_a_command_that_floods_stderr_is_stopped_and_reported(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "scontrol", "exec yes 'scontrol: error: something' >&2")
    assert in_child(env, "requeue") == [f"scontrol requeue 7: stderr is over {STDERR_LIMIT} bytes", "gone"]


def test_the_longest_real_answer_is_read_whole(tmp_path: Path) -> None:
    """squeue -s of a job with MaxStepCount's default 40000 steps, each id as long as Slurm makes it, fits."""
    ids = "".join(f"67108863+9.{n}\n" for n in range(40000)) + "67108863+9.batch\n67108863+9.extern\n"
    assert len(ids) < STDOUT_LIMIT
    (tmp_path / "ids").write_text(ids)
    env = stand_in(tmp_path, "squeue", f"cat {tmp_path / 'ids'}")
    assert Batch(env, 30).steps_left()


@pytest.mark.parametrize(
    ("printed", "left"),
    [
        ("7.0\n7.batch\n7.extern\n", True),
        ("7.batch\n7.extern\n", False),
        ("", False),
        ("7.interactive\n", True),
    ],
)
def test_the_steps_still_listed(tmp_path: Path, printed: str, left: bool) -> None:
    (tmp_path / "out").write_text(printed)
    env = stand_in(tmp_path, "squeue", f'[ "$*" = "-h -s -j 7 -o %i" ] || exit 3\ncat {tmp_path / "out"}')
    assert Batch(env, 30).steps_left() is left


def test_the_state_is_read_and_stripped(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "squeue", '[ "$*" = "-h -j 7 -o %T" ] || exit 3\nprintf "  RUNNING\\r\\n"')
    assert Batch(env, 30).state() == "RUNNING"


def test_a_failing_command_is_reported_with_its_exit_status_and_stderr(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "scancel", "echo 'scancel: error: Invalid job id specified' >&2\nexit 1")
    with pytest.raises(Failure) as e:
        Batch(env, 30).signal_steps(15)
    assert str(e.value) == "scancel --signal=TERM 7: exit 1: scancel: error: Invalid job id specified"


def test_a_command_that_hangs_times_out_as_before(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "squeue", "exec sleep 600")
    with pytest.raises(Failure) as e:
        Batch(env, 0.5).state()
    assert (
        str(e.value)
        == "squeue: Command '('squeue', '-h', '-j', '7', '-o', '%T')' timed out after 0.5 seconds"
    )
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_a_command_that_cannot_start_is_reported_as_before(tmp_path: Path) -> None:
    env = {**base_env(), "PATH": str(tmp_path), "SLURM_JOB_ID": "7"}
    with pytest.raises(Failure) as e:
        Batch(env, 30).state()
    assert str(e.value) == "squeue: [Errno 2] No such file or directory: 'squeue'"


def test_bytes_the_locale_cannot_decode_are_replaced_not_raised(tmp_path: Path) -> None:
    """Before, a byte that is not UTF-8 in a command's output raised UnicodeDecodeError out of publish run."""
    env = stand_in(
        tmp_path,
        "scancel",
        "printf 'scancel: error: Kill job error on job id 7 on node n\\377\\n' >&2\nexit 1",
    )
    with pytest.raises(Failure) as e:
        Batch(env, 30).signal_steps(15)
    assert (
        str(e.value)
        == "scancel --signal=TERM 7: exit 1: scancel: error: Kill job error on job id 7 on node n\ufffd"
    )
    env = stand_in(tmp_path, "squeue", "printf '7.0\\n7.\\377\\n'")
    assert Batch(env, 30).steps_left()


@pytest.mark.parametrize(
    ("state", "said"), [("COMPLETING", "no failure"), ("RUNNING", "scontrol requeue 7: exit -15: ")]
)
def test_scontrol_requeue_ended_by_the_requeue_it_asked_for(tmp_path: Path, state: str, said: str) -> None:
    """scontrol is one of the job's processes: the requeue it asks for ends the job, and Slurm's SIGTERM may
    reach it before it exits. Once the job no longer runs, that end is the requeue done, not a failure (run
    said "requeue failed" and exited 1 for a job Slurm had requeued); while the job still runs, it is one."""
    stand_in(tmp_path, "squeue", f"echo {state}")
    env = stand_in(tmp_path, "scontrol", "kill -TERM $$")
    assert in_child(env, "requeue") == [said, "gone"]
