"""The CPU and peak memory of ``publish status`` on a large POSIX root against a plain Python pass over the
same root, interleaved, as a markdown table.

    python bench/status.py [--entries 100000] [--attempts 200] [-n ROUNDS] [--json] [--dir DIR]
                           [--against REV] [--root ROOT]

The root holds ENTRIES publications, their saves spread over ATTEMPTS attempts' folders (``exec/<A>/
checkpoint-<step>``, every one there and published).  Each round runs ``publish status`` (text, or -json with
--json) and the baseline, a Python pass that lists pub/, exec/ and every attempt's folder and ``lstat``s each
save (the least any status must read), and that pass listing each save's folder too (the least a status that
shows each save's size reads: the root has no manifests), each in a fresh process; with --against REV, also ``publish status``
of that git revision (checked out in a temporary worktree).  CPU is user + system of the whole process tree
(from wait4), RSS its peak.  Each cell is the median over the rounds, with the range; the ratio is taken per
round, then its median, against the baseline and against the baseline and sizes.  Issue 32's target: at
most 1.5x the baseline's CPU (set before status showed sizes; now against the baseline and sizes) and 2x its
peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402

BASELINE = r"""
import os, sys
root = sys.argv[1]
pub = os.listdir(root + "/pub")
saves = 0
for attempt in os.listdir(root + "/exec"):
    where = root + "/exec/" + attempt
    for save in os.listdir(where):
        os.lstat(where + "/" + save)
        saves += 1
print(len(pub), "entries,", saves, "saves")
"""

#: The baseline, and each save's folder listed with its files' sizes: the least a status that shows what
#: each save holds reads when no manifest says it (this root has none).
SIZED = r"""
import os, sys
root = sys.argv[1]
pub = os.listdir(root + "/pub")
held = 0
for attempt in os.listdir(root + "/exec"):
    where = root + "/exec/" + attempt
    for save in os.listdir(where):
        os.lstat(where + "/" + save)
        with os.scandir(where + "/" + save) as it:
            held += sum(e.stat(follow_symlinks=False).st_size for e in it if e.is_file(follow_symlinks=False))
print(len(pub), "entries,", held, "bytes")
"""


def make_root(base: Path, entries: int, attempts: int) -> Path:
    root = base / "root"
    (root / "pub").mkdir(parents=True)
    for i in range(entries):
        step = (i + 1) * 10
        save = f"exec/a{i % attempts:04d}/checkpoint-{step}"
        (root / save).mkdir(parents=True)
        (root / "pub" / layout.name(0, step, save)).write_bytes(b"")
    return root


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """CPU seconds (user + system of the process and its children) and peak RSS (MiB) of ``cmd``, run in the
    checkout ``env`` names (PYTHONPATH) or this one: ``-m`` puts the working directory first on sys.path."""
    cwd = env["PYTHONPATH"] if env else REPO
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read() if proc.stderr else b""
    if os.waitstatus_to_exitcode(status) != 0 or err:
        raise SystemExit(f"{cmd} failed: {status} {err.decode()}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def cell(values: list[float], unit: str, digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--attempts", type=int, default=200)
    ap.add_argument("-n", type=int, default=5, help="rounds")
    ap.add_argument("--json", action="store_true", help="status -json instead of the text")
    ap.add_argument("--against", default=None, help="also run status from this git revision")
    ap.add_argument("--dir", default=None)
    ap.add_argument(
        "--root", default=None, help="a root made by make_root before (kept), instead of a new one"
    )
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-status-", dir=args.dir))
    try:
        root = Path(args.root) if args.root else make_root(base, args.entries, args.attempts)
        flags = ["-json"] if args.json else []
        runs: dict[str, tuple[list[str], dict[str, str] | None]] = {
            "baseline": ([sys.executable, "-c", BASELINE, str(root)], None),
            "baseline and sizes": ([sys.executable, "-c", SIZED, str(root)], None),
            "status": ([sys.executable, "-m", "publish", "status", "-checkpoint", str(root), *flags], None),
        }
        if args.against:
            old = base / "against"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old), args.against],
                check=True,
            )
            env = {**os.environ, "PYTHONPATH": str(old)}
            runs[f"status at {args.against}"] = (
                [sys.executable, "-m", "publish", "status", "-checkpoint", str(root), *flags],
                env,
            )
        for cmd, env in runs.values():  # warm the page cache and the bytecode caches
            measured(cmd, env)
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        rss: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.n):
            for name, (cmd, env) in runs.items():
                c, r = measured(cmd, env)
                cpu[name].append(c)
                rss[name].append(r)
        load = os.getloadavg()
        print(
            f"`publish status{' -json' if args.json else ''}` of {args.entries} entries in {args.attempts} attempts, "
            f"{os.cpu_count()} CPUs, {args.n} interleaved rounds, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
        )
        print(
            "| | CPU | peak RSS | CPU / baseline (per round) | CPU / baseline and sizes (per round) | "
            "peak RSS / baseline |\n| --- | --- | --- | --- | --- | --- |"
        )
        for name in runs:
            ratios = [c / b for c, b in zip(cpu[name], cpu["baseline"])]
            sized = [c / b for c, b in zip(cpu[name], cpu["baseline and sizes"])]
            held = [r / b for r, b in zip(rss[name], rss["baseline"])]
            print(
                f"| {name} | {cell(cpu[name], 's')} | {cell(rss[name], 'MiB', 0)} | "
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
                f"{statistics.median(sized):.2f}x ({min(sized):.2f}-{max(sized):.2f}) | "
                f"{statistics.median(held):.2f}x |"
            )
        if args.against:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base / "against")], check=False
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
