"""The POSIX root as the store reaches it: one descriptor of the root per call, pub/, exec/ and tomb/ opened
below it without following a link, other paths found as a framework would find them.  A part of
:class:`publish.stores.posix.PosixStore`, shared with its file operations (:mod:`publish.stores.posix_files`)."""

from __future__ import annotations

import _stat as stat  # stat's functions and constants themselves: stat.py is one more module to load
import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start

from publish.rules.errors import Failure, FileError, MissingRoot
from publish.rules.files import fsops
from publish.rules.layout import EXEC, PUB
from publish.rules.redact import shown

_ROOT_FLAGS = os.O_RDONLY | fsops.O_DIRECTORY | fsops.O_CLOEXEC  # follows a link: the root may be one
_FOLLOW_FLAGS = (
    os.O_RDONLY | fsops.O_DIRECTORY | fsops.O_CLOEXEC
)  # below exec/: links are followed, as frameworks do
# A marker is opened without following a link, without waiting for a FIFO's writer, without becoming a
# terminal's controlling process: what is not a regular file is refused, never read.
MARKER_FLAGS = (
    os.O_RDONLY
    | fsops.O_NOFOLLOW
    | fsops.O_CLOEXEC
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
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


def entry_kind(entry: os.DirEntry[str]) -> str:
    try:
        return kind(entry.stat(follow_symlinks=False).st_mode)
    except OSError:  # gone since it was listed
        return "not a regular file"


def why(e: OSError) -> str:
    """What went wrong, as an OSError says it."""
    return e.strerror or str(e)


class RootDirs:
    """The directories of a checkpoint root that is a directory.  ``root`` is absolute and lexically clean; it
    may be a link."""

    def __init__(self, root: str) -> None:
        self.root = root

    def full(self, path: str) -> str:
        """The location of ``path``, for a message or an answer."""
        return self.root.rstrip("/") + "/" + path

    def open_root(self) -> int:
        try:
            return os.open(self.root, _ROOT_FLAGS)
        except FileNotFoundError:
            raise MissingRoot(
                f"checkpoint root {shown(self.root)} does not exist",
                f"publish init -checkpoint {shown(self.root)}",
            ) from None
        except NotADirectoryError:
            raise Failure(f"checkpoint root {self.root} is not a directory") from None
        except OSError as e:
            raise FileError(f"checkpoint root {shown(self.root)}", e, op="open") from None

    def not_a_directory(self, name: str, st: os.stat_result) -> Failure:
        what = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a directory"
        return Failure(f"{self.full(name)} {what}")

    def open_top(self, root_fd: int, name: str) -> int | None:
        """pub/ or exec/ opened in the root, never through a link; None when missing; else a Failure naming it."""
        for _ in range(3):  # a name that flips back to a directory while looked at is opened again
            try:
                return os.open(name, fsops.DIR_FLAGS, dir_fd=root_fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                import errno  # here: a resolve that finds what it looks for needs none of it

                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise FileError(self.full(name), e, op="open") from None
            try:
                st = fsops.lstat_at(root_fd, name)
            except OSError as e:
                raise FileError(self.full(name), e, op="stat") from None
            if st is None:
                return None
            if not stat.S_ISDIR(st.st_mode):
                raise self.not_a_directory(name, st)
        raise Failure(f"{self.full(name)} keeps changing")

    def open_dir(self, root_fd: int, path: str) -> int:
        """The directory at ``path`` (not the root): pub/ or exec/ as its first element never through a link,
        the rest as the framework would find it.  FileNotFoundError when it, or pub/ or exec/, is missing."""
        first, _, rest = path.partition("/")
        if first not in (PUB, EXEC):
            return os.open(path, _FOLLOW_FLAGS, dir_fd=root_fd)
        top = self.open_top(root_fd, first)
        if top is None:
            import errno

            raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.full(first))
        if not rest:
            return top
        try:
            return os.open(rest, _FOLLOW_FLAGS, dir_fd=top)
        finally:
            os.close(top)

    def lstat(self, path: str) -> os.stat_result | None:
        """``lstat`` of ``path`` from the root's descriptor (through open_dir); None when nothing is there."""
        parent, _, name = path.rpartition("/")
        root_fd = self.open_root()
        try:
            if not parent:
                return fsops.lstat_at(root_fd, name)
            try:
                fd = self.open_dir(root_fd, parent)
            except (FileNotFoundError, NotADirectoryError):
                return None
            try:
                return fsops.lstat_at(fd, name)
            finally:
                os.close(fd)
        except OSError as e:
            raise FileError(self.full(path), e, op="stat") from None
        finally:
            os.close(root_fd)

    def lstat_all(self, paths: list[str]) -> list[os.stat_result | None]:
        """:meth:`lstat` of each of ``paths``, in their order: the root opened once and each parent folder
        once (as open_dir finds it), every name looked up in its parent's descriptor."""
        by_parent: dict[str, list[int]] = {}
        for i, path in enumerate(paths):
            by_parent.setdefault(path.rpartition("/")[0], []).append(i)
        found: list[os.stat_result | None] = [None] * len(paths)
        root_fd = self.open_root()
        try:
            for parent, indices in by_parent.items():
                i = indices[0]
                try:
                    fd = self.open_dir(root_fd, parent) if parent else os.dup(root_fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                try:
                    for i in indices:
                        found[i] = fsops.lstat_at(fd, paths[i].rpartition("/")[2])
                finally:
                    os.close(fd)
        except OSError as e:
            raise FileError(self.full(paths[i]), e, op="stat") from None
        finally:
            os.close(root_fd)
        return found

    def open_folder(self, path: str) -> int | None:
        """A descriptor of the directory at ``path`` (found as list_folders finds it); None when missing."""
        root_fd = self.open_root()
        try:
            return self.open_dir(root_fd, path) if path else os.dup(root_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise FileError(self.full(path), e, op="open") from None
        finally:
            os.close(root_fd)

    def refuse_odd(self, path: str, st: os.stat_result) -> None:
        """Refuse a marker that is not a regular file: a FIFO would block its reader for ever."""
        if not stat.S_ISREG(st.st_mode):
            raise Failure(f"{self.full(path)} is {kind(st.st_mode)}, not a regular file")
