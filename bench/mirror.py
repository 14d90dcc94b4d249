"""Upload a DCP-shaped save to a local SeaweedFS with publish's engine and with the usual uploaders, side by side.

    python bench/mirror.py [--size 4GiB] [--runs 3] [--jobs 8] [--only publish,rclone,aws,boto3]
                           [--write docs/perf-mirror.md]

The save: 8 large files sharing ``--size`` (the shards of a DCP save; 512 MiB each at 4 GiB) and 64 small ones
(1 KiB to 1 MiB: .metadata and small shards).  Each run round uploads it once with each uploader, in turn, to a
fresh prefix (the order rotates from round to round), and removes what was uploaded before the next round:

- publish: ``publish.stores.transfer.upload_save`` with ``jobs`` (a child Python process);
- rclone: ``rclone copy --transfers JOBS`` (its other settings default);
- aws: ``aws s3 cp --recursive`` with ``max_concurrent_requests = JOBS`` (its other settings default);
- boto3: ``upload_file`` of each file in turn with the default TransferConfig (10 threads a file);
- crt: boto3's transfer manager over the AWS CRT (``pip install 'boto3[crt]'``), as boto3 uploads with
  ``preferred_transfer_client="crt"``: every file queued at once, the CRT's own threads, parts and CRC32;
- sha256: Python's ``hashlib.sha256`` (OpenSSL) of the same files, 8 MiB reads into one buffer, one thread:
  what publish computes that the CRT does not, so publish's target is crt + sha256 (issue 32);
- sha256sum: ``sha256sum`` of the same files: the floor for ``resolve -verify=deep``.

For each: the wall time (throughput = bytes / wall), the CPU seconds (user + sys) of the uploader's process
and its children per GiB (``wait4``), its peak RSS, and the CPU SeaweedFS spent meanwhile (from /proc).  The
files are read from the page cache (written just before, RAM far larger): the figures are of CPU and the
loopback, not of a disk.  Median of ``--runs`` rounds, with the lowest and highest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.servers import Weed  # noqa: E402

BEGIN, END = "<!-- bench/mirror.py: begin -->", "<!-- bench/mirror.py: end -->"
GIB = 1 << 30
MIB = 1 << 20
TOOLS = ("publish", "rclone", "aws", "boto3", "crt", "sha256", "sha256sum")


def parse_size(text: str) -> int:
    units = {"KIB": 1 << 10, "MIB": MIB, "GIB": GIB, "K": 1 << 10, "M": MIB, "G": GIB}
    t = text.strip().upper()
    for unit, mult in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def make_save(where: Path, total: int) -> list[Path]:
    """8 large files sharing ``total`` and 64 small ones, random bytes (no store compresses them away)."""
    save = where / "step-100"
    save.mkdir(parents=True)
    files = []
    big = total // 8
    chunk = os.urandom(8 * MIB)
    for rank in range(8):
        p = save / f"__{rank}_0.distcp"
        with open(p, "wb") as f:
            left = big
            while left:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                f.write(os.urandom(16))  # no two chunks alike
                left -= n
            f.truncate(big)
        files.append(p)
    rng = random.Random(7)
    for i in range(64):
        p = save / ("shards" if i % 2 else "") / f"small-{i:02d}.bin"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(os.urandom(rng.randint(1024, MIB)))
        files.append(p)
    (save / ".metadata").write_bytes(os.urandom(300 * 1024))
    files.append(save / ".metadata")
    return files


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a running process (its children waited for included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def hwm(pid: int) -> int:
    """The peak RSS of a running process's own memory (VmHWM), in bytes; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_measured(argv: list[str], env: dict[str, str], server_pid: int) -> dict[str, float]:
    """Run ``argv``; its wall time, CPU seconds (process and children, wait4), peak RSS, the server's CPU.

    The peak RSS is VmHWM read every 20 ms until the process ends (a high-water mark, so the last reading is
    at most 20 ms old): wait4's ru_maxrss would count the pages of this Python process that forked it."""
    import threading

    server0 = cpu_of(server_pid)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], hwm(proc.pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    err_bytes = b""
    if proc.stderr is not None:
        err_bytes = proc.stderr.read()  # until it closes: the process is ending
    peak[0] = max(peak[0], hwm(proc.pid))
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    watcher.join()
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = err_bytes.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-2000:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "sys": usage.ru_stime,
        "rss": peak[0],
        "server": cpu_of(server_pid) - server0,
    }


def child_publish(args: argparse.Namespace) -> int:
    """The publish uploader, in a process of its own so it is measured as the others are."""
    from publish.rules.credentials import Credentials
    from publish.rules.deadline import Deadline
    from publish.stores.posix import PosixStore
    from publish.stores.s3 import S3Store
    from publish.stores.transfer import upload_save

    root, save, bucket, prefix, endpoint = args.child
    creds = Credentials(
        access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        endpoint=endpoint,
        region="us-east-1",
    )
    dst = S3Store(bucket, prefix, creds, proxy=None, env={})
    part = parse_size(args.part_size) if args.part_size else None
    rows = upload_save(Deadline(3600), PosixStore(root), save, dst, jobs=args.jobs, part_size=part)
    print(len(rows), sum(r[1] for r in rows))
    return 0


def child_boto3(args: argparse.Namespace) -> int:
    """boto3's upload_file of each file in turn, default TransferConfig."""
    import boto3

    root, save, bucket, prefix, endpoint = args.child
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    base = Path(root) / save
    for p in sorted(base.rglob("*")):
        if p.is_file():
            s3.upload_file(str(p), bucket, f"{prefix}/{save}/{p.relative_to(base).as_posix()}")
    return 0


def child_crt(args: argparse.Namespace) -> int:
    """boto3's CRT transfer manager (s3transfer.crt, what ``preferred_transfer_client="crt"`` makes), pointed
    at the endpoint over http: boto3's own path to it always builds a client for AWS over TLS, so the CRT's
    S3 client is made here as boto3 makes it (the machine's processors as its threads, its default target
    throughput, 8 MiB parts) with the endpoint given to the request serializer, as the AWS CLI does."""
    import awscrt.auth
    import botocore.session
    from s3transfer.crt import BotocoreCRTRequestSerializer, CRTTransferManager, create_s3_crt_client

    root, save, bucket, prefix, endpoint = args.child
    provider = awscrt.auth.AwsCredentialsProvider.new_static(
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    )
    client = create_s3_crt_client("us-east-1", crt_credentials_provider=provider, use_ssl=False)
    serializer = BotocoreCRTRequestSerializer(
        botocore.session.Session(), {"endpoint_url": endpoint, "region_name": "us-east-1"}
    )
    base = Path(root) / save
    with CRTTransferManager(client, serializer) as manager:
        futures = [
            manager.upload(str(p), bucket, f"{prefix}/{save}/{p.relative_to(base).as_posix()}")
            for p in sorted(base.rglob("*"))
            if p.is_file()
        ]
        for future in futures:
            future.result()
    return 0


def child_sha256(args: argparse.Namespace) -> int:
    """OpenSSL's SHA-256 (hashlib) of every file of the save, 8 MiB reads into one buffer."""
    import hashlib

    root, save = args.child[:2]
    buf = bytearray(8 * MIB)
    view = memoryview(buf)
    for p in sorted((Path(root) / save).rglob("*")):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    h.update(view[:n])
            print(h.hexdigest(), p)
    return 0


def commands(
    tool: str,
    root: Path,
    save: str,
    bucket: str,
    prefix: str,
    weed: Weed,
    jobs: int,
    tmp: Path,
    files: list[Path],
    part_size: str = "",
) -> tuple[list[str], dict[str, str]]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "AWS_ACCESS_KEY_ID": weed.access_key,
        "AWS_SECRET_ACCESS_KEY": weed.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    child = [str(root), save, bucket, prefix, weed.endpoint]
    me = [sys.executable, str(Path(__file__).resolve()), "--jobs", str(jobs)]
    if part_size:
        me += ["--part-size", part_size]
    if tool == "publish":
        return [*me, "--child-publish", *child], env
    if tool == "boto3":
        return [*me, "--child-boto3", *child], env
    if tool == "crt":
        return [*me, "--child-crt", *child], env
    if tool == "sha256":
        return [*me, "--child-sha256", *child], env
    if tool == "rclone":
        env.update(
            {
                "RCLONE_CONFIG_WEED_TYPE": "s3",
                "RCLONE_CONFIG_WEED_PROVIDER": "SeaweedFS",
                "RCLONE_CONFIG_WEED_ACCESS_KEY_ID": weed.access_key,
                "RCLONE_CONFIG_WEED_SECRET_ACCESS_KEY": weed.secret_key,
                "RCLONE_CONFIG_WEED_ENDPOINT": weed.endpoint,
                "RCLONE_CONFIG_WEED_REGION": "us-east-1",
                "RCLONE_CONFIG": str(tmp / "rclone.conf"),
            }
        )
        argv = [
            "rclone",
            "copy",
            "--transfers",
            str(jobs),
            str(root / save),
            f"weed:{bucket}/{prefix}/{save}",
        ]
        return argv, env
    if tool == "aws":
        config = tmp / "aws-config"
        config.write_text(f"[default]\nregion = us-east-1\ns3 =\n    max_concurrent_requests = {jobs}\n")
        env["AWS_CONFIG_FILE"] = str(config)
        argv = [
            "aws",
            "s3",
            "cp",
            "--recursive",
            "--only-show-errors",
            "--endpoint-url",
            weed.endpoint,
            str(root / save),
            f"s3://{bucket}/{prefix}/{save}",
        ]
        return argv, env
    if tool == "sha256sum":
        return ["sha256sum", *map(str, files)], env
    raise ValueError(tool)


def clear(weed: Weed, bucket: str, prefix: str) -> None:
    s3 = weed.client()
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        keys += [{"Key": o["Key"]} for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})


def check(weed: Weed, bucket: str, prefix: str, files: list[Path], base: Path, save: str) -> None:
    """Every file is there with its size (what each uploader wrote is read back by boto3's listing)."""
    s3 = weed.client()
    sizes = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/{save}/"):
        for o in page.get("Contents", []):
            sizes[o["Key"][len(prefix) + len(save) + 2 :]] = o["Size"]
    want = {p.relative_to(base / save).as_posix(): p.stat().st_size for p in files}
    if sizes != want:
        missing = sorted(set(want) - set(sizes))[:3]
        raise SystemExit(f"upload incomplete under {prefix}: missing {missing}, {len(sizes)} of {len(want)}")


def fmt(values: list[float], scale: float, digits: int = 2) -> str:
    med = statistics.median(values) / scale
    return f"{med:.{digits}f} ({min(values) / scale:.{digits}f}-{max(values) / scale:.{digits}f})"


def crt_version() -> str:
    try:
        import awscrt
    except ImportError:
        return ""
    return f"; awscrt {awscrt.__version__}"


def machine(weed_version: str, load: list[tuple[float, float, float]]) -> str:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    versions = []
    for argv in (["rclone", "version"], ["aws", "--version"]):
        with contextlib.suppress(OSError):
            versions.append(
                subprocess.run(argv, capture_output=True, text=True).stdout.split("\n")[0].strip()
            )
    import boto3

    loads = ", ".join(f"{a:.1f}" for a, _, _ in load)
    return (
        f"Machine: nproc {os.cpu_count()}; cpu {cpu}; python {platform.python_version()}; {weed_version}; "
        f"{'; '.join(versions)}; boto3 {boto3.__version__}{crt_version()}; 1-minute load before each round: {loads}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GiB", help="bytes of the 8 large files together (4GiB, 512MiB...)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--part-size", default="", help="publish's part size (default: its own choice)")
    ap.add_argument("--only", default=",".join(TOOLS))
    ap.add_argument("--write", type=Path)
    ap.add_argument("--child-publish", nargs=5, dest="child_publish", metavar="X")
    ap.add_argument("--child-boto3", nargs=5, dest="child_boto3", metavar="X")
    ap.add_argument("--child-crt", nargs=5, dest="child_crt", metavar="X")
    ap.add_argument("--child-sha256", nargs=5, dest="child_sha256", metavar="X")
    args = ap.parse_args()
    if args.child_publish:
        args.child = args.child_publish
        return child_publish(args)
    if args.child_boto3:
        args.child = args.child_boto3
        return child_boto3(args)
    if args.child_crt:
        args.child = args.child_crt
        return child_crt(args)
    if args.child_sha256:
        args.child = args.child_sha256
        return child_sha256(args)
    tools = [t for t in args.only.split(",") if t]
    for t in tools:
        if t not in TOOLS:
            raise SystemExit(f"unknown tool {t}")
        exe = {"rclone": "rclone", "aws": "aws", "sha256sum": "sha256sum"}.get(t)
        if exe and shutil.which(exe) is None:
            raise SystemExit(
                f"{exe} is not installed (rclone: apt-get install -y rclone; aws: pip install awscli)"
            )
    if "crt" in tools and not crt_version():
        raise SystemExit("the CRT is not installed: pip install 'boto3[crt]' (or leave out crt with --only)")
    total = parse_size(args.size)
    tmp = Path(tempfile.mkdtemp(prefix="publish-bench-mirror-"))
    (tmp / "weed").mkdir()
    weed = Weed(str(tmp / "weed"))
    results: dict[str, list[dict[str, float]]] = {t: [] for t in tools}
    loads = []
    try:
        src = tmp / "fast"
        files = make_save(src, total)
        nbytes = sum(p.stat().st_size for p in files)
        subprocess.run(
            ["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True
        )  # into the page cache
        bucket = weed.create_bucket()
        weed_version = subprocess.run(["weed", "version"], capture_output=True, text=True).stdout.split("\n")[
            0
        ]
        for r in range(args.runs):
            loads.append(os.getloadavg())
            order = tools[r % len(tools) :] + tools[: r % len(tools)]
            for tool in order:
                prefix = f"{tool}-{r}-{uuid.uuid4().hex[:6]}"
                argv, env = commands(
                    tool, src, "step-100", bucket, prefix, weed, args.jobs, tmp, files, args.part_size
                )
                m = run_measured(argv, env, weed.proc.pid)
                if tool not in ("sha256", "sha256sum"):
                    check(weed, bucket, prefix, files, src, "step-100")
                    clear(weed, bucket, prefix)
                results[tool].append(m)
                print(
                    f"round {r} {tool:9s} {nbytes / m['wall'] / MIB:8.1f} MiB/s  cpu {m['cpu'] / (nbytes / GIB):5.2f} s/GiB"
                    f" (sys {m['sys'] / (nbytes / GIB):4.2f})  rss {m['rss'] / MIB:6.1f} MiB  server cpu {m['server'] / (nbytes / GIB):5.2f} s/GiB",
                    flush=True,
                )
    finally:
        weed.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    gib = nbytes / GIB
    lines = [
        f"Save: {len(files)} files, {nbytes / GIB:.2f} GiB (8 x {total // 8 // MIB} MiB and 65 small ones); "
        f"jobs {args.jobs}; median of {args.runs} rounds (lowest-highest).",
        "",
        machine(weed_version, loads),
        "",
        "| uploader | MiB/s | CPU s/GiB (uploader) | of which sys | peak RSS MiB | SeaweedFS CPU s/GiB |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for tool in tools:
        ms = results[tool]
        lines.append(
            f"| {tool} | {fmt([nbytes / m['wall'] for m in ms], MIB, 0)} | {fmt([m['cpu'] for m in ms], gib)} | "
            f"{statistics.median([m['sys'] for m in ms]) / gib:.2f} | "
            f"{fmt([m['rss'] for m in ms], MIB, 0)} | "
            + (fmt([m["server"] for m in ms], gib) if tool not in ("sha256", "sha256sum") else "-")
            + " |"
        )
    if all(t in tools for t in ("publish", "crt", "sha256")):
        ratios = [
            p["cpu"] / (c["cpu"] + h["cpu"])
            for p, c, h in zip(results["publish"], results["crt"], results["sha256"])
        ]
        lines += [
            "",
            "publish's CPU over the target (crt + sha256, the same round), per round: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f"; median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
        ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        doc = args.write.read_text() if args.write.exists() else f"{BEGIN}\n{END}\n"
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        args.write.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
