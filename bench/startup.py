"""Start-up cost of `publish`: wall time and peak RSS, per form, as a markdown table.

    python bench/startup.py [-n RUNS] [--rounds R] [--against OTHER | --ratio]

Forms: dist/publish (one file, warm: its unpacked copy already in the cache), the one file without a cache
(PUBLISH_CACHE_DIR=off: it unpacks on every start), dist/publish-folder/bin/publish (folder), `python -m
publish` (source); and two baselines: this Python's `-I -c pass`, and the interpreter the folder carries
running `-I -S -c pass` (what any start of the frozen program costs before the package's own imports).
Commands: `publish version` and a POSIX `resolve` on a root with 100 publications. Each cell is the median
of RUNS runs (default 30) after one warm-up run, so the page cache is warm. Run ./build first.

Then the paired comparison the target is about (warm one file <= 1.2x the folder form's CPU): R rounds
(default 15), each running the one file and the folder alternately 5 times per command; a round's ratio is
the median CPU of the one file over the folder's; the median ratio over the rounds, and its range.

Then the start-up target of issue 25 (a POSIX `resolve` at most 1.6x the bare interpreter): R rounds, each
running a 10-entry POSIX `resolve` and the same interpreter's `-I -S -c pass` alternately 5 times; a round's
ratio is the median CPU of the resolve over the bare start's. For the folder form (its interpreter, `-I -S`,
is the baseline) and for the source form (this Python, `-I -S`, the checkout put on sys.path by `-c`).
--ratio: that comparison alone.

--against OTHER (another build's one file, e.g. a copy of dist/publish made before a change): the same paired
comparison, warm, of dist/publish against OTHER, each with its own copy in the same cache; alone, without the
table above.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402


def make_root(base: Path, entries: int = 100) -> Path:
    root = base / f"ckpt-{entries}"
    (root / "pub").mkdir(parents=True)
    for step in range(100, 100 * entries + 100, 100):
        save = f"exec/1/checkpoint-{step}"
        (root / save).mkdir(parents=True)
        (root / "pub" / layout.name(0, step, save)).write_bytes(b"")
    return root


def peak_rss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS (MiB) of one run, taken by GNU time: a process's peak counts the memory of the process it was
    forked from, so the parent must be small (this Python is not)."""
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", out.name, *cmd], stdout=subprocess.DEVNULL, env=env
        )
        return int(Path(out.name).read_text().split()[-1]) / 1024


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """Median wall time (ms), CPU time (ms, user + system, the unpacking's cleaner excluded) and peak RSS
    (MiB, NaN without /usr/bin/time) of `cmd`."""
    walls, cpus, rss = [], [], []
    for i in range(runs + 1):
        cpu = cpu_children()
        start = time.perf_counter()
        code = subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, cwd=REPO).returncode
        wall = time.perf_counter() - start
        cpu = cpu_children() - cpu
        if code != 0:
            raise SystemExit(f"{cmd}: exit {code}")
        if i:  # the first run warms the page cache
            walls.append(wall * 1000)
            cpus.append(cpu * 1000)
            rss.append(peak_rss(cmd, env) if os.path.exists("/usr/bin/time") else float("nan"))
    return statistics.median(walls), statistics.median(cpus), statistics.median(rss)


def cpu_of(cmd: list[str], env: dict[str, str]) -> float:
    """CPU time (ms, user + system) of one run."""
    cpu = cpu_children()
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, cwd=REPO).returncode != 0:
        raise SystemExit(f"{cmd}: failed")
    return (cpu_children() - cpu) * 1000


def paired(a: list[str], b: list[str], rounds: int, env: dict[str, str]) -> tuple[float, float, list[float]]:
    """Median CPU (ms) of a and of b over all runs, and each round's ratio of medians: a and b alternate, 5
    runs each a round, after one warm-up run of each (which also fills the one file's cache)."""
    cpu_of(a, env), cpu_of(b, env)
    all_a, all_b, ratios = [], [], []
    for _ in range(rounds):
        ra, rb = [], []
        for _ in range(5):
            ra.append(cpu_of(a, env))
            rb.append(cpu_of(b, env))
        all_a += ra
        all_b += rb
        ratios.append(statistics.median(ra) / statistics.median(rb))
    return statistics.median(all_a), statistics.median(all_b), ratios


def against(one: Path, other: Path, commands: dict[str, list[str]], rounds: int, env: dict[str, str]) -> int:
    print(f"Python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(f"paired, {rounds} rounds of 5 interleaved runs each, both warm: CPU of {one} / {other}")
    print()
    print("| command | this one file CPU ms | other CPU ms | ratio (median) | ratio range over rounds |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, argv in commands.items():
        one_ms, other_ms, ratios = paired([str(one), *argv], [str(other), *argv], rounds, env)
        print(
            f"| {name} | {one_ms:.1f} | {other_ms:.1f} | {statistics.median(ratios):.2f}x"
            f" | {min(ratios):.2f}x - {max(ratios):.2f}x |",
            flush=True,
        )
    print()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def ratio_to_bare(folder: Path, root: Path, rounds: int, env: dict[str, str]) -> None:
    """The paired CPU of a POSIX resolve (10 entries) over the same interpreter's bare `-I -S -c pass`."""
    tree = folder / "libexec" / "publish"
    frozen = [str(tree / "ld-publish.so.1"), "--inhibit-cache", "--library-path", str(tree / "_internal")]
    source = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); sys.argv[0] = 'publish'; "
        "from publish.cli import run; sys.exit(run())"
    )
    pairs = {
        "folder form": (
            [str(folder / "bin" / "publish"), "resolve", "-checkpoint", str(root)],
            [*frozen, str(tree / "publish"), "-I", "-S", "-c", "pass"],
        ),
        "source, python -I -S": (
            [sys.executable, "-I", "-S", "-c", source, "resolve", "-checkpoint", str(root)],
            [sys.executable, "-I", "-S", "-c", "pass"],
        ),
    }
    print(
        f"paired, {rounds} rounds of 5 interleaved runs each: CPU of a 10-entry POSIX resolve / -I -S -c pass"
    )
    print()
    print(
        "| form | resolve CPU ms | -I -S -c pass CPU ms | ratio (median) | ratio range over rounds | target |"
    )
    print("| --- | ---: | ---: | ---: | --- | --- |")
    for form, (cmd, bare) in pairs.items():
        resolve_ms, bare_ms, ratios = paired(cmd, bare, rounds, env)
        print(
            f"| {form} | {resolve_ms:.1f} | {bare_ms:.1f} | {statistics.median(ratios):.2f}x"
            f" | {min(ratios):.2f}x - {max(ratios):.2f}x | <= 1.6x |",
            flush=True,
        )
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="runs per cell (at least 20)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the paired comparison (at least 5)")
    parser.add_argument("--against", type=Path, help="another build's one file: paired comparison only")
    parser.add_argument(
        "--ratio", action="store_true", help="only the 10-entry resolve against -I -S -c pass"
    )
    args = parser.parse_args()
    runs = max(args.n, 20)
    one, folder = REPO / "dist" / "publish", REPO / "dist" / "publish-folder"
    if not one.exists():
        raise SystemExit("dist/publish is missing: run ./build first")
    forms = {
        "one file (warm cache)": [str(one)],
        "one file, no cache": [str(one)],
        "folder": [str(folder / "bin" / "publish")],
        "python -m publish": [sys.executable, "-m", "publish"],
    }
    tree = folder / "libexec" / "publish"
    baseline = {
        "python3 -I -c pass": [sys.executable, "-I", "-c", "pass"],
        "the folder's interpreter, -I -S -c pass": [
            *(str(tree / "ld-publish.so.1"), "--inhibit-cache", "--library-path", str(tree / "_internal")),
            *(str(tree / "publish"), "-I", "-S", "-c", "pass"),
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "TMPDIR": tmp}
        env["PUBLISH_CACHE_DIR"] = str(Path(tmp) / "cache")
        no_cache = dict(env, PUBLISH_CACHE_DIR="off")
        commands = {
            "version": ["version"],
            "resolve (POSIX, 100 entries)": ["resolve", "-checkpoint", str(root)],
        }
        if args.against:
            return against(one, args.against.resolve(), commands, max(args.rounds, 5), env)
        if args.ratio:
            ratio_to_bare(folder, make_root(Path(tmp), 10), max(args.rounds, 5), env)
            return 0
        print(f"{runs} runs a cell, medians; Python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
        print("| form | command | wall ms | CPU ms | peak RSS MiB |")
        print("| --- | --- | ---: | ---: | ---: |")
        for form, base in forms.items():
            for name, argv in commands.items():
                wall, cpu, rss = measure(base + argv, runs, no_cache if "no cache" in form else env)
                print(f"| {form} | {name} | {wall:.1f} | {cpu:.1f} | {rss:.1f} |", flush=True)
        for form, cmd in baseline.items():
            wall, cpu, rss = measure(cmd, runs, env)
            print(f"| {form} (baseline) | - | {wall:.1f} | {cpu:.1f} | {rss:.1f} |", flush=True)
        print()
        print(
            f"paired, {max(args.rounds, 5)} rounds of 5 interleaved runs each: CPU of the warm one file / the folder"
        )
        print()
        print("| command | one file CPU ms | folder CPU ms | ratio (median) | ratio range over rounds |")
        print("| --- | ---: | ---: | ---: | --- |")
        for name, argv in commands.items():
            one_ms, folder_ms, ratios = paired(
                [str(one), *argv], [str(folder / "bin" / "publish"), *argv], max(args.rounds, 5), env
            )
            print(
                f"| {name} | {one_ms:.1f} | {folder_ms:.1f} | {statistics.median(ratios):.2f}x"
                f" | {min(ratios):.2f}x - {max(ratios):.2f}x |",
                flush=True,
            )
        print()
        ratio_to_bare(folder, make_root(Path(tmp), 10), max(args.rounds, 5), env)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    size = one.stat().st_size
    tree = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    print()
    print(f"size: one file {size / 1048576:.1f} MiB ({size} bytes); folder {tree / 1048576:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
