"""The Store over a POSIX directory: local disk, NFS, Lustre, GPFS.

Everything is looked up relative to a descriptor of the root, opened once per call (the root may be a
link).  pub/ and exec/ must be real directories: they are opened with ``O_NOFOLLOW``, so one swapped for a
link after a check is refused, not followed.  Removal walks down with ``O_NOFOLLOW`` too (publish.fsops).
"""

from __future__ import annotations

import errno
import os
import stat

from publish import fsops
from publish.errors import Failure
from publish.fileio import read_at_most
from publish.layout import EXEC, POSIX_NAME_MAX, PUB, TOMB
from publish.stores.base import Removal

_O_NOFOLLOW = fsops.O_NOFOLLOW
_O_CLOEXEC = fsops.O_CLOEXEC
_O_DIRECTORY = fsops.O_DIRECTORY
_ROOT_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC  # follows a link: the root may be one
_FOLLOW_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC  # below exec/: links are followed, as frameworks do
# A marker is opened without following a link, without waiting for a FIFO's writer, without becoming a
# terminal's controlling process: what is not a regular file is refused, never read.
_MARKER_FLAGS = (
    os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
)
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
#: The most one read_range returns (a zip central directory of a torch archive is far smaller).
RANGE_LIMIT = 64 * 1024 * 1024


def kind(mode: int) -> str:
    """What a file of ``mode`` is, for a message: "a directory", "a FIFO"..."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _entry_kind(entry: os.DirEntry[str]) -> str:
    try:
        return kind(entry.stat(follow_symlinks=False).st_mode)
    except OSError:  # gone since it was listed
        return "not a regular file"


def _why(e: OSError) -> str:
    return e.strerror or str(e)


class PosixStore:
    """A checkpoint root that is a directory.  ``root`` is absolute and lexically clean; it may be a link."""

    cheap_listing = True

    def __init__(self, root: str) -> None:
        self.root = root

    def location(self, path: str) -> str:
        return self.root.rstrip("/") + "/" + path

    def _full(self, path: str) -> str:
        return self.location(path)

    def begin(self, timeout: float | None) -> None:
        pass

    def _open_root(self) -> int:
        try:
            return os.open(self.root, _ROOT_FLAGS)
        except FileNotFoundError:
            raise Failure(f"checkpoint root {self.root} does not exist") from None
        except NotADirectoryError:
            raise Failure(f"checkpoint root {self.root} is not a directory") from None
        except OSError as e:
            raise Failure(f"checkpoint root {self.root}: {_why(e)}") from None

    def _not_a_directory(self, name: str, st: os.stat_result) -> Failure:
        what = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a directory"
        return Failure(f"{self._full(name)} {what}")

    def _open_top(self, root_fd: int, name: str) -> int | None:
        """pub/ or exec/ opened in the root, never through a link; None when missing; else a Failure naming it."""
        for _ in range(3):  # a name that flips back to a directory while looked at is opened again
            try:
                return os.open(name, fsops.DIR_FLAGS, dir_fd=root_fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise Failure(f"{self._full(name)}: {_why(e)}") from None
            st = fsops.lstat_at(root_fd, name)
            if st is None:
                return None
            if not stat.S_ISDIR(st.st_mode):
                raise self._not_a_directory(name, st)
        raise Failure(f"{self._full(name)} keeps changing")

    def _open_dir(self, root_fd: int, path: str) -> int:
        """The directory at ``path`` (not the root): pub/ or exec/ as its first element never through a link,
        the rest as the framework would find it.  FileNotFoundError when it, or pub/ or exec/, is missing."""
        first, _, rest = path.partition("/")
        if first not in (PUB, EXEC):
            return os.open(path, _FOLLOW_FLAGS, dir_fd=root_fd)
        top = self._open_top(root_fd, first)
        if top is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", self._full(first))
        if not rest:
            return top
        try:
            return os.open(rest, _FOLLOW_FLAGS, dir_fd=top)
        finally:
            os.close(top)

    def _lstat(self, path: str) -> os.stat_result | None:
        """``lstat`` of ``path`` from the root's descriptor (through _open_dir); None when nothing is there."""
        parent, _, name = path.rpartition("/")
        root_fd = self._open_root()
        try:
            if not parent:
                return fsops.lstat_at(root_fd, name)
            try:
                fd = self._open_dir(root_fd, parent)
            except (FileNotFoundError, NotADirectoryError):
                return None
            try:
                return fsops.lstat_at(fd, name)
            finally:
                os.close(fd)
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None
        finally:
            os.close(root_fd)

    def check_root(self) -> None:
        fd = self._open_root()
        try:
            for name in (PUB, EXEC):
                try:
                    st = fsops.lstat_at(fd, name)
                except OSError as e:
                    raise Failure(f"{self._full(name)}: {_why(e)}") from None
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    raise self._not_a_directory(name, st)
        finally:
            os.close(fd)

    def list_entries(self) -> list[str]:
        """Every name in pub/; a child that is not a regular file is refused, naming it.

        The type comes from the directory listing itself (``d_type``): no stat per entry where the
        filesystem reports it."""
        pub = self._full(PUB)
        root_fd = self._open_root()
        try:
            fd = self._open_top(root_fd, PUB)
        finally:
            os.close(root_fd)
        if fd is None:
            return []
        try:
            names, odd = [], []
            with os.scandir(fd) as it:
                for entry in it:
                    names.append(entry.name)
                    if not entry.is_file(follow_symlinks=False):
                        odd.append(entry)
            if odd:
                first = min(odd, key=lambda e: e.name)
                raise Failure(f"{pub}/{first.name}: not a publication entry ({_entry_kind(first)})")
            return names
        except OSError as e:
            raise Failure(f"{pub}: {_why(e)}") from None
        finally:
            os.close(fd)

    def create_entry(self, name: str) -> bool:
        if len(name.encode("utf-8")) > POSIX_NAME_MAX:
            raise Failure(
                f"the entry name would be {len(name.encode('utf-8'))} bytes, over the {POSIX_NAME_MAX} a POSIX "
                "file name may hold: the save's path is too long"
            )
        pub = self._full(PUB)
        root_fd = self._open_root()
        try:
            fd = self._open_top(root_fd, PUB)
            if fd is None:
                try:
                    os.mkdir(PUB, 0o755, dir_fd=root_fd)
                except FileExistsError:
                    pass
                except OSError as e:
                    raise Failure(f"{pub}: {_why(e)}") from None
                else:
                    fsops.fsync_fd(root_fd)
                fd = self._open_top(root_fd, PUB)
                if fd is None:
                    raise Failure(f"{pub} was removed while an entry was being created in it")
        finally:
            os.close(root_fd)
        try:
            return self._create_in(fd, name)
        finally:
            os.close(fd)

    def _create_in(self, pub_fd: int, name: str) -> bool:
        path = self._full(f"{PUB}/{name}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o644, dir_fd=pub_fd)
        except FileExistsError:
            return False
        except OSError as e:
            raise Failure(f"{path}: {_why(e)}") from None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsops.fsync_fd(pub_fd)
        return True

    def remove_entries(self, names: list[str]) -> None:
        root_fd = self._open_root()
        try:
            fd = self._open_top(root_fd, PUB)
        finally:
            os.close(root_fd)
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
                raise Failure(f"{self._full(where)}/{name}: {_why(e)}") from None
        if names:
            fsops.fsync_fd(fd)

    def holds(self, path: str) -> bool:
        return self._lstat(path) is not None

    def list_folders(self, path: str) -> list[str]:
        full = self._full(path)
        root_fd = self._open_root()
        try:
            fd = self._open_dir(root_fd, path)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise Failure(f"{full} is not a directory") from None
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(root_fd)
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it if e.is_dir()]
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(fd)

    def _marker(self, path: str, st: os.stat_result) -> None:
        """Refuse a marker that is not a regular file: a FIFO would block its reader for ever."""
        if not stat.S_ISREG(st.st_mode):
            raise Failure(f"{self._full(path)} is {kind(st.st_mode)}, not a regular file")

    def read(self, path: str, limit: int) -> bytes | None:
        """The regular file at ``path``; a link, a FIFO or anything else there is refused (never opened
        in a way that could wait)."""
        full = self._full(path)
        parent, _, name = path.rpartition("/")
        root_fd = self._open_root()
        try:
            dir_fd = self._open_dir(root_fd, parent) if parent else os.dup(root_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(root_fd)
        try:
            st = fsops.lstat_at(dir_fd, name)
            if st is None:
                return None
            self._marker(path, st)
            fd = os.open(name, _MARKER_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:  # swapped for a link after the lstat
                raise Failure(f"{full} is a symbolic link, not a regular file") from None
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(dir_fd)
        try:
            self._marker(path, os.fstat(fd))
            data = read_at_most(fd, limit)
            if data is None:
                raise Failure(f"{full} is over {limit} bytes")
            return data
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        """True when a regular file is at ``path``; a link, a FIFO or anything else there is refused."""
        st = self._lstat(path)
        if st is None:
            return False
        self._marker(path, st)
        return True

    def remove_folder(self, path: str) -> Removal:
        """Walk down from the root's descriptor, each element checked (``lstat``) then opened with
        ``O_NOFOLLOW`` and compared (``fstat``), and remove the last relative to its parent's descriptor."""
        parts = path.split("/")
        fds = [self._open_root()]
        try:
            for i, part in enumerate(parts):
                rel = "/".join(parts[: i + 1])
                try:
                    result = self._remove_step(fds, part, rel, last=i == len(parts) - 1)
                except fsops.Changed as e:
                    where = self._full(rel + ("/" + e.filename if e.filename else ""))
                    raise Failure(f"{where}: could not remove: {e.strerror}") from None
                except OSError as e:
                    where = self._full(
                        rel + ("/" + e.filename if isinstance(e.filename, str) and e.filename else "")
                    )
                    raise Failure(f"{where}: could not remove: {_why(e)}") from None
                if result is not None:
                    return result
            raise AssertionError("unreachable")
        finally:
            for fd in fds:
                os.close(fd)

    def _remove_step(self, fds: list[int], part: str, rel: str, last: bool) -> Removal | None:
        """One element of remove_folder's walk: the Removal when the walk ends here, else None (the element's
        descriptor is appended to ``fds``)."""
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
        raise Failure(f"{self._full(rel)}: could not remove: it was replaced while it was being removed")

    # -- tombstones: tomb/ is reached through descriptors, never through a link, like pub/

    def _tomb_dir(self, create: bool) -> int | None:
        """A descriptor of tomb/ (made, durably, when missing and ``create``); None when missing otherwise."""
        root = self._open_root()
        try:
            for _ in range(3):  # another prune may make or remove it between our calls
                fd = self._open_top(root, TOMB)
                if fd is not None or not create:
                    return fd
                try:
                    os.mkdir(TOMB, 0o755, dir_fd=root)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise Failure(f"{self._full(TOMB)}: {_why(e)}") from None
                fsops.fsync_fd(root)
            raise Failure(f"{self._full(TOMB)}: appeared and vanished while it was opened")
        finally:
            os.close(root)

    def list_tombs(self) -> list[str]:
        fd = self._tomb_dir(create=False)
        if fd is None:
            return []
        try:
            return os.listdir(fd)
        except OSError as e:
            raise Failure(f"{self._full(TOMB)}: {_why(e)}") from None
        finally:
            os.close(fd)

    def create_tombs(self, names: list[str]) -> None:
        if not names:
            return
        fd = self._tomb_dir(create=True)
        assert fd is not None
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
                try:
                    os.fsync(f)
                finally:
                    os.close(f)
            fsops.fsync_fd(fd)
        except OSError as e:
            raise Failure(f"{self._full(TOMB)}: {_why(e)}") from None
        finally:
            os.close(fd)

    def remove_tombs(self, names: list[str]) -> None:
        if not names:
            return
        fd = self._tomb_dir(create=False)
        if fd is None:
            return
        try:
            self._unlink_all(fd, TOMB, names)
        finally:
            os.close(fd)

    # -- what the frameworks read of a save: its files' sizes, and ranges of one file

    def _dir(self, path: str) -> int | None:
        """A descriptor of the directory at ``path`` (found as list_folders finds it); None when missing."""
        root_fd = self._open_root()
        try:
            return self._open_dir(root_fd, path) if path else os.dup(root_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None
        finally:
            os.close(root_fd)

    def list_files(self, path: str) -> list[str]:
        fd = self._dir(path)
        if fd is None:
            return []
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it if e.is_file(follow_symlinks=False)]
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None
        finally:
            os.close(fd)

    def sizes(self, path: str) -> dict[str, int]:
        top = self._dir(path)
        if top is None:
            return {}
        found: dict[str, int] = {}
        pending = [""]
        try:
            while pending:  # a loop, not recursion, and one descriptor at a time: a deep tree is fine
                below = pending.pop()
                try:
                    fd = os.open(below, fsops.DIR_FLAGS, dir_fd=top) if below else os.dup(top)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone while we looked: not part of the save
                except OSError as e:
                    if e.errno == errno.ELOOP:
                        continue  # swapped for a link while we looked: never followed
                    raise
                try:
                    with os.scandir(fd) as it:
                        for entry in it:
                            name = f"{below}/{entry.name}" if below else entry.name
                            if entry.is_dir(follow_symlinks=False):
                                pending.append(name)
                                continue
                            st = entry.stat(follow_symlinks=False)
                            if not stat.S_ISREG(st.st_mode):  # a FIFO, a link: never read, never followed
                                where = self._full(f"{path}/{name}")
                                raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file")
                            found[name] = st.st_size
                finally:
                    os.close(fd)
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None
        finally:
            os.close(top)
        return found

    def size(self, path: str) -> int | None:
        st = self._lstat(path)
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None

    def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        full = self._full(path)
        if length > RANGE_LIMIT:
            raise Failure(f"{full}: a read of {length} bytes, over the {RANGE_LIMIT} one read may take")
        parent, _, name = path.rpartition("/")
        dir_fd = self._dir(parent)
        if dir_fd is None:
            return None
        try:
            fd = os.open(
                name, _MARKER_FLAGS, dir_fd=dir_fd
            )  # a link or a FIFO is never followed or waited on
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                return None
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, got = [], 0
            while got < length:
                chunk = os.pread(fd, min(length - got, 1 << 20), offset + got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(fd)
