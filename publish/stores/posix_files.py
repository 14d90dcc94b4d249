"""The generic file operations of the POSIX store: what resolve, status and the frameworks read of a save.  A
part of :class:`publish.stores.posix.PosixStore`, over the root's directories (:mod:`publish.stores.posix_root`)."""

from __future__ import annotations

import errno
import os
import stat

from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError, PublishError
from publish.rules.files import fsops
from publish.rules.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, RANGE_LIMIT, RootDirs, kind, why

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.stores.base import LastChange

#: The errors that leave a folder's age untold (it is left in place, with why), rather than failing the verb.
_UNTOLD_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ELOOP)
_DIR_FLAGS = fsops.DIR_FLAGS


def _is_dir(entry: os.DirEntry[str], unexamined: list[tuple[str, str]] | None) -> bool:
    """True when ``entry`` is a directory, or a link to one; a child that cannot be examined (a link loop, a
    name too long, a permission) is not, and is appended to ``unexamined`` with why."""
    try:
        return entry.is_dir()
    except OSError as e:
        if unexamined is not None:
            unexamined.append((entry.name, why(e)))
        return False


class _Listed:
    """A folder's entries listed already, used where ``os.scandir`` of it would be."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self.entries = entries

    def __enter__(self) -> list[os.DirEntry[str]]:
        return self.entries

    def __exit__(self, *exc: object) -> None:
        pass


#: The most files and folders of the folders newest looked at that a store keeps a record of, in all.
SEEN = 200_000


class PosixFiles:
    """Files and folders below the root: never a FIFO waited on, never a link followed where it matters."""

    def __init__(self, dirs: RootDirs) -> None:
        self._dirs = dirs
        # What newest saw of small folders (walks.newest_tree), by path, for remove_folder to remove one as
        # seen, without listing it again: SEEN files and folders at most in all.
        self.seen: dict[str, dict[str, tuple[os.stat_result, list[str], list[str]]]] = {}
        self._seen_left = SEEN

    def list_folders(
        self, dl: Deadline, path: str, unexamined: list[tuple[str, str]] | None = None
    ) -> list[str]:
        full = self._dirs.full(path)
        root_fd = self._dirs.open_root()
        try:
            fd = self._dirs.open_dir(root_fd, path)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise Failure(f"{full} is not a directory") from None
        except OSError as e:
            raise FileError(full, e, op="open") from None
        finally:
            os.close(root_fd)
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it if _is_dir(e, unexamined)]
        except OSError as e:
            raise FileError(full, e, op="list") from None
        finally:
            os.close(fd)

    def read(self, dl: Deadline, path: str, limit: int) -> bytes | None:
        """The regular file at ``path``; a link, a FIFO or anything else there is refused (never opened
        in a way that could wait)."""
        full = self._dirs.full(path)
        parent, _, name = path.rpartition("/")
        root_fd = self._dirs.open_root()
        try:
            dir_fd = self._dirs.open_dir(root_fd, parent) if parent else os.dup(root_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise FileError(full, e, op="open") from None
        finally:
            os.close(root_fd)
        try:
            st = fsops.lstat_at(dir_fd, name)
            if st is None:
                return None
            self._dirs.refuse_odd(path, st)
            fd = os.open(name, MARKER_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:  # swapped for a link after the lstat
                raise Failure(f"{full} is a symbolic link, not a regular file") from None
            raise FileError(full, e, op="open") from None
        finally:
            os.close(dir_fd)
        try:
            from publish.rules.files.fileio import (
                read_at_most,  # here: a scan that finds no save reads nothing
            )

            self._dirs.refuse_odd(path, os.fstat(fd))
            data = read_at_most(fd, limit)
            if data is None:
                raise Failure(f"{full} is over {limit} bytes")
            return data
        except OSError as e:
            raise FileError(full, e, op="read") from None
        finally:
            os.close(fd)

    def list_files(self, dl: Deadline, path: str) -> list[str]:
        fd = self._dirs.open_folder(path)
        if fd is None:
            return []
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it if e.is_file(follow_symlinks=False)]
        except OSError as e:
            raise FileError(self._dirs.full(path), e, op="list") from None
        finally:
            os.close(fd)

    def sizes(self, dl: Deadline, path: str) -> dict[str, int]:
        top = self._dirs.open_folder(path)
        if top is None:
            return {}
        found: dict[str, int] = {}
        self._walk(top, path, found)
        return found

    def _walk(
        self, top: int, path: str, found: dict[str, int] | None, listed: list[os.DirEntry[str]] | None = None
    ) -> tuple[int, int]:
        """The regular files below the folder ``top`` (a descriptor, closed here), the save at ``path``: how
        many and what they hold, each put in ``found`` (by its path relative to the folder) when given;
        ``listed``: what ``top`` holds, listed already.  A
        walk that never follows a link, a loop (not recursion) with one descriptor at a time, so a deep tree
        is fine; a link, a FIFO or any file that is not regular is a Failure naming it; an OSError a
        FileError naming the save."""
        files = held = 0
        pending = [""]
        try:
            while pending:
                below = pending.pop()
                if below:
                    try:
                        fd = os.open(below, fsops.DIR_FLAGS, dir_fd=top)
                    except (FileNotFoundError, NotADirectoryError):
                        continue  # gone while we looked: not part of the save
                    except OSError as e:
                        if e.errno == errno.ELOOP:
                            continue  # swapped for a link while we looked: never followed
                        raise
                else:
                    fd = top
                try:
                    with os.scandir(fd) if listed is None or below else _Listed(listed) as it:
                        for entry in it:
                            name = f"{below}/{entry.name}" if below else entry.name
                            if entry.is_dir(follow_symlinks=False):
                                pending.append(name)
                                continue
                            st = entry.stat(follow_symlinks=False)
                            if not stat.S_ISREG(st.st_mode):  # a FIFO, a link: never read, never followed
                                where = self._dirs.full(f"{path}/{name}")
                                raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file")
                            files += 1
                            held += st.st_size
                            if found is not None:
                                found[name] = st.st_size
                finally:
                    if fd != top:
                        os.close(fd)
        except OSError as e:
            raise FileError(self._dirs.full(path), e, op="list") from None
        finally:
            os.close(top)
        return files, held

    def save_sizes(self, dl: Deadline, paths: list[str]) -> list[int | PublishError]:
        """What each save at ``paths`` holds, in their order, as ``sizes`` and then ``size`` tell it: the sum
        of the files below a folder, the size of a save that is one regular file, else 0; or the error
        measuring it alone raises (a Failure: a link or a FIFO inside it; a FileError: a folder that cannot
        be read).  The root is opened once and each parent folder once (as open_dir finds it); each save is
        opened in its parent's descriptor with ``O_NOFOLLOW``, so a folder is never reached through a path
        checked earlier.  A save that is a link, or one whose parent or itself cannot be opened that way, is
        measured as ``sizes`` and ``size`` measure it alone (a link to a folder followed, as there)."""
        by_parent: dict[str, list[int]] = {}
        for i, path in enumerate(paths):
            by_parent.setdefault(path.rpartition("/")[0], []).append(i)
        found: list[int | PublishError] = [0] * len(paths)
        try:
            root_fd = self._dirs.open_root()
        except PublishError as e:  # the root gone meanwhile: what sizes says of each save then
            return [e] * len(paths)
        try:
            for parent, indices in by_parent.items():
                try:
                    fd = self._dirs.open_dir(root_fd, parent) if parent else os.dup(root_fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # nothing there: 0, as sizes and size say of it
                except (OSError, PublishError):
                    for i in indices:
                        found[i] = self._alone(dl, paths[i])
                    continue
                try:
                    for i in indices:
                        path = paths[i]
                        name = path.rpartition("/")[2]
                        try:
                            top = os.open(name, _DIR_FLAGS, dir_fd=fd)
                        except OSError as e:
                            found[i] = self._not_opened(dl, fd, path, name, e)
                            continue
                        found[i] = self._opened(top, path)
                finally:
                    os.close(fd)
        finally:
            os.close(root_fd)
        return found

    def held_sizes(
        self, dl: Deadline, paths: list[str], measure: list[bool]
    ) -> list[int | PublishError | None]:
        """Whether a save is at each of ``paths`` and, where ``measure`` says so, what it holds, in their
        order: None where nothing is there (as :meth:`RootDirs.lstat_all` tells it, raising what it raises),
        else what :meth:`save_sizes` says of it (0 where not measured).  A save measured is opened once, in
        its parent's descriptor with ``O_NOFOLLOW``: that it opens tells that it is there, without its
        ``lstat``; one that does not open (a file, a link, a FIFO, a folder that cannot be opened) is looked
        at with ``lstat``, as lstat_all looks, and measured as save_sizes measures it."""
        by_parent: dict[str, list[int]] = {}
        for i, path in enumerate(paths):
            by_parent.setdefault(path.rpartition("/")[0], []).append(i)
        found: list[int | PublishError | None] = [None] * len(paths)
        root_fd = self._dirs.open_root()
        i = 0
        try:
            for parent, indices in by_parent.items():
                i = indices[0]
                try:
                    fd = self._dirs.open_dir(root_fd, parent) if parent else os.dup(root_fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # nothing there, as lstat_all says
                try:
                    for i in indices:
                        path = paths[i]
                        name = path.rpartition("/")[2]
                        if not measure[i]:
                            if fsops.lstat_at(fd, name) is not None:
                                found[i] = 0
                            continue
                        try:
                            top = os.open(name, _DIR_FLAGS, dir_fd=fd)
                        except FileNotFoundError:
                            continue  # nothing there, as lstat says
                        except OSError as e:
                            st = fsops.lstat_at(fd, name)  # as lstat_all asks it, and fails
                            if st is not None:
                                found[i] = self._not_a_folder(dl, path, e, st)
                            continue
                        found[i] = self._opened(top, path)
                finally:
                    os.close(fd)
        except OSError as e:
            raise FileError(self._dirs.full(paths[i]), e, op="stat") from None
        finally:
            os.close(root_fd)
        return found

    def _opened(self, top: int, path: str) -> int | PublishError:
        """What the save folder at ``path``, opened as ``top`` (closed here), holds, or the error its walk met."""
        try:
            with os.scandir(top) as it:
                listed: list[os.DirEntry[str]] | None = list(it)
        except OSError:
            listed = None  # the walk lists it again, and says why it cannot
        if listed == []:
            os.close(top)
            return 0  # an empty folder holds 0 bytes, as size says of a folder
        try:
            return self._walk(top, path, None, listed)[1]
        except PublishError as e:
            return e

    def _not_opened(self, dl: Deadline, parent: int, path: str, name: str, e: OSError) -> int | PublishError:
        """What the save at ``path`` (``name`` in the descriptor ``parent``), which could not be opened as a
        folder without following a link (``e``), holds: a file's size, nothing when it is gone, else what
        ``sizes`` and ``size`` say of it alone (a link followed, as there; a folder that cannot be read)."""
        if isinstance(e, FileNotFoundError):
            return 0  # gone since it was seen: nothing there
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            return self._alone(dl, path)  # a folder that cannot be opened: its error, as sizes says it
        try:
            st = fsops.lstat_at(parent, name)
        except OSError:
            return self._alone(dl, path)
        if st is None:
            return 0
        return self._not_a_folder(dl, path, e, st)

    def _not_a_folder(self, dl: Deadline, path: str, e: OSError, st: os.stat_result) -> int | PublishError:
        """What the save at ``path`` holds, which is there (its ``lstat``: ``st``) but did not open as a folder
        without following a link (``e``): a file's size, else what ``sizes`` and ``size`` say of it alone."""
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            return self._alone(dl, path)  # a folder that cannot be opened: its error, as sizes says it
        if stat.S_ISREG(st.st_mode):
            return st.st_size  # a save that is one file
        return self._alone(dl, path)  # a link (followed, as sizes follows it), a FIFO...

    def _alone(self, dl: Deadline, path: str) -> int | PublishError:
        """What the save at ``path`` holds as save_size asks it of one save: ``sizes``, then ``size``."""
        try:
            found = self.sizes(dl, path)
            if found:
                return sum(found.values())
            return self.size(dl, path) or 0
        except PublishError as e:
            return e

    def newest_all(self, dl: Deadline, paths: list[str]) -> list[LastChange]:
        """When anything last changed at each of ``paths``, in their order, as Store.newest tells: a walk down
        from the root's descriptor as remove_folder's (each element checked with ``lstat``, opened with
        ``O_NOFOLLOW`` and compared), then through the folder with :func:`walks.newest_tree`.  The root is
        opened once, and the walk down to a folder kept for the paths that follow, as far as they lie in it.
        What the walk saw of a small folder whose time it told is kept in ``seen``."""
        fds = [self._dirs.open_root()]  # the root, then the elements of parent, entered
        parent: list[str] | None = None
        told: LastChange | None = None  # what the walk to parent ended in, when it did not reach it
        found: list[LastChange] = []
        try:
            for path in paths:
                parts = path.split("/")
                if parts[:-1] != parent:
                    keep = 0  # the elements of parent entered that this path's folder lies in too
                    while keep < min(len(fds) - 1, len(parts) - 1) and parent and parent[keep] == parts[keep]:
                        keep += 1
                    for fd in fds[1 + keep :]:
                        os.close(fd)
                    del fds[1 + keep :]
                    parent = parts[:-1]
                    told = self._walk_down(fds, parts, len(parts) - 1, None)
                if told is not None:
                    found.append(told)
                    continue
                seen: dict[str, tuple[os.stat_result, list[str], list[str]]] | None = (
                    {} if self._seen_left > 0 else None
                )
                held = len(fds)
                try:
                    change = self._walk_down(fds, parts, len(parts), seen)
                finally:
                    for fd in fds[held:]:
                        os.close(fd)
                    del fds[held:]
                assert change is not None
                if seen and change.at is not None and change.at < float("inf"):  # inf: seen changing
                    self.seen[path] = seen
                    self._seen_left -= sum(1 + len(files) for _, files, _ in seen.values())
                found.append(change)
            return found
        finally:
            for fd in fds:
                os.close(fd)

    def _walk_down(
        self,
        fds: list[int],
        parts: list[str],
        stop: int,
        seen: dict[str, tuple[os.stat_result, list[str], list[str]]] | None,
    ) -> LastChange | None:
        """The walk of newest from ``fds`` (the root, then the elements of ``parts`` it entered, appended) down
        to element ``stop``: None on reaching it short of the last, else what newest answers."""
        from publish.rules.files import walks  # here: only -orphans asks how old a folder is
        from publish.stores.base import LastChange

        rel = ""
        try:
            for i in range(len(fds) - 1, stop):
                part = parts[i]
                rel = "/".join(parts[: i + 1])
                st = fsops.lstat_at(fds[-1], part)
                if st is None:
                    return LastChange(None)
                if stat.S_ISLNK(st.st_mode):
                    return LastChange(None, link=rel)
                if not stat.S_ISDIR(st.st_mode):
                    return LastChange(walks.changed_at(st) if i == len(parts) - 1 else None)
                entered = walks.enter(fds[-1], part, st)
                if entered == walks.LINK:
                    return LastChange(None, link=rel)
                if entered == walks.GONE:
                    return LastChange(None)
                if isinstance(entered, str):
                    return LastChange(walks.CHANGING)
                fds.append(entered)
            if stop < len(parts):
                return None
            return LastChange(walks.newest_tree(fds[-1], walks.NEWEST_ENTRIES, walks.NEWEST_DEPTH, seen))
        except walks.Untold as e:
            return LastChange(None, why=f"its age cannot be told: {e}")
        except OSError as e:
            below = e.filename if isinstance(e.filename, str) and e.filename else ""
            where = self._dirs.full(rel + ("/" + below if below else ""))
            if e.errno in _UNTOLD_ERRNOS:
                return LastChange(None, why=f"its age cannot be told: {shown(where)}: {why(e)}")
            raise FileError(shown(where), e, op="stat") from None

    def size(self, dl: Deadline, path: str) -> int | None:
        st = self._dirs.lstat(path)
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None

    def read_range(self, dl: Deadline, path: str, offset: int, length: int) -> bytes | None:
        full = self._dirs.full(path)
        if length > RANGE_LIMIT:
            raise Failure(f"{full}: a read of {length} bytes, over the {RANGE_LIMIT} one read may take")
        parent, _, name = path.rpartition("/")
        dir_fd = self._dirs.open_folder(parent)
        if dir_fd is None:
            return None
        try:
            fd = os.open(name, MARKER_FLAGS, dir_fd=dir_fd)  # a link or a FIFO is never followed or waited on
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                return None
            raise FileError(full, e, op="open") from None
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
            raise FileError(full, e, op="read") from None
        finally:
            os.close(fd)
