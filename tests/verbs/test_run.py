"""publish run on POSIX roots, without a batch system: resolve first, COMMAND's environment and arguments,
the exit status, signals sent to publish run alone (a Kubernetes pod's PID 1, Ctrl-C), the last scan, prune.

tests/jobs/test_slurm.py runs the same verb under a real Slurm.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.rules.errors import Failure
from publish.verbs import run as run_verb
from tests.conftest import REPO, base_env, run_cli
from tests.support.running import Running
from tests.support.trainer_saves import hf_save

TRAINER = [sys.executable, str(REPO / "examples" / "tiny_trainer.py")]
# COMMAND that writes its arguments and the variables publish run gives it to $OUT
DUMP = [
    sys.executable,
    "-c",
    "import json, os, sys; keys = ('CHECKPOINT', 'DISPATCH_ATTEMPT', 'DISPATCH_EPOCH', 'PUBLISH_SAVES', "
    "'PUBLISH_RESUME'); json.dump({'argv': sys.argv[1:], **{k: os.environ.get(k) for k in keys}}, "
    "open(os.environ['OUT'], 'w'))",
]


def env_for(tmp: Path, **more: str) -> dict[str, str]:
    return {**base_env(), "OUT": str(tmp / "out.json"), **more}


def dumped(tmp: Path) -> dict[str, object]:
    return json.loads((tmp / "out.json").read_text())  # type: ignore[no-any-return]


def test_a_missing_root_fails_before_command_starts(tmp_path: Path) -> None:
    r = run_cli(
        "run", "-checkpoint", str(tmp_path / "nope"), "-framework", "hf", "--", *DUMP, env=env_for(tmp_path)
    )
    assert r.code == 1, r
    assert r.err.startswith("publish: ") and str(tmp_path / "nope") in r.err
    assert not (tmp_path / "out.json").exists()


def test_a_credentials_failure_fails_before_command_starts(tmp_path: Path) -> None:
    r = run_cli(
        "run", "-checkpoint", "s3://ckpts/run", "-creds", f"file:{tmp_path / 'none'}", "-framework", "hf",
        "--", *DUMP, env=env_for(tmp_path),
    )  # fmt: skip
    assert r.code == 1 and r.err.startswith("publish: credentials: "), r
    assert not (tmp_path / "out.json").exists()


def test_an_entry_that_does_not_parse_fails_before_command_starts(root: Path, tmp_path: Path) -> None:
    (root / "pub").mkdir()
    (root / "pub" / "junk").touch()
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "--", *DUMP, env=env_for(tmp_path))
    assert r.code == 1 and "junk" in r.err, r
    assert not (tmp_path / "out.json").exists()


def test_command_gets_the_dispatch_and_no_resume_when_there_is_no_save(root: Path, tmp_path: Path) -> None:
    env = env_for(tmp_path, PUBLISH_RESUME="/stale")
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a1", "-epoch", "7",
        "-resume-arg=--resume", "--", *DUMP, "x", env=env,
    )  # fmt: skip
    assert r.code == 0, r
    assert dumped(tmp_path) == {
        "argv": ["x"],
        "CHECKPOINT": str(root),
        "DISPATCH_ATTEMPT": "a1",
        "DISPATCH_EPOCH": "7",
        "PUBLISH_SAVES": f"{root}/exec/a1",
        "PUBLISH_RESUME": None,
    }
    assert "publish: run: no save to resume from" in r.err


def test_command_gets_the_resolved_save_and_the_resume_arg(root: Path, tmp_path: Path) -> None:
    save = hf_save(root / "exec" / "old", 4)
    assert run_cli("publish", "-checkpoint", str(root), "-epoch", "1", str(save), "4").code == 0
    env = env_for(tmp_path, DISPATCH_ATTEMPT="a2", DISPATCH_EPOCH="9", CHECKPOINT=str(root))
    r = run_cli(
        "run", "-framework", "hf", "-resume-arg", "--resume_from_checkpoint", "--", *DUMP, "x", env=env
    )
    assert r.code == 0, r
    got = dumped(tmp_path)
    assert got["argv"] == ["x", "--resume_from_checkpoint", str(save)]
    assert (got["PUBLISH_RESUME"], got["DISPATCH_ATTEMPT"], got["DISPATCH_EPOCH"]) == (str(save), "a2", "9")
    r = run_cli("run", "-framework", "hf", "-attempt", "a3", "--", *DUMP, env=env)
    assert dumped(tmp_path)["argv"] == [] and dumped(tmp_path)["PUBLISH_RESUME"] == str(save)


@pytest.mark.parametrize(
    ("slurm", "attempt"),
    [
        ({"SLURM_JOB_ID": "77"}, "77.0"),
        ({"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "2"}, "77.2"),
        ({"SLURM_JOB_ID": "81", "SLURM_ARRAY_JOB_ID": "80", "SLURM_ARRAY_TASK_ID": "1"}, "80_1.0"),
    ],
)
def test_the_attempt_on_slurm(root: Path, tmp_path: Path, slurm: dict[str, str], attempt: str) -> None:
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "--", *DUMP, env=env_for(tmp_path, **slurm)
    )
    assert r.code == 0, r
    assert dumped(tmp_path)["DISPATCH_ATTEMPT"] == attempt


def test_elsewhere_each_dispatch_gets_its_own_attempt_and_a_greater_epoch(root: Path, tmp_path: Path) -> None:
    seen = []
    for _ in range(2):
        r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "--", *DUMP, env=env_for(tmp_path))
        assert r.code == 0, r
        seen.append(dumped(tmp_path))
    attempts = [str(d["DISPATCH_ATTEMPT"]) for d in seen]
    epochs = [int(str(d["DISPATCH_EPOCH"])) for d in seen]
    assert attempts[0] != attempts[1] and all("/" not in a for a in attempts)
    assert epochs[0] < epochs[1] < layout.LIMIT
    assert epochs[1] - epochs[0] < 10**11  # nanoseconds: two dispatches a moment apart differ


@pytest.mark.parametrize(("script", "status"), [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 137)])
def test_the_exit_status_is_commands(root: Path, script: str, status: int) -> None:
    r = run_cli(
        "run",
        "-checkpoint",
        str(root),
        "-framework",
        "hf",
        "-attempt",
        "a",
        "--",
        "sh",
        "-c",
        script,
        env=base_env(),
    )
    assert r.code == status, r


def test_a_command_that_cannot_start(root: Path) -> None:
    r = run_cli(
        "run",
        "-checkpoint",
        str(root),
        "-framework",
        "hf",
        "-attempt",
        "a",
        "--",
        str(root / "none"),
        env=base_env(),
    )
    assert r.code == 1 and f"publish: cannot start {root / 'none'}: " in r.err, r


def test_saves_are_published_and_pruned_after_command_exits(root: Path, tmp_path: Path) -> None:
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "5", "-keep", "1",
        "--", *TRAINER, "--steps", "6", env=base_env(),
    )  # fmt: skip
    assert r.code == 0, r
    published = [line for line in r.lines if line.startswith("published ")]
    assert [line.split("step ")[1].split(",")[0] for line in published] == ["2", "4", "6"], r.out
    assert (
        f"removed {root}/exec/a/checkpoint-2" in r.lines and f"removed {root}/exec/a/checkpoint-4" in r.lines
    )
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/a/checkpoint-6\n"


def test_a_failed_prune_makes_the_status_non_zero(root: Path) -> None:
    script = 'touch "$CHECKPOINT/pub/junk"'  # after resolve: only prune reads every entry
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-keep", "2",
        "--", "sh", "-c", f"mkdir -p $CHECKPOINT/pub; {script}", env=base_env(),
    )  # fmt: skip
    assert r.code == 1, r
    assert "junk" in r.err


def test_a_failed_scan_keeps_command_running_and_makes_the_status_non_zero(root: Path) -> None:
    # exec/a is a file, not a folder: every scan fails; COMMAND is not stopped for it
    script = 'mkdir -p "$CHECKPOINT/exec"; touch "$PUBLISH_SAVES"; sleep 0.5; echo still running'
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-interval", "100ms",
        "--", "sh", "-c", script, env=base_env(),
    )  # fmt: skip
    assert r.code == 1, r
    assert r.err.count("COMMAND keeps running") == 1, r.err  # one report per distinct fault, not per scan
    assert f"{root}/exec/a" in r.err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_publish_run_alone_reaches_command_and_its_save_is_published(
    root: Path, sig: int
) -> None:
    """A pod's PID 1 (SIGTERM), Ctrl-C (SIGINT: COMMAND has a process group of its own, so only run hears it).

    With an hour between scans, only the last scan, made after COMMAND has exited, can publish the save."""
    trainer = (
        [*TRAINER, "--steps", "400"]
        if sig == signal.SIGTERM
        else [sys.executable, "-c", "import signal, sys, time; "
              "got = []; signal.signal(signal.SIGINT, lambda *a: got.append(1)); print('ready', flush=True)\n"
              "while not got: time.sleep(0.05)\nprint('INT', len(got), flush=True); sys.exit(130)"]
    )  # fmt: skip
    r = Running("-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "3", "-interval", "1h",
                "--", *trainer)  # fmt: skip
    r.wait_line("trainer: saved" if sig == signal.SIGTERM else "ready", timeout=30)
    r.proc.send_signal(sig)
    code, err, lines = r.finish()
    assert f"publish: run: passing {signal.Signals(sig).name} on to" in err
    if sig == signal.SIGINT:
        assert (code, lines[-1]) == (130, "INT 1"), (code, err, lines)
        return
    assert code == 143, err
    stopped = [line for line in lines if line.startswith("trainer: stopped by SIGTERM at step ")]
    assert stopped, lines
    step = int(stopped[0].rsplit(" ", 1)[1])
    name = layout.name(3, step, f"exec/a/checkpoint-{step}")
    assert lines[-1] == f"published {name} (epoch 3, step {step}, {root}/exec/a/checkpoint-{step})", lines
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/a/checkpoint-{step}\n"

    # the next dispatch resumes from it, and publishes with a greater epoch
    again = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "b", "-epoch", "4",
        "-resume-arg=--resume", "--", *TRAINER, "--steps", "2", env=base_env(),
    )  # fmt: skip
    assert again.code == 0, again
    assert f"publish: run: resuming from {root}/exec/a/checkpoint-{step}\n" in again.err
    steps = [
        int(line.split("step ")[1].split(",")[0]) for line in again.lines if line.startswith("published ")
    ]
    assert steps and all(n > step for n in steps), again.out  # COMMAND started from the save, not from 0
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/b/checkpoint-{steps[-1]}\n"


def test_a_named_signal_is_passed_on_and_a_second_one_again(root: Path, tmp_path: Path) -> None:
    count = tmp_path / "count"
    code = (
        "import signal, sys, time\n"
        f"seen = []\n"
        "def on(sig, frame):\n"
        f"    seen.append(sig); open({str(count)!r}, 'w').write(str(len(seen)))\n"
        "signal.signal(signal.SIGUSR1, on)\n"
        "print('ready', flush=True)\n"
        "while len(seen) < 2: time.sleep(0.05)\n"
        "sys.exit(7)\n"
    )
    r = Running("-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-signal", "USR1",
                "--", sys.executable, "-c", code)  # fmt: skip
    r.wait_line("ready")
    r.proc.send_signal(signal.SIGUSR1)
    import time

    deadline = time.monotonic() + 20
    while not (count.exists() and count.read_text() == "1"):
        assert time.monotonic() < deadline, "COMMAND never got SIGUSR1"
        time.sleep(0.05)
    r.proc.send_signal(signal.SIGUSR1)
    status, err, _ = r.finish()
    assert (status, count.read_text()) == (7, "2"), err
    assert err.count("publish: run: passing SIGUSR1 on to") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-framework", "hf", "sh"], "COMMAND must follow --"),
        (["-framework", "hf", "--"], "missing COMMAND after --"),
        (["--", "sh"], "-framework is required"),
        (
            ["-framework", "hf", "-requeue", "--", "sh"],
            "-requeue needs a Slurm job: SLURM_JOB_ID is not set\n",
        ),
        (["-framework", "hf", "-creds", "file:/x", "--", "sh"], "-creds applies only to s3:// roots"),
        (["-framework", "hf", "-signal", "KILL", "--", "sh"], "SIGKILL cannot be caught"),
        (["-framework", "hf", "-signal", "NOPE", "--", "sh"], "not a signal name"),
        (["-framework", "hf", "-keep", "0", "--", "sh"], "-keep"),
        (["-framework", "hf", "-resume-arg=", "--", "sh"], "-resume-arg is empty"),
        (["-framework", "hf", "-attempt", "a/b", "--", "sh"], "not one path element"),
    ],
)
def test_usage_errors(root: Path, tmp_path: Path, args: list[str], message: str) -> None:
    r = run_cli("run", "-checkpoint", str(root), *args, env=env_for(tmp_path))
    assert r.code == 2, r
    assert r.err.startswith("publish: ") and message in r.err, r.err
    assert "usage: publish run" in r.err
    assert not os.listdir(root)


def test_run_called_without_a_slurm_job_refuses_requeue_in_the_same_words(tmp_path: Path) -> None:
    from publish.frameworks import FRAMEWORKS
    from publish.ops import Say
    from publish.rules.errors import UsageError
    from publish.stores.posix import PosixStore

    signals = run_verb.Signals()
    try:
        with pytest.raises(UsageError) as info:
            settings = run_verb.Settings(
                PosixStore(str(tmp_path)), FRAMEWORKS["hf"], "a", 1, ["true"], {}, str(tmp_path)
            )
            settings.interval, settings.timeout, settings.requeue = 0.1, 10, True
            run_verb.Job(settings, UNBOUNDED, Say(print, print), signals).run()
    finally:
        signals.close()
    assert str(info.value) == "-requeue needs a Slurm job: SLURM_JOB_ID is not set"


def test_an_s3_root_needs_creds(tmp_path: Path) -> None:
    r = run_cli("run", "-checkpoint", "s3://ckpts/p", "-framework", "hf", "--", "sh", env=env_for(tmp_path))
    assert r.code == 2 and "-creds is required" in r.err, r


def test_help_shows_the_usage() -> None:
    r = run_cli("run", "-h")
    assert r.code == 0 and "usage: publish run" in r.err and "-resume-arg" in r.err and "-requeue" in r.err
    assert "run " in run_cli("help").out


class Batch(run_verb.Batch):
    """A Slurm job whose state is ``state`` and whose requeue fails when ``refuse``: the faults here."""

    def __init__(self, state: str, refuse: bool = False) -> None:
        super().__init__({"SLURM_JOB_ID": "5"}, 10)
        self._state = state
        self.refuse = refuse
        self.calls: list[str] = []

    def state(self) -> str:
        self.calls.append("state")
        return self._state

    def requeue(self) -> None:
        self.calls.append("requeue")
        if self.refuse:
            raise Failure("scontrol requeue 5: exit 1: refused")


@pytest.mark.parametrize(
    ("state", "refuse", "status", "calls"),
    [
        ("RUNNING", False, 143, ["state", "state", "requeue"]),  # the warning signal: passed on, requeued
        ("RUNNING", True, 143, ["state", "state", "requeue"]),
        ("SIGNALING", False, 143, ["state", "state", "requeue"]),  # the warning, while Slurm sends it
        ("COMPLETING", False, 7, ["state", "state"]),  # scancel, requeue: not sent again, not requeued
    ],
)
def test_on_slurm_a_signal_is_passed_on_and_the_job_requeued_only_while_it_runs(
    root: Path, state: str, refuse: bool, status: int, calls: list[str]
) -> None:
    from publish.frameworks import FRAMEWORKS
    from publish.ops import Say
    from publish.stores.posix import PosixStore

    # COMMAND exits 143 on SIGTERM; 7 when nobody sends one within 2s (Slurm did, in the COMPLETING case)
    command = [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, "
               "lambda *a: sys.exit(143)); print('ready', flush=True); time.sleep(2); sys.exit(7)"]  # fmt: skip
    out: list[str] = []
    err: list[str] = []
    signals = run_verb.Signals()
    batch = Batch(state, refuse)

    def launch(argv: list[str], env: dict[str, str]) -> run_verb.Process:
        child = run_verb.Process(argv, env, None)
        signals.note(signal.SIGTERM)
        return child

    settings = run_verb.Settings(
        PosixStore(str(root)), FRAMEWORKS["hf"], "a", 1, command, base_env(), str(root)
    )
    settings.interval, settings.timeout, settings.requeue, settings.batch = 0.1, 10, True, batch
    code = run_verb.Job(settings, UNBOUNDED, Say(out.append, err.append), signals, launch).run()
    signals.close()
    assert batch.calls == calls, err
    assert code == status, err  # a failed requeue is said; COMMAND's status is non-zero already
    if refuse:
        assert "run: requeue failed: scontrol requeue 5: exit 1: refused" in err
    elif state != "COMPLETING":
        assert err[-1] == "run: asked Slurm to requeue job 5"
    else:
        assert "run: job 5 is COMPLETING: not requeued" in err


def test_a_plain_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    """run -framework hf without -mirror, -requeue or -orphans loads no other framework's module, nothing of
    the mirror or of the idle count, not the store protocol, the removal walks or the bounded reader (its
    start-up target: bench/run_lag.py, docs/perf-run.md)."""
    import subprocess

    root = tmp_path / "root"
    save = root / "exec/1/checkpoint-100"
    save.mkdir(parents=True)
    (root / "pub").mkdir()
    (root / "pub" / layout.name(0, 100, "exec/1/checkpoint-100")).write_bytes(b"")
    code = (
        "import sys\n"
        "from publish.cli import main\n"
        f"argv = ['run', '-checkpoint', {str(root)!r}, '-framework', 'hf', '-attempt', 'A', '-interval', '1h',"
        " '--', 'true']\n"
        "status = main(argv, {'PATH': '/usr/bin:/bin'}, sys.stdout, sys.stderr)\n"
        "print(sorted(m for m in sys.modules if m.startswith('publish.')))\n"
        "sys.exit(status)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    import ast

    loaded = set(ast.literal_eval(r.stdout.splitlines()[-1]))
    assert "publish.verbs.run" in loaded and "publish.frameworks" in loaded  # it did run
    never = {
        "publish.frameworks.dcp",
        "publish.frameworks.deepspeed",
        "publish.frameworks.lightning",
        "publish.frameworks.megatron",
        "publish.frameworks.nemo",
        "publish.frameworks.snapshot",
        "publish.ops.tiers",
        "publish.ops.pending",
        "publish.ops.idle",
        "publish.stores.base",
        "publish.rules.files.walks",
        "publish.rules.files.fileio",
        "publish.stores.transfer",
    }
    assert not loaded & never, sorted(loaded & never)
