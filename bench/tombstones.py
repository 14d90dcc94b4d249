"""The cost of a prune's tombstones: ``publish prune -keep 1`` of N saves (each an empty folder with one
entry), this checkout against a baseline checkout (by default the commit before tombstones were batched),
median of several runs, in one run of this script.

    python bench/tombstones.py [--saves 2000] [--runs 3] [--baseline REV] [--dir /var/tmp]

Prints the median wall time of each and their ratio; the figures go into docs/performance.md.
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

BASELINE = "68f0055"  # main before tombstones were made with one fsync and dropped a batch at a time


def make_root(base: Path, saves: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="root-", dir=base))
    (root / "pub").mkdir()
    for i in range(saves):
        path = f"exec/A/s{i:06d}"
        (root / path).mkdir(parents=True)
        (root / "pub" / layout.name(1, i, path)).touch()
    return root


def prune(source: Path, root: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(source)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "publish", "prune", "-checkpoint", str(root), "-keep", "1"],
        env=env, check=True, stdout=subprocess.DEVNULL, cwd=source,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saves", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default=BASELINE, help="the git revision to compare with")
    ap.add_argument("--dir", default=None, help="where to build the roots (default: a temporary directory)")
    opts = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tombstones-", dir=opts.dir))
    old = base / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old), opts.baseline], check=True
    )
    try:
        times: dict[str, list[float]] = {"baseline": [], "this": []}
        for _ in range(opts.runs):
            for name, source in (("baseline", old), ("this", REPO)):
                root = make_root(base, opts.saves)
                times[name].append(prune(source, root))
                shutil.rmtree(root)
        b, t = statistics.median(times["baseline"]), statistics.median(times["this"])
        print(f"prune -keep 1 of {opts.saves} saves, median of {opts.runs} runs")
        print(f"  baseline {opts.baseline}: {b:.2f} s ({b / opts.saves * 1000:.2f} ms a save)")
        print(f"  this checkout:    {t:.2f} s ({t / opts.saves * 1000:.2f} ms a save)")
        print(f"  ratio: {t / b:.2f}x")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
