"""Events after publication (issue #34): ``-on-publish CMD`` and ``-on-mirror CMD`` of watch and run.

The promise: CMD runs once for each publication this process made, after it (the entry is there when CMD
runs), one at a time in the order of publication, with PUBLISH_EVENT_* in its environment exactly as the
entry, its location and the rest are; a CMD that fails or hangs is said and counted and changes nothing
else: every save is published and pruned as without it, the exit status is the same, and the job's end is
bounded by -timeout.  Each test here fails on the code before the feature (the flags did not exist)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from publish.rules import layout
from publish.rules.layout import PUB
from tests.conftest import REPO, Watch, base_env, run_cli, spawn
from tests.support.trainer_saves import hf_save, real_state

#: A hook that appends one JSON line to argv[1]: every PUBLISH_EVENT_* variable (hex of its bytes), MARK and
#: USUAL (hex), and, when argv[2] is given, whether the entry is there then: the fast root's pub/ (a POSIX
#: path), or through boto3 on the S3 root argv[2] (s3://bucket/prefix) with the file: credentials argv[3].
HOOK = r"""
import json, os, sys, time
env = os.environb
rec = {k.decode(): v.hex() for k, v in env.items() if k.startswith(b"PUBLISH_EVENT_") or k in (b"MARK", b"USUAL")}
time.sleep(float(os.environ.get("HOOK_SLEEP", "0")))
entry = os.environ["PUBLISH_EVENT_ENTRY"]
if len(sys.argv) > 2 and sys.argv[2].startswith("s3://"):
    import boto3
    from botocore.config import Config
    creds = {n: open(os.path.join(sys.argv[3], n)).read().strip() for n in ("access_key_id", "secret_access_key", "endpoint", "region")}
    s3 = boto3.client("s3", endpoint_url=creds["endpoint"], aws_access_key_id=creds["access_key_id"],
                      aws_secret_access_key=creds["secret_access_key"], region_name=creds["region"],
                      config=Config(s3={"addressing_style": "path"}))
    bucket, _, prefix = sys.argv[2][len("s3://"):].partition("/")
    try:
        s3.head_object(Bucket=bucket, Key=f"{prefix}/pub/{entry}")
        rec["there"] = True
    except Exception as e:
        rec["there"] = repr(e)
elif len(sys.argv) > 2:
    rec["there"] = os.path.exists(os.path.join(sys.argv[2], "pub", entry))
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(rec) + "\n")
"""


def hook(tmp: Path, *args: str) -> tuple[str, Path]:
    """The CMD of :data:`HOOK` and the log it appends to."""
    script = tmp / "hook.py"
    script.write_text(HOOK)
    log = tmp / "events.jsonl"
    words = [sys.executable, str(script), str(log), *args]
    return " ".join(shlex.quote(w) for w in words), log


def events(log: Path) -> list[dict[str, object]]:
    """The hook's records, its variables decoded back to bytes (``there`` as it was)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        out.append({k: (bytes.fromhex(v) if isinstance(v, str) else v) for k, v in rec.items()})
    return out


def published(lines: list[str]) -> list[tuple[str, str]]:
    """(entry, location) of each ``published`` line, in order."""
    found = []
    for line in lines:
        if line.startswith("published "):
            entry, _, rest = line[len("published ") :].partition(" ")
            found.append((entry, rest.rsplit(", ", 1)[1][:-1]))
    return found


def saves(root: Path, attempt: str, steps: list[int]) -> None:
    for step in steps:
        hf_save(root / "exec" / attempt, step)


def alive(pid: int) -> bool:
    """The process is there and not a zombie (a killed child nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


# A COMMAND that writes hf saves 1..4 into $PUBLISH_SAVES, one after the other, each whole before the next.
TRAINER = (
    "import os, sys, time; sys.path.insert(0, os.environ['TESTS']); "
    "from tests.support.trainer_saves import hf_save; from pathlib import Path; "
    "[(hf_save(Path(os.environ['PUBLISH_SAVES']), s), time.sleep(0.3)) for s in (1, 2, 3, 4)]"
)


def test_run_fires_once_per_publication_in_publication_order(tmp_path: Path) -> None:
    """Item "after each publication, one at a time in publication order": each `published` line of run has
    exactly one event, in the same order, after the entry exists, and nothing else fires (a slow hook makes
    the events queue up behind it)."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    cmd, log = hook(tmp_path, str(root))
    env = {**base_env(), "TESTS": str(REPO), "HOOK_SLEEP": "0.2"}
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-epoch", "5",
        "-interval", "100ms", "-on-publish", cmd, "--", sys.executable, "-c", TRAINER, env=env,
    )  # fmt: skip
    assert r.code == 0, r
    lines = published(r.lines)
    assert [e for e, _ in lines] == sorted(os.listdir(root / PUB)) and len(lines) == 4, r
    got = events(log)
    assert [(e["PUBLISH_EVENT_ENTRY"].decode(), e["PUBLISH_EVENT_LOCATION"].decode()) for e in got] == lines  # type: ignore[union-attr]
    assert [e["PUBLISH_EVENT_STEP"] for e in got] == [b"1", b"2", b"3", b"4"]
    assert all(e["there"] is True and e["PUBLISH_EVENT_TIER"] == b"root" for e in got), got


def test_two_watches_on_one_root_fire_once_per_entry_between_them(tmp_path: Path) -> None:
    """Item "after each publication" with two commands at once on one root: two watches of the same SAVES
    race for each entry; only the one that creates an entry prints it and fires its event, so each entry has
    exactly one event between them, and each watch's events follow its own `published` lines' order."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    steps = list(range(1, 9))
    saves(root, "A", steps)
    cmd, log = hook(tmp_path, str(root))
    watches = [
        Watch(
            "-checkpoint",
            str(root),
            "-framework",
            "hf",
            "-attempt",
            "A",
            "-interval",
            "50ms",
            "-on-publish",
            cmd,
            env={"MARK": mark},
        )  # fmt: skip
        for mark in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while (
        not (root / PUB).exists() or len(os.listdir(root / PUB)) < len(steps)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    for w in watches:  # one may still be starting when the other has published everything
        w.trapping()
    ends = [w.stop() for w in watches]
    assert [code for code, _ in ends] == [0, 0], ends
    got = events(log)
    entries = sorted(os.listdir(root / PUB))
    assert sorted(e["PUBLISH_EVENT_ENTRY"].decode() for e in got) == entries, got  # type: ignore[union-attr]
    for w, mark in zip(watches, (b"a", b"b")):
        mine = [e["PUBLISH_EVENT_ENTRY"].decode() for e in got if e["MARK"] == mark]  # type: ignore[union-attr]
        assert mine == [entry for entry, _ in published(w.seen)]
    assert all(e["there"] is True for e in got), got


def test_the_environment_holds_each_value_exactly(tmp_path: Path) -> None:
    """Item "the entry, location, epoch, step, framework and tier in its environment": the location of a root
    whose path holds a newline and a byte that is not UTF-8 reaches CMD as those bytes, and so does a
    variable of the process's own environment (passed on as it was); the other values as published."""
    root = tmp_path / os.fsdecode(b"r\xffo\not")
    assert run_cli("init", "-checkpoint", str(root)).code == 0
    saves(root, "A", [7])
    cmd, log = hook(tmp_path)
    usual = os.fsdecode(b"v\xfea\nl")
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-epoch", "12",
        "-on-publish", cmd, "--", "true", env={**base_env(), "USUAL": usual, "PUBLISH_EVENT_TIER": "stale"},
    )  # fmt: skip
    assert r.code == 0, r
    ((entry, _),) = published(r.lines)
    got = events(log)
    assert got == [
        {
            "PUBLISH_EVENT_ENTRY": entry.encode(),
            "PUBLISH_EVENT_LOCATION": os.fsencode(root) + b"/exec/A/checkpoint-7",
            "PUBLISH_EVENT_EPOCH": b"12",
            "PUBLISH_EVENT_STEP": b"7",
            "PUBLISH_EVENT_FRAMEWORK": b"hf",
            "PUBLISH_EVENT_TIER": b"root",
            "USUAL": b"v\xfea\nl",
        }
    ]
    assert entry == layout.name(12, 7, "exec/A/checkpoint-7")


def test_a_failing_hook_is_said_and_counted_and_changes_nothing_else(tmp_path: Path) -> None:
    """Item "a failing CMD is reported and counted, and never delays or stops a publication, a prune or the
    job's end": every save is published, the prune keeps the newest, each failure is named once with its
    entry, counted in -metrics, and run's exit status stays COMMAND's (0)."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [1, 2, 3])
    metrics = tmp_path / "m.prom"
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-keep", "1",
        "-metrics", str(metrics), "-on-publish", "exit 3", "--", "true", env=base_env(),
    )  # fmt: skip
    assert r.code == 0, r
    entries = [e for e, _ in published(r.lines)]
    assert len(entries) == 3 and sorted(os.listdir(root / PUB)) == entries[-1:], r
    assert sum(line.startswith("removed ") for line in r.lines) == 2, r
    for entry in entries:
        assert r.err.count(f"publish: on-publish: {entry}: exited 3\n") == 1, r.err
    assert 'publish_events_failed_total{root="' + str(root) + '"} 3' in metrics.read_text()


def test_a_failing_hook_leaves_watch_exit_status_alone(tmp_path: Path) -> None:
    """The same for watch: a CMD killed by a signal is said, and a watch stopped by SIGTERM after a clean last
    scan exits 0 all the same."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [4])
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-on-publish", "kill -SEGV $$")
    entry = w.next_line().split()[1]
    code, err = w.stop()
    assert code == 0, err
    assert f"publish: on-publish: {entry}: killed by SIGSEGV\n" in err


def test_a_hanging_hook_is_killed_with_its_children_and_the_end_is_bounded(tmp_path: Path) -> None:
    """Item "bounded by -timeout; a hanging CMD never delays the job's end": each CMD starts a child and
    hangs; each is killed after -timeout (or at the end, when the end's -timeout passes first, or dropped
    unrun), its child with it, and run ends with COMMAND's status, its prune done."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [1, 2, 3])
    pids = tmp_path / "pids"
    cmd = f"sleep 600 & echo $! >> {shlex.quote(str(pids))}; echo $$ >> {shlex.quote(str(pids))}; wait"
    proc = spawn(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-keep", "1", "-timeout", "3s",
        "-on-publish", cmd, "--", "true",
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)  # a hook that held run's end would hold it for 600 s
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    entries = [e for e, _ in published(out.splitlines())]
    assert len(entries) == 3 and sorted(os.listdir(root / PUB)) == entries[-1:], out + err
    accounted = sum(f"on-publish: {e}: killed" in err for e in entries)
    for line in err.splitlines():
        if line.startswith("publish: on-publish: ") and " dropped, not run" in line:
            accounted += int(line.split()[2])
    assert accounted == 3, err
    started = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    assert started, err
    assert [p for p in started if alive(p)] == []


# A COMMAND that says it is ready, and on SIGTERM writes save 9 (the save a trainer makes when told to stop)
# and exits 143.
STOPPED = (
    f"import os, signal, sys, time; sys.path.insert(0, {str(REPO)!r}); "
    "from tests.support.trainer_saves import hf_save; from pathlib import Path; "
    "signal.signal(signal.SIGTERM, lambda *a: (hf_save(Path(os.environ['PUBLISH_SAVES']), 9), os._exit(143))); "
    "print('ready', flush=True); time.sleep(600)"
)


def test_run_stopped_by_sigterm_runs_the_last_scans_events(tmp_path: Path) -> None:
    """Item "the last scan's events run within run's time budget": run stopped by SIGTERM passes it on, the
    save COMMAND makes on it is published by the last scan, and its event (behind a slow one) still runs
    before run exits with COMMAND's status."""
    from tests.support.binaries import catches_sigterm
    from tests.support.running import Running

    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [1])
    cmd, log = hook(tmp_path)
    r = Running(
        "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-interval", "1h", "-timeout", "60s",
        "-on-publish", f"HOOK_SLEEP=0.5 {cmd}", "--", sys.executable, "-c", STOPPED,
    )  # fmt: skip
    r.wait_line("ready")
    deadline = time.monotonic() + 30
    while not catches_sigterm(r.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    r.proc.send_signal(signal.SIGTERM)
    code, err, lines = r.finish(timeout=120)
    assert code == 143, err
    done = published(lines)
    assert [e["PUBLISH_EVENT_ENTRY"].decode() for e in events(log)] == [e for e, _ in done], err  # type: ignore[union-attr]
    assert [e["PUBLISH_EVENT_STEP"] for e in events(log)] == [b"1", b"9"], err


def test_a_hooks_output_goes_to_stderr_never_to_stdout(tmp_path: Path) -> None:
    """Item "its output on stderr": stdout carries the `published` lines that scripts parse, and a CMD that
    writes to its stdout (and to its stderr) lands on publish's stderr."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [1, 2])
    proc = spawn(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A",
        "-on-publish", "echo hook-out $PUBLISH_EVENT_STEP; echo hook-err $PUBLISH_EVENT_STEP >&2", "--", "true",
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out and all(line.startswith("published ") for line in out.splitlines()), out
    assert err.count("hook-out ") == 2 and err.count("hook-err ") == 2, err


@pytest.mark.parametrize(
    ("verb", "flags", "named"),
    [
        ("run", ["-on-mirror", "true"], "-on-mirror applies to -mirror"),
        ("watch", ["-on-mirror", "true"], "-on-mirror applies to -mirror"),
        ("run", ["-on-publish", ""], "-on-publish is empty"),
        ("watch", ["-on-publish", " "], "-on-publish is empty"),
        ("run", ["-mirror", "s3://ckpts/p", "-creds", "file:/none", "-on-mirror", ""], "-on-mirror is empty"),
    ],
)
def test_usage_errors(tmp_path: Path, verb: str, flags: list[str], named: str) -> None:
    """Item "-on-mirror without -mirror is a usage error naming it; an empty CMD is a usage error": exit 2
    before anything starts (COMMAND never runs)."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    marker = tmp_path / "started"
    tail = ["--", "touch", str(marker)] if verb == "run" else []
    r = run_cli(
        verb, "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", *flags, *tail, env=base_env()
    )
    assert r.code == 2, r
    assert r.err.startswith("publish: ") and named in r.err.splitlines()[0], r.err
    assert not marker.exists()


def _loaded(root: Path, *more: str) -> set[str]:
    import ast

    code = (
        "import sys\n"
        "from publish.cli import main\n"
        f"argv = ['run', '-checkpoint', {str(root)!r}, '-framework', 'hf', '-attempt', 'A', '-interval', '1h',"
        f" *{list(more)!r}, '--', 'true']\n"
        "status = main(argv, {'PATH': '/usr/bin:/bin'}, sys.stdout, sys.stderr)\n"
        "print(sorted(m for m in sys.modules if m.startswith('publish.')))\n"
        "sys.exit(status)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return set(ast.literal_eval(r.stdout.splitlines()[-1]))


def test_a_plain_run_imports_nothing_of_the_events(tmp_path: Path) -> None:
    """Design item "import the events module only when -on-publish/-on-mirror is given": a plain run's
    start-up is unchanged; the same run with -on-publish does import it (so the check sees imports)."""
    root = tmp_path / "root"
    run_cli("init", "-checkpoint", str(root))
    saves(root, "A", [1])
    assert "publish.ops.events" not in _loaded(root)
    assert "publish.ops.events" in _loaded(root, "-on-publish", "true")


# -- S3


@pytest.mark.s3
def test_on_publish_on_an_s3_root_fires_after_the_entry_is_there(tmp_path: Path, weed: object) -> None:
    """Item "works on S3": run on an s3:// root (SeaweedFS) fires once per publication, in order, with the
    s3:// location; the hook finds the entry in the store when it runs; no credential is in its
    environment."""
    from tests.support.s3roots import Root

    s3 = Root(weed, tmp_path)  # type: ignore[arg-type]
    for step in (10, 20):
        s3.put(f"exec/A/checkpoint-{step}/model.safetensors", b"w")
        s3.put(f"exec/A/checkpoint-{step}/trainer_state.json", real_state(step))
    cmd, log = hook(tmp_path, s3.url, s3.creds[len("file:") :])
    r = s3.run("run", "-framework", "hf", "-attempt", "A", "-on-publish", cmd, "--", "true", env=base_env())
    assert r.code == 0, r
    lines = published(r.lines)
    assert [location for _, location in lines] == [f"{s3.url}/exec/A/checkpoint-{s}" for s in (10, 20)]
    got = events(log)
    assert [(e["PUBLISH_EVENT_ENTRY"].decode(), e["PUBLISH_EVENT_LOCATION"].decode()) for e in got] == lines  # type: ignore[union-attr]
    assert all(e["there"] is True for e in got), got
    secret = weed.secret_key.encode()  # type: ignore[attr-defined]
    assert not any(secret in v for e in got for v in e.values() if isinstance(v, bytes))


@pytest.mark.s3
@pytest.mark.parametrize("verb", ["run", "watch"])
def test_on_mirror_fires_after_the_mirror_entry_exists(tmp_path: Path, weed: object, verb: str) -> None:
    """Item "-on-mirror CMD after the save is published on the mirror" (SeaweedFS): each save has its root
    event, then its mirror event, which finds the entry on the mirror when it runs, its location the
    mirror's; -on-publish events find the fast root's entry; one queue, in publication order."""
    from tests.support.s3roots import Root

    fast = tmp_path / "fast"
    run_cli("init", "-checkpoint", str(fast))
    saves(fast, "A", [1, 2])
    mirror = Root(weed, tmp_path, init=False)  # type: ignore[arg-type]
    mirror_cmd, log = hook(tmp_path, mirror.url, mirror.creds[len("file:") :])
    root_cmd = mirror_cmd.replace(shlex.quote(mirror.url), shlex.quote(str(fast)))
    root_cmd = root_cmd.replace(" " + shlex.quote(mirror.creds[len("file:") :]), "")
    flags = [
        "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework", "hf",
        "-attempt", "A", "-interval", "100ms", "-on-publish", root_cmd, "-on-mirror", mirror_cmd,
    ]  # fmt: skip
    if verb == "run":
        r = run_cli("run", *flags, "--", "true", env=base_env())
        code, lines = r.code, r.lines
    else:
        w = Watch(*flags)
        deadline = time.monotonic() + 60
        while len(published(w.seen)) < 4 and time.monotonic() < deadline:
            try:
                w.next_line(timeout=1)
            except Exception:
                continue
        code, _ = w.stop(timeout=120)
        lines = w.seen
    assert code == 0, lines
    done = published(lines)
    assert len(done) == 4, lines
    got = events(log)
    for tier, prefix in ((b"root", str(fast) + "/"), (b"mirror", mirror.url + "/")):
        said = [
            (e["PUBLISH_EVENT_ENTRY"].decode(), e["PUBLISH_EVENT_LOCATION"].decode())  # type: ignore[union-attr]
            for e in got
            if e["PUBLISH_EVENT_TIER"] == tier
        ]
        assert said == [(e, where) for e, where in done if where.startswith(prefix)] and len(said) == 2, got
    assert all(e["there"] is True for e in got), got
    for entry in {e for e, _ in done}:
        tiers = [e["PUBLISH_EVENT_TIER"] for e in got if e["PUBLISH_EVENT_ENTRY"] == entry.encode()]
        assert tiers == [b"root", b"mirror"], got
