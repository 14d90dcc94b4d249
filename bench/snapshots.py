"""Save and load of a 1 GiB payload: publish.snapshots against torch.save + fsync and torch.load, each
operation in a fresh process, the two sides interleaved, medians and spread over rounds.

    python bench/snapshots.py [DIR] [--rounds N] [--gib G] [--tensors T]

Each round runs nine fresh processes: eight in pairs (baseline then library, or library then baseline,
alternating by round), each timing one operation after importing torch and building the payload, and one
for a floor (below):

- first save: the library's first ``save_checkpoint(keep_last=2)`` of a process, into a root that holds two
  older snapshots written by earlier processes (a process that saves before it reads the root), against one
  ``torch.save`` + fsync;
- first save after load_latest: the same, after an untimed ``load_latest`` (a job resuming), against one
  ``torch.save`` + fsync after an untimed ``torch.load`` of the baseline's file;
- steady save: the library's second save of a process (the first, untimed, made the process know every
  snapshot in the root), against a second ``torch.save`` + fsync of the process;
- load: ``load(path)`` of the newest snapshot against ``torch.load(weights_only=True, map_location="cpu")``
  of the baseline's file (both files were written moments before, so both are in the page cache).

Peak memory is each process's ``ru_maxrss`` (torch, the payload, the operation).  Ratios are computed per
round (paired) and their median and range are printed, with the medians of the times.

Each round also measures what no implementation of the format can go below, in the same run:

- the CPU time (user + system, all threads) of each operation, and that time divided by the CPUs: the
  shortest wall time in which that work can be done even with every CPU busy throughout;
- ``hash``: SHA-256 of the newest snapshot's payload alone, in a fresh process, from a mapping of the file
  (no copy). A reader must check the manifest's digest, one SHA-256 over the whole file, which runs on one
  CPU: no checking load ends sooner.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

PAIRS = [
    ("first save", "base_save1", "save1"),
    ("first save after load_latest", "base_save_resumed", "save_resumed"),
    ("steady save", "base_save2", "save2"),
    ("load", "base_load", "load"),
]
FLOOR_OPS = ["hash"]
TARGETS = {"first save": 1.5, "first save after load_latest": 1.5, "steady save": 1.5, "load": 1.2}
MEMORY_TARGET = 1.1


def make_payload(torch: Any, gib: float, tensors: int, step: int) -> dict[str, Any]:
    """``gib`` GiB of float32 in ``tensors`` tensors (contents do not change what is measured)."""
    elements = int(gib * (1 << 30)) // 4
    if tensors == 1:
        return {"step": step, "weights": torch.full((elements,), 1.5), "small": torch.arange(10)}
    each = elements // tensors
    model = {f"layer{i}.weight": torch.full((each,), float(i)) for i in range(tensors)}
    return {"step": step, "model": model, "small": torch.arange(10)}


def torch_save(torch: Any, payload: dict[str, Any], path: str) -> None:
    torch.save(payload, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_mapped(path: str) -> str:
    """SHA-256 of the file at ``path``, hashed from a read-only mapping in 4 MiB pieces."""
    import hashlib
    import mmap

    sha256 = hashlib.sha256()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        for offset in range(0, len(view), 4 << 20):
            piece = view[offset : offset + (4 << 20)]
            sha256.update(piece)
            piece.release()
        view.release()
    return sha256.hexdigest()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(op: str, root: str, plain: str, step: int, gib: float, tensors: int) -> None:
    """One operation in this fresh process; prints {"seconds", "cpu_seconds", "maxrss_kib", "path"} as JSON."""
    sys.path.insert(0, str(REPO))
    import torch

    import publish.snapshots as snapshots

    path = ""
    if op == "hash":
        path = _newest(root)
        cpu = cpu_seconds()
        start = time.perf_counter()
        sha256_mapped(os.path.join(path, "checkpoint.pt"))
    elif op == "load":
        path = _newest(root)
        cpu = cpu_seconds()
        start = time.perf_counter()
        snapshots.load(path)
    elif op == "base_load":
        cpu = cpu_seconds()
        start = time.perf_counter()
        torch.load(plain, weights_only=True, map_location="cpu")
    else:
        payload = make_payload(torch, gib, tensors, step)
        if op == "save_resumed":  # a job's start: resume from the newest snapshot, untimed
            resumed: Any = snapshots.load_latest(root)
            del resumed
        elif op == "base_save_resumed":
            resumed = torch.load(plain, weights_only=True, map_location="cpu")
            del resumed
        if op in ("save2", "base_save2"):  # the untimed first save of this process
            if op == "save2":
                snapshots.save_checkpoint(root, payload)
            else:
                torch_save(torch, payload, plain)
            payload["step"] = step + 1
        cpu = cpu_seconds()
        start = time.perf_counter()
        if op.startswith("base_"):
            torch_save(torch, payload, plain)
        else:
            path = str(snapshots.save_checkpoint(root, payload))
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "maxrss_kib": maxrss, "path": path}))


def _newest(root: str) -> str:
    """The newest snapshot directory by name's step (the bench writes them in order), without verifying."""
    names = sorted(n for n in os.listdir(root) if n.startswith("step_"))
    return os.path.join(root, names[-1])


def run_child(op: str, root: Path, plain: Path, step: int, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", op, str(root), str(plain), str(step)]
    argv += ["--gib", str(args.gib), "--tensors", str(args.tensors)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{op} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", nargs="?", default=None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=1, help="split the payload into this many tensors")
    parser.add_argument("--child", nargs=4, metavar=("OP", "ROOT", "PLAIN", "STEP"))
    args = parser.parse_args()
    if args.child:
        op, root, plain, step = args.child
        child(op, root, plain, int(step), args.gib, args.tensors)
        return 0
    work = Path(tempfile.mkdtemp(prefix="snapbench-", dir=args.dir))
    try:
        root, plain = work / "root", work / "plain.pt"
        step = 0
        for _ in range(2):  # the root holds two older snapshots before the first round
            run_child("save1", root, plain, step, args)
            step += 2
        results: dict[str, list[dict[str, Any]]] = {}
        loadavg: list[float] = []
        for r in range(args.rounds):
            for _name, base, ours in PAIRS:
                order = [base, ours] if r % 2 == 0 else [ours, base]
                for op in order:
                    results.setdefault(op, []).append(run_child(op, root, plain, step, args))
                    step += 2
            for op in FLOOR_OPS:
                results.setdefault(op, []).append(run_child(op, root, plain, step, args))
            loadavg.append(os.getloadavg()[0])
            print(
                f"round {r + 1}: "
                + ", ".join(f"{k} {v[-1]['seconds']:.2f}s" for k, v in results.items())
                + f", load average {loadavg[-1]:.1f}",
                file=sys.stderr,
            )
        report(args, results, loadavg, plain.stat().st_size)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace, results: dict[str, list[dict[str, Any]]], loadavg: list[float], size: int
) -> None:
    import torch

    print(
        f"payload {size / (1 << 30):.2f} GiB in {args.tensors} tensor(s), {args.rounds} rounds, one fresh "
        f"process per operation; {platform.platform()}, python {platform.python_version()}, "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        f"load average (1 min) after each round: min {min(loadavg):.1f}, median "
        f"{statistics.median(loadavg):.1f}, max {max(loadavg):.1f}"
    )
    print()
    print("| operation | baseline, s | publish.snapshots, s | ratio (paired) | target | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, base, ours in PAIRS:
        b = [x["seconds"] for x in results[base]]
        o = [x["seconds"] for x in results[ours]]
        ratios = [y / x for x, y in zip(b, o)]
        met = "yes" if statistics.median(ratios) <= TARGETS[name] else "no"
        print(
            f"| {name} | {spread(b, '.2f')} | {spread(o, '.2f')} | {spread(ratios, '.2f')}x "
            f"| <= {TARGETS[name]}x | {met} |"
        )
    print()
    floors(results)
    print()
    print(
        "| peak memory (ru_maxrss) | baseline, MiB | publish.snapshots, MiB | ratio (paired) | target | met |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, base, ours in PAIRS:
        b = [x["maxrss_kib"] / 1024 for x in results[base]]
        o = [x["maxrss_kib"] / 1024 for x in results[ours]]
        ratios = [y / x for x, y in zip(b, o)]
        target = f"<= {MEMORY_TARGET}x" if name == "first save" else "-"
        met = ("yes" if statistics.median(ratios) <= MEMORY_TARGET else "no") if name == "first save" else "-"
        print(
            f"| {name} | {spread(b, '.0f')} | {spread(o, '.0f')} | {spread(ratios, '.2f')}x | {target} | {met} |"
        )


def floors(results: dict[str, list[dict[str, Any]]]) -> None:
    """What the work itself allows: each operation's CPU time over the CPUs, and for the load the one SHA-256
    a reader must compute, each against the same round's baseline."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    print(
        f"| operation | publish.snapshots CPU, s | CPU / {cpus} CPUs, s | SHA-256 alone, s "
        "| floor, x baseline (paired) | measured, x floor (paired) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    hashed = [x["seconds"] for x in results["hash"]]
    for name, base, ours in PAIRS:
        b = [x["seconds"] for x in results[base]]
        o = [x["seconds"] for x in results[ours]]
        cpu = [x["cpu_seconds"] for x in results[ours]]
        # A load cannot end before its one SHA-256 of the payload; any operation not before its CPU time
        # spread over every CPU.
        floor = [max(c / cpus, h if name == "load" else 0.0) for c, h in zip(cpu, hashed)]
        print(
            f"| {name} | {spread(cpu, '.2f')} | {spread([c / cpus for c in cpu], '.2f')} "
            f"| {spread(hashed, '.2f') if name == 'load' else '-'} "
            f"| {spread([f / x for f, x in zip(floor, b)], '.2f')}x "
            f"| {spread([y / f for f, y in zip(floor, o)], '.2f')}x |"
        )


if __name__ == "__main__":
    sys.exit(main())
