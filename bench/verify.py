"""How long `publish resolve -verify=deep` takes against `sha256sum` of the same files, as a markdown table.

    python bench/verify.py [--files 8] [--file-mib 512] [--small 64] [-n ROUNDS] [--dir DIR]

Writes a DCP-shaped save (FILES shards of FILE_MIB MiB of random bytes, SMALL files of 100 KB) under a POSIX
root in DIR (default: a temporary directory), publishes it (which reads and hashes every file), reads it
once to warm the page cache, then runs ROUNDS rounds (default 5), each of `sha256sum` of every file of the
save and `publish resolve -verify=deep`, interleaved.  Each cell is the median over the rounds (and the
range) of the wall time and of the CPU (user + system, of the process and its threads, from wait4).  The
target (issue 27): verify=deep of a 4 GiB save within 1.2x sha256sum's wall time.  The save's files stay in
the page cache: what is compared is the hashing, not the disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of ``cmd``, which must succeed."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0 or err:
        raise SystemExit(f"{cmd} failed: {proc.returncode} {err.decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--file-mib", type=int, default=512)
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "root"
        save = root / "exec" / "A" / "step-1"
        save.mkdir(parents=True)
        chunk = 64 << 20
        for i in range(args.files):
            with open(save / f"__{i}_0.distcp", "wb") as f:
                for _ in range(args.file_mib * (1 << 20) // chunk):
                    f.write(os.urandom(chunk))
        for i in range(args.small):
            (save / f"small_{i}.bin").write_bytes(os.urandom(100_000))
        total = sum(p.stat().st_size for p in save.iterdir())
        publish = [sys.executable, "-m", "publish"]
        files = sorted(str(p) for p in save.iterdir())
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        pub = timed([*publish, "publish", "-checkpoint", str(root), str(save), "1"])
        rows: dict[str, tuple[list[float], list[float]]] = {"sha256sum": ([], []), "verify=deep": ([], [])}
        for _ in range(args.n):
            for name, cmd in (
                ("sha256sum", ["sha256sum", *files]),
                ("verify=deep", [*publish, "resolve", "-checkpoint", str(root), "-verify=deep"]),
            ):
                wall, cpu = timed(cmd)
                rows[name][0].append(wall)
                rows[name][1].append(cpu)
        print(
            f"A save of {args.files} x {args.file_mib} MiB + {args.small} x 100 KB ({total / (1 << 30):.2f} GiB), "
            f"{os.cpu_count()} CPUs, {args.n} rounds; publish (hashing every file once): {pub[0]:.2f} s wall, "
            f"{pub[1]:.2f} s CPU\n"
        )
        print("| | wall | CPU |\n| --- | --- | --- |")
        for name, (walls, cpus) in rows.items():
            print(f"| {name} | {cell(walls)} | {cell(cpus)} |")
        ratio = statistics.median(rows["verify=deep"][0]) / statistics.median(rows["sha256sum"][0])
        print(f"\nverify=deep / sha256sum, wall: {ratio:.2f}x (target: at most 1.2x)")


if __name__ == "__main__":
    main()
