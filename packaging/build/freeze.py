"""Make the frozen folder and turn it into the two forms ./build ships.

    freeze.py python REPO FROZEN BOOT    FROZEN/publish = this Python's own interpreter, FROZEN/lib = the standard
                                     library modules the package reaches and the package, compiled
    freeze.py tree FROZEN ROOT       ROOT = FROZEN + the loader (ROOT/ld-publish.so.1) + every C library it needs
    freeze.py folder ROOT LAUNCHER OUT   OUT/bin/publish (the launcher), OUT/libexec/publish (ROOT)
    freeze.py onefile ROOT LAUNCHER OUT  one file: the launcher, ROOT packed after it, an index, a trailer

The trailer and index formats are read by packaging/build/launcher.c; keep both in step.
Runs at build time only, with the build environment's Python (it needs the lz4 package).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
import types
from pathlib import Path

MAGIC = b"PUBLSHX1"
KIND_DIR, KIND_FILE, KIND_LINK = 0, 1, 2
CODEC_RAW, CODEC_LZ4, CODEC_ZLIB = 0, 1, 2
FLAG_LAZY = 1
ENTRY = struct.Struct("<BBBxIQQQI")  # kind, codec, flags, mode, offset, packed length, size, path length
TRAILER = struct.Struct("<8sQQQ")
# The program's own folder inside the tree: PyInstaller's onedir and Nuitka's standalone are both moved so that
# the executable is ROOT/publish and its libraries are in ROOT/_internal.
LIBS = "_internal"


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed(path: Path, libdir: Path) -> tuple[dict[str, Path], Path | None]:
    """The shared libraries `path` resolves to on this machine (soname -> file), and its loader."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir.resolve()))
    out = subprocess.run(["ldd", str(path.resolve())], env=env, capture_output=True, text=True).stdout
    libs: dict[str, Path] = {}
    loader = None
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            target = rest.strip().split(" (")[0].strip()
            if target == "not found":
                raise SystemExit(f"freeze: {path}: {name.strip()} not found")
            if target.startswith("/"):
                libs[name.strip()] = Path(target)
        elif line.startswith("/"):
            loader = Path(line.split(" (")[0])
    return libs, loader


def make_tree(frozen: Path, root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(frozen, root, symlinks=True)
    libdir = root / LIBS
    libdir.mkdir(exist_ok=True)
    loader = None
    pending = [p for p in root.rglob("*") if is_elf(p)]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        libs, ld = needed(path, libdir)
        loader = loader or ld
        for name, target in libs.items():
            if target.resolve().is_relative_to(root.resolve()):
                continue
            dest = libdir / name
            if not dest.exists():
                shutil.copy2(target.resolve(), dest)
                pending.append(dest)
    if loader is None:
        raise SystemExit("freeze: no dynamic loader found: is the frozen program dynamically linked?")
    shutil.copy2(loader.resolve(), root / "ld-publish.so.1")
    strip_debug(root)


def strip_debug(root: Path) -> None:
    """Drop the debugging sections of the tree's shared libraries and extension modules that carry them (pyenv
    and python.org builds do: libpython alone is 3 times its stripped size). Only `.so` files: an executable
    may carry an archive after its ELF sections (PyInstaller's), which strip would drop."""
    for path in sorted(root.rglob("*.so*")):
        if is_elf(path) and b".debug_info" in path.read_bytes():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
            subprocess.run(["strip", "--strip-debug", str(path)], check=True)


# The modules the package imports inside functions (S3, Vault, TLS), named so the analysis cannot miss them, and
# the parts of the standard library it never needs.
HIDDEN = [
    "base64", "binascii", "calendar", "concurrent.futures", "datetime", "email", "email.feedparser",
    "email.message", "email.parser", "email.policy", "email.utils", "errno", "hashlib", "hmac", "html", "http",
    "http.client", "ipaddress", "json", "json.decoder", "math", "random", "re", "resource", "secrets", "select",
    "selectors", "signal", "socket", "ssl", "stat", "struct", "tempfile", "threading", "time", "urllib", "urllib.parse",
    "uuid", "xml", "xml.etree", "xml.etree.ElementTree", "xml.parsers.expat", "pyexpat", "zlib", "_hashlib",
    "_ssl", "_json", "_struct", "_socket", "_random", "_sha1", "_md5", "_blake2",
    # hashlib's own SHA-256 when OpenSSL's is not there: _sha256 until 3.11, _sha2 from 3.12
    "_sha2" if sys.version_info >= (3, 12) else "_sha256",
]  # fmt: skip
EXCLUDES = [
    "torch", "numpy", "tkinter", "_tkinter", "unittest", "pydoc", "pydoc_data", "doctest", "lib2to3",
    "distutils", "setuptools", "pip", "sqlite3", "_sqlite3", "curses", "_curses", "readline", "bz2", "_bz2",
    "lzma", "_lzma", "ctypes", "_ctypes", "multiprocessing", "asyncio", "xmlrpc", "pdb", "idlelib", "ensurepip",
    "venv", "test", "dbm", "_dbm", "_gdbm", "tty", "pty", "getpass", "_osx_support", "_aix_support",
    "_bootsubprocess", "_pyio", "_pydecimal", "__phello__", "__hello__",
]  # fmt: skip


def make_python(repo: Path, frozen: Path, boot: Path) -> None:
    """A frozen folder made of this interpreter and the compiled modules it will run:

    FROZEN/publish                        the interpreter (its executable, renamed)
    FROZEN/lib/pythonXY.zip               the modules version, help, a POSIX resolve and a POSIX run
                                          import, stored uncompressed, and _publish_boot
    FROZEN/lib/more.zip                   every other module the package reaches (S3, Vault, TLS, ...),
                                          deflated; packaging/build/boot.py puts it last on sys.path
    FROZEN/lib/pythonX.Y/os.pyc           the landmark by which the interpreter finds its prefix (FROZEN)
    FROZEN/lib/pythonX.Y/lib-dynload/     the extension modules it reaches

    Modules compiled into the interpreter itself (built in or frozen) are not copied. Everything is compiled
    without optimisation (the same code as the source, asserts included) into unchecked hash-based .pyc;
    ``from __future__ import annotations`` is compiled as the flag it sets (:func:`compiled`).
    """
    import importlib.util
    import modulefinder
    import sysconfig
    import zipfile
    from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]

    if frozen.exists():
        shutil.rmtree(frozen)
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or stdlib / "lib-dynload")
    if not dynload.is_dir():
        dynload = stdlib / "lib-dynload"
    finder = modulefinder.ModuleFinder(path=[str(repo), str(stdlib), str(dynload)], excludes=EXCLUDES)
    package = sorted(
        ".".join(p.relative_to(repo).with_suffix("").parts).removesuffix(".__init__")
        for p in (repo / "publish").rglob("*.py")
    )
    encodings = sorted(
        "encodings." + p.stem for p in (stdlib / "encodings").glob("*.py") if p.stem != "__init__"
    )
    for name in ["encodings", *encodings, *package, *HIDDEN]:
        finder.import_hook(name)
    finder.run_script(str(boot))

    lib = frozen / "lib"
    exts = lib / ver / "lib-dynload"
    exts.mkdir(parents=True)
    shutil.copy2(os.path.realpath(getattr(sys, "_base_executable", sys.executable)), frozen / "publish")

    def pyc(source: Path, name: str) -> bytes:
        data = source.read_bytes()
        code = compiled(data, name)
        return bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False))

    members: dict[str, bytes] = {}
    for name, mod in sorted(finder.modules.items()):
        file = getattr(mod, "__file__", None)
        if name == "__main__" or not file:
            continue  # built into the interpreter
        path = Path(file)
        if path.suffix == ".py":
            if _imp_is_frozen(name):
                continue
            rel = "/".join(name.split(".")) + ("/__init__" if getattr(mod, "__path__", None) else "")
            members[rel + ".pyc"] = pyc(path, rel + ".py")
        else:
            shutil.copy2(path, exts / path.name)
    members["_publish_boot.pyc"] = pyc(boot, "_publish_boot.py")
    (lib / ver / "os.pyc").write_bytes(pyc(stdlib / "os.py", "os.py"))
    hot = hot_modules(repo) | {"_publish_boot"}

    def is_hot(rel: str) -> bool:
        return rel.removesuffix(".pyc").removesuffix("/__init__").replace("/", ".") in hot

    for zip_name, method, chosen in (
        (lib / f"python{sys.version_info[0]}{sys.version_info[1]}.zip", zipfile.ZIP_STORED, True),
        (lib / "more.zip", zipfile.ZIP_DEFLATED, False),
    ):
        with zipfile.ZipFile(zip_name, "w") as z:
            for rel, data in sorted(members.items()):
                if is_hot(rel) == chosen:
                    info = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
                    info.compress_type = method
                    z.writestr(info, data, compresslevel=9 if method == zipfile.ZIP_DEFLATED else None)
    missing = sorted(set(finder.badmodules) & set(package + HIDDEN))
    if missing:
        raise SystemExit(f"freeze: modules not found: {', '.join(missing)}")


def compiled(source: bytes, name: str) -> types.CodeType:
    """``source`` compiled as the interpreter compiles it, but with ``from __future__ import annotations`` as
    the compiler flag it sets rather than as a statement: the same code (annotations kept as strings), without
    importing the ``__future__`` module at run time, which every module of the package names (about 0.5 M
    instructions of a POSIX resolve's 37 M). Any other statement, and any other future, is left as it is."""
    import __future__

    import ast

    tree = ast.parse(source, name)
    flags = 0
    body = list(tree.body)
    for i, node in enumerate(body):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and i == 0:
            continue  # the docstring
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "__future__"
            and [(a.name, a.asname) for a in node.names] == [("annotations", None)]
        ):
            flags = __future__.annotations.compiler_flag
            body.remove(node)
        break
    if not flags:
        return compile(source, name, "exec", dont_inherit=True, optimize=0)
    tree.body = body
    return compile(tree, name, "exec", flags=flags, dont_inherit=True, optimize=0)


def hot_modules(repo: Path) -> set[str]:
    """The modules this interpreter, isolated and without site, imports for `version`, `help`, a POSIX
    `resolve` (found and not found) and a POSIX `run` (the job scripts' verb, whose start is held to 1.3x a
    resolve's: bench/run_lag.py), run from the source."""
    import tempfile

    sys.path.insert(0, str(repo))
    from publish.rules import layout

    del sys.path[0]
    found: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "pub").mkdir(parents=True)
        (root / "exec" / "1" / "checkpoint-10").mkdir(parents=True)
        (root / "pub" / layout.name(0, 10, "exec/1/checkpoint-10")).write_bytes(b"")
        out = Path(tmp) / "modules"
        # written at exit, and before os._exit (posix._exit, as publish.cli calls it), with which run and watch end
        code = (
            "import atexit, os, posix, sys\n"
            f"sys.path.insert(0, {str(repo)!r})\n"
            f"note = lambda: open({str(out)!r}, 'a').write(' '.join(sys.modules) + '\\n')\n"
            "atexit.register(note)\n"
            "end = os._exit\n"
            "os._exit = posix._exit = lambda code: (atexit.unregister(note), note(), end(code))\n"
            "sys.argv[0] = 'publish'\n"
            "from publish.cli import run\n"
            "sys.exit(run())\n"
        )
        for args in (
            ["version"],
            ["help"],
            ["resolve", "-checkpoint", str(root)],
            ["resolve", "-checkpoint", tmp + "/no"],
            ["run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "hot", "--", "true"],
        ):
            r = subprocess.run([sys.executable, "-I", "-S", "-c", code, *args], capture_output=True, cwd=tmp)
            if args == ["version"] and r.returncode != 0:
                raise SystemExit(f"freeze: `publish version` fails from the source:\n{r.stderr.decode()}")
        found.update(out.read_text().split())
    return found


def _imp_is_frozen(name: str) -> bool:
    import _imp

    return bool(_imp.is_frozen(name))


def make_folder(root: Path, launcher: Path, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    (out / "bin").mkdir(parents=True)
    (out / "libexec").mkdir()
    shutil.copytree(root, out / "libexec" / "publish", symlinks=True)
    shutil.copy2(launcher, out / "bin" / "publish")
    os.chmod(out / "bin" / "publish", 0o755)


# The extension modules boot.py imports to unpack the lazy members (zlib decodes them and more.zip): built into
# Debian's interpreter, but an extension module in pyenv's and python.org's builds. Those, and the C libraries
# they need, are unpacked with what every start needs; left packed, boot.py could not import them.
UNPACKER_NEEDS = {"zlib"}


def lazy_members(root: Path) -> tuple[set[str], str]:
    """The members of an interpreter tree (freeze.py python) that only some verbs need, left packed in the one
    file for packaging/build/boot.py to unpack on first import: every extension module, every C library that
    the interpreter itself does not need, and lib/more.zip. And the table boot.py reads: one line per extension
    module, `module member library-member...`."""
    if not list((root / "lib").glob("python*.zip")):
        return set(), ""  # PyInstaller or Nuitka: their loaders unpack nothing themselves
    libdir = root / LIBS
    hot = set(needed(root / "publish", libdir)[0])
    if not hot or not hot <= {p.name for p in libdir.iterdir()}:
        raise SystemExit(f"freeze: {root / 'publish'}: its libraries are not all in {libdir}")
    exts = sorted(root.glob("lib/python*/lib-dynload/*.so"))
    for ext in exts:
        if ext.name.split(".")[0] in UNPACKER_NEEDS:
            hot |= set(needed(ext, libdir)[0])
    lazy_libs = {p.name for p in libdir.iterdir() if p.is_file()} - hot
    lazy: set[str] = {f"{LIBS}/{name}" for name in lazy_libs} | {"lib/more.zip"}
    lines = []
    for ext in exts:
        if ext.name.split(".")[0] in UNPACKER_NEEDS:
            continue
        member = str(ext.relative_to(root))
        lazy.add(member)
        deps = sorted(f"{LIBS}/{name}" for name in needed(ext, libdir)[0] if name in lazy_libs)
        lines.append(" ".join([ext.name.split(".")[0], member, *deps]))
    return lazy, "\n".join(lines) + "\n"


def make_onefile(root: Path, launcher: Path, out: Path) -> None:
    import zlib

    import lz4.block  # type: ignore[import-not-found]  # build-time only, in the build environment

    blob = bytearray(launcher.read_bytes())
    index = bytearray()
    count = 0
    lazy, table = lazy_members(root)

    def add(rel: bytes, kind: int, codec: int, flags: int, mode: int, data: bytes, size: int) -> None:
        nonlocal index, count
        offset = len(blob)
        blob.extend(data)
        index += ENTRY.pack(kind, codec, flags, mode, offset, len(data), size, len(rel)) + rel
        count += 1

    entries = sorted(root.rglob("*"), key=lambda p: p.relative_to(root).parts)
    for path in entries:
        rel = str(path.relative_to(root))
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path).encode()
            add(rel.encode(), KIND_LINK, CODEC_RAW, 0, 0o777, data, len(data))
        elif stat.S_ISDIR(st.st_mode):
            add(rel.encode(), KIND_DIR, CODEC_RAW, 0, 0o700, b"", 0)
        elif rel in lazy:
            raw = path.read_bytes()
            packed = zlib.compress(raw, 9)
            codec, data = (CODEC_ZLIB, packed) if len(packed) < len(raw) * 0.95 else (CODEC_RAW, raw)
            add(rel.encode(), KIND_FILE, codec, FLAG_LAZY, st.st_mode & 0o700, data, len(raw))
        else:
            raw = path.read_bytes()
            packed = lz4.block.compress(raw, mode="high_compression", compression=12, store_size=False)
            codec, data = (CODEC_LZ4, packed) if len(packed) < len(raw) else (CODEC_RAW, raw)
            add(rel.encode(), KIND_FILE, codec, 0, st.st_mode & 0o700, data, len(raw))
    if table:
        raw = table.encode()
        add(b".lazy", KIND_FILE, CODEC_ZLIB, FLAG_LAZY, 0o600, zlib.compress(raw, 9), len(raw))
    # The build's digest (of the launcher and every member): the name of its unpacked copy in the cache, so
    # two builds never share one. Left packed (flagged lazy); the launcher reads it from the index.
    build_id = hashlib.sha256(blob).hexdigest().encode()
    add(b".build-id", KIND_FILE, CODEC_RAW, FLAG_LAZY, 0o600, build_id, len(build_id))
    index_offset = len(blob)
    blob += index
    blob += TRAILER.pack(MAGIC, index_offset, len(index), count)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(blob)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "python":
        make_python(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    elif len(argv) == 3 and argv[0] == "tree":
        make_tree(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 4 and argv[0] == "folder":
        make_folder(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    elif len(argv) == 4 and argv[0] == "onefile":
        make_onefile(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    elif len(argv) == 2 and argv[0] == "sha256":
        print(hashlib.sha256(Path(argv[1]).read_bytes()).hexdigest())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
