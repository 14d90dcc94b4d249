"""Save and load of a 1 GiB payload: publish.snapshots against torch.save + fsync and torch.load alone.

    python bench/snapshots.py [DIR] [--runs N] [--gib G] [--tensors T] [--no-warm]

Runs alternate (baseline then library, library then baseline, ...; for saves and for loads) in one process and the medians are printed as a markdown
table.  The library's save is measured in steady state with keep_last=2: two snapshots exist before each
save, so each save also verifies the new one and removes the oldest.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import publish.snapshots as snapshots  # noqa: E402


def baseline_save(path: Path, payload: dict[str, object]) -> float:
    start = time.perf_counter()
    torch.save(payload, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def warm_memory(elements: int) -> None:
    """Touch and free as much memory as a load allocates, so that the load which follows gets pages the
    kernel has just freed rather than pages a ballooned VM's host has taken back (which can take seconds
    to fault in again, and would fall on whichever load happens to go first)."""
    block = torch.ones(elements)
    del block


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", nargs="?", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=1, help="split the payload into this many tensors")
    parser.add_argument(
        "--no-warm", dest="warm", action="store_false", help="do not touch fresh memory before each load"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="snapbench-", dir=args.dir))
    try:
        torch.manual_seed(0)
        elements = int(args.gib * (1 << 30)) // 4
        if args.tensors == 1:
            payload = {"step": 0, "weights": torch.randn(elements), "small": torch.arange(10)}
        else:  # like a state_dict: many tensors of a few MiB each
            each = elements // args.tensors
            weights = {f"layer{i}.weight": torch.randn(each) for i in range(args.tensors)}
            payload = {"step": 0, "model": weights, "small": torch.arange(10)}
        root = work / "root"
        plain = work / "plain.pt"
        for step in (1, 2):  # steady state: keep_last=2 already full
            payload["step"] = step
            snapshots.save_checkpoint(root, payload)
        times: dict[str, list[float]] = {"save": [], "base_save": [], "load": [], "base_load": []}
        loadavg: list[float] = []
        for run in range(args.runs):
            payload["step"] = 3 + run
            # Alternate which goes first, so neither always follows the other's writeback.
            if run % 2 == 0:
                times["base_save"].append(baseline_save(plain, payload))
            t, path = timed(snapshots.save_checkpoint, root, payload)
            times["save"].append(t)
            if run % 2 == 1:
                times["base_save"].append(baseline_save(plain, payload))
            loads = [
                ("base_load", lambda: torch.load(plain, weights_only=True, map_location="cpu")),
                ("load", lambda path=path: snapshots.load(path)),
            ]
            for key, load in loads if run % 2 == 0 else loads[::-1]:
                if args.warm:
                    warm_memory(elements)
                t, _ = timed(load)
                times[key].append(t)
            loadavg.append(os.getloadavg()[0])
            print(
                f"run {run + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
                + f", load average {loadavg[-1]:.1f}",
                file=sys.stderr,
            )
        med = {k: statistics.median(v) for k, v in times.items()}
        size = plain.stat().st_size
        print(f"payload {size / (1 << 30):.2f} GiB, {args.runs} runs each, medians; {platform.platform()}")
        print(
            f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, dir {work}"
        )
        print(
            f"load average (1 min) during the runs: min {min(loadavg):.1f}, median "
            f"{statistics.median(loadavg):.1f}, max {max(loadavg):.1f}"
        )
        print()
        print("| operation | baseline | publish.snapshots | ratio | target |")
        print("| --- | --- | --- | --- | --- |")
        print(
            f"| save (keep_last=2) | {med['base_save']:.2f} s (torch.save + fsync) | {med['save']:.2f} s "
            f"| {med['save'] / med['base_save']:.2f}x | <= 1.5x |"
        )
        print(
            f"| load | {med['base_load']:.2f} s (torch.load, weights_only) | {med['load']:.2f} s "
            f"| {med['load'] / med['base_load']:.2f}x | <= 1.2x |"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
