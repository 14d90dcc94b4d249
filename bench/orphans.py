"""The CPU of ``publish prune -orphans`` removing many leftover folders against ``rm -rf`` of the same folders,
interleaved, as a markdown table.

    python bench/orphans.py [--leftovers 10000] [--files 3] [-n ROUNDS] [--dir DIR] [--against REV]

A template root holds one publication (exec/keep/checkpoint-1) and LEFTOVERS attempts' folders no entry
relates to, each ``exec/<A>/checkpoint-1`` with FILES small files.  Each round copies the template twice
(``cp -a``, not measured), waits until nothing in the copies changed for over a second, then runs, each in a
fresh process: ``rm -rf`` of the leftover folders of one copy (the baseline) and ``publish prune -keep 1
-orphans -orphans-age 1s`` of the other (with --against REV, also prune from that git revision, on a third
copy).  CPU is user + system of the whole process tree (from wait4).  Each cell is the median over the
rounds, with the range; the ratio is taken per round, then its median.  Issue 32's target: at most 2x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402


def make_template(base: Path, leftovers: int, files: int) -> Path:
    root = base / "template"
    (root / "exec" / "keep" / "checkpoint-1").mkdir(parents=True)
    (root / "pub").mkdir()
    (root / "pub" / layout.name(0, 1, "exec/keep/checkpoint-1")).touch()
    for i in range(leftovers):
        save = root / "exec" / f"a{i:06d}" / "checkpoint-1"
        save.mkdir(parents=True)
        for j in range(files):
            (save / f"f{j}").write_bytes(b"x" * 100)
    return root


def measured(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system of the process and its children) of ``cmd``, which must succeed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read() if proc.stderr else b""
    if os.waitstatus_to_exitcode(status) != 0 or err:
        raise SystemExit(f"{cmd[:6]} failed: {status} {err.decode()}")
    return usage.ru_utime + usage.ru_stime


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leftovers", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("-n", type=int, default=3, help="rounds")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--against", default=None, help="also run prune from this git revision")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-orphans-", dir=args.dir))
    try:
        template = make_template(base, args.leftovers, args.files)
        names = sorted(p.name for p in (template / "exec").iterdir() if p.name != "keep")
        sources = {"prune -orphans": REPO}
        if args.against:
            old = base / "against"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old), args.against],
                check=True,
            )
            sources[f"prune -orphans at {args.against}"] = old
        cpu: dict[str, list[float]] = {"rm -rf": [], **{k: [] for k in sources}}
        for r in range(args.n):
            copies = {name: base / f"r{r}-{i}" for i, name in enumerate(cpu)}
            for copy in copies.values():
                subprocess.run(["cp", "-a", str(template), str(copy)], check=True)
            time.sleep(1.5)  # -orphans-age 1s: nothing in them changed for over a second
            for name, copy in copies.items():
                if name == "rm -rf":
                    cpu[name].append(measured(["rm", "-rf", *names], copy / "exec"))
                    continue
                source = sources[name]
                env = {**os.environ, "PYTHONPATH": str(source)}
                cmd = [sys.executable, "-m", "publish", "prune", "-checkpoint", str(copy), "-keep", "1"]
                cpu[name].append(measured([*cmd, "-orphans", "-orphans-age", "1s"], source, env))
                left = sorted(p.name for p in (copy / "exec").iterdir())
                if left != ["keep"] or os.listdir(copy / "tomb"):
                    raise SystemExit(f"{name} left {left[:3]}... in exec/")
            for copy in copies.values():
                shutil.rmtree(copy)
        load = os.getloadavg()
        print(
            f"{args.leftovers} leftover folders of {args.files} files each, {os.cpu_count()} CPUs, {args.n} "
            f"interleaved rounds, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
        )
        print("| | CPU | CPU / rm -rf (per round) |\n| --- | --- | --- |")
        for name, values in cpu.items():
            ratios = [c / b for c, b in zip(values, cpu["rm -rf"])]
            print(
                f"| {name} | {cell(values)} | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
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
