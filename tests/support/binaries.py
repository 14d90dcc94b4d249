"""What the binary tests share (not a test module): where the frozen program under test is, how to run it, and
what its one-file form leaves behind.

The program under test is dist/publish (./build), or the one file named by PUBLISH_BIN (OUT/publish, with its
folder form beside it as OUT/publish-folder, as `./build FREEZER OUT` leaves them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import publish
from publish.rules import layout
from tests.conftest import need

REPO = Path(__file__).resolve().parents[2]
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


def unpack_dir_of(pid: int) -> Path:
    """The directory a running one-file process was unpacked into (its loader lives there)."""
    exe = Path(os.readlink(f"/proc/{pid}/exe"))
    assert exe.name == "ld-publish.so.1"
    return exe.parent


def start_watch(binary: Path, tmp_path: Path, tmpdir: Path, **extra: str) -> subprocess.Popen[str]:
    root = tmp_path / "root"
    (root / "exec" / "1").mkdir(parents=True)
    return subprocess.Popen(
        [
            str(binary),
            "watch",
            "-checkpoint",
            str(root),
            "-framework",
            "hf",
            "-attempt",
            "1",
            "-interval",
            "1h",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(tmpdir, **extra),
    )


def catches_sigterm(pid: int) -> bool:
    """The program has installed its SIGTERM handler (SigCgt in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def running_program(proc: subprocess.Popen[str]) -> Path:
    """Wait until the launcher has exec'd the program in place, and return where it was unpacked."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            if os.readlink(f"/proc/{proc.pid}/exe").endswith("/ld-publish.so.1") and catches_sigterm(
                proc.pid
            ):
                return unpack_dir_of(proc.pid)
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("the program did not start")


def cache_entries(cache: Path) -> list[str]:
    return sorted(os.listdir(cache)) if cache.is_dir() else []


def tree_state(*dirs: Path) -> dict[str, tuple[int, int, int]]:
    """Every path below dirs with its inode, size and mtime: what a start that writes nothing leaves alone."""
    state = {}
    for d in dirs:
        for p in [d, *d.rglob("*")]:
            st = p.lstat()
            state[str(p)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return state
