"""Crash safety: publish and prune killed with SIGKILL at random moments never leave a bad root.

After every kill: each name in pub/ parses (no temporary or half-made file), each entry names a folder that
exists, and resolve exits 0 printing an existing location (or nothing when no entry is left).  Running the verb
again afterwards finishes the work.

Most trials run the verb in a small driver that imports the command, says it is ready, and starts the verb
when it reads a byte on stdin, so the kill lands inside the verb's I/O rather than in the interpreter's start;
a smaller set kills the whole command (``python -m publish``, or PUBLISH_BIN) at any point of its run.

PUBLISH_CRASH_SEED and PUBLISH_CRASH_TRIALS change the seed and the number of trials per set.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from publish.ops.retention import plan
from publish.rules import layout
from tests.conftest import spawn
from tests.support.crash import Driver, run
from tests.support.reference_plan import latest

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("PUBLISH_CRASH_SEED", "20240601"))
TRIALS = int(os.environ.get("PUBLISH_CRASH_TRIALS", "200"))
WHOLE_TRIALS = max(TRIALS // 5, 10)


def entries(root: Path) -> list[str]:
    pub = root / "pub"
    return sorted(os.listdir(pub)) if pub.is_dir() else []


def check(root: Path) -> list[layout.Entry]:
    """Every invariant a crash must keep; the entries found."""
    found = []
    for name in entries(root):
        assert not name.startswith("."), f"left over in pub/: {name}"
        try:
            entry = layout.parse(name)
        except ValueError as e:
            raise AssertionError(f"left over in pub/: {name!r} ({e})") from None
        assert (root / "pub" / name).is_file(), f"pub/{name} is not a file"
        assert (root / entry.path).is_dir(), f"pub/{name} names {entry.path}, which is missing"
        found.append(entry)
    code, out, err = run("resolve", "-checkpoint", str(root))
    assert code == 0, err
    best = latest(found)
    if best is None:
        assert out == ""
    else:
        assert out == f"{root}/{best.path}\n"
        assert os.path.isdir(out.strip())
    return found


def calibrate(make: Callable[[int], list[str]], tmp: Path) -> float:
    """How long the verb takes (as the driver measures it): the fastest of a few uninterrupted runs."""
    times = []
    for i in range(5):
        d = Driver(*make(-1 - i))
        d.go()
        code, _, err = d.finish()
        assert code == 0, err
        times.append(float(err.decode().rsplit("took ", 1)[1].split()[0]))
    return min(times)


def save(root: Path, path: str, files: int = 3) -> None:
    folder = root / path
    folder.mkdir(parents=True, exist_ok=True)
    for j in range(files):
        (folder / f"shard-{j}.bin").write_bytes(b"x" * 64)
    (folder / "nested").mkdir(exist_ok=True)
    (folder / "nested" / "state").write_bytes(b"y")


# -- publish --------------------------------------------------------------------------------------------


def publish_root(tmp: Path, i: int, rng: random.Random) -> tuple[Path, list[str], layout.Entry]:
    """A root with a few entries (or none, and no pub/), and a new save to publish."""
    root = tmp / f"pub-{i}"
    root.mkdir()
    existing = rng.choice([0, 0, 1, 5])
    for k in range(existing):
        path = f"exec/a/checkpoint-{k}"
        save(root, path, files=1)
        if k == 0:
            (root / "pub").mkdir()
        (root / "pub" / layout.name(0, k, path)).touch()
    epoch, step = rng.choice([0, 1]), 10 + i % 7
    entry = layout.Entry(epoch, step, f"exec/b/checkpoint-{step}")
    save(root, entry.path, files=1)
    args = ["publish", "-checkpoint", str(root), "-epoch", str(epoch), f"{root}/{entry.path}", str(step)]
    return root, args, entry


def test_publish_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    span = calibrate(lambda i: publish_root(tmp_path, i, rng)[1], tmp_path)
    landed = created = uniform = 0
    edge = span
    for i in range(TRIALS):
        root, args, entry = publish_root(tmp_path, i, rng)
        before = set(entries(root))
        # Every other kill aims at the moment the entry is made (after the manifest and its fsyncs: a window
        # uniform kills alone can miss for a whole campaign), found as it goes: later after a kill that came
        # before the entry, earlier after one that came too late to cut anything.
        aimed = i % 2 == 1
        killed = Driver(*args).kill_after(rng.uniform(0.99, 1.01) * edge if aimed else rng.uniform(0, span))
        after = check(root)
        assert set(entries(root)) - before <= {entry.name}, f"seed {SEED} trial {i}"
        if not killed:
            assert entry in after
        created += killed and entry in after
        if aimed:
            if not killed:
                edge *= 0.98  # too late: publish had ended
            elif entry not in after:
                edge *= 1.02  # too early: the entry was not made yet
        else:
            landed += killed
            uniform += 1
            if not killed:
                # publish finished before the kill: the calibration ran slower than these runs; come back in
                span *= 0.95
            elif not created and i >= 20:
                # The fastest calibration run can be well ahead of these runs on a busy machine: reach further.
                span *= 1.05
        # Publishing again finishes the work: the entry is there once, and resolve may now pick it.
        code, out, err = run(*args)
        assert code == 0, err
        assert entry in check(root), f"seed {SEED} trial {i}"
    report = (
        f"{landed} of {uniform} kills at uniform moments landed inside publish, {created} of all {TRIALS} after the"
        f" entry was made (seed {SEED})"
    )
    print(report)
    assert landed >= uniform // 2, report
    assert 0 < created < landed, report  # kills landed both before and after the entry's creation


# -- prune ----------------------------------------------------------------------------------------------


def prune_root(tmp: Path, i: int, rng: random.Random) -> tuple[Path, list[str], int, list[layout.Entry]]:
    """A root with many entries and save folders, some nested in others, and a -keep."""
    root = tmp / f"prune-{i}"
    root.mkdir()
    (root / "pub").mkdir()
    made = []
    for k in range(30):
        attempt = "a" if k < 15 else "b"
        entry = layout.Entry(0 if k < 15 else 1, k, f"exec/{attempt}/checkpoint-{k}")
        save(root, entry.path, files=6)
        made.append(entry)
    # An old entry naming a whole execution folder, and one naming a folder inside a save.
    made.append(layout.Entry(0, 0, "exec/b"))
    made.append(layout.Entry(0, 1, "exec/a/checkpoint-1/nested"))
    for entry in made:
        (root / "pub" / entry.name).touch()
    keep = rng.choice([1, 2, 3, 5])
    return root, ["prune", "-checkpoint", str(root), "-keep", str(keep)], keep, made


def test_prune_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(SEED + 1)
    span = calibrate(lambda i: prune_root(tmp_path, i, rng)[1], tmp_path)
    states: Counter[str] = Counter()
    landed = orphans = 0
    for i in range(TRIALS):
        root, args, keep, made = prune_root(tmp_path, i, rng)
        gone, folders = plan(made, keep)
        kept = set(made) - set(gone)
        killed = Driver(*args).kill_after(rng.uniform(0, span))
        landed += killed
        after = set(check(root))
        assert kept <= after <= set(made), f"seed {SEED + 1} trial {i}"
        left = [f for f in folders if (root / f).exists()]
        if after == set(made):
            states["before any entry was removed"] += 1
        elif after != kept:
            states["while removing entries"] += 1
        elif left:
            states["between the entries and the last folder"] += 1
        else:
            states["after the last folder"] += 1
        # Pruning again finishes: only the latest -keep entries stay, and resolve still answers.
        code, _, err = run(*args)
        assert code == 0, err
        assert set(check(root)) == kept, f"seed {SEED + 1} trial {i}"
        orphans += any((root / f).exists() for f in folders)
    report = ", ".join(f"{k}: {v}" for k, v in states.items())
    print(
        f"prune kills (seed {SEED + 1}): {landed} of {TRIALS} landed inside; {report}; {orphans} left orphans"
    )
    assert landed >= TRIALS // 2, f"only {landed} of {TRIALS} kills landed inside prune ({report})"
    assert states["between the entries and the last folder"] >= 1, report


# -- the whole command ------------------------------------------------------------------------------------


def whole(args: list[str], delay: float) -> bool:
    proc = spawn(*args)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != -signal.SIGKILL:
        assert proc.returncode == 0, err
    return proc.returncode == -signal.SIGKILL


def whole_span(args: list[str]) -> float:
    start = time.perf_counter()
    proc = spawn(*args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return time.perf_counter() - start


def test_whole_command_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    root, args, _ = publish_root(tmp_path, 10_000, rng)
    publish_span = whole_span(args)
    root, args, _, _ = prune_root(tmp_path, 10_000, rng)
    prune_span = whole_span(args)
    for i in range(WHOLE_TRIALS):
        root, args, entry = publish_root(tmp_path, i, rng)
        whole(args, rng.uniform(0, publish_span))
        check(root)
        assert run(*args)[0] == 0
        assert entry in check(root)

        root, args, keep, made = prune_root(tmp_path, 20_000 + i, rng)
        kept = set(made) - set(plan(made, keep)[0])
        whole(args, rng.uniform(0, prune_span))
        assert kept <= set(check(root)) <= set(made)
        assert run(*args)[0] == 0
        assert set(check(root)) == kept
