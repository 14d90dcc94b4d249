"""The first module the frozen interpreter runs: `ROOT/publish -I -S [-X publish-payload=FD] -c "import
_publish_boot" ARGS` (packaging/build/launcher.c builds that command; the module is compiled into lib/pythonXY.zip).

The modules every start needs are in ROOT/lib/pythonXY.zip, first on sys.path; the others (S3, Vault, TLS, ...)
are in ROOT/lib/more.zip, which only the finder below reads, so that a POSIX verb never reads its directory.
The modules of pythonXY.zip imported after this one are read by _Stored, first on sys.meta_path: with one
descriptor and one read each, from zipimport's own table of the archive, rather than through zipimport's path
(which reads and unmarshals each module twice); anything it cannot check is left to zipimport.

In the one-file form the launcher unpacks only what every verb needs (the interpreter, its C libraries,
pythonXY.zip) and leaves the rest in the file: more.zip, the extension modules and the C libraries only they
need (OpenSSL for TLS and hashlib, ...). It passes the file itself as descriptor FD. The finder below, last on
sys.meta_path, so asked only for a module found nowhere else, unpacks such an extension module (and the
libraries it needs), or more.zip, into the directory the launcher unpacked into (the cache's copy or a
private one), on first use. A POSIX verb never pays for TLS. The folder form has every file on disk and passes
no descriptor.

A member already there is used only if it is as this finder would write it: a regular file of the index's
size and owner's permission bits, with the stamp (the modification time launcher.c's set_stamp derives from
the build's digest). Any other (cut short, rewritten in place, a link, a FIFO) is unpacked again over it, with
one warning line. It is checked on every import that needs it: a later start may have swapped a fresh copy in
under this process, which reads its files by path. So that nothing lazy is read past the check, the one-file
form takes lib-dynload off sys.path (only this finder finds extension modules there) and puts more_hook first
on sys.path_hooks (the importer of a package's folder inside more.zip checks more.zip before each search).

The archive's format is written by packaging/build/freeze.py and read by packaging/build/launcher.c; keep the three in step.
"""

from __future__ import annotations

import sys
import zipimport  # built in: how pythonXY.zip, which holds this module, is read

TYPE_CHECKING = False  # typing itself costs milliseconds at start
if TYPE_CHECKING:
    import os
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import Any

MORE = "lib/more.zip"


class _Zip39(zipimport.zipimporter):
    """3.9's zipimporter with the find_spec, create_module and exec_module it has from 3.10.

    3.9's loads a module with load_module, which puts the module in sys.modules before running its code,
    unmarked: another thread importing it meanwhile gets it half made (`module 'hashlib' has no attribute
    'sha256'` in the threads that hash a save for its manifest). Loaded through a spec and exec_module, the
    module is marked as being initialised, and the other thread waits for it, as it does from 3.10."""

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        from _frozen_importlib import ModuleSpec, spec_from_loader

        loader, portions = self.find_loader(fullname)
        if loader is not None:
            return spec_from_loader(fullname, self, is_package=self.is_package(fullname))
        if portions:  # a folder without __init__: a portion of a namespace package
            spec = ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = portions
            return spec
        return None

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the module the import system makes

    def exec_module(self, module: ModuleType) -> None:
        exec(self.get_code(module.__name__), module.__dict__)


#: The zipimporter this program uses: 3.10's and later as they are, 3.9's with their find_spec and exec_module.
ZIP = zipimport.zipimporter if hasattr(zipimport.zipimporter, "exec_module") else _Zip39


class _Finder:
    """Last on sys.meta_path: finds what pythonXY.zip and lib-dynload do not hold. In the one-file form the
    archive appended to the executable (descriptor fd, or -1) holds the members the launcher left packed."""

    MAGIC = b"PUBLSHX1"
    CODEC_ZLIB = 2
    FLAG_LAZY = 1
    STAMP_BASE = 1_000_000_000  # launcher.c: STAMP_BASE + 2 * the first 6 hex digits of .build-id, in seconds

    def __init__(self, root: str, fd: int) -> None:
        import _thread

        self.root = root
        self.fd = fd
        self.table: dict[str, list[str]] | None = None  # extension module -> its member, then its libraries
        self.index: dict[str, tuple[int, int, int, int, int]] = {}  # lazy member -> codec, mode, offset, ...
        self.lock = _thread.allocate_lock()
        self.busy: int | None = None  # the thread inside find_spec
        self.stamp = self.STAMP_BASE * 1_000_000_000  # the members' modification time, ns (set by _read)

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        import _thread

        if self.busy == _thread.get_ident():
            return None  # an import made by this finder itself (there should be none): not one of ours
        with self.lock:
            self.busy = _thread.get_ident()
            try:  # noqa: SIM105 - contextlib is one more import at every start
                return self._find(name)
            finally:
                self.busy = None

    def build_id(self) -> str:
        """The one file's build digest, its `.build-id` member (64 hex digits, stored as is), for `publish
        version`; "" in the folder form, which has no payload. Imports nothing (so cannot re-enter the finder)."""
        import _thread
        import os

        if self.fd < 0:
            return ""
        with self.lock:
            # Marked busy as find_spec marks it: should reading the table import a module after all, the
            # finder passes it by instead of waiting for the lock this thread holds.
            self.busy = _thread.get_ident()
            try:
                if self.table is None:
                    self._read()
                entry = self.index.get(".build-id")
            finally:
                self.busy = None
        if entry is None or entry[0] != 0 or entry[4] != entry[3] or entry[3] > 64:
            return ""  # absent, or not stored as is: not a digest this program can read
        return os.pread(self.fd, entry[3], entry[2]).decode("ascii", "replace")

    def _find(self, name: str) -> ModuleSpec | None:
        # the import system's own modules, always loaded (importlib itself may be in more.zip)
        from _frozen_importlib import ModuleSpec
        from _frozen_importlib_external import ExtensionFileLoader, PathFinder

        if self.fd >= 0:
            if self.table is None:
                self._read()
            assert self.table is not None
            members = self.table.get(name)
            if members:
                for member in reversed(members):  # the libraries first, the module last
                    self._unpack(member)
                file = self.root + "/" + members[0]
                spec = ModuleSpec(name, ExtensionFileLoader(name, file), origin=file)
                spec.has_location = True
                return spec
            if MORE in self.index:
                self._unpack(MORE)
        # A module of more.zip, at the top or in a package that pythonXY.zip holds part of (publish.stores):
        # the package's folder inside more.zip.
        package = name.rpartition(".")[0]
        where = "/".join([self.root, MORE, *package.split(".")]) if package else self.root + "/" + MORE
        return PathFinder.find_spec(name, [where])

    def more_hook(self, path: str) -> zipimport.zipimporter:
        """First on sys.path_hooks in the one-file form: the importer of a path inside more.zip (a package of
        more.zip, once imported, has its __path__ there, and its submodules are found through it, not through
        this finder): a zipimporter that checks more.zip (_unpack) before each search."""
        if not (path + "/").startswith(self.root + "/" + MORE + "/"):
            raise ImportError("not in more.zip")
        finder = self

        class More(ZIP):
            def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
                finder._check_more()
                return super().find_spec(fullname, target)

        self._check_more()
        return More(path)

    def _check_more(self) -> None:
        import _thread

        if self.busy == _thread.get_ident():
            return  # called from _find, which has just checked
        with self.lock:
            if self.table is None:
                self._read()
            if MORE in self.index:
                self._unpack(MORE)

    def _read(self) -> None:
        # Only modules already loaded or built in: this runs inside an import, under the lock.
        import os

        def u(b: bytes) -> int:
            return int.from_bytes(b, "little")

        end = os.fstat(self.fd).st_size
        trailer = os.pread(self.fd, 32, end - 32)
        if trailer[:8] != self.MAGIC:
            raise ImportError("the archive appended to this executable is damaged")
        idx_off, idx_len, count = u(trailer[8:16]), u(trailer[16:24]), u(trailer[24:32])
        raw = os.pread(self.fd, idx_len, idx_off)
        pos = 0
        for _ in range(count):
            # kind u8, codec u8, flags u8, pad, mode u32, offset u64, packed u64, size u64, path length u32
            e = raw[pos : pos + 36]
            kind, codec, flags, mode = e[0], e[1], e[2], u(e[4:8])
            off, packed, size, plen = u(e[8:16]), u(e[16:24]), u(e[24:32]), u(e[32:36])
            pos += 36
            path = raw[pos : pos + plen].decode()
            pos += plen
            if kind == 1 and flags & self.FLAG_LAZY:
                self.index[path] = (codec, mode, off, packed, size)
        if ".build-id" in self.index:
            digest = self._data(".build-id")[:6].decode()
            self.stamp = (self.STAMP_BASE + 2 * int(digest, 16)) * 1_000_000_000
        table: dict[str, list[str]] = {}
        if ".lazy" in self.index:
            for line in self._data(".lazy").decode().splitlines():
                name, *members = line.split()
                table[name] = members
        self.table = table

    def _data(self, member: str) -> bytes:
        import os
        import zlib

        codec, _, off, packed, size = self.index[member]
        data = os.pread(self.fd, packed, off)
        if codec == self.CODEC_ZLIB:
            data = zlib.decompress(data)
        if len(data) != size:
            raise ImportError(f"the archive appended to this executable is damaged ({member})")
        return data

    def _damage(self, member: str, st: os.stat_result) -> str:
        """Why the member found on disk is not as _unpack writes it ("" if it is)."""
        import stat

        _, mode, _, _, size = self.index[member]
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link"
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size != size:
            return f"{st.st_size} bytes, not {size}"
        if st.st_mtime_ns != self.stamp:
            return "modified since it was unpacked"
        if st.st_mode & 0o700 != mode & 0o700:
            return f"mode {st.st_mode & 0o777:03o}, not {mode & 0o700:03o}"
        return ""

    def _write(self, member: str, target: str, data: bytes, st: os.stat_result | None) -> None:
        import os
        import stat

        # the cache is shared by concurrent starts: each writes its own part, and the rename is atomic (a
        # process that maps the file it replaces keeps the old one: nothing is rewritten in place)
        part = f"{target}.part-{os.getpid()}"
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, self.index[member][1] & 0o700)
            os.utime(fd, ns=(os.fstat(fd).st_atime_ns, self.stamp))  # the access time as it is
        except BaseException:
            os.close(fd)
            os.unlink(part)
            raise
        os.close(fd)
        if st is not None and stat.S_ISDIR(st.st_mode):
            os.rename(target, f"{target}.damaged-{os.getpid()}")  # rename cannot replace a directory
        os.rename(part, target)

    def _unpack(self, member: str) -> None:
        import os

        # Checked on every call, not once a process: a later start may have swapped a fresh copy in under this
        # one (launcher.c), which lacks the lazy members until some process unpacks them again.
        target = self.root + "/" + member
        try:
            st: os.stat_result | None = os.lstat(target)
        except FileNotFoundError:
            st = None
        damage = self._damage(member, st) if st is not None else ""
        if st is not None and not damage:
            return
        data = self._data(member)
        try:
            try:  # noqa: SIM105 - contextlib is one more import at every start
                self._write(member, target, data, st)
            except FileNotFoundError:
                # A later start swapped a fresh copy in under this process (launcher.c) between the open of
                # the part and its rename, which then finds no part: write it again, into the copy now there.
                self._write(member, target, data, None)
        except OSError as e:
            where = "TMPDIR" if "/.publish-" in self.root else "PUBLISH_CACHE_DIR"
            # The verb needs a part of the program the launcher left packed (TLS, S3, Vault): say what
            # could not be written where, and what to do (publish prints an OSError's text and exits 1).
            raise OSError(
                e.errno,
                f"cannot unpack {member} into {self.root}: {e.strerror}"
                f" (free space there, or point {where} at another filesystem)",
            ) from None
        if damage:
            sys.stderr.write(
                f"publish: warning: the unpacked copy {self.root} was damaged ({member}: {damage});"
                f" unpacked {member} again\n"
            )
            sys.stderr.flush()


class _Stored:
    """First on sys.meta_path: the modules of pythonXY.zip (the package's and the standard library's there),
    read with one descriptor kept open, in place of zipimport's Python path through the import system.

    zipimport finds a module by trying its suffixes, is asked for the file name (which reads the member and
    unmarshals it), then for the code (which reads and unmarshals it again), each read opening the archive
    afresh and parsing the local header in Python: about a quarter of a million instructions a module before
    its body runs. Here the member is found by name in zipimport's own table of the archive (`files`, read
    once from its central directory when zipimport imported this module), read with one pread of its local
    header and data, checked (the local header's signature, the member's name, stored, the .pyc's magic and
    flags) and unmarshalled once. A member this finder does not read as such (compressed, a .pyc checked
    against its source, a header or name that does not match, a size past the archive's end, a read that
    fails) is left to zipimport (find_spec returns None), whose errors are as they were; so is every name not
    in the archive. The modules keep zipimport's attributes: __file__ and origin the member's path in the
    archive, __path__ its folder there for a package; get_source is None (the archive holds no source)."""

    SIGNATURE = b"PK\x03\x04"

    def __init__(self, archive: str, files: dict[str, tuple[object, ...]], fd: int, size: int) -> None:
        # the import system's own modules, always loaded: bound once, not imported again on each module
        import marshal
        import posix
        from _frozen_importlib import ModuleSpec
        from _frozen_importlib_external import MAGIC_NUMBER

        self.archive = archive
        # member name -> zipimport's entry: (path, compression, data size, file size, local header offset, ...)
        self.files = files
        self.fd = fd
        self.size = size  # of the archive, when opened: no read is asked for more
        self.pread = posix.pread
        self.loads = marshal.loads
        self.spec: Any = ModuleSpec  # (typeshed's ModuleSpec takes a Loader, which this is not nominally)
        self.magic = MAGIC_NUMBER

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        key = name.replace(".", "/")
        member = key + "/__init__.pyc"  # a package before a module, as zipimport looks
        entry = self.files.get(member)
        if entry is None:
            member = key + ".pyc"
            entry = self.files.get(member)
            if entry is None:
                return None
        code = self._read(member, entry)
        if code is None:
            return None
        file = str(entry[0])
        spec: ModuleSpec = self.spec(name, self, origin=file, loader_state=code)
        spec.has_location = True  # __file__ set, __cached__ the same path (a .pyc)
        if member.endswith("/__init__.pyc"):
            spec.submodule_search_locations = [file.rpartition("/")[0]]
        return spec

    def _read(self, member: str, entry: tuple[object, ...]) -> memoryview | None:
        """The marshalled code of the member (after the .pyc's 16-byte header), or None if zipimport is to
        read it."""
        compress, size, offset = entry[1], entry[2], entry[4]
        name = member.encode()
        head = 30 + len(name)  # the local header as zipfile writes it: no extra field
        if compress != 0 or not isinstance(size, int) or not isinstance(offset, int):
            return None
        if size < 16 or offset < 0 or offset + head + size > self.size:
            return None
        try:
            data = self.pread(self.fd, head + size, offset)
        except OSError:
            return None
        if (
            len(data) != head + size
            or data[:4] != self.SIGNATURE
            or data[26:30] != len(name).to_bytes(2, "little") + b"\0\0"
            or data[30:head] != name
            or data[head : head + 4] != self.magic
            or data[head + 4 : head + 8] != b"\1\0\0\0"  # hash-based, unchecked: as freeze.py writes them
        ):
            return None
        return memoryview(data)[head + 16 :]

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the module the import system makes

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None and isinstance(spec.loader_state, memoryview):  # read by find_spec
            data, spec.loader_state = spec.loader_state, None  # the bytes are not kept once the code is made
            exec(self.loads(data), module.__dict__)
        else:
            exec(self.get_code(module.__name__), module.__dict__)

    def get_code(self, name: str) -> CodeType:
        spec = self.find_spec(name)
        if spec is None:
            return self._zip(name).get_code(name)
        code: CodeType = self.loads(spec.loader_state)
        return code

    def get_source(self, name: str) -> str | None:
        return None  # the archive holds compiled modules only, as zipimport would say

    def is_package(self, name: str) -> bool:
        return name.replace(".", "/") + "/__init__.pyc" in self.files

    def get_filename(self, name: str) -> str:
        spec = self.find_spec(name)
        return spec.origin if spec is not None and spec.origin else self._zip(name).get_filename(name)

    def get_data(self, path: str) -> bytes:
        return zipimport.zipimporter(self.archive).get_data(path)

    def get_resource_reader(self, name: str) -> object:
        return self._zip(name).get_resource_reader(name)

    def _zip(self, name: str) -> zipimport.zipimporter:
        """zipimport's importer of the folder that holds the module (it reads a module by its last name only)."""
        parent = name.rpartition(".")[0]
        return ZIP("/".join([self.archive, *parent.split(".")]) if parent else self.archive)


def _stored(loader: object) -> _Stored | None:
    """The finder of the archive `loader` (the zipimporter that imported this module) read this module from,
    or None when zipimport keeps no table of it (another implementation) or it cannot be opened."""
    import posix

    archive = getattr(loader, "archive", None)
    files = getattr(zipimport, "_zip_directory_cache", {}).get(archive)
    if not isinstance(archive, str) or not isinstance(files, dict):
        return None
    try:
        fd = posix.open(archive, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return None
    return _Stored(archive, files, fd, posix.fstat(fd).st_size)


def _zip_hook() -> None:
    """On 3.9, ZIP reads the zips on sys.path (pythonXY.zip) from now on, in place of zipimporter."""
    if ZIP is not zipimport.zipimporter:
        sys.path_hooks[:] = [ZIP if hook is zipimport.zipimporter else hook for hook in sys.path_hooks]
        for path, importer in list(sys.path_importer_cache.items()):
            if type(importer) is zipimport.zipimporter:
                del sys.path_importer_cache[path]


def _install() -> None:
    fd = sys._xoptions.get("publish-payload")
    payload = int(fd) if isinstance(fd, str) and fd.isdigit() else -1
    if payload >= 0:
        import os

        try:
            os.set_inheritable(payload, False)  # the program's own children never see it
        except OSError:
            payload = -1
    _zip_hook()
    finder = _Finder(sys.prefix, payload)
    if payload >= 0:
        if "zlib" not in sys.builtin_module_names:
            # An extension module in pyenv's and python.org's builds, unpacked with what every start needs
            # (freeze.py's UNPACKER_NEEDS) and checked by the launcher: imported now, from lib-dynload, since
            # the finder needs it to unpack the rest and lib-dynload leaves sys.path just below.
            try:  # noqa: SIM105 - contextlib is one more import at every start
                import zlib  # noqa: F401
            except ImportError:
                pass
        # the extension modules are lazy members: found by the finder alone, which checks what it finds
        sys.path[:] = [p for p in sys.path if not p.endswith("/lib-dynload")]
        sys.path_hooks.insert(0, finder.more_hook)
    sys.meta_path.append(finder)
    stored = _stored(globals().get("__loader__"))
    if stored is not None:
        sys.meta_path.insert(0, stored)


_install()

from publish.cli import run  # noqa: E402

sys.exit(run())
