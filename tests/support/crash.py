"""Cutting the command short, for the crash-safety tests: a verb in a child process killed at a chosen
moment (:class:`Driver`), a PosixStore that stops dead after N steps (:class:`Cut`), and a root of nested saves
with its whole tree as a value to compare (:func:`build`, :func:`tree`)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from publish.cli import main
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.stores.posix import PosixStore
from tests.conftest import REPO, base_env

DRIVER = """
import os, sys, time
from publish.cli import main
import publish.stores.posix, publish.verbs.publish, publish.verbs.prune, publish.verbs.resolve
import publish.ops.publishing, publish.ops.retention, publish.ops.resolution
sys.stdout.write("ready\\n")
sys.stdout.flush()
if sys.stdin.buffer.read(1) != b"g":
    os._exit(3)
start = time.perf_counter()
code = main(sys.argv[1:], os.environ, sys.stdout, sys.stderr)
sys.stdout.flush()
sys.stderr.write("\\nthe verb took %.6f s\\n" % (time.perf_counter() - start))
sys.stderr.flush()
os._exit(code)
"""


class Driver:
    """One verb in a child process, imported and waiting for the go byte."""

    def __init__(self, *args: str) -> None:
        env = {**base_env(), "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", DRIVER, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()
        if line != b"ready\n":
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"driver did not start: {line!r} {err!r}")

    def go(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"g")
        self.proc.stdin.flush()
        return time.perf_counter()

    def finish(self) -> tuple[int, bytes, bytes]:
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err

    def kill_after(self, delay: float) -> bool:
        """Start the verb, SIGKILL it ``delay`` seconds later; True when the kill cut it short."""
        start = self.go()
        while time.perf_counter() - start < delay:  # sleep() overshoots by more than the shortest delays
            if delay - (time.perf_counter() - start) > 0.005:
                time.sleep(0.001)
        self.proc.send_signal(signal.SIGKILL)
        code, _, err = self.finish()
        if code != -signal.SIGKILL:
            assert code == 0, err
        return code == -signal.SIGKILL


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), {}, out, err, cwd="/")
    return code, out.getvalue(), err.getvalue()


def build(base: Path, name: str, folders: int = 12, files: int = 4, big: int = 120) -> tuple[Path, Path]:
    """A root of nested saves and many entries, and a directory outside it that a link inside points to.

    exec/a and exec/b hold saves (each a few files and a nested folder, one much bigger); old entries also
    name a whole execution folder (exec/c), a folder inside a save, and a save reached through a link."""
    root, outside = base / name / "root", base / name / "outside"
    (root / "pub").mkdir(parents=True)
    (outside / "checkpoint-0").mkdir(parents=True)
    (outside / "checkpoint-0" / "w").write_bytes(b"outside")
    (root / "exec").mkdir()
    (root / "exec" / "L").symlink_to("../../outside")  # relative, so every root's tree reads the same
    made = [layout.Entry(0, 0, "exec/L/checkpoint-0")]
    for k in range(folders):
        attempt = "a" if k < folders // 2 else "b"
        path = f"exec/{attempt}/checkpoint-{k}"
        folder = root / path
        (folder / "nested").mkdir(parents=True)
        for j in range(big if k == 1 else files):
            (folder / f"shard-{j}.bin").write_bytes(f"{path} {j}".encode())
        (folder / "nested" / "state").write_bytes(b"s")
        made.append(layout.Entry(0 if attempt == "a" else 1, k, path))
    (root / "exec" / "c" / "checkpoint-0").mkdir(parents=True)
    (root / "exec" / "c" / "checkpoint-0" / "w").write_bytes(b"c")
    made += [
        layout.Entry(0, 0, "exec/c"),
        # A newer entry inside an older one's folder: cut between the two entries' removals, the folder of
        # the first must still go, though the second (about to go too) lies inside it.
        layout.Entry(0, 3, "exec/c/checkpoint-0"),
        layout.Entry(0, 1, "exec/a/checkpoint-2/nested"),
        layout.Entry(0, 2, f"exec/b/checkpoint-{folders - 1}/nested"),  # inside a save that stays
    ]
    from publish.rules import manifest

    (root / "man").mkdir()
    for entry in made:
        (root / "man" / entry.name).write_bytes(manifest.encode(entry.name, _rows(root / entry.path)))
        (root / "pub" / entry.name).touch()
    return root, outside


def _rows(top: Path) -> list[tuple[str, int, str | None]]:
    """A manifest's rows for the save ``top`` as it is now: each regular file below it, with its size."""
    rows = []
    for folder, _, files in os.walk(top):
        for name in files:
            path = Path(folder, name)
            rows.append((path.relative_to(top).as_posix(), path.stat().st_size, None))
    return sorted(rows)


def tree(*dirs: Path) -> dict[str, Any]:
    """Every path below each of ``dirs`` (relative, prefixed by the index of its dir): a file's bytes, a
    link's target, or None for a directory."""
    out: dict[str, Any] = {}
    for i, top in enumerate(dirs):
        for where, subdirs, files in os.walk(top):
            for name in subdirs + files:
                full = os.path.join(where, name)
                rel = f"{i}:{os.path.relpath(full, top)}"
                if os.path.islink(full):
                    out[rel] = ("link", os.readlink(full))
                elif os.path.isdir(full):
                    out[rel] = None
                else:
                    with open(full, "rb") as f:
                        out[rel] = f.read()
    return out


class Killed(BaseException):
    pass


class Cut:
    """A PosixStore that stops dead after ``budget`` steps: each tombstone, entry, manifest and tombstone
    removal is a step, and a folder's removal two (half of its files, then the rest)."""

    def __init__(self, store: PosixStore, budget: int) -> None:
        self.store, self.budget, self.steps = store, budget, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _take(self) -> None:
        if self.steps >= self.budget:
            raise Killed
        self.steps += 1

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        for n in names:
            self._take()
            self.store.create_tombs(dl, [n])

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        for n in names:
            self._take()
            self.store.remove_entries(dl, [n])

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        for n in names:
            self._take()
            self.store.remove_tombs(dl, [n])

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        for n in names:
            self._take()
            self.store.remove_manifests(dl, [n])
        self.store.remove_manifests(dl, [])

    def remove_folder(self, dl: Deadline, path: str) -> Any:
        self._take()
        full = Path(self.store.location(path))
        if full.is_dir() and not any(p.is_symlink() for p in [full, *full.parents]):
            files = sorted(p for p in full.rglob("*") if p.is_file())
            for p in files[: len(files) // 2]:
                p.unlink()
        self._take()
        return self.store.remove_folder(dl, path)
