"""What the binary tests share (not a test module): where the frozen program under test is, how to run it, and
what its one-file form leaves behind.

The program under test is dist/publish (./build), or the one file named by PUBLISH_BIN (OUT/publish, with its
folder form beside it as OUT/publish-folder, as `./build FREEZER OUT` leaves them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import publish
from publish import layout
from tests.conftest import need

REPO = Path(__file__).resolve().parent.parent
BIN = (
    Path(os.path.abspath(os.environ["PUBLISH_BIN"]))
    if os.environ.get("PUBLISH_BIN")
    else REPO / "dist" / "publish"
)
FOLDER = BIN.with_name("publish-folder")
VERSION_LINE = f"publish {publish.__version__}\n"
#: the lines `version` prints after VERSION_LINE: the build, the Python and the freezer
BUILD_LINES = ("build: ", "python: ", "freezer: ")


def first(stdout: str) -> str:
    """The first line of ``stdout``, with its newline: `version`'s VERSION_LINE (the build lines follow)."""
    head, newline, _ = stdout.partition("\n")
    return head + newline


def unavailable(why: str) -> None:
    """Skip, or fail under CI=true."""
    need(False, why)


def interpreter_form(folder: Path = FOLDER) -> bool:
    """Made by ./build python (the interpreter and its zips), not by PyInstaller or Nuitka."""
    return bool(list((folder / "libexec" / "publish" / "lib").glob("python*.zip")))


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def leftovers(*dirs: Path) -> set[str]:
    """The unpack directories of the one-file form found in dirs."""
    found = set()
    for d in dirs:
        if d.is_dir():
            found |= {str(d / n) for n in os.listdir(d) if n.startswith(".publish-")}
    return found


def wait_gone(paths: set[str], limit: float = 10) -> set[str]:
    """The paths still there after up to `limit` seconds (the cleaner runs just after the program exits)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        paths = {p for p in paths if os.path.lexists(p)}
        if not paths:
            break
        time.sleep(0.02)
    return paths


def env_for(tmpdir: Path | str | None = None, **extra: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    env.update(extra)
    return env


def publish_entry(root: Path, save: str, step: int, epoch: int = 0) -> None:
    (root / save).mkdir(parents=True, exist_ok=True)
    (root / "pub").mkdir(parents=True, exist_ok=True)
    (root / "pub" / layout.name(epoch, step, save)).write_bytes(b"")


class Chroot:
    """A directory holding only the one-file binary, /proc (mounted) and /tmp: nothing else of a system."""

    def __init__(self, base: Path, binary: Path = BIN) -> None:
        self.dir = base / "jail"
        self.dir.mkdir()
        shutil.copy2(binary, self.dir / "publish")
        for sub in ("proc", "tmp"):
            (self.dir / sub).mkdir()
        os.chmod(self.dir / "tmp", 0o1777)
        self.mounts: list[Path] = []
        mount("-t", "proc", "proc", str(self.dir / "proc"))
        self.mounts.append(self.dir / "proc")

    def mount_tmpfs(self, sub: str, *options: str) -> Path:
        target = self.dir / sub
        target.mkdir(parents=True, exist_ok=True)
        mount("-t", "tmpfs", "-o", ",".join(("mode=1777", *options)), "tmpfs", str(target))
        self.mounts.append(target)
        return target

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        def enter() -> None:
            os.chroot(self.dir)
            os.chdir("/")

        return subprocess.run(
            ["/publish", *args],
            env=env if env is not None else {"TMPDIR": "/tmp"},
            preexec_fn=enter,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def close(self) -> None:
        for m in reversed(self.mounts):
            umount(m)
