"""The Store over a POSIX directory: local disk, NFS, Lustre, GPFS.

Everything is looked up relative to a descriptor of the root, opened once per call (the root may be a
link).  pub/ and exec/ must be real directories: they are opened with ``O_NOFOLLOW``, so one swapped for a
link after a check is refused, not followed.  Removal walks down with ``O_NOFOLLOW`` too (publish.files.fsops).

One store made of two parts: the root's directories (:class:`publish.stores.posix_root.RootDirs`: the root's
descriptor, pub/, exec/ and tomb/ never through a link) and the generic file operations over them
(:class:`publish.stores.posix_files.PosixFiles`, imported on first use: a resolve that answers needs none of
them); the entry, mark and tombstone operations, and ``holds`` and ``exists``, are here.
"""

from __future__ import annotations

import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start
import stat

from publish.deadline import Deadline
from publish.errors import Failure, FileError
from publish.files import fsops
from publish.layout import EXEC, MAN, POSIX_NAME_MAX, PUB, TOMB
from publish.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, RootDirs, entry_kind, kind

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.stores.base import LastChange, Removal, Upload
    from publish.stores.posix_files import PosixFiles

_O_NOFOLLOW = fsops.O_NOFOLLOW
_O_CLOEXEC = fsops.O_CLOEXEC

#: A manifest's temporary file: this prefix and random hex, in man/ (no entry name starts with ".").
TEMP_PREFIX = ".tmp-"
#: How long after its last change a temporary file in man/ is taken for one a cut-off write left.
TEMP_AGE = 3600.0


class PosixStore:
    """A checkpoint root that is a directory.  ``root`` is absolute and lexically clean; it may be a link."""

    cheap_listing = True

    def __init__(self, root: str) -> None:
        self.root = root
        self._dirs = RootDirs(root)
        self._files_part: PosixFiles | None = None

    @property
    def _files(self) -> PosixFiles:
        """The file operations part, made on first use (its module imported then)."""
        if self._files_part is None:
            from publish.stores.posix_files import PosixFiles

            self._files_part = PosixFiles(self._dirs)
        return self._files_part

    @property
    def dirs(self) -> RootDirs:
        """The root's directories, reached through descriptors: what the upload of a save walks."""
        return self._dirs

    def location(self, path: str) -> str:
        return self._dirs.full(path)

    # -- generic file operations: the files part (holds and exists: an lstat of the root's directories)

    def holds(self, dl: Deadline, path: str) -> bool:
        return self._dirs.lstat(path) is not None

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

    def newest(self, dl: Deadline, path: str) -> LastChange:
        return self._files.newest(dl, path)

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
        try:
            fd = os.open(self.root, os.O_RDONLY | fsops.O_DIRECTORY | _O_CLOEXEC)
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            raise Failure(f"checkpoint root {shown(self.root)} is not a directory") from None
        except OSError as e:
            raise FileError(f"checkpoint root {shown(self.root)}", e, op="open") from None
        else:
            os.close(fd)
            return False
        from os import makedirs  # init's alone
        from posixpath import dirname

        try:
            makedirs(self.root)
        except FileExistsError:
            return False  # made meanwhile by another init
        except OSError as e:
            raise FileError(
                f"checkpoint root {shown(self.root)}", e, "could not make it", op="make"
            ) from None
        parent = dirname(self.root.rstrip("/")) or "/"
        try:  # durable where the filesystem allows
            fd = os.open(parent, os.O_RDONLY | fsops.O_DIRECTORY | _O_CLOEXEC)
            try:
                fsops.fsync_fd(fd)
            finally:
                os.close(fd)
        except OSError:
            pass
        return True

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

    def create_entry(self, dl: Deadline, name: str) -> bool:
        if len(name.encode("utf-8")) > POSIX_NAME_MAX:
            raise Failure(
                f"the entry name would be {len(name.encode('utf-8'))} bytes, over the {POSIX_NAME_MAX} a POSIX "
                "file name may hold: the save's path is too long"
            )
        fd = self._made_top(
            PUB, 2, f"{self._dirs.full(PUB)} was removed while an entry was being created in it"
        )
        try:
            return self._create_in(fd, name)
        finally:
            os.close(fd)

    def create_mark(self, dl: Deadline, name: str) -> bool:
        fd = self._made_top(EXEC, 2, f"{self._dirs.full(EXEC)} was removed while a mark was being made in it")
        try:
            return self._create_in(fd, name, EXEC)
        finally:
            os.close(fd)

    def _create_in(self, pub_fd: int, name: str, top: str = PUB) -> bool:
        """Create the empty ``name`` in the directory ``pub_fd`` (the root's ``top``) exclusively, durably."""
        path = self._dirs.full(f"{top}/{name}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o644, dir_fd=pub_fd)
        except FileExistsError:
            return False
        except OSError as e:
            raise FileError(path, e, op="create") from None
        try:
            os.fsync(fd)
        except OSError as e:
            raise FileError(path, e, op="sync") from None
        finally:
            os.close(fd)
        self._sync(pub_fd, self._dirs.full(top))
        return True

    def _sync(self, fd: int, where: str) -> None:
        """fsync the directory ``fd`` (at ``where``, for messages) as :func:`fsops.fsync_fd` does."""
        try:
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(where, e, op="sync") from None

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        fd = self._pub_dir()
        if fd is None:
            return
        try:
            self._unlink_all(fd, PUB, names)
        finally:
            os.close(fd)

    def _unlink_all(self, fd: int, where: str, names: list[str]) -> None:
        """Unlink each of ``names`` in the directory ``fd`` (``where``, for messages), then fsync it; a name
        already gone is fine."""
        for name in names:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise FileError(f"{self._dirs.full(where)}/{name}", e, op="remove") from None
        if names:
            self._sync(fd, self._dirs.full(where))

    def uploads(self, dl: Deadline, path: str, cutoff: float) -> list[Upload]:
        return []  # a file being written is a file: newest sees it

    def abort_upload(self, dl: Deadline, upload: Upload) -> bool:
        return False

    def remove_folder(self, dl: Deadline, path: str) -> Removal:
        """Walk down from the root's descriptor, each element checked (``lstat``) then opened with
        ``O_NOFOLLOW`` and compared (``fstat``), and remove the last relative to its parent's descriptor."""
        parts = path.split("/")
        fds = [self._dirs.open_root()]
        try:
            for i, part in enumerate(parts):
                rel = "/".join(parts[: i + 1])
                try:
                    result = self._remove_step(fds, part, rel, last=i == len(parts) - 1)
                except fsops.Changed as e:
                    where = self._dirs.full(rel + ("/" + e.filename if e.filename else ""))
                    raise Failure(f"{where}: could not remove: {e.strerror}") from None
                except OSError as e:
                    where = self._dirs.full(
                        rel + ("/" + e.filename if isinstance(e.filename, str) and e.filename else "")
                    )
                    raise FileError(where, e, "could not remove", op="remove") from None
                if result is not None:
                    return result
            raise AssertionError("unreachable")
        finally:
            for fd in fds:
                os.close(fd)

    def _remove_step(self, fds: list[int], part: str, rel: str, last: bool) -> Removal | None:
        """One element of remove_folder's walk: the Removal when the walk ends here, else None (the element's
        descriptor is appended to ``fds``)."""
        from publish.stores.base import Removal  # prune's alone: a resolve needs none of base's types

        st = fsops.lstat_at(fds[-1], part)
        if st is None:
            return Removal(False)
        if stat.S_ISLNK(st.st_mode):
            return Removal(False, link=rel)
        if not stat.S_ISDIR(st.st_mode):
            if not last:
                return Removal(False)  # a file where a folder would be: there is no such folder
            try:
                os.unlink(part, dir_fd=fds[-1])  # a save that is one file; unlink never follows a link
            except FileNotFoundError:
                return Removal(False)
            return Removal(True)
        outcome = fsops.remove_tree(fds[-1], part, st) if last else fsops.enter(fds[-1], part, st)
        if isinstance(outcome, int):
            fds.append(outcome)
            return None
        if outcome == "":
            return Removal(True)
        if outcome == fsops.LINK:  # swapped for a link after the check: left in place, as any link is
            return Removal(False, link=rel)
        if outcome == fsops.GONE:
            return Removal(False)
        raise Failure(f"{self._dirs.full(rel)}: could not remove: it was replaced while it was being removed")

    # -- tombstones: tomb/ is reached through descriptors, never through a link, like pub/

    def _made_top(self, name: str, opens: int, vanished: str) -> int:
        """A descriptor of pub/, tomb/ or exec/, made (durably: the root fsynced) when missing, opened at most
        ``opens`` times; a Failure saying ``vanished`` when another process keeps removing it."""
        root = self._dirs.open_root()
        try:
            for attempt in range(opens):
                fd = self._dirs.open_top(root, name)
                if fd is not None:
                    return fd
                if attempt == opens - 1:
                    break
                try:
                    os.mkdir(name, 0o755, dir_fd=root)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise FileError(self._dirs.full(name), e, op="make") from None
                self._sync(root, f"checkpoint root {shown(self.root)}")
            raise Failure(vanished)
        finally:
            os.close(root)

    def _tomb_dir(self) -> int | None:
        """A descriptor of tomb/, never through a link; None when it is missing."""
        root = self._dirs.open_root()
        try:
            return self._dirs.open_top(root, TOMB)
        finally:
            os.close(root)

    def list_tombs(self, dl: Deadline) -> list[str]:
        fd = self._tomb_dir()
        if fd is None:
            return []
        try:
            return os.listdir(fd)
        except OSError as e:
            raise FileError(self._dirs.full(TOMB), e, op="list") from None
        finally:
            os.close(fd)

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        if not names:
            return
        fd = self._made_top(TOMB, 4, f"{self._dirs.full(TOMB)}: appeared and vanished while it was opened")
        try:
            for name in names:
                try:
                    f = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                        0o644,
                        dir_fd=fd,
                    )
                except FileExistsError:
                    continue
                os.close(f)  # empty: the one fsync of tomb/ below makes every new name durable
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(self._dirs.full(TOMB), e, op="create") from None
        finally:
            os.close(fd)

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        if not names:
            return
        fd = self._tomb_dir()
        if fd is None:
            return
        try:
            self._unlink_all(fd, TOMB, names)
        finally:
            os.close(fd)

    # -- manifests: man/ is reached through descriptors, never through a link, like pub/

    def _man_dir(self) -> int | None:
        """A descriptor of man/, never through a link; None when it is missing."""
        root = self._dirs.open_root()
        try:
            return self._dirs.open_top(root, MAN)
        finally:
            os.close(root)

    def _manifest_name(self, entry: str) -> str:
        if not entry or "/" in entry or "\0" in entry or entry.startswith("."):
            raise Failure(f"{shown(self._dirs.full(MAN) + '/' + entry)}: not a manifest's name")
        return entry

    def write_manifest(self, dl: Deadline, entry: str, data: bytes) -> None:
        name = self._manifest_name(entry)
        where = f"{self._dirs.full(MAN)}/{name}"
        fd = self._made_top(MAN, 4, f"{self._dirs.full(MAN)}: appeared and vanished while it was opened")
        temp = TEMP_PREFIX + os.urandom(8).hex()
        written = False
        try:
            f = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644, dir_fd=fd
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(f, view[: 1 << 20]) :]
                os.fsync(f)
            finally:
                os.close(f)
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a link there, never follows it
            written = True
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(shown(where), e) from None
        finally:
            if not written:
                try:  # noqa: SIM105  (contextlib costs a POSIX resolve its start-up time)
                    os.unlink(temp, dir_fd=fd)
                except OSError:
                    pass
            os.close(fd)

    def read_manifest(self, dl: Deadline, entry: str, limit: int) -> bytes | None:
        name = self._manifest_name(entry)
        where = shown(f"{self._dirs.full(MAN)}/{name}")
        fd = self._man_dir()
        if fd is None:
            return None
        try:
            try:
                f = os.open(name, MARKER_FLAGS, dir_fd=fd)  # a link or a FIFO is refused, never followed
            except FileNotFoundError:
                return None
            except OSError as e:
                st = fsops.lstat_at(fd, name)
                if st is not None and not stat.S_ISREG(st.st_mode):
                    raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file") from None
                raise FileError(where, e) from None
            try:
                st = os.fstat(f)
                if not stat.S_ISREG(st.st_mode):
                    raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file")
                from publish.files.fileio import (
                    read_at_most,  # a manifest's reader alone: a resolve needs none
                )

                data = read_at_most(f, limit)
            finally:
                os.close(f)
            if data is None:
                raise Failure(f"{where} is over {limit} bytes")
            return data
        except OSError as e:
            raise FileError(where, e) from None
        finally:
            os.close(fd)

    def list_manifests(self, dl: Deadline) -> list[str]:
        fd = self._man_dir()
        if fd is None:
            return []
        try:
            return [n for n in os.listdir(fd) if not n.startswith(".")]
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        finally:
            os.close(fd)

    def manifest_times(self, dl: Deadline) -> dict[str, float]:
        fd = self._man_dir()
        if fd is None:
            return {}
        try:
            times = {}
            for name in os.listdir(fd):
                if not name.startswith("."):
                    st = fsops.lstat_at(fd, name)
                    if st is not None:  # else removed since it was listed
                        times[name] = fsops.changed_at(st)
            return times
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        finally:
            os.close(fd)

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        fd = self._man_dir()
        if fd is None:
            return
        try:
            self._unlink_all(fd, MAN, [self._manifest_name(n) for n in names] + self._stale_temps(fd))
        finally:
            os.close(fd)

    def _stale_temps(self, fd: int) -> list[str]:
        """The temporary files in man/ (the directory ``fd``) unchanged for TEMP_AGE: writes cut off."""
        import time

        cutoff = time.time() - TEMP_AGE
        stale = []
        try:
            for name in os.listdir(fd):
                if name.startswith(TEMP_PREFIX):
                    st = fsops.lstat_at(fd, name)
                    if st is not None and stat.S_ISREG(st.st_mode) and fsops.changed_at(st) < cutoff:
                        stale.append(name)
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        return stale

    def save_rows(self, dl: Deadline, path: str, digests: bool) -> list[tuple[str, int, str | None]]:
        from publish.stores.posix_saves import save_rows

        return save_rows(self._dirs, dl, path, digests)

    def check_rows(
        self, dl: Deadline, path: str, rows: list[tuple[str, int, str | None]], deep: bool
    ) -> tuple[str, str] | None:
        from publish.stores.posix_saves import check_rows

        return check_rows(self._dirs, dl, path, rows, deep)
