"""The Store over a POSIX directory: local disk, NFS, Lustre, GPFS.

Everything is looked up relative to a descriptor of the root, opened once per call (the root may be a
link).  pub/ and exec/ must be real directories: they are opened with ``O_NOFOLLOW``, so one swapped for a
link after a check is refused, not followed.  Removal walks down with ``O_NOFOLLOW`` too (publish.rules.files.fsops).

One store made of three parts: the root's directories (:class:`publish.stores.posix_root.RootDirs`: the root's
descriptor, pub/, exec/ and tomb/ never through a link), the generic file operations over them
(:class:`publish.stores.posix_files.PosixFiles`) and what the store writes and removes: the root, entries,
marks, tombstones, manifests and saves (:class:`publish.stores.posix_writes.PosixWrites`). The last two are
made on first use, their modules imported then: a resolve that answers needs neither. The root's check, the
listing of pub/, ``holds`` and ``exists`` are here.
"""

from __future__ import annotations

import _stat as stat  # stat's functions and constants themselves: stat.py is one more module to load
import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start

from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError
from publish.rules.files import fsops
from publish.rules.layout import EXEC, PUB
from publish.stores.posix_root import RootDirs, entry_kind

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.rules.errors import PublishError
    from publish.stores.base import LastChange, Removal, Sender, Upload
    from publish.stores.posix_files import PosixFiles
    from publish.stores.posix_upload import PosixSave
    from publish.stores.posix_writes import PosixWrites


class PosixStore:
    """A checkpoint root that is a directory.  ``root`` is absolute and lexically clean; it may be a link."""

    cheap_listing = True

    def __init__(self, root: str) -> None:
        self.root = root
        self._dirs = RootDirs(root)
        self._files_part: PosixFiles | None = None
        self._writes_part: PosixWrites | None = None

    @property
    def _files(self) -> PosixFiles:
        """The file operations part, made on first use (its module imported then)."""
        if self._files_part is None:
            from publish.stores.posix_files import PosixFiles

            self._files_part = PosixFiles(self._dirs)
        return self._files_part

    @property
    def _writes(self) -> PosixWrites:
        """The writing part, made on first use (its module imported then)."""
        if self._writes_part is None:
            from publish.stores.posix_writes import PosixWrites

            self._writes_part = PosixWrites(self._dirs)
        return self._writes_part

    def location(self, path: str) -> str:
        return self._dirs.full(path)

    # -- generic file operations: the files part (holds and exists: an lstat of the root's directories)

    def holds(self, dl: Deadline, path: str) -> bool:
        return self._dirs.lstat(path) is not None

    def holds_all(self, dl: Deadline, paths: list[str]) -> list[bool]:
        """:meth:`holds` of each of ``paths``, in their order, each parent folder opened once."""
        return [st is not None for st in self._dirs.lstat_all(paths)]

    def real_paths(self, dl: Deadline, paths: list[str]) -> list[str | None]:
        """For each of ``paths``, in their order, the path below the root that it leads to through a symbolic
        link on it (an attempt's folder that is a link to another's, a save that is a link to a sibling),
        or None: no link on it, nothing there, or it leads out of the root (not in the Store protocol: a
        prune asks if the store has it; S3 has no links).  Each parent folder is resolved once, then each
        name looked up in it with one ``lstat``."""
        import posixpath

        top = posixpath.realpath(self.root)
        parents: dict[str, str] = {}
        found: list[str | None] = []
        for path in paths:
            parent, _, name = path.rpartition("/")
            real_parent = parents.get(parent)
            if real_parent is None:
                real_parent = parents[parent] = posixpath.realpath(posixpath.join(self.root, parent))
            real = posixpath.join(real_parent, name)
            try:
                st = os.lstat(real)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                real = posixpath.realpath(real)
            rel = posixpath.relpath(real, top)
            outside = rel in (".", "..") or rel.startswith("../")
            found.append(None if outside or rel == path else rel)
        return found

    def list_folders(
        self, dl: Deadline, path: str, unexamined: list[tuple[str, str]] | None = None
    ) -> list[str]:
        return self._files.list_folders(dl, path, unexamined)

    def read(self, dl: Deadline, path: str, limit: int) -> bytes | None:
        return self._files.read(dl, path, limit)

    def exists(self, dl: Deadline, path: str) -> bool:
        """True when a regular file is at ``path``; a link, a FIFO or anything else there is refused."""
        st = self._dirs.lstat(path)
        if st is None:
            return False
        self._dirs.refuse_odd(path, st)
        return True

    def children(self, dl: Deadline, path: str) -> tuple[list[str], list[str]]:
        return self.list_folders(dl, path), self.list_files(dl, path)

    def list_files(self, dl: Deadline, path: str) -> list[str]:
        return self._files.list_files(dl, path)

    def sizes(self, dl: Deadline, path: str) -> dict[str, int]:
        return self._files.sizes(dl, path)

    def save_sizes(self, dl: Deadline, paths: list[str]) -> list[int | PublishError]:
        """What each save at ``paths`` holds, as ``sizes`` then ``size`` tell it, or the error they raise, each
        parent folder opened once (not in the Store protocol: status asks if the store has it, as for
        holds_all; publish.stores.posix_files)."""
        return self._files.save_sizes(dl, paths)

    def held_sizes(
        self, dl: Deadline, paths: list[str], measure: list[bool]
    ) -> list[int | PublishError | None]:
        """:meth:`holds_all` of ``paths`` (None: nothing there) with, where ``measure`` says so,
        :meth:`save_sizes` of the saves there, each measured save opened once (not in the Store protocol:
        status asks if the store has it; publish.stores.posix_files)."""
        return self._files.held_sizes(dl, paths, measure)

    def newest(self, dl: Deadline, path: str) -> LastChange:
        return self._files.newest_all(dl, [path])[0]

    def newest_all(self, dl: Deadline, paths: list[str]) -> list[LastChange]:
        """:meth:`newest` of each of ``paths``, in their order (not in the Store protocol: -orphans asks if the
        store has it, as status does for holds_all)."""
        return self._files.newest_all(dl, paths)

    def size(self, dl: Deadline, path: str) -> int | None:
        return self._files.size(dl, path)

    def read_range(self, dl: Deadline, path: str, offset: int, length: int) -> bytes | None:
        return self._files.read_range(dl, path, offset, length)

    # -- the root, pub/ and exec/

    def check_root(self, dl: Deadline) -> None:
        fd = self._dirs.open_root()
        try:
            for name in (PUB, EXEC):
                try:
                    st = fsops.lstat_at(fd, name)
                except OSError as e:
                    raise FileError(self._dirs.full(name), e, op="stat") from None
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    raise self._dirs.not_a_directory(name, st)
        finally:
            os.close(fd)

    def check_exists(self, dl: Deadline) -> None:
        pass  # check_root opened the root: a missing one failed there

    def create_root(self, dl: Deadline) -> bool:
        return self._writes.create_root(dl)

    def list_entries(self, dl: Deadline) -> list[str]:
        """Every name in pub/; a child that is not a regular file is refused, naming it.

        The type comes from the directory listing itself (``d_type``): no stat per entry where the
        filesystem reports it."""
        return list(self._scan_pub(times=False))

    def entry_times(self, dl: Deadline) -> dict[str, float]:
        return self._scan_pub(times=True)

    def _scan_pub(self, times: bool) -> dict[str, float]:
        """One read of pub/: each name, with its mtime when ``times`` (one lstat each, from the listing's
        entry; 0.0 otherwise).  A child that is not a regular file is refused, naming it."""
        pub = self._dirs.full(PUB)
        fd = self._pub_dir()
        if fd is None:
            return {}
        try:
            found: dict[str, float] = {}
            odd = []
            with os.scandir(fd) as it:
                for entry in it:
                    if not entry.is_file(follow_symlinks=False):
                        odd.append(entry)
                        continue
                    if times:
                        try:
                            found[entry.name] = entry.stat(follow_symlinks=False).st_mtime
                        except FileNotFoundError:
                            continue  # removed since it was listed: gone from the answer too
                    else:
                        found[entry.name] = 0.0
            if odd:
                first = min(odd, key=lambda e: e.name)
                raise Failure(f"{pub}/{first.name}: not a publication entry ({entry_kind(first)})")
            return found
        except OSError as e:
            raise FileError(pub, e, op="list") from None
        finally:
            os.close(fd)

    def _pub_dir(self) -> int | None:
        """A descriptor of pub/, never through a link; None when it is missing."""
        root = self._dirs.open_root()
        try:
            return self._dirs.open_top(root, PUB)
        finally:
            os.close(root)

    # -- entries, marks, saves, tombstones and manifests: the writing part

    def create_entry(self, dl: Deadline, name: str) -> bool:
        return self._writes.create_entry(dl, name)

    def create_mark(self, dl: Deadline, name: str) -> bool:
        return self._writes.create_mark(dl, name)

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        self._writes.remove_entries(dl, names)

    def uploads(self, dl: Deadline, path: str, cutoff: float) -> list[Upload]:
        return []  # a file being written is a file: newest sees it

    def abort_upload(self, dl: Deadline, upload: Upload) -> bool:
        return False

    def remove_folder(self, dl: Deadline, path: str) -> Removal:
        seen = self._files_part.seen.pop(path, None) if self._files_part is not None else None
        return self._writes.remove_folder(dl, path, seen)  # as newest saw it, when it did

    def list_tombs(self, dl: Deadline) -> list[str]:
        return self._writes.list_tombs(dl)

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        self._writes.create_tombs(dl, names)

    def tomb_times(self, dl: Deadline) -> dict[str, float]:
        return self._writes.tomb_times(dl)

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        self._writes.remove_tombs(dl, names)

    def write_manifest(self, dl: Deadline, entry: str, data: bytes) -> None:
        self._writes.write_manifest(dl, entry, data)

    def read_manifest(self, dl: Deadline, entry: str, limit: int) -> bytes | None:
        return self._writes.read_manifest(dl, entry, limit)

    def read_manifests(
        self, dl: Deadline, entries: list[str], limit: int
    ) -> dict[str, bytes | None | PublishError]:
        """read_manifest of many entries, man/ opened once (not in the Store protocol: status asks if the
        store has it, as for holds_all)."""
        return self._writes.read_manifests(dl, entries, limit)

    def list_manifests(self, dl: Deadline) -> list[str]:
        return self._writes.list_manifests(dl)

    def manifest_times(self, dl: Deadline) -> dict[str, float]:
        return self._writes.manifest_times(dl)

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        self._writes.remove_manifests(dl, names)

    def save_rows(self, dl: Deadline, path: str, digests: bool) -> list[tuple[str, int, str | None]]:
        from publish.stores.posix_saves import save_rows

        return save_rows(self._dirs, dl, path, digests)

    def check_rows(
        self, dl: Deadline, path: str, rows: list[tuple[str, int, str | None]], deep: bool
    ) -> tuple[str, str] | None:
        from publish.stores.posix_saves import check_rows

        return check_rows(self._dirs, dl, path, rows, deep)

    def open_save(self, dl: Deadline, path: str) -> PosixSave:
        from publish.stores.posix_upload import PosixSave

        return PosixSave(self._dirs, path)

    def sender(self, fork: bool) -> Sender:
        from publish.rules.redact import shown

        raise Failure(f"{shown(self.root)}: a POSIX root is not a mirror: nothing is uploaded into it")
