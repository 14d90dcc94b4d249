"""The frozen executable (dist/publish, dist/publish-folder, or the one file PUBLISH_BIN names and the folder
beside it): what a compute node gives it, and what it leaves.

CI runs ./build first; these tests use its output and fail under CI=true when it is missing. The chroot, mount
and page-cache parts need root (CI runs as root). The tests marked interpreter_form look inside the default
form's tree (its zips, its lazy members); ./test deselects them for the PyInstaller and Nuitka builds.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import ssl
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import remember_secret
from tests.support import dcp_shapes, deepspeed_saves
from tests.support.binaries import (
    BIN,
    BUILD_LINES,
    FOLDER,
    REPO,
    VERSION_LINE,
    Chroot,
    cache_entries,
    env_for,
    first,
    leftovers,
    mount,
    publish_entry,
    running_program,
    start_watch,
    tree_state,
    umount,
    unavailable,
    wait_gone,
)
from tests.support.netfixtures import TLSFront
from tests.support.ports import dead_port
from tests.support.servers import Moto

pytestmark = pytest.mark.binary

# install-module installs the folder form under test (beside PUBLISH_BIN), not always dist/publish-folder.
INSTALL_ENV = {**os.environ, "PUBLISH_FOLDER": str(FOLDER)}


@pytest.fixture(scope="module")
def binary() -> Path:
    if not os.access(BIN, os.X_OK) or not (FOLDER / "bin" / "publish").exists():
        unavailable(f"{BIN} is missing: run ./build first")
    return BIN


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (chroot, mount)")


@pytest.fixture
def jail(binary: Path, as_root: None, tmp_path: Path) -> Iterator[Chroot]:
    c = Chroot(tmp_path)
    try:
        yield c
    finally:
        c.close()


# --- the files ----------------------------------------------------------------------------------------------


def test_one_file_is_a_static_executable(binary: Path) -> None:
    """No PT_INTERP: the kernel runs it without any loader from the node."""
    data = binary.read_bytes()[:4096]
    assert data[:4] == b"\x7fELF" and data[4] == 2  # ELF64
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    assert 3 not in types  # PT_INTERP
    assert 2 not in types  # PT_DYNAMIC


@pytest.mark.interpreter_form
def test_one_file_size_target(binary: Path) -> None:
    assert binary.stat().st_size <= 12 * 1024 * 1024


def frozen_modules() -> set[str]:
    """The modules the binary can import: compiled into its zips, or (extension modules) in lib-dynload."""
    lib = FOLDER / "libexec" / "publish" / "lib"
    zips = glob.glob(str(lib / "python*.zip"))
    if not zips:
        unavailable("dist/publish-folder was not made by ./build python")
    names = {
        n.removesuffix(".pyc").removesuffix("/__init__").replace("/", ".")
        for z in (zips[0], lib / "more.zip")
        for n in zipfile.ZipFile(z).namelist()
    }
    names |= {Path(p).name.split(".")[0] for p in glob.glob(str(lib / "python*" / "lib-dynload" / "*.so"))}
    return names


@pytest.mark.interpreter_form
def test_lazily_imported_modules_are_frozen(binary: Path) -> None:
    """The S3 and Vault code imports these inside functions; the analysis must not have missed them."""
    modules = frozen_modules()
    wanted = {
        "ssl", "http.client", "xml.etree.ElementTree", "email.parser", "email.message", "hashlib", "hmac",
        "secrets", "signal", "threading", "json", "base64", "urllib.parse", "socket", "selectors", "_ssl",
        "subprocess",
        "_hashlib", "_publish_boot", "resource", "pickle",
    }  # fmt: skip
    assert wanted <= modules, wanted - modules
    package = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in (REPO / "publish").rglob("*.py")
    }
    assert package <= modules, package - modules
    assert not {m for m in modules if m.split(".")[0] in ("torch", "numpy")}


# Run by the folder form's own interpreter as the launcher runs it, with `publish resolve` as its arguments: at
# exit, each module read from pythonXY.zip after the interpreter's own start and the type of the loader that read it.
LOADERS = """
import atexit, sys
started = set(sys.modules)
def note():
    for name, module in sorted(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if ".zip/" in file and "/more.zip/" not in file and name not in started:
            print(name, type(module.__loader__).__name__)
atexit.register(note)
sys.argv[0] = "publish"
import _publish_boot
"""


@pytest.mark.interpreter_form
def test_the_modules_every_start_reads_come_through_boots_finder(binary: Path, tmp_path: Path) -> None:
    """Issue 33: a POSIX resolve reads its modules of pythonXY.zip (the package's and the standard library's)
    with packaging/build/boot.py's finder of that archive, not zipimport's Python path (about a quarter of a
    million instructions a module more): every module imported after the interpreter's own start (which
    imports encodings, and on 3.9 io, abc and codecs, from the archive) and boot.py itself (gone from
    sys.modules as the command's exit ends its import)."""
    tree = FOLDER / "libexec" / "publish"
    (tmp_path / "pub").mkdir()
    r = subprocess.run(
        [str(tree / "ld-publish.so.1"), "--inhibit-cache", "--library-path", str(tree / "_internal")]
        + [str(tree / "publish"), "-I", "-S", "-c", LOADERS, "resolve", "-checkpoint", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env_for(tmp_path),
    )
    loaders = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
    assert {"publish.cli", "publish.verbs.resolve", "publish.stores.posix"} <= set(loaders), (
        r.stdout + r.stderr
    )
    assert {n: loader for n, loader in loaders.items() if loader != "_Stored"} == {}


@pytest.mark.interpreter_form
def test_tree_carries_tls_and_its_own_c_library(binary: Path) -> None:
    libs = FOLDER / "libexec" / "publish" / "_internal"
    names = set(os.listdir(libs))
    assert {"libssl.so.3", "libcrypto.so.3", "libc.so.6"} <= names
    assert (FOLDER / "libexec" / "publish" / "ld-publish.so.1").exists()
    assert glob.glob(str(FOLDER / "libexec" / "publish" / "lib" / "python3.*" / "lib-dynload" / "_ssl.*.so"))


# --- running ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["one file", "folder"])
def test_version(binary: Path, form: str, tmp_path: Path) -> None:
    exe = binary if form == "one file" else FOLDER / "bin" / "publish"
    r = subprocess.run([str(exe), "version"], capture_output=True, text=True, env=env_for(tmp_path))
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    assert wait_gone(leftovers(tmp_path)) == set()


@pytest.mark.parametrize(
    "args",
    [["version"], ["help"], [], ["nosuchverb"], ["resolve"], ["resolve", "-nosuchflag"], ["resolve", "-h"]],
)
def test_same_output_and_status_as_the_source(binary: Path, args: list[str], tmp_path: Path) -> None:
    src = subprocess.run(
        [sys.executable, "-m", "publish", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env_for(tmp_path),
    )
    frozen = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env_for(tmp_path))
    if args == ["version"]:  # the build lines name each one's own build, Python and freezer
        frozen.stdout, src.stdout = first(frozen.stdout), first(src.stdout)
    assert (frozen.returncode, frozen.stdout, frozen.stderr) == (src.returncode, src.stdout, src.stderr)


def build_id_member(one_file: Path) -> str:
    """The `.build-id` member of the one file, read as packaging/build/README.md describes the format."""
    data = one_file.read_bytes()
    magic, index_at, index_len, count = struct.unpack("<8sQQQ", data[-32:])
    assert magic == b"PUBLSHX1"
    head = struct.Struct("<BBBxIQQQI")
    at = index_at
    for _ in range(count):
        _, codec, _, _, offset, packed, _, name_len = head.unpack_from(data, at)
        at += head.size
        name = data[at : at + name_len]
        at += name_len
        if name == b".build-id":
            assert codec == 0
            return data[offset : offset + packed].decode()
    raise AssertionError("no .build-id member")


def test_version_names_the_one_files_build_its_python_and_freezer(binary: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    r = subprocess.run(
        [str(binary), "version"],
        capture_output=True,
        text=True,
        env=env_for(tmp_path, PUBLISH_CACHE_DIR=str(cache)),
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    lines = r.stdout.splitlines()
    assert [line.partition(" ")[0] + " " for line in lines[1:]] == list(BUILD_LINES)
    freezer = lines[3].removeprefix("freezer: ")
    if (
        freezer == "python"
    ):  # the default form: its launcher hands the program the file, so it knows its digest
        digest = build_id_member(binary)
        assert lines[1] == f"build: {digest}" and len(digest) == 64
        assert os.listdir(cache) == [digest[:32]]  # the unpacked copy the launcher named after it
        assert [p.name for p in (FOLDER / "libexec" / "publish" / "lib").glob("python3*.zip")] == [
            "python3{}.zip".format(lines[2].split(".")[1])
        ]
    else:
        assert freezer in ("pyinstaller", "nuitka") and lines[1] == "build: none"
    folder = subprocess.run([str(FOLDER / "bin" / "publish"), "version"], capture_output=True, text=True)
    assert folder.stdout.splitlines()[1:] == ["build: none", lines[2], lines[3]]  # the folder has no payload


def test_every_verb_runs_from_a_cold_one_file(binary: Path, tmp_path: Path) -> None:
    """Each verb from the one file with an empty cache, so that each unpacks what it needs on first use (the
    modules of more.zip, the extension modules): with an interpreter whose zlib is an extension module and
    not built in (pyenv's), boot.py needs zlib to unpack the rest, so zlib must not be left packed."""
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    (root / "exec" / "A" / "checkpoint-1").mkdir(parents=True)
    (root / "exec" / "A" / "checkpoint-1" / "model.bin").write_bytes(b"w")
    creds = tmp_path / "creds"
    creds.mkdir(mode=0o700)
    fields = {
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": "not-a-secret-0001",
        "endpoint": f"http://127.0.0.1:{dead_port()}",
        "region": "us-east-1",
    }
    for name, value in fields.items():
        (creds / name).write_text(value + "\n")
        (creds / name).chmod(0o600)
    remember_secret(fields["access_key_id"], fields["secret_access_key"])
    ckpt = ["-checkpoint", str(root)]
    verbs: list[tuple[list[str], int, str]] = [
        (["status", *ckpt], 0, "publications in"),
        (["publish", *ckpt, str(root / "exec/A/checkpoint-1"), "1"], 0, "published "),
        (["resolve", *ckpt], 0, str(root / "exec/A/checkpoint-1")),
        (["prune", *ckpt, "-keep", "1"], 0, ""),
        (["run", *ckpt, "-framework", "hf", "-attempt", "A", "--", "true"], 0, ""),
        (["watch", *ckpt, "-framework", "hf"], 2, ""),  # no attempt: a usage error, after the parse
        (["probe", "-checkpoint", "s3://bucket/p", "-creds", f"file:{creds}", "-timeout", "5s"], 1, ""),
    ]
    for args, code, out in verbs:
        shutil.rmtree(home / ".cache", ignore_errors=True)
        r = subprocess.run(
            [str(binary), *args],
            capture_output=True,
            text=True,
            env=env_for(tmp_path, HOME=str(home)),
            timeout=120,
        )
        assert r.returncode == code and out in r.stdout, (args, r)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert "does not answer: connection refused" in r.stderr, r.stderr


def test_a_large_dcp_metadata_is_read_in_a_child_by_the_frozen_program(binary: Path, tmp_path: Path) -> None:
    """Above 16 KiB a .metadata is read in a forked child (select, resource, marshal; the pure-Python
    unpickler when the C one is slow): the frozen program must carry all of it.  status shows one whole
    save and one refused whose dict keys collide."""
    root = tmp_path / "root"
    good, bad = root / "exec" / "A" / "step-1", root / "exec" / "A" / "step-2"
    for folder in (good, bad):
        folder.mkdir(parents=True)
        (folder / "f").write_bytes(b"\x01" * 3000)
    items = {f"w{i}": {"relative_path": "f", "offset": i, "length": 1} for i in range(3000)}
    (good / ".metadata").write_bytes(dcp_shapes.metadata(items))
    (bad / ".metadata").write_bytes(dcp_shapes.colliding(40_000))
    r = subprocess.run(
        [str(binary), "status", "-checkpoint", str(root), "-json"],
        capture_output=True,
        text=True,
        env=env_for(tmp_path, HOME=str(tmp_path)),
        timeout=120,
    )
    assert (r.returncode, r.stderr) == (0, ""), r
    saves = {s["path"]: (s["framework"], s["state"], s["message"]) for s in json.loads(r.stdout)["saves"]}
    assert saves["exec/A/step-1"] == ("dcp", "complete", "")
    assert saves["exec/A/step-2"][:2] == ("dcp", "faulty")
    assert "an int of 2^61-1 or more as a dict key or set item" in saves["exec/A/step-2"][2]


def test_bare_chroot(jail: Chroot) -> None:
    """Only the binary, /proc and /tmp: no libc, no loader, no libz, no Python from the node."""
    assert sorted(os.listdir(jail.dir)) == ["proc", "publish", "tmp"]
    r = jail.run("version")
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    publish_entry(jail.dir / "ckpt", "exec/1/checkpoint-100", 100)
    publish_entry(jail.dir / "ckpt", "exec/1/checkpoint-50", 50)
    r = jail.run("resolve", "-checkpoint", "/ckpt")
    assert (r.returncode, r.stdout, r.stderr) == (0, "/ckpt/exec/1/checkpoint-100\n", "")
    r = jail.run("resolve", "-checkpoint", "/nothere")
    assert r.returncode == 1 and r.stderr.startswith("publish: ")
    assert wait_gone(leftovers(jail.dir / "tmp", jail.dir)) == set()


def test_chroot_with_noexec_tmp(jail: Chroot) -> None:
    """TMPDIR and /tmp noexec: it finds another place (here the binary's own folder) and cleans it."""
    jail.mount_tmpfs("tmp", "noexec")
    r = jail.run("version", env={"TMPDIR": "/tmp"})
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    assert wait_gone(leftovers(jail.dir / "tmp", jail.dir)) == set()


def test_no_exec_capable_place_is_an_error(jail: Chroot) -> None:
    """/tmp noexec and the binary's folder read-only (nothing else exists): an error that says so."""
    jail.mount_tmpfs("tmp", "noexec")
    ro = jail.dir.parent / "ro"
    ro.mkdir()
    mount("--rbind", str(jail.dir), str(ro))
    jail.mounts.append(ro)
    mount("-o", "remount,bind,ro", str(ro))
    ro_jail = Chroot.__new__(Chroot)
    ro_jail.dir, ro_jail.mounts = ro, []
    r = ro_jail.run("version", env={"TMPDIR": "/tmp"})
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith("publish: no writable directory that allows executables")


@pytest.fixture
def noexec_tmpdir(as_root: None, tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "noexec"
    d.mkdir()
    mount("-t", "tmpfs", "-o", "noexec,mode=1777,size=64m", "tmpfs", str(d))
    try:
        yield d
    finally:
        umount(d)


def test_noexec_tmpdir(binary: Path, noexec_tmpdir: Path) -> None:
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env_for(noexec_tmpdir))
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    assert os.listdir(noexec_tmpdir) == []


def test_sigterm_reaches_the_program_and_the_unpacked_files_go(binary: Path, noexec_tmpdir: Path) -> None:
    """The launcher execs in place: the pid a job script holds is the program's, and SIGTERM reaches it."""
    proc = start_watch(binary, noexec_tmpdir.parent, noexec_tmpdir)
    where = running_program(proc)
    assert not str(where).startswith(str(noexec_tmpdir))  # a noexec TMPDIR is passed over
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (0, "")
    assert wait_gone({str(where)}) == set()


@pytest.mark.interpreter_form
def test_one_file_unpacks_tls_only_when_needed(binary: Path, tmp_path: Path) -> None:
    """A POSIX verb runs without OpenSSL and the extension modules on disk (they stay packed in the file)."""
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    proc = start_watch(binary, tmp_path, tmpdir)
    try:
        where = running_program(proc)
        assert (where / "publish").exists() and (where / "_internal" / "libc.so.6").exists()
        assert not (where / "_internal" / "libcrypto.so.3").exists()
        assert not (where / "_internal" / "libssl.so.3").exists()
        assert glob.glob(str(where / "lib" / "python3.*" / "lib-dynload" / "_ssl.*")) == []
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def packed_extensions(tree: Path) -> list[Path]:
    """The extension modules the one file leaves packed: all but zlib, which boot.py needs to unpack the others
    (present only where the build Python has zlib as an extension module, not built in)."""
    return [p for p in (tree / "lib").glob("python3.*/lib-dynload/*.so") if not p.name.startswith("zlib.")]


LAZY_PROBE = """
import os, sys
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])  # packaging/build/boot.py up to its start-up
_install()
import encodings.idna, hashlib, http.client, json, ssl, uuid, xml.etree.ElementTree, publish.s3.s3client
assert "x".encode("idna") == b"x" and ssl.create_default_context() and hashlib.sha256(b"").digest()
print(json.__file__)
print(ssl._ssl.__file__)
print(" ".join(sorted(os.listdir(sys.prefix + "/_internal"))))
"""


@pytest.mark.interpreter_form
def test_lazy_members_are_unpacked_on_first_import(binary: Path, tmp_path: Path) -> None:
    """packaging/build/boot.py's finder, on a tree holding only what the launcher unpacks and the one file open as
    its payload: the modules of more.zip, the extension modules and OpenSSL come out on first import."""
    tree = tmp_path / "tree"
    shutil.copytree(FOLDER / "libexec" / "publish", tree, symlinks=True)
    lazy = [tree / "lib" / "more.zip", *packed_extensions(tree)]
    lazy += [tree / "_internal" / n for n in ("libcrypto.so.3", "libssl.so.3")]
    for p in lazy:
        p.unlink()
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
                *("-c", LAZY_PROBE, str(REPO / "packaging" / "build" / "boot.py")),
            ],
            capture_output=True,
            text=True,
            pass_fds=(payload.fileno(),),
            env=env_for(tmp_path),
        )
    assert r.returncode == 0, r.stderr
    json_file, ssl_file, libs = r.stdout.splitlines()
    assert json_file == f"{tree}/lib/more.zip/json/__init__.pyc"
    assert ssl_file.startswith(f"{tree}/lib/python3.") and "/lib-dynload/_ssl." in ssl_file
    assert {"libcrypto.so.3", "libssl.so.3"} <= set(libs.split())
    assert list((tree / "lib").glob("python3.*/lib-dynload/_decimal.*")) == []  # only what was imported
    assert not list(tree.rglob("*.part*"))


@pytest.mark.interpreter_form
@pytest.mark.serial  # the space it leaves is measured to the MiB: alone, nothing else writes meanwhile
def test_a_full_disk_when_a_packed_member_is_first_needed_says_what_and_where(
    binary: Path, as_root: None, tmp_path: Path
) -> None:
    """TMPDIR has room for what every verb needs but not for the S3 modules: the S3 verb names the member,
    the directory and the remedy, exits 1, and leaves nothing behind."""
    small = tmp_path / "small"
    small.mkdir()
    mount("-t", "tmpfs", "-o", "mode=1777,size=32m", "tmpfs", str(small))
    try:
        tree = FOLDER / "libexec" / "publish"
        lazy = {tree / "lib" / "more.zip", *packed_extensions(tree)}
        lazy |= {tree / "_internal" / n for n in ("libcrypto.so.3", "libssl.so.3")}
        files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]
        eager = sum(p.stat().st_size for p in files if p not in lazy)
        st = os.statvfs(small)
        (small / "filler").write_bytes(bytes(st.f_bavail * st.f_frsize - eager - (1 << 20)))
        ok = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env_for(small))
        assert (ok.returncode, first(ok.stdout), ok.stderr) == (
            0,
            VERSION_LINE,
            "",
        )  # what every verb needs fits
        # its unpack directory gone first (its cleaner runs just after it exits): else the room that removal
        # frees while the next run unpacks (a busy machine) may let the S3 modules fit after all
        assert wait_gone({str(p) for p in small.iterdir() if p.name != "filler"}) == set()
        r = subprocess.run(
            [str(binary), "resolve", "-checkpoint", "s3://bucket/run", "-creds", "secret:x"],
            capture_output=True,
            text=True,
            env=env_for(small),
        )
        assert (r.returncode, r.stdout) == (1, "")
        head, _, tail = r.stderr.partition(f" into {small}/")
        assert head.startswith("publish: cannot unpack lib/"), r.stderr
        assert tail.endswith(
            ": No space left on device (free space there, or point TMPDIR at another filesystem)\n"
        ), r.stderr
        assert r.stderr.count("\n") == 1
        # its unpack directory goes too: the cleaner removes it just after the program has exited
        assert wait_gone({str(p) for p in small.iterdir() if p.name != "filler"}) == set()
        assert os.listdir(small) == ["filler"]
    finally:
        umount(small)


def test_sigkill_still_leaves_nothing(binary: Path, tmp_path: Path) -> None:
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    proc = start_watch(binary, tmp_path, tmpdir)
    where = running_program(proc)
    assert where.parent == tmpdir
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert wait_gone({str(where)}) == set()


def processes() -> dict[int, list[str]]:
    """Every process's command line, as /proc/PID/cmdline gives it (what ps -f and pkill -f read)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[int(pid)] = f.read().decode(errors="replace").split("\0")[:-1]
        except OSError:
            pass
    return found


def test_the_cleaner_has_its_own_name(binary: Path, tmp_path: Path) -> None:
    """The clean-up process is `publish-unpack-cleaner DIR` in ps, not a second `publish watch ...` that a
    `pkill -f 'publish watch'` would hit instead of watch."""
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    proc = start_watch(binary, tmp_path, tmpdir)
    try:
        where = running_program(proc)
        root = str(tmp_path / "root")
        assert [pid for pid, argv in processes().items() if root in argv] == [proc.pid]
        cleaners = [
            pid for pid, argv in processes().items() if argv == ["publish-unpack-cleaner", str(where)]
        ]
        assert len(cleaners) == 1
        with open(f"/proc/{cleaners[0]}/comm") as f:
            assert f.read() == "publish-unpack-\n"  # the first 15 characters, for ps -e and top
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert wait_gone({str(where)}) == set()  # it still does its job
    finally:
        proc.kill()
        proc.wait()


def drop_page_cache() -> None:
    """A cold machine: nothing of the binary in the page cache (best effort: a container may refuse)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError:
        pass


def test_64_concurrent_cold_starts(binary: Path, tmp_path: Path) -> None:
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    system = [Path("/tmp"), Path("/dev/shm")]
    before = leftovers(*system)
    if os.geteuid() == 0:
        drop_page_cache()
    procs = [
        subprocess.Popen(
            [str(binary), "version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(tmpdir),
        )
        for _ in range(64)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert [r for r in results if (first(r[0][0]), r[0][1], r[1]) != (VERSION_LINE, "", 0)] == []
    assert wait_gone(leftovers(tmpdir)) == set()
    assert os.listdir(tmpdir) == []
    assert wait_gone(leftovers(*system) - before) == set()


# --- TLS trust, as Go finds it ---------------------------------------------------------------------------------


@pytest.fixture
def tls_s3(moto_s3: Moto, tmp_path: Path) -> Iterator[tuple[str, str, bytes, str]]:  # noqa: F811
    try:
        import trustme
    except ImportError:
        unavailable("trustme is not installed")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    host, port = moto_s3.endpoint.removeprefix("http://").split(":")
    front = TLSFront((host, int(port)), ctx)
    bucket = moto_s3.create_bucket()
    moto_s3.client().put_object(
        Bucket=bucket, Key="run/.publish-root", Body=b""
    )  # the root, as init makes it
    try:
        yield f"https://127.0.0.1:{front.port}", bucket, ca.cert_pem.bytes(), moto_s3.access_key
    finally:
        front.close()


def s3_jail(jail: Chroot, endpoint: str, key: str) -> None:
    creds = jail.dir / "creds"
    creds.mkdir()
    for field, value in {
        "access_key_id": key,
        "secret_access_key": "moto-secret-0001",
        "endpoint": endpoint,
        "region": "us-east-1",
    }.items():
        (creds / field).write_text(value + "\n")


def put(jail: Chroot, path: str, data: bytes) -> None:
    target = jail.dir / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


BUNDLES = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
]


@pytest.mark.s3
@pytest.mark.parametrize("bundle", [BUNDLES[0], BUNDLES[1], BUNDLES[-1]])
def test_tls_trust_from_the_nodes_bundle(
    jail: Chroot, tls_s3: tuple[str, str, bytes, str], bundle: str
) -> None:
    endpoint, bucket, ca_pem, key = tls_s3
    s3_jail(jail, endpoint, key)
    put(jail, bundle, ca_pem)
    r = jail.run("resolve", "-checkpoint", f"s3://{bucket}/run", "-creds", "secret:/creds")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@pytest.mark.s3
def test_tls_trust_from_a_large_bundle_through_its_copy_in_the_cache(
    jail: Chroot, tls_s3: tuple[str, str, bytes, str]
) -> None:
    endpoint, bucket, ca_pem, key = tls_s3
    s3_jail(jail, endpoint, key)
    system = Path(BUNDLES[0])
    if not system.is_file():
        unavailable(f"{system} (Debian's ca-certificates), for a bundle of the usual size")
    put(jail, BUNDLES[0], system.read_bytes() + ca_pem)
    env = {"TMPDIR": "/tmp", "HOME": "/home/u"}
    for _ in range(2):  # the first start makes the copy, the second reads it
        r = jail.run("resolve", "-checkpoint", f"s3://{bucket}/run", "-creds", "secret:/creds", env=env)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    (copy,) = (jail.dir / "home/u/.cache/publish").glob("ca-*")
    assert len(list(copy.iterdir())) > 100 and all(p.name[8] == "." for p in copy.iterdir())


@pytest.mark.s3
def test_tls_trust_from_ssl_cert_file(jail: Chroot, tls_s3: tuple[str, str, bytes, str]) -> None:
    endpoint, bucket, ca_pem, key = tls_s3
    s3_jail(jail, endpoint, key)
    put(jail, "/site/ca.pem", ca_pem)
    put(jail, BUNDLES[0], b"")  # an empty system bundle: SSL_CERT_FILE comes first
    r = jail.run(
        "resolve",
        "-checkpoint",
        f"s3://{bucket}/run",
        "-creds",
        "secret:/creds",
        env={"TMPDIR": "/tmp", "SSL_CERT_FILE": "/site/ca.pem"},
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@pytest.mark.s3
def test_tls_without_any_bundle_says_where_it_looked(
    jail: Chroot, tls_s3: tuple[str, str, bytes, str]
) -> None:
    endpoint, bucket, _, key = tls_s3
    s3_jail(jail, endpoint, key)
    r = jail.run("resolve", "-checkpoint", f"s3://{bucket}/run", "-creds", "secret:/creds")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("publish: ")
    assert BUNDLES[0] in r.stderr and BUNDLES[-1] in r.stderr


@pytest.mark.s3
def test_tls_with_a_bundle_that_does_not_hold_the_ca_fails(
    jail: Chroot, tls_s3: tuple[str, str, bytes, str]
) -> None:
    import trustme

    endpoint, bucket, _, key = tls_s3
    s3_jail(jail, endpoint, key)
    put(jail, BUNDLES[0], trustme.CA().cert_pem.bytes())
    r = jail.run("resolve", "-checkpoint", f"s3://{bucket}/run", "-creds", "secret:/creds")
    assert r.returncode == 1 and r.stderr.startswith("publish: ")


# --- module install -----------------------------------------------------------------------------------------


def test_install_module_tree(binary: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "sw"
    r = subprocess.run(
        [str(REPO / "packaging" / "install" / "install-module"), str(prefix), "9.8.7"],
        capture_output=True,
        text=True,
        env=INSTALL_ENV,
    )
    assert r.returncode == 0, r.stderr
    home = prefix / "publish" / "9.8.7"
    assert os.access(home / "bin" / "publish", os.X_OK)
    assert (home / "libexec" / "publish" / "ld-publish.so.1").exists()
    lua = (prefix / "modulefiles" / "publish" / "9.8.7.lua").read_text()
    tcl = (prefix / "modulefiles" / "publish" / "9.8.7").read_text()
    assert f'prepend_path("PATH", "{home}/bin")' in lua
    assert tcl.startswith("#%Module") and f"prepend-path PATH {home}/bin" in tcl
    r = subprocess.run([str(home / "bin" / "publish"), "version"], capture_output=True, text=True)
    assert (r.returncode, first(r.stdout)) == (0, VERSION_LINE)
    # through a link, as a site's bin/ folder may hold one
    link = tmp_path / "publish-link"
    link.symlink_to(home / "bin" / "publish")
    assert (
        first(subprocess.run([str(link), "version"], capture_output=True, text=True).stdout) == VERSION_LINE
    )


def test_install_module_refuses_an_existing_version(binary: Path, tmp_path: Path) -> None:
    script = str(REPO / "packaging" / "install" / "install-module")
    assert (
        subprocess.run([script, str(tmp_path), "1.0"], capture_output=True, env=INSTALL_ENV).returncode == 0
    )
    r = subprocess.run([script, str(tmp_path), "1.0"], capture_output=True, text=True, env=INSTALL_ENV)
    assert r.returncode == 1 and "already installed" in r.stderr


def lmod() -> list[str]:
    """Lmod reads both kinds of module file (Tcl through its own Tcl interpreter)."""
    found = sorted(glob.glob("/usr/share/lmod/*/libexec/lmod")) + glob.glob(
        "/usr/share/lmod/lmod/libexec/lmod"
    )
    if not found:
        unavailable("Lmod is not installed (Debian: lmod)")
    return [found[-1], "sh"]


@pytest.mark.parametrize("kind", ["lua", "tcl"])
def test_module_load_puts_publish_on_path(binary: Path, tmp_path: Path, kind: str) -> None:
    prefix = tmp_path / "sw"
    subprocess.run(
        [str(REPO / "packaging" / "install" / "install-module"), str(prefix)],
        check=True,
        capture_output=True,
        env=INSTALL_ENV,
    )
    modules = prefix / "modulefiles"
    if kind == "tcl":
        for lua in modules.rglob("*.lua"):
            lua.unlink()  # the Tcl file alone
    tool = lmod()
    env = {"PATH": "/usr/bin:/bin", "MODULEPATH": str(modules), "HOME": str(tmp_path)}
    r = subprocess.run([*tool, "load", "publish"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    script = r.stdout + "\npublish version\n"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    assert VERSION_LINE.strip() in out.stdout.splitlines(), (r.stdout, out.stderr)


@pytest.fixture(scope="module")
def modulecmd(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Environment Modules' own modulecmd.tcl, unpacked from Debian's package without installing it (the
    package conflicts with lmod), run by tclsh."""
    if not shutil.which("tclsh") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "tcl"], capture_output=True)
    tclsh = shutil.which("tclsh")
    if not tclsh or not shutil.which("apt-get") or not shutil.which("dpkg"):
        unavailable("Environment Modules needs tclsh, apt-get and dpkg (Debian: tcl)")
    where = tmp_path_factory.mktemp("environment-modules")
    os.chmod(where, 0o755)  # apt-get download hands the file over to the _apt user

    def download() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", "download", "environment-modules"], cwd=where, capture_output=True, text=True
        )

    r = download()
    if r.returncode != 0 and os.geteuid() == 0:  # a machine whose package lists were never fetched
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        r = download()
    debs = glob.glob(str(where / "environment-modules_*.deb"))
    if r.returncode != 0 or not debs:
        unavailable(f"apt-get download environment-modules failed: {r.stderr.strip()}")
    subprocess.run(["dpkg", "-x", debs[0], str(where / "root")], check=True, capture_output=True)
    found = glob.glob(str(where / "root" / "usr" / "lib" / "*" / "modulecmd.tcl"))
    if not found:
        unavailable("the environment-modules package holds no modulecmd.tcl")
    return [str(tclsh), found[0]]


def test_environment_modules_loads_and_unloads_the_tcl_file(
    binary: Path, tmp_path: Path, modulecmd: list[str]
) -> None:
    """The Tcl module file through Environment Modules itself, not through Lmod's reading of it."""
    prefix = tmp_path / "sw"
    subprocess.run(
        [str(REPO / "packaging" / "install" / "install-module"), str(prefix), "9.8.7"],
        check=True,
        capture_output=True,
        env=INSTALL_ENV,
    )
    for lua in (prefix / "modulefiles").rglob("*.lua"):
        lua.unlink()  # the Tcl file alone
    env = {"PATH": "/usr/bin:/bin", "MODULEPATH": str(prefix / "modulefiles"), "HOME": str(tmp_path)}
    script = (
        f"module() {{ eval \"$('{modulecmd[0]}' '{modulecmd[1]}' sh \"$@\")\"; }}\n"
        "module load publish || exit 3\n"
        'echo "PATH=$PATH"\n'
        "publish version || exit 4\n"
        "module unload publish || exit 5\n"
        'echo "PATH=$PATH"\n'
        "command -v publish && exit 6\n"
        "exit 0\n"
    )
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    home = prefix / "publish" / "9.8.7"
    assert [line for line in r.stdout.splitlines() if not line.startswith(BUILD_LINES)] == [
        f"PATH={home}/bin:/usr/bin:/bin",
        VERSION_LINE.strip(),
        "PATH=/usr/bin:/bin",
    ]
    assert "ERROR" not in r.stderr, r.stderr


# --- what a whole-cgroup kill leaves ------------------------------------------------------------------------


def test_clean_unpacked_removes_only_directories_no_process_uses(binary: Path, tmp_path: Path) -> None:
    """packaging/install/clean-unpacked, for a job epilog: the cleaner dies with the job when the batch system kills
    the job's whole cgroup, and the unpack directory stays."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = start_watch(binary, tmp_path, tmpdir)
    try:
        running = running_program(proc)
        orphan = tmpdir / ".publish-Ab12Cd"
        (orphan / "lib").mkdir(parents=True)
        (orphan / "lib" / "x.so").write_bytes(b"\0" * 64)
        young = tmpdir / ".publish-Ef34Gh"
        young.mkdir()
        old = time.time() - 600
        for d in (orphan, running):
            os.utime(d, (old, old))
        script = str(REPO / "packaging" / "install" / "clean-unpacked")
        r = subprocess.run([script, str(tmpdir)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert not orphan.exists()
        assert running.is_dir() and young.is_dir()
        assert r.stdout == f"clean-unpacked: removed {orphan}\n"
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone({str(running)}) == set()
    r = subprocess.run([script, "-m", "x", str(tmpdir)], capture_output=True, text=True)
    assert r.returncode == 2 and "bad age" in r.stderr


# --- the cache: one unpacked copy per build and per user -------------------------------------------------------


def test_cache_lives_in_the_users_cache_directory_and_a_warm_start_writes_nothing(
    binary: Path, tmp_path: Path
) -> None:
    """$HOME/.cache/publish/DIGEST, mode 0700, filled by the first start; the second start runs that copy,
    writes nothing to $TMPDIR (nor anywhere below $HOME) and starts no cleaner."""
    home, tmpdir = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmpdir.mkdir()
    env = env_for(tmpdir, HOME=str(home))
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    cache = home / ".cache" / "publish"
    [entry] = cache_entries(cache)
    assert len(entry) == 32 and set(entry) <= set("0123456789abcdef")
    for d in (home / ".cache", cache, cache / entry):
        assert d.lstat().st_mode & 0o777 == 0o700, d
    assert (cache / entry / "ld-publish.so.1").is_file()
    assert os.listdir(tmpdir) == []

    proc = start_watch(binary, tmp_path, tmpdir, HOME=str(home))
    try:
        assert running_program(proc) == cache / entry
        cleaners = [a for a in processes().values() if a[:1] == ["publish-unpack-cleaner"]]
        assert [a for a in cleaners if str(tmp_path) in " ".join(a)] == []
    finally:
        proc.kill()
        proc.wait()
    assert os.listdir(tmpdir) == []
    before = tree_state(home, tmpdir)  # watch unpacked the modules it needs beyond version's
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    assert tree_state(home, tmpdir) == before
    assert os.listdir(tmpdir) == []


def test_cache_location_xdg_cache_home_publish_cache_dir_and_off(binary: Path, tmp_path: Path) -> None:
    """$XDG_CACHE_HOME/publish before $HOME/.cache/publish; PUBLISH_CACHE_DIR before both; with
    PUBLISH_CACHE_DIR=off each start unpacks into a private directory of its own, removed when it ends."""
    home, xdg, own, tmpdir = (tmp_path / n for n in ("home", "xdg", "own/cache", "tmp"))
    home.mkdir()
    tmpdir.mkdir()
    cases = [
        ({"XDG_CACHE_HOME": str(xdg)}, xdg / "publish"),
        ({"XDG_CACHE_HOME": str(xdg), "PUBLISH_CACHE_DIR": str(own)}, own),
    ]
    for extra, where in cases:
        r = subprocess.run(
            [str(binary), "version"],
            capture_output=True,
            text=True,
            env=env_for(tmpdir, HOME=str(home), **extra),
        )
        assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
        assert len(cache_entries(where)) == 1, where
    assert not (home / ".cache").exists()
    proc = start_watch(binary, tmp_path, tmpdir, HOME=str(home), PUBLISH_CACHE_DIR="off")
    try:
        where = running_program(proc)
        assert where.parent == tmpdir and where.name.startswith(".publish-")
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone({str(where)}) == set()
    assert not (home / ".cache").exists()


def test_64_concurrent_cold_starts_share_one_cache(binary: Path, tmp_path: Path) -> None:
    """64 first starts at once: all succeed, one copy is put in place, no fill directory is left; then 16 S3
    starts at once unpack the same lazy members into that copy and all say the same thing as one alone."""
    home, tmpdir = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmpdir.mkdir()
    env = env_for(tmpdir, HOME=str(home))
    if os.geteuid() == 0:
        drop_page_cache()
    procs = [
        subprocess.Popen(
            [str(binary), "version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(64)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert [r for r in results if (first(r[0][0]), r[0][1], r[1]) != (VERSION_LINE, "", 0)] == []
    cache = home / ".cache" / "publish"
    assert len(cache_entries(cache)) == 1 and not cache_entries(cache)[0].startswith(".")
    assert os.listdir(tmpdir) == []

    s3 = [str(binary), "resolve", "-checkpoint", "s3://bucket/run", "-creds", "secret:x"]
    alone = subprocess.run(s3, capture_output=True, text=True, env=env_for(tmpdir, PUBLISH_CACHE_DIR="off"))
    assert alone.returncode != 0 and alone.stderr.startswith("publish: ")
    procs = [
        subprocess.Popen(s3, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(16)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert [r for r in results if r != ((alone.stdout, alone.stderr), alone.returncode)] == []
    assert not list(cache.rglob("*.part*"))
    assert wait_gone(leftovers(tmpdir)) == set()


def cache_dir_symlink(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.symlink_to(elsewhere)


def cache_dir_group_writable(cache: Path, tmp_path: Path) -> None:
    cache.mkdir()
    os.chmod(cache, 0o770)


def cache_dir_world_writable(cache: Path, tmp_path: Path) -> None:
    cache.mkdir()
    os.chmod(cache, 0o1777)


def cache_dir_of_another_user(cache: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        unavailable("needs root (chown)")
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)


@pytest.mark.parametrize(
    "make, why",
    [
        (cache_dir_symlink, "it is a symbolic link"),
        (cache_dir_group_writable, "other users may write to it (chmod 700 it)"),
        (cache_dir_world_writable, "other users may write to it (chmod 700 it)"),
        (cache_dir_of_another_user, "it is owned by another user"),
    ],
)
def test_a_cache_directory_another_user_could_write_is_refused(
    binary: Path, tmp_path: Path, make: object, why: str
) -> None:
    """The start says so and unpacks into a private directory instead; nothing is written into the refused
    directory (or through the link)."""
    assert callable(make)
    cache, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    make(cache, tmp_path)
    before = tree_state(tmp_path / "elsewhere" if cache.is_symlink() else cache)
    r = subprocess.run(
        [str(binary), "version"],
        capture_output=True,
        text=True,
        env=env_for(tmpdir, PUBLISH_CACHE_DIR=str(cache)),
    )
    assert (r.returncode, first(r.stdout)) == (0, VERSION_LINE)
    assert r.stderr == (
        f"publish: warning: not using the cache {cache}: {why} (unpacking into a private directory instead)\n"
    )
    assert tree_state(tmp_path / "elsewhere" if cache.is_symlink() else cache) == before
    assert wait_gone(leftovers(tmpdir)) == set()


def test_a_build_entry_that_is_a_link_is_not_followed(binary: Path, tmp_path: Path) -> None:
    cache, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    env = env_for(tmpdir, PUBLISH_CACHE_DIR=str(cache))
    assert subprocess.run([str(binary), "version"], capture_output=True, env=env).returncode == 0
    [entry] = cache_entries(cache)
    os.rename(cache / entry, tmp_path / "moved")
    os.symlink(tmp_path / "moved", cache / entry)
    (tmp_path / "moved" / "publish").write_bytes(b"#!/bin/sh\necho planted\n")
    planted = tree_state(tmp_path / "moved")
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout)) == (0, VERSION_LINE)
    # the link is damage (tests/house/test_unpack_cache.py): moved aside, never followed, and a copy put in its place
    assert r.stderr.startswith(
        f"publish: warning: the unpacked copy {cache / entry} was damaged (it is a symbolic"
    )
    assert r.stderr.count("\n") == 1
    assert tree_state(tmp_path / "moved") == planted
    assert (cache / entry).is_dir() and not (cache / entry).is_symlink()
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")


def test_a_half_filled_copy_is_never_used(binary: Path, tmp_path: Path) -> None:
    """First starts killed at moments spread over the fill leave at most fill directories (.tmp-*), never a
    copy in place with a file missing or short; a leftover fill directory is passed over, and the next start
    puts a complete copy in place."""
    cache, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    env = env_for(tmpdir, PUBLISH_CACHE_DIR=str(cache))
    tree = FOLDER / "libexec" / "publish"
    for delay in [i * 0.004 for i in range(25)]:
        proc = subprocess.Popen(
            [str(binary), "version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        time.sleep(delay)  # the moment of the kill, not a wait for anything
        proc.kill()
        proc.wait(timeout=30)
        placed = [n for n in cache_entries(cache) if not n.startswith(".")]
        for name in placed:
            copy = cache / name
            for p in copy.rglob("*"):
                if p.is_file() and not p.is_symlink() and ".part" not in p.name:
                    assert p.stat().st_size == (tree / p.relative_to(copy)).stat().st_size, p
            for needed in ("ld-publish.so.1", "publish", "_internal/libc.so.6"):
                assert (copy / needed).is_file(), needed
            shutil.rmtree(copy)  # start the next round cold again
    # a fill directory of a start that was killed, under the name the next start would choose first
    junk = cache / ".tmp-99999-0"
    junk.mkdir(parents=True, exist_ok=True)
    (junk / "publish").write_bytes(b"#!/bin/sh\necho half\n")
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    assert len([n for n in cache_entries(cache) if not n.startswith(".")]) == 1
    assert os.listdir(tmpdir) == []


def test_clean_unpacked_removes_fill_directories_left_in_a_cache(binary: Path, tmp_path: Path) -> None:
    """A start killed while filling the cache leaves CACHE/.tmp-PID-N; clean-unpacked CACHE removes an old one
    and leaves the build copies and a young fill directory. A damaged copy that was a link, moved aside as
    CACHE/.damaged-BUILD-PID-N, goes too, its target left alone."""
    cache, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    env = env_for(tmpdir, PUBLISH_CACHE_DIR=str(cache))
    assert subprocess.run([str(binary), "version"], capture_output=True, env=env).returncode == 0
    [copy] = cache_entries(cache)
    old, young = cache / ".tmp-4242-0", cache / ".tmp-4243-1"
    (old / "lib").mkdir(parents=True)
    (old / "lib" / "x.so").write_bytes(b"\0" * 64)
    young.mkdir()
    then = time.time() - 600
    for d in (old, cache / copy):
        os.utime(d, (then, then))
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_bytes(b"")
    link = cache / f".damaged-{copy}-4244-0"
    link.symlink_to(target)
    script = str(REPO / "packaging" / "install" / "clean-unpacked")
    r = subprocess.run([script, str(cache)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    assert sorted(r.stdout.splitlines()) == sorted(f"clean-unpacked: removed {d}" for d in (old, link))
    assert os.listdir(target) == ["keep"]
    assert cache_entries(cache) == sorted([copy, young.name])
    r = subprocess.run([str(binary), "version"], capture_output=True, text=True, env=env)
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")


def test_deepspeed_model_states_are_read_by_the_frozen_program(binary: Path, tmp_path: Path) -> None:
    """A DeepSpeed save's model states are read through the zip's directory and members (the CRC from
    binascii), the pickle in a forked child past 16 KiB: run publishes the whole save and names the one
    whose model states are refused (40,000 colliding keys), once."""
    root = tmp_path / "root"
    saves = root / "exec" / "A"
    deepspeed_saves.write_save(saves, 1, args=["x" * 100] * 400)  # a client state of 40 KB
    deepspeed_saves.write_save(saves, 2)
    bad = saves / "global_step2" / "mp_rank_00_model_states.pt"
    bad.write_bytes(deepspeed_saves.colliding(40_000))
    assert len((saves / "global_step1" / "mp_rank_00_model_states.pt").read_bytes()) > 40_000
    r = subprocess.run(
        [
            str(binary),
            "run",
            "-checkpoint",
            str(root),
            "-framework",
            "deepspeed",
            "-attempt",
            "A",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=env_for(tmp_path, HOME=str(tmp_path)),
        timeout=120,
    )
    assert r.returncode == 0, r
    published = r.stdout.splitlines()
    assert len(published) == 1 and published[0].endswith(f", step 1, {saves}/global_step1)"), r.stdout
    refused = [line for line in r.stderr.splitlines() if line.startswith(f"publish: {bad}: ")]
    assert len(refused) == 1 and "an int of 2^61-1 or more as a dict key or set item" in refused[0], r.stderr
