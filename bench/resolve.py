"""Time a POSIX ``publish resolve`` and list what it imports.

    python bench/resolve.py [--runs 5] [--startup-runs 21] [--sizes 10,1000,100000] [--write docs/perf-resolve.md]
                            [--plan-sizes 10000,100000,1000000] [--plan-only] [--check]

Each figure is the median wall time of a whole process (start to exit) run with subprocess, the commands of one
row set interleaved so load on the machine falls on all of them alike.  Baselines measured in the same run: the
bare interpreter (``python -c pass``, and ``python -S -c pass`` without the site module) and a listing of pub/
from Python (``os.listdir``), which is the floor for any resolve that must read every name.

The import list comes from ``python -X importtime``: the modules a resolve imports beyond the bare
interpreter's, what each costs (median self time over several runs), and which publish module pulled it in.

prune's plan (which entries and folders go) is timed in-process on 10^4, 10^5 and 10^6 entries in nested
folders, against sorting the same entries oldest first (which the plan must do) in the same run; the quadratic
plan it replaced is timed beside it on the smallest size.  Those go to a block of their own (``--plan-only``
runs them alone).

Targets: 100,000 entries under 0.5 s; no ssl, http or xml module imported; under 15 ms added to the bare
interpreter's start; prune's plan O(n log n), as the sort is: its ratio to the sort at the largest size within 2x the
ratio at the smallest.  ``--write`` puts the results between the bench markers of a markdown file (the text
around them is kept); ``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402
from tests.support.reference_plan import quadratic_plan  # noqa: E402

PY = sys.executable
BEGIN, END = "<!-- bench/resolve.py: begin -->", "<!-- bench/resolve.py: end -->"
PLAN_BEGIN, PLAN_END = "<!-- bench/resolve.py plan: begin -->", "<!-- bench/resolve.py plan: end -->"

FORBIDDEN = ("ssl", "_ssl", "http", "xml", "pyexpat")  # the target: none of these
AVOID = ("email", "urllib", "json", "_json", "socket", "select", "selectors", "hashlib", "hmac")  # reported
TARGET_100K = 0.5
TARGET_ADDED = 0.015
TARGET_PLAN_GROWTH = 2.0


def env() -> dict[str, str]:
    """A plain environment running this checkout's publish (the commands also run in REPO, since ``-m`` looks
    in the working directory first).  PYTHONDONTWRITEBYTECODE is left out: .pyc files are used as installed."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    out = {k: os.environ[k] for k in keep if k in os.environ}
    out["PYTHONPATH"] = str(REPO)
    return out


def machine() -> dict[str, str]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        model = platform.processor()
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 0
    return {
        "nproc": str(cpus),
        "cpu": model or "unknown",
        "python": f"{platform.python_implementation()} {platform.python_version()} ({PY})",
        "os": f"{platform.system()} {platform.release()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path``, from /proc/mounts (longest mount point that holds it)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt, fstype = parts[1], parts[2]
                if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
                    best, kind = mnt, fstype
    except OSError:
        pass
    return kind


def make_root(base: Path, n: int) -> Path:
    root = base / f"root-{n}"
    pub = root / "pub"
    pub.mkdir(parents=True)
    for i in range(n):
        fd = os.open(pub / layout.name(0, i, f"exec/a/checkpoint-{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    (root / "exec" / "a" / f"checkpoint-{n - 1}").mkdir(parents=True)
    return root


def wall(cmd: list[str], expect: str | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env(), cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0 or (expect is not None and proc.stdout != expect):
        raise SystemExit(
            f"{' '.join(cmd)}: exit {proc.returncode}, stdout {proc.stdout!r}, stderr {proc.stderr!r}"
        )
    return took


def medians(cmds: dict[str, tuple[list[str], str | None]], runs: int) -> dict[str, float]:
    """The median wall time of each command, runs interleaved; ``<name> min`` holds the fastest run."""
    times: dict[str, list[float]] = defaultdict(list)
    for cmd, expect in cmds.values():  # one warm-up each: page cache, .pyc files
        wall(cmd, expect)
    for _ in range(runs):
        for name, (cmd, expect) in cmds.items():
            times[name].append(wall(cmd, expect))
    out = {name: statistics.median(t) for name, t in times.items()}
    out.update({f"{name} min": min(t) for name, t in times.items()})
    return out


# -- -X importtime ----------------------------------------------------------------------------------------


@dataclass
class Import:
    name: str
    self_us: float
    cumulative_us: float
    chain: tuple[str, ...]  # the importers, outermost first


_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def importtime(cmd: list[str]) -> dict[str, Import]:
    proc = subprocess.run(cmd, env=env(), cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    rows = []
    for line in proc.stderr.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), (len(m.group(3)) - 1) // 2, m.group(4)))
    # importtime prints a module after the modules it imported; read backwards, each parent comes first.
    out: dict[str, Import] = {}
    stack: list[tuple[int, str]] = []
    for self_us, cum_us, depth, name in reversed(rows):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        chain = tuple(n for _, n in stack)
        stack.append((depth, name))
        if name not in out:
            out[name] = Import(name, self_us, cum_us, chain)
    return out


def median_imports(cmd: list[str], runs: int) -> dict[str, Import]:
    samples = [importtime(cmd) for _ in range(runs)]
    first = samples[-1]
    for name, imp in first.items():
        imp.self_us = statistics.median(s[name].self_us for s in samples if name in s)
        imp.cumulative_us = statistics.median(s[name].cumulative_us for s in samples if name in s)
    return first


def family(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def culprit(imp: Import) -> str:
    """The innermost publish module on the import's chain (the module itself if it is one)."""
    if imp.name.startswith("publish"):
        return imp.name
    for name in reversed(imp.chain):
        if name.startswith("publish"):
            return name
    return imp.chain[0] if imp.chain else imp.name


# -- prune's plan -----------------------------------------------------------------------------------------


def plan_entries(n: int) -> list[layout.Entry]:
    """``n`` entries over attempts of 1,000 saves each, every tenth with an entry inside it and every attempt
    with one naming the whole attempt, in no set order."""
    import random

    out = []
    for i in range(n):
        attempt = f"exec/{i // 1000:05d}"
        if i % 1000 == 0:
            out.append(layout.Entry(0, i, attempt))
        elif i % 10 == 0:
            out.append(layout.Entry(0, i, f"{attempt}/checkpoint-{i - 1}/inner"))
        else:
            out.append(layout.Entry(0, i, f"{attempt}/checkpoint-{i}"))
    for entry in out:
        assert entry.name  # as parsed from pub/: each entry holds its name already
    random.Random(n).shuffle(out)
    return out


def plan_times(n: int, runs: int, quadratic: bool) -> dict[str, float]:
    """Median seconds of the plan (keep 3 and keep n/2) and of sorting the same entries, runs interleaved."""
    from publish.ops.retention import plan

    entries = plan_entries(n)
    fns = {
        "sort": lambda: layout.oldest_first(entries),
        "plan": lambda: plan(entries, 3),
        "plan half": lambda: plan(entries, n // 2),
    }
    if quadratic:
        fns["quadratic"] = lambda: quadratic_plan(entries, 3)
        assert quadratic_plan(entries, 3) == plan(entries, 3)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


# -- the report -------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def plan_report(opts: argparse.Namespace) -> tuple[list[str], bool]:
    """prune's plan against a sort of the same entries, as markdown lines; and whether its target is met."""
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    info = machine()
    say("Machine: " + "; ".join(f"{k} {v}" for k, v in info.items()))
    say()
    # prune's plan, in-process: against sorting the same entries.
    plan_sizes = [int(x) for x in opts.plan_sizes.split(",") if x]
    say(f"### prune's plan (in-process, median of {opts.runs})")
    say()
    say(
        "Entries over attempts of 1,000 saves, every tenth naming a folder inside another save and one per "
        "attempt naming the whole attempt; the plan with `-keep 3` and with half the entries kept. The "
        "quadratic plan it replaced, on the smallest size with `-keep 3`."
    )
    say()
    say(
        "| entries | sort oldest first | plan, keep 3 | plan, keep half | slower plan / sort | quadratic plan |"
    )
    say("| ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = {}
    for n in plan_sizes:
        t = plan_times(n, opts.runs, quadratic=n == min(plan_sizes))
        ratios[n] = max(t["plan"], t["plan half"]) / t["sort"]
        quad = ms(t["quadratic"]) if "quadratic" in t else ""
        say(
            f"| {n:,} | {ms(t['sort'])} | {ms(t['plan'])} | {ms(t['plan half'])} "
            f"| {ratios[n]:.2f}x | {quad} |"
        )
    say()

    growth = ratios[max(ratios)] / ratios[min(ratios)] if ratios else 1.0
    ok = growth <= TARGET_PLAN_GROWTH
    if ratios:
        small, large = min(ratios), max(ratios)
        say(
            f"Target: prune's plan grows as the sort does (its ratio to the sort at {large:,} entries within "
            f"{TARGET_PLAN_GROWTH:.0f}x the ratio at {small:,}): {ratios[large]:.2f}x against "
            f"{ratios[small]:.2f}x, {'met' if ok else 'MISSED'}"
        )
    return lines, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per figure for the root sizes (median)")
    ap.add_argument("--startup-runs", type=int, default=21, help="runs per start-up figure (median)")
    ap.add_argument("--sizes", default="10,1000,100000", help="entries per root, comma-separated")
    ap.add_argument("--dir", default=None, help="where to build the roots (default: a temporary directory)")
    ap.add_argument("--write", default=None, help="markdown file to put the results in")
    ap.add_argument("--plan-sizes", default="10000,100000,1000000", help="entries for prune's plan")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--plan-only", action="store_true", help="time prune's plan only (its own block)")
    opts = ap.parse_args()
    if opts.plan_only:
        plan_lines, ok_plan = plan_report(opts)
        if opts.write:
            write(Path(opts.write), plan_lines, PLAN_BEGIN, PLAN_END)
        return 0 if ok_plan or not opts.check else 1
    sizes = [int(s) for s in opts.sizes.split(",")]

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    base = Path(tempfile.mkdtemp(prefix="bench-resolve-", dir=opts.dir))
    try:
        info = machine()
        built = {}
        for n in sizes:
            start = time.perf_counter()
            built[n] = make_root(base, n)
            print(f"built a root of {n:,} entries in {ms(time.perf_counter() - start)}", file=sys.stderr)
        info["filesystem"] = f"{filesystem(base)} ({base.parent})"
        say("Machine: " + "; ".join(f"{k} {v}" for k, v in info.items()))
        say()

        def resolve(root: Path, *flags: str) -> tuple[list[str], str]:
            cmd = [PY, *flags, "-m", "publish", "resolve", "-checkpoint", str(root)]
            return cmd, f"{root}/{layout.parse(max(os.listdir(root / 'pub'))).path}\n"

        # Start-up: the smallest root against the bare interpreter.
        small = built[min(sizes)]
        script = shutil.which("publish")
        start_cmds: dict[str, tuple[list[str], str | None]] = {
            "python -c pass": ([PY, "-c", "pass"], None),
            "python -S -c pass": ([PY, "-S", "-c", "pass"], None),
            "python -m publish resolve": resolve(small),
            "python -S -m publish resolve": resolve(small, "-S"),
        }
        if script:
            start_cmds["publish resolve (console script)"] = (
                [script, "resolve", "-checkpoint", str(small)],
                resolve(small)[1],
            )
        st = medians(start_cmds, opts.startup_runs)
        added = st["python -m publish resolve"] - st["python -c pass"]
        say(f"### Start-up ({min(sizes)} entries, median of {opts.startup_runs}; fastest run in brackets)")
        say()
        say("| command | wall | over its bare interpreter |")
        say("| --- | ---: | ---: |")
        rows = [
            ("`python -c pass`", "python -c pass", ""),
            ("`python -S -c pass`", "python -S -c pass", ""),
            ("`python -m publish resolve`", "python -m publish resolve", "python -c pass"),
            ("`python -S -m publish resolve`", "python -S -m publish resolve", "python -S -c pass"),
        ]
        if script:
            rows.append(
                ("`publish resolve` (console script)", "publish resolve (console script)", "python -c pass")
            )
        for label, key, against in rows:
            over = ""
            if against:
                over = f"{ms(st[key] - st[against])} ({ms(st[key + ' min'] - st[against + ' min'])})"
            say(f"| {label} | {ms(st[key])} ({ms(st[key + ' min'])}) | {over} |")
        say()

        # Sizes: resolve against a listing of pub/ from Python.
        say(f"### Root size (median of {opts.runs})")
        say()
        say("| entries | `python -c pass` | `os.listdir(pub)` | `publish resolve` | resolve − listing |")
        say("| ---: | ---: | ---: | ---: | ---: |")
        by_size = {}
        for n in sizes:
            root = built[n]
            cmds: dict[str, tuple[list[str], str | None]] = {
                "bare": ([PY, "-c", "pass"], None),
                "listdir": ([PY, "-c", "import os, sys; os.listdir(sys.argv[1])", str(root / "pub")], None),
                "resolve": resolve(root),
            }
            t = medians(cmds, opts.runs)
            by_size[n] = t["resolve"]
            say(
                f"| {n:,} | {ms(t['bare'])} | {ms(t['listdir'])} | {ms(t['resolve'])} "
                f"| {ms(t['resolve'] - t['listdir'])} |"
            )
        say()

        # Imports: what resolve adds to the interpreter's own, and with -S everything it needs.
        runs = max(3, min(opts.runs, 7))
        bare = median_imports([PY, "-X", "importtime", "-c", "pass"], runs)
        full = median_imports([PY, "-X", "importtime", *resolve(small)[0][1:]], runs)
        nosite = median_imports([PY, "-S", "-X", "importtime", *resolve(small, "-S")[0][2:]], runs)
        added_mods = {k: v for k, v in full.items() if k not in bare}
        forbidden = sorted(k for k in full if family(k, FORBIDDEN))
        avoided = sorted(k for k in added_mods if family(k, AVOID))
        avoided_site = sorted(k for k in full if family(k, AVOID) and k not in added_mods)
        cost = sum(i.self_us for i in added_mods.values()) / 1e6
        cost_s = sum(i.self_us for i in nosite.values() if i.name != "site") / 1e6
        say(f"### Imports (`-X importtime`, median self time of {runs} runs)")
        say()
        say(
            f"A POSIX resolve imports {len(added_mods)} modules beyond `python -c pass` ({ms(cost)} of self "
            f"time); with `-S`, {len(nosite)} modules in all ({ms(cost_s)})."
        )
        say()
        say(f"- ssl, http, xml: {', '.join(forbidden) if forbidden else 'none imported'}")
        say(f"- email, urllib, json, socket, hashlib added by resolve: {', '.join(avoided) or 'none'}")
        if avoided_site:
            say(f"- of those, imported by the interpreter's site start-up already: {', '.join(avoided_site)}")
        say()
        say("Modules a resolve adds, by what pulled them in (self time, ≥ 0.3 ms listed):")
        say()
        say("| pulled in by | module | self |")
        say("| --- | --- | ---: |")
        groups: dict[str, list[Import]] = defaultdict(list)
        for imp in added_mods.values():
            groups[culprit(imp)].append(imp)
        order = sorted(groups, key=lambda g: -sum(i.self_us for i in groups[g]))
        for g in order:
            total = sum(i.self_us for i in groups[g]) / 1000
            say(f"| **{g}** | (all {len(groups[g])}) | **{total:.1f} ms** |")
            for imp in sorted(groups[g], key=lambda i: -i.self_us):
                if imp.self_us >= 300 and imp.name != g:
                    say(f"| | {imp.name} | {imp.self_us / 1000:.1f} ms |")
        say()

        ok_size = by_size.get(100_000, 0.0) < TARGET_100K
        ok_imports = not forbidden
        ok_added = added < TARGET_ADDED
        say("### Targets")
        say()
        if 100_000 in by_size:
            say(
                f"- 100,000 entries under {ms(TARGET_100K)}: {ms(by_size[100_000])}, {'met' if ok_size else 'MISSED'}"
            )
        say(
            f"- no ssl, http or xml module imported: {'met' if ok_imports else 'MISSED: ' + ', '.join(forbidden)}"
        )
        say(
            f"- under {ms(TARGET_ADDED)} added to `python -c pass`: {ms(added)}, {'met' if ok_added else 'MISSED'}"
        )

        if opts.write:
            write(Path(opts.write), lines)
        plan_lines, ok_plan = plan_report(opts)
        if opts.write:
            write(Path(opts.write), plan_lines, PLAN_BEGIN, PLAN_END)
        return 0 if (ok_size and ok_imports and ok_added and ok_plan) or not opts.check else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


def write(path: Path, lines: list[str], begin: str = BEGIN, end: str = END) -> None:
    block = "\n".join([begin, *lines, end])
    if path.exists():
        text = path.read_text()
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            text = head + block + rest.split(end, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = "# resolve performance\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
