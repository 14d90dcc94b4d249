"""The one file's unpacked copy in the cache survives damage: a start that finds the copy (or a lazy member
already unpacked into it) not as the unpack left it says so on one line, unpacks it again (or runs from a
private directory when it cannot), exits with the verb's own status, and the next start is warm and silent.

packaging/build/README.md ("Where it unpacks") describes the check. Uses dist/publish (./build), as
tests/house/test_binary.py does.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.binaries import (
    BIN,
    FOLDER,
    REPO,
    VERSION_LINE,
    cache_entries,
    env_for,
    first,
    interpreter_form,
    mount,
    publish_entry,
    running_program,
    start_watch,
    tree_state,
    umount,
    unavailable,
)

pytestmark = pytest.mark.binary

FLAG_LAZY = 1


@pytest.fixture(scope="module")
def binary() -> Path:
    if not os.access(BIN, os.X_OK) or not (FOLDER / "bin" / "publish").exists():
        unavailable(f"{BIN} is missing: run ./build first")
    return BIN


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (mount)")


def index(binary: Path) -> dict[str, tuple[int, int, int]]:
    """The one file's members (packaging/build/README.md, "The one-file format"): path -> kind, flags, size."""
    data = binary.read_bytes()
    magic, offset, length, count = struct.unpack("<8sQQQ", data[-32:])
    assert magic == b"PUBLSHX1"
    head = struct.Struct("<BBBxIQQQI")
    found, pos = {}, offset
    for _ in range(count):
        kind, _codec, flags, _mode, _off, _packed, size, plen = head.unpack_from(data, pos)
        pos += head.size
        found[data[pos : pos + plen].decode()] = (kind, flags, size)
        pos += plen
    assert pos == offset + length
    return found


def zip_member(binary: Path) -> str:
    [member] = [p for p in index(binary) if re.fullmatch(r"lib/python3\d+\.zip", p)]
    return member


class Cache:
    """A cache directory of its own (PUBLISH_CACHE_DIR) and a root with one publication to resolve."""

    def __init__(self, binary: Path, base: Path, cache: Path | None = None) -> None:
        self.binary = binary
        self.dir = cache or base / "cache"
        self.tmpdir = base / "tmp"
        self.tmpdir.mkdir()
        self.root = base / "root"
        publish_entry(self.root, "exec/1/checkpoint-10", 10)
        self.env = env_for(self.tmpdir, PUBLISH_CACHE_DIR=str(self.dir))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, timeout=120
        )

    def resolve(self) -> subprocess.CompletedProcess[str]:
        return self.run("resolve", "-checkpoint", str(self.root))

    def copy(self) -> Path:
        [name] = [n for n in cache_entries(self.dir) if re.fullmatch(r"[0-9a-f]{32}", n)]
        return self.dir / name

    def asides(self) -> list[str]:
        return [n for n in cache_entries(self.dir) if n.startswith(".damaged-")]


@pytest.fixture
def cache(binary: Path, tmp_path: Path) -> Cache:
    c = Cache(binary, tmp_path)
    r = c.resolve()
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.strip().endswith("checkpoint-10")
    return c


def repaired_line(copy: Path, cache: Path, why: str) -> str:
    """The pattern of the line a start that replaced a damaged copy prints."""
    return (
        rf"publish: warning: the unpacked copy {re.escape(str(copy))} was damaged \({re.escape(why)}\);"
        rf" moved it to {re.escape(str(cache))}/\.damaged-{copy.name}-\d+-\d+ and unpacked it again\n"
    )


def test_every_unpacked_file_carries_the_builds_stamp_as_its_modification_time(
    cache: Cache, refused: str, tmp_path: Path
) -> None:
    """1000000000 + 2 * (the first 6 hex digits of the build's digest) seconds, 0 ns, for what the launcher
    and what boot.py write alike (packaging/build/README.md, "The stamp"); the access time is left alone."""
    copy = cache.copy()
    stamp = (1_000_000_000 + 2 * int(copy.name[:6], 16)) * 1_000_000_000
    r = cache.run(
        "resolve", "-checkpoint", "s3://bucket/run", "-creds", f"secret:{s3_creds(tmp_path, refused)}"
    )
    assert r.returncode == 1 and "refused" in r.stderr  # it unpacked more.zip, _ssl, OpenSSL
    files = [p for p in copy.rglob("*") if p.is_file() and not p.is_symlink()]
    lazy = {p for p in files if index(cache.binary)[str(p.relative_to(copy))][1] & FLAG_LAZY}
    assert files != list(lazy) and (
        bool(lazy) or not interpreter_form(cache.binary.with_name("publish-folder"))
    )
    assert [str(p) for p in files if p.stat().st_mtime_ns != stamp] == []
    assert [str(p) for p in files if p.stat().st_atime_ns == stamp] == []


# --- damage to what every start needs (the launcher's check) ---------------------------------------------------


def truncate_interpreter(copy: Path, binary: Path) -> str:
    size = index(binary)["publish"][2]
    os.truncate(copy / "publish", 4096)
    return f"publish: 4096 bytes, not {size}"


def rewrite_zip_in_place(copy: Path, binary: Path) -> str:
    """The same size, one byte changed: only the stamp shows it."""
    member = zip_member(binary)
    with open(copy / member, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    return f"{member}: modified since it was unpacked"


def remove_a_directory(copy: Path, binary: Path) -> str:
    shutil.rmtree(copy / "_internal")
    return "_internal: missing"


def library_becomes_a_link(copy: Path, binary: Path) -> str:
    """A link to a file with the right content: still not what was unpacked."""
    lib = copy / "_internal" / "libc.so.6"
    os.rename(lib, copy.parent.parent / "libc.so.6")
    os.symlink(copy.parent.parent / "libc.so.6", lib)
    return "_internal/libc.so.6: a symbolic link"


def loader_becomes_a_fifo(copy: Path, binary: Path) -> str:
    (copy / "ld-publish.so.1").unlink()
    os.mkfifo(copy / "ld-publish.so.1")
    return "ld-publish.so.1: not a regular file"


def interpreter_not_executable(copy: Path, binary: Path) -> str:
    os.chmod(copy / "publish", 0o600)
    return "publish: mode 600, not 700"


def copy_becomes_a_file(copy: Path, binary: Path) -> str:
    shutil.rmtree(copy)
    copy.write_bytes(b"#!/bin/sh\necho planted\n")
    return "it is not a directory"


def copy_becomes_a_link(copy: Path, binary: Path) -> str:
    elsewhere = copy.parent.parent / "elsewhere"
    os.rename(copy, elsewhere)
    os.symlink(elsewhere, copy)
    return "it is a symbolic link"


@pytest.mark.parametrize(
    "damage",
    [
        truncate_interpreter,
        pytest.param(rewrite_zip_in_place, marks=pytest.mark.interpreter_form),
        remove_a_directory,
        library_becomes_a_link,
        loader_becomes_a_fifo,
        interpreter_not_executable,
        copy_becomes_a_file,
        copy_becomes_a_link,
    ],
)
def test_a_damaged_copy_is_said_on_one_line_and_unpacked_again(
    cache: Cache, damage: Callable[[Path, Path], str]
) -> None:
    good = cache.resolve()
    copy = cache.copy()
    why = damage(copy, cache.binary)
    damaged = (
        tree_state(copy.parent.parent / "elsewhere") if (copy.parent.parent / "elsewhere").exists() else {}
    )

    r = cache.resolve()
    assert (r.returncode, r.stdout) == (0, good.stdout)
    assert re.fullmatch(repaired_line(copy, cache.dir, why), r.stderr), r.stderr
    [aside] = cache.asides()
    assert r.stderr.rstrip("\n").split(" moved it to ")[1].split(" ")[0] == str(cache.dir / aside)
    assert os.path.lexists(cache.dir / aside)  # kept: a process may still run from it
    assert copy.is_dir() and not copy.is_symlink()
    if damaged:  # a link's target is neither followed nor changed
        assert tree_state(copy.parent.parent / "elsewhere") == damaged

    before = tree_state(cache.dir, cache.tmpdir)
    r = cache.resolve()
    assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")
    assert tree_state(cache.dir, cache.tmpdir) == before  # warm: nothing written
    assert os.listdir(cache.tmpdir) == []


def test_the_verbs_own_status_and_message_follow_the_line(cache: Cache) -> None:
    missing = str(cache.root.parent / "no-such-root")
    alone = cache.run("resolve", "-checkpoint", missing)
    assert alone.returncode == 1 and alone.stderr.startswith("publish: ")
    copy = cache.copy()
    why = truncate_interpreter(copy, cache.binary)
    r = cache.run("resolve", "-checkpoint", missing)
    assert (r.returncode, r.stdout) == (alone.returncode, alone.stdout)
    first, rest = r.stderr.split("\n", 1)
    assert re.fullmatch(repaired_line(copy, cache.dir, why), first + "\n"), r.stderr
    assert rest == alone.stderr


def test_concurrent_starts_on_a_damaged_copy_all_run_and_leave_one_good_copy(cache: Cache) -> None:
    good = cache.resolve()
    copy = cache.copy()
    why = truncate_interpreter(copy, cache.binary)
    line = (
        rf"publish: warning: the unpacked copy {re.escape(str(copy))} was damaged \({re.escape(why)}\);"
        r" (moved it to \S+ and unpacked it again|another start unpacked it again)\n"
    )
    procs = [
        subprocess.Popen(
            [str(cache.binary), "resolve", "-checkpoint", str(cache.root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cache.env,
        )
        for _ in range(16)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert [r for r in results if r[1] != 0 or r[0][0] != good.stdout] == []
    assert [err for (_, err), _ in results if err and not re.fullmatch(line, err)] == []
    assert [err for (_, err), _ in results if err]  # at least the start that repaired it said so
    assert cache.asides()
    assert [n for n in cache_entries(cache.dir) if n.startswith(".tmp-")] == []
    before = tree_state(cache.dir)
    r = cache.resolve()
    assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")
    assert tree_state(cache.dir) == before


def test_without_rename_exchange_the_damaged_copy_goes_aside_first(cache: Cache) -> None:
    """A filesystem without renameat2(RENAME_EXCHANGE) (NFS, where home directories often are): the damaged
    copy is renamed aside, then the fresh one into place; the same line. The refusal is made by strace's
    fault injection, as such a filesystem makes it (EINVAL)."""
    strace = shutil.which("strace")
    if not strace:
        unavailable("strace (its fault injection stands for a filesystem without RENAME_EXCHANGE)")
    assert strace
    good = cache.resolve()
    copy = cache.copy()
    why = truncate_interpreter(copy, cache.binary)
    log = cache.tmpdir.parent / "strace.log"
    r = subprocess.run(
        [
            strace,
            "-f",
            "-o",
            str(log),
            "-e",
            "trace=renameat2,renameat",
            "-e",
            "inject=renameat2:error=EINVAL",
        ]
        + [str(cache.binary), "resolve", "-checkpoint", str(cache.root)],
        capture_output=True,
        text=True,
        env=cache.env,
        timeout=120,
    )
    assert (r.returncode, r.stdout) == (0, good.stdout)
    assert re.fullmatch(repaired_line(copy, cache.dir, why), r.stderr), r.stderr
    calls = log.read_text()
    assert "RENAME_EXCHANGE) = -1 EINVAL" in calls
    assert re.search(rf'renameat\(\d+, "{copy.name}", \d+, "\.damaged-{copy.name}-\d+-0"\) = 0', calls)
    [aside] = cache.asides()
    assert (cache.dir / aside / "publish").stat().st_size == 4096
    before = tree_state(cache.dir, cache.tmpdir)
    r = cache.resolve()
    assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")
    assert tree_state(cache.dir, cache.tmpdir) == before


# --- where the repair cannot be made -----------------------------------------------------------------------------


@pytest.fixture
def small_fs(as_root: None, tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "fs"
    d.mkdir()
    mount("-t", "tmpfs", "-o", "mode=700,size=48m", "tmpfs", str(d))
    try:
        yield d
    finally:
        umount(d)


def test_a_damaged_copy_that_cannot_be_replaced_runs_from_a_private_directory(
    binary: Path, small_fs: Path, tmp_path: Path
) -> None:
    """No room for a fresh copy: the line says so, the start runs from a private directory in TMPDIR; once
    there is room, the next start replaces the copy."""
    c = Cache(binary, tmp_path, small_fs / "cache")
    good = c.resolve()
    assert (good.returncode, good.stderr) == (0, "")
    copy = c.copy()
    why = truncate_interpreter(copy, binary)
    st = os.statvfs(small_fs)
    (small_fs / "filler").write_bytes(bytes(st.f_bavail * st.f_frsize - (1 << 20)))
    r = c.resolve()
    assert (r.returncode, r.stdout) == (0, good.stdout)
    assert r.stderr == (
        f"publish: warning: the unpacked copy {copy} is damaged ({why}) and cannot be replaced: No space left"
        " on device (unpacking into a private directory instead)\n"
    )
    assert c.asides() == [] and [n for n in cache_entries(c.dir) if n.startswith(".tmp-")] == []
    (small_fs / "filler").unlink()
    r = c.resolve()
    assert (r.returncode, r.stdout) == (0, good.stdout)
    assert re.fullmatch(repaired_line(copy, c.dir, why), r.stderr), r.stderr
    r = c.resolve()
    assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")


def test_a_cache_on_a_read_only_mount_is_not_used(binary: Path, small_fs: Path, tmp_path: Path) -> None:
    """As without a cache: each start unpacks privately and touches nothing there, damaged or not; writable
    again, the next start replaces the damaged copy."""
    c = Cache(binary, tmp_path, small_fs / "cache")
    good = c.resolve()
    copy = c.copy()
    why = truncate_interpreter(copy, binary)
    mount("-o", "remount,ro", str(small_fs))
    try:
        before = tree_state(small_fs)
        r = c.resolve()
        assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")
        assert tree_state(small_fs) == before
    finally:
        mount("-o", "remount,rw", str(small_fs))
    r = c.resolve()
    assert re.fullmatch(repaired_line(copy, c.dir, why), r.stderr), r.stderr
    r = c.resolve()
    assert (r.returncode, r.stdout, r.stderr) == (0, good.stdout, "")


# --- a copy damaged while a program runs from it ----------------------------------------------------------------


def test_a_copy_damaged_under_a_running_watch_is_replaced_and_kept_until_the_watch_ends(
    binary: Path, tmp_path: Path
) -> None:
    """The watch keeps running from the damaged copy, moved aside; clean-unpacked leaves it while the watch
    runs and removes it after."""
    cache_dir, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    proc = start_watch(binary, tmp_path, tmpdir, PUBLISH_CACHE_DIR=str(cache_dir))
    try:
        copy = running_program(proc)
        assert copy.parent == cache_dir
        os.unlink(copy / "_internal" / "libz.so.1")  # mapped by the watch: it keeps its own
        env = env_for(tmpdir, PUBLISH_CACHE_DIR=str(cache_dir))
        r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env, timeout=120)
        assert (r.returncode, first(r.stdout)) == (0, VERSION_LINE)
        assert re.fullmatch(repaired_line(copy, cache_dir, "_internal/libz.so.1: missing"), r.stderr), (
            r.stderr
        )
        [aside] = [n for n in cache_entries(cache_dir) if n.startswith(".damaged-")]
        assert running_program(proc) == cache_dir / aside  # the watch runs on from the copy moved aside
        then = time.time() - 600
        os.utime(cache_dir / aside, (then, then))
        script = str(REPO / "packaging" / "install" / "clean-unpacked")
        r = subprocess.run([script, str(cache_dir)], capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
        assert (cache_dir / aside).is_dir()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, err) == (0, "")
    finally:
        proc.kill()
        proc.wait()
    r = subprocess.run([script, str(cache_dir)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"clean-unpacked: removed {cache_dir / aside}\n", "")
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env, timeout=120)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")


# --- the lazy members: packaging/build/boot.py's check -----------------------------------------------------------


@pytest.fixture
def refused() -> Iterator[str]:
    """An https:// endpoint on loopback that refuses connections (bound, never listening)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield f"https://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def s3_creds(base: Path, endpoint: str) -> Path:
    creds = base / "creds"
    creds.mkdir()
    for field, value in {
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": "example-secret",
        "endpoint": endpoint,
        "region": "us-east-1",
    }.items():
        (creds / field).write_text(value + "\n")
    return creds


def lazy_member(binary: Path, pattern: str) -> str:
    [member] = [
        p for p, (_, flags, _) in index(binary).items() if flags & FLAG_LAZY and re.fullmatch(pattern, p)
    ]
    return member


@pytest.mark.interpreter_form
@pytest.mark.parametrize(
    "pattern, damage, why",
    [
        ("lib/more.zip", "truncate", "100 bytes, not {size}"),
        ("lib/more.zip", "directory", "not a regular file"),
        (r"lib/python3\.\d+/lib-dynload/_ssl\..*", "fifo", "not a regular file"),
        ("_internal/libcrypto.so.3", "rewrite", "modified since it was unpacked"),
        ("_internal/libssl.so.3", "link", "a symbolic link"),
    ],
)
def test_a_damaged_lazy_member_is_said_on_one_line_and_unpacked_again(
    cache: Cache, refused: str, tmp_path: Path, pattern: str, damage: str, why: str
) -> None:
    """An https:// S3 verb unpacks more.zip, _ssl and OpenSSL into the copy; each damaged afterwards is
    unpacked again by the next start that needs it, with one line before the verb's own message."""
    args = ("resolve", "-checkpoint", "s3://bucket/run", "-creds", f"secret:{s3_creds(tmp_path, refused)}")
    alone = cache.run(*args)
    assert alone.returncode == 1 and "refused" in alone.stderr, alone.stderr
    member = lazy_member(cache.binary, pattern)
    target = cache.copy() / member
    assert target.is_file()
    size = target.stat().st_size
    if damage == "truncate":
        os.truncate(target, 100)
    elif damage == "directory":
        target.unlink()
        target.mkdir()
    elif damage == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif damage == "rewrite":
        with open(target, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\0" * 16)
    else:
        os.rename(target, tmp_path / "moved")
        os.symlink(tmp_path / "moved", target)

    r = cache.run(*args)
    assert (r.returncode, r.stdout) == (alone.returncode, alone.stdout)
    expected = (
        f"publish: warning: the unpacked copy {cache.copy()} was damaged ({member}: {why.format(size=size)});"
        f" unpacked {member} again\n"
    )
    assert r.stderr == expected + alone.stderr
    assert target.is_file() and not target.is_symlink() and target.stat().st_size == size
    r = cache.run(*args)
    assert (r.returncode, r.stdout, r.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert not list(cache.copy().rglob("*.part-*"))


SWAP_PROBE = """
import os, sys
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])  # packaging/build/boot.py up to its start-up
_install()
import email, json
os.unlink(sys.prefix + "/lib/more.zip")  # a fresh copy swapped in under this process has none yet
import uuid
os.unlink(sys.prefix + "/lib/more.zip")
import email.parser  # through the package's own __path__, inside more.zip
print(json.__file__, uuid.__file__, email.parser.__file__)
"""


@pytest.mark.interpreter_form
def test_a_running_program_unpacks_a_lazy_member_again_into_a_copy_swapped_in_under_it(
    binary: Path, tmp_path: Path
) -> None:
    """boot.py checks a lazy member on every import that needs it, not once a process: after a later start
    has replaced the copy a long-running program uses (by its path), that program's next import from more.zip
    unpacks more.zip into the new copy instead of failing."""
    tree = tmp_path / "tree"
    shutil.copytree(FOLDER / "libexec" / "publish", tree, symlinks=True)
    for member, (_, flags, _) in index(binary).items():  # as the launcher leaves it: no lazy member yet
        if flags & FLAG_LAZY and (tree / member).exists():
            (tree / member).unlink()
    with open(binary, "rb") as payload:
        r = subprocess.run(
            [
                *(
                    str(tree / "ld-publish.so.1"),
                    "--inhibit-cache",
                    "--library-path",
                    str(tree / "_internal"),
                ),
                *(str(tree / "publish"), "-I", "-S", "-X", f"publish-payload={payload.fileno()}"),
                *("-c", SWAP_PROBE, str(REPO / "packaging" / "build" / "boot.py")),
            ],
            capture_output=True,
            text=True,
            pass_fds=(payload.fileno(),),
            env=env_for(tmp_path),
            timeout=120,
        )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout.split() == [
        f"{tree}/lib/more.zip/{m}" for m in ("json/__init__.pyc", "uuid.pyc", "email/parser.pyc")
    ]
    assert (tree / "lib" / "more.zip").stat().st_size > 0


SWAP_DURING_WRITE = """
import os, sys
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])  # packaging/build/boot.py up to its start-up
_install()
real_open, swapped = os.open, []


def open_and_swap(path, flags, mode=0o777, *, dir_fd=None):
    fd = real_open(path, flags, mode, dir_fd=dir_fd)
    if ".part-" in str(path) and not swapped:  # as a later start's RENAME_EXCHANGE would, right now
        swapped.append(path)
        root = sys.prefix
        os.rename(root, root + ".aside")
        for where, _, files in os.walk(root + ".aside"):
            here = root + where[len(root + ".aside") :]
            os.makedirs(here, exist_ok=True)
            for name in files:
                if ".part-" not in name:
                    os.link(where + "/" + name, here + "/" + name)
    return fd


os.open = open_and_swap
import json
print(json.__file__, swapped[0])
"""


@pytest.mark.interpreter_form
def test_a_copy_swapped_in_while_a_lazy_member_is_written_gets_it(binary: Path, tmp_path: Path) -> None:
    """The swap falls between the open of NAME.part-PID and its rename (which then finds no part): boot.py
    writes the member again, into the copy now at its path, and the import succeeds."""
    tree = tmp_path / "tree"
    shutil.copytree(FOLDER / "libexec" / "publish", tree, symlinks=True)
    for member, (_, flags, _) in index(binary).items():
        if flags & FLAG_LAZY and (tree / member).exists():
            (tree / member).unlink()
    with open(binary, "rb") as payload:
        r = subprocess.run(
            [
                *(
                    str(tree / "ld-publish.so.1"),
                    "--inhibit-cache",
                    "--library-path",
                    str(tree / "_internal"),
                ),
                *(str(tree / "publish"), "-I", "-S", "-X", f"publish-payload={payload.fileno()}"),
                *("-c", SWAP_DURING_WRITE, str(REPO / "packaging" / "build" / "boot.py")),
            ],
            capture_output=True,
            text=True,
            pass_fds=(payload.fileno(),),
            env=env_for(tmp_path),
            timeout=120,
        )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    json_file, part = r.stdout.split()
    assert json_file == f"{tree}/lib/more.zip/json/__init__.pyc"
    assert part.startswith(f"{tree}/lib/more.zip.part-")  # the swap did fall there
    assert (tree / "lib" / "more.zip").is_file()
