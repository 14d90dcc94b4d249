"""How soon `publish run` exits after COMMAND does, and what its start costs, as markdown tables.

    python bench/run_lag.py [--form source|one|folder] [--against DIR_OR_FILE] [-n RUNS] [--rounds R]

Three measurements, each of `publish run -checkpoint ROOT -framework hf -attempt A -interval 1h -- COMMAND`
on a POSIX root of 100 publications (so run resumes, scans an empty SAVES once at the start, and once more at
the end: the last scan):

1. **exit lag**: COMMAND sleeps 0.2 s, writes `time.monotonic_ns()` to its stdout and ends with `os._exit(0)`;
   the lag is from that moment to the moment this benchmark's `waitpid` of `publish run` returns. Baseline in
   the same run: the same COMMAND under a bare parent (`python3 -I -S -c`, `os.posix_spawn`, `os.waitpid`,
   `os._exit`): what any parent pays to hear of a child's exit and exit itself.
2. **stop lag**: COMMAND prints `ready` and waits for SIGTERM, on which it writes its time and exits 143; the
   benchmark sends SIGTERM to `publish run` (which passes it on) and measures from the send to run's exit, and
   from COMMAND's exit to run's exit.
3. **start-up CPU**: user + system CPU (from wait4: the process and the children it reaped) of `publish run
   ... -- /bin/true` against a POSIX `publish resolve` of the same root, paired: each round runs both 5 times,
   interleaved; a round's ratio is the median of run's over the median of resolve's; the table gives the
   median over the rounds and its range. `/bin/true` alone costs well under a millisecond.

Each lag cell is the median of RUNS runs (default 15) after one warm-up run. Targets (issue 26): run exits
within 10 ms of COMMAND's exit plus the last scan; its start costs at most 1.3x a POSIX resolve's CPU.

--form: source (`python -m publish` from this checkout, the default), one (dist/publish) or folder
(dist/publish-folder/bin/publish); run ./build first for the last two. --against: the same measurements of
another build in the same run: a directory is a checkout run from its source (e.g. the commit before,
`git archive HEAD~1 | tar -x -C /tmp/before`), a file is a one-file build.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.rules import layout  # noqa: E402

EXIT_AFTER = "import os, time; time.sleep(0.2); os.write(1, b'%d\\n' % time.monotonic_ns()); os._exit(0)"
ON_TERM = (
    "import os, signal, time\n"
    "def on(*a):\n"
    "    os.write(1, b'%d\\n' % time.monotonic_ns()); os._exit(143)\n"
    "signal.signal(signal.SIGTERM, on)\n"
    "os.write(1, b'ready\\n')\n"
    "while True: time.sleep(60)\n"
)
# the baseline parent: starts COMMAND (argv[1:]), waits for it, exits at once
BARE = (
    "import os, sys; pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ); "
    "os.waitpid(pid, 0); os._exit(0)"
)
T = TypeVar("T")
TARGET_LAG_MS = 10.0
TARGET_CPU = 1.3


def make_root(base: Path) -> Path:
    root = base / "ckpt"
    (root / "pub").mkdir(parents=True)
    for step in range(100, 10_100, 100):
        save = f"exec/1/checkpoint-{step}"
        (root / save).mkdir(parents=True)
        (root / "pub" / layout.name(0, step, save)).write_bytes(b"")
    return root


class Form:
    """One `publish` under test: its command words, and the directory it runs in (a checkout's, for -m)."""

    def __init__(self, label: str, words: list[str], cwd: Path) -> None:
        self.label = label
        self.words = words
        self.cwd = cwd


def form_of(kind: str) -> Form:
    if kind == "source":
        return Form("this checkout, python -m publish", [sys.executable, "-m", "publish"], REPO)
    path = REPO / "dist" / ("publish" if kind == "one" else "publish-folder/bin/publish")
    if not path.exists():
        raise SystemExit(f"{path} is missing: run ./build first")
    return Form(f"this build, {path.relative_to(REPO)}", [str(path)], REPO)


def against_of(text: str) -> Form:
    path = Path(text).resolve()
    if path.is_dir():
        return Form(f"{path}, python -m publish", [sys.executable, "-m", "publish"], path)
    return Form(str(path), [str(path)], REPO)


def run_args(form: Form, root: Path, attempt: str, command: list[str]) -> list[str]:
    return [
        *form.words, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", attempt,
        "-interval", "1h", "--", *command,
    ]  # fmt: skip


def exit_lag(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Milliseconds from COMMAND's exit (the time it printed last) to the end of ``cmd``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    out, _ = proc.communicate(timeout=60)
    end = time.monotonic_ns()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd}: exit {proc.returncode}")
    return (end - int(out.split()[-1])) / 1e6


def stop_lag(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Milliseconds from SIGTERM sent to ``cmd`` to its end, and from COMMAND's exit to its end."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != b"ready\n":
        proc.kill()
        raise SystemExit(f"{cmd}: {line!r}")
    time.sleep(0.05)  # publish run is waiting now
    sent = time.monotonic_ns()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    code = proc.wait(timeout=60)
    end = time.monotonic_ns()
    if code != 143:
        raise SystemExit(f"{cmd}: exit {code}")
    return (end - sent) / 1e6, (end - int(rest.split()[-1])) / 1e6


def cpu_ms(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """CPU (ms, user + system) of one run of ``cmd`` and the children it reaped (wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd}: exit {proc.returncode}")
    return (usage.ru_utime + usage.ru_stime) * 1000


def runs_of(runs: int, measure: Callable[[], T]) -> list[T]:
    """``runs`` results of ``measure`` after one warm-up run (the page cache, the one file's copy)."""
    measure()
    return [measure() for _ in range(runs)]


def lags(form: Form, root: Path, runs: int, env: dict[str, str]) -> dict[str, float]:
    py = [sys.executable, "-I", "-S", "-c"]
    n = iter(range(10**9))
    exits = runs_of(
        runs, lambda: exit_lag(run_args(form, root, f"x{next(n)}", [*py, EXIT_AFTER]), form.cwd, env)
    )
    stops = runs_of(
        runs, lambda: stop_lag(run_args(form, root, f"s{next(n)}", [*py, ON_TERM]), form.cwd, env)
    )
    return {
        "exit": statistics.median(exits),
        "exit_max": max(exits),
        "stop": statistics.median(s for s, _ in stops),
        "stop_after_command": statistics.median(c for _, c in stops),
    }


def paired_cpu(form: Form, root: Path, rounds: int, env: dict[str, str]) -> tuple[float, float, list[float]]:
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    run = run_args(form, root, "cpu", [true])
    resolve = [*form.words, "resolve", "-checkpoint", str(root)]
    cpu_ms(run, form.cwd, env), cpu_ms(resolve, form.cwd, env)
    all_run, all_resolve, ratios = [], [], []
    for _ in range(rounds):
        a, b = [], []
        for _ in range(5):
            a.append(cpu_ms(run, form.cwd, env))
            b.append(cpu_ms(resolve, form.cwd, env))
        all_run += a
        all_resolve += b
        ratios.append(statistics.median(a) / statistics.median(b))
    return statistics.median(all_run), statistics.median(all_resolve), ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=("source", "one", "folder"), default="source")
    parser.add_argument("--against", help="another build: a checkout's directory, or a one file")
    parser.add_argument("-n", type=int, default=15, help="runs per lag cell (at least 5)")
    parser.add_argument(
        "--rounds", type=int, default=15, help="rounds of the paired CPU comparison (at least 5)"
    )
    args = parser.parse_args()
    runs, rounds = max(args.n, 5), max(args.rounds, 5)
    forms = [form_of(args.form)] + ([against_of(args.against)] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "TMPDIR": tmp}
        env["PUBLISH_CACHE_DIR"] = str(Path(tmp) / "cache")
        print(f"Python {sys.version.split()[0]}; {os.cpu_count()} CPUs; {runs} runs a lag cell, medians")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
        py = [sys.executable, "-I", "-S", "-c"]
        bare = runs_of(runs, lambda: exit_lag([*py, BARE, *py, EXIT_AFTER], REPO, env))
        base = statistics.median(bare)
        print(
            "| publish | exit lag ms (max) | over the bare parent ms | SIGTERM to exit ms | COMMAND's exit to run's, after SIGTERM ms |"
        )
        print("| --- | ---: | ---: | ---: | ---: |")
        print(f"| bare parent (baseline) | {base:.1f} ({max(bare):.1f}) | - | - | - |", flush=True)
        for form in forms:
            got = lags(form, root, runs, env)
            print(
                f"| {form.label} | {got['exit']:.1f} ({got['exit_max']:.1f}) | {got['exit'] - base:.1f}"
                f" | {got['stop']:.1f} | {got['stop_after_command']:.1f} |",
                flush=True,
            )
        print()
        print(f"paired, {rounds} rounds of 5 interleaved runs each: CPU of `run -- true` / POSIX `resolve`")
        print()
        print("| publish | run CPU ms | resolve CPU ms | ratio (median) | ratio range over rounds |")
        print("| --- | ---: | ---: | ---: | --- |")
        for form in forms:
            run_ms, resolve_ms, ratios = paired_cpu(form, root, rounds, env)
            print(
                f"| {form.label} | {run_ms:.1f} | {resolve_ms:.1f} | {statistics.median(ratios):.2f}x"
                f" | {min(ratios):.2f}x - {max(ratios):.2f}x |",
                flush=True,
            )
        print()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"targets: exit lag over the bare parent <= {TARGET_LAG_MS:.0f} ms; run CPU <= {TARGET_CPU}x resolve's"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
