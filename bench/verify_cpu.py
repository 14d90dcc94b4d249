"""The CPU of ``publish resolve -verify=deep`` against a plain Python SHA-256 loop over the same files, and the
manifest hashing of a publication (the same reading code), for several read sizes and thread counts.

    python bench/verify_cpu.py [--files 8] [--file-mib 256] [--small 64] [-n ROUNDS] [--dir DIR]
                               [--variants 8:4,1:4,1:1]

Writes a DCP-shaped save (FILES shards of FILE_MIB MiB, SMALL files of 100 KB) under a POSIX root, publishes
it, reads it once to warm the page cache (the files stay there: what is compared is the hashing, not the
disk), then runs ROUNDS interleaved rounds of, each in a fresh process:

- the baseline: ``hashlib.sha256`` over every file, 1 MiB reads into one buffer, one thread;
- per variant MiB:THREADS (posix_saves.CHUNK and THREADS set before the command runs): ``resolve
  -verify=deep``, and ``save_rows`` of the save (what ``publish`` hashes for the manifest).

CPU is user + system of the whole process (all threads, from wait4); wall is measured too, since on 2 CPUs
the publication's hashing on several threads takes less wall time.  Issue 32's target: -verify=deep at most
1.1x the baseline's CPU.
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

BASELINE = r"""
import hashlib, os, sys
buf = bytearray(1 << 20)
view = memoryview(buf)
for path in sys.argv[1:]:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    while True:
        n = os.readv(fd, [buf])
        if not n:
            break
        h.update(view[:n])
    os.close(fd)
    print(h.hexdigest(), path)
"""

VARIANT = r"""
import sys
from publish.stores import posix_saves
posix_saves.CHUNK = int(sys.argv[1]) << 20
posix_saves.THREADS = int(sys.argv[2])
if sys.argv[3] == "rows":
    from publish.rules.deadline import Deadline
    from publish.stores.posix_root import RootDirs
    rows = posix_saves.save_rows(RootDirs(sys.argv[4]), Deadline(None), sys.argv[5])
    assert all(r[2] for r in rows)
    sys.exit(0)
from publish.cli import run
sys.argv = ["publish", *sys.argv[3:]]
sys.exit(run())
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the process and its threads) of ``cmd``."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read() if proc.stderr else b""
    if os.waitstatus_to_exitcode(status) != 0 or err:
        raise SystemExit(f"{cmd} failed: {status} {err.decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument(
        "--variants", default="8:4,1:4,1:1", help="MiB:THREADS,... (8:4 the code before issue 32)"
    )
    args = ap.parse_args()
    variants = [tuple(int(x) for x in v.split(":")) for v in args.variants.split(",")]
    base = Path(tempfile.mkdtemp(prefix="bench-verify-", dir=args.dir))
    try:
        root = base / "root"
        rel = "exec/A/step-1"
        save = root / rel
        save.mkdir(parents=True)
        for i in range(args.files):
            with open(save / f"__{i}_0.distcp", "wb") as f:
                for _ in range(args.file_mib // 64):
                    f.write(os.urandom(64 << 20))
        for i in range(args.small):
            (save / f"small_{i}.bin").write_bytes(os.urandom(100_000))
        files = sorted(str(p) for p in save.iterdir())
        total = sum(os.path.getsize(p) for p in files)
        py = sys.executable
        timed([py, "-m", "publish", "publish", "-checkpoint", str(root), str(save), "1"])
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        runs: dict[str, list[str]] = {"baseline: hashlib, 1 MiB, one thread": [py, "-c", BASELINE, *files]}
        for mib, threads in variants:
            runs[f"resolve -verify=deep, {mib} MiB x {threads}"] = [
                py, "-c", VARIANT, str(mib), str(threads), "resolve", "-checkpoint", str(root), "-verify=deep",
            ]  # fmt: skip
            runs[f"manifest hashing (save_rows), {mib} MiB x {threads}"] = [
                py, "-c", VARIANT, str(mib), str(threads), "rows", str(root), rel,
            ]  # fmt: skip
        walls: dict[str, list[float]] = {k: [] for k in runs}
        cpus: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.n):
            for name, cmd in runs.items():
                wall, cpu = timed(cmd)
                walls[name].append(wall)
                cpus[name].append(cpu)
        load = os.getloadavg()
        print(
            f"A save of {args.files} x {args.file_mib} MiB + {args.small} x 100 KB ({total / (1 << 30):.2f} GiB) "
            f"in the page cache, {os.cpu_count()} CPUs, {args.n} interleaved rounds, load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
        )
        first = next(iter(runs))
        print("| | wall | CPU | CPU / baseline (per round) |\n| --- | --- | --- | --- |")
        for name in runs:
            ratios = [c / b for c, b in zip(cpus[name], cpus[first])]
            print(
                f"| {name} | {cell(walls[name])} | {cell(cpus[name])} | "
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
