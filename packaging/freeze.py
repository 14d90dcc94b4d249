"""Turn a frozen folder (PyInstaller or Nuitka) into the two forms ./build ships.

    freeze.py tree FROZEN ROOT       ROOT = FROZEN + the loader (ROOT/ld-publish.so.1) + every C library it needs
    freeze.py folder ROOT LAUNCHER OUT   OUT/bin/publish (the launcher), OUT/libexec/publish (ROOT)
    freeze.py onefile ROOT LAUNCHER OUT  one file: the launcher, ROOT packed after it, an index, a trailer

The trailer and index formats are read by packaging/launcher.c; keep both in step.
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
from pathlib import Path

MAGIC = b"PUBLSHX1"
KIND_DIR, KIND_FILE, KIND_LINK = 0, 1, 2
ENTRY = struct.Struct("<BxxxIQQQI")
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
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = subprocess.run(["ldd", str(path)], env=env, capture_output=True, text=True).stdout
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


def make_folder(root: Path, launcher: Path, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    (out / "bin").mkdir(parents=True)
    (out / "libexec").mkdir()
    shutil.copytree(root, out / "libexec" / "publish", symlinks=True)
    shutil.copy2(launcher, out / "bin" / "publish")
    os.chmod(out / "bin" / "publish", 0o755)


def make_onefile(root: Path, launcher: Path, out: Path) -> None:
    import lz4.block  # type: ignore[import-not-found]  # build-time only, in the build environment

    blob = bytearray(launcher.read_bytes())
    index = bytearray()
    count = 0
    entries = sorted(root.rglob("*"), key=lambda p: p.relative_to(root).parts)
    for path in entries:
        rel = str(path.relative_to(root)).encode()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path).encode()
            kind, size, mode = KIND_LINK, len(data), 0o777
        elif stat.S_ISDIR(st.st_mode):
            data, kind, size, mode = b"", KIND_DIR, 0, 0o700
        else:
            raw = path.read_bytes()
            packed = lz4.block.compress(raw, mode="high_compression", compression=12, store_size=False)
            data = packed if len(packed) < len(raw) else raw
            kind, size, mode = KIND_FILE, len(raw), st.st_mode & 0o700
        offset = len(blob)
        blob += data
        index += ENTRY.pack(kind, mode, offset, len(data), size, len(rel)) + rel
        count += 1
    index_offset = len(blob)
    blob += index
    blob += TRAILER.pack(MAGIC, index_offset, len(index), count)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(blob)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "tree":
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
