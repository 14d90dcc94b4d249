"""Walks through a tree relative to descriptors that never follow a symbolic link: pure os, no policy.

Entering a directory as its ``lstat`` described it, removing a tree (no recursion, a bounded number of
descriptors), a tree's newest change, and the removal of a small tree as that walk saw it. Every name is looked up in a directory already open, as in
:mod:`publish.rules.files.fsops`, whose flags and ``lstat`` these walks use.
"""

from __future__ import annotations

import errno
import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start
import stat

from publish.rules.files import (
    fsops,  # called through the module: a test's spy on fsops.lstat_at sees every walk
)

# What stands at a name that was checked to be a directory, when it could not be entered or removed.
LINK = "link"  # a symbolic link now
GONE = "gone"  # nothing now
CHANGED = "changed"  # another directory, or something that is neither a directory nor a link

_TRIES = 100  # a name that flips back to the directory it was is tried again, this many times at most
_WINDOW = 16  # directories kept open during a removal; an outer one is reopened through ".." and checked


class Changed(OSError):
    """The tree changed under a removal in a way it cannot follow without leaving what it checked."""


def enter(dir_fd: int, name: str, expect: os.stat_result) -> int | str:
    """Open ``name`` in ``dir_fd`` as the directory ``expect`` (its ``lstat``) describes, never through a link.

    Returns the descriptor, or LINK, GONE or CHANGED for what stands at ``name`` instead.
    """
    for _ in range(_TRIES):
        try:
            fd = os.open(name, fsops.DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return GONE
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        else:
            if fsops.same(os.fstat(fd), expect):
                return fd
            os.close(fd)
            return CHANGED
        now = fsops.lstat_at(dir_fd, name)
        if now is None:
            return GONE
        if stat.S_ISLNK(now.st_mode):
            return LINK
        if not (stat.S_ISDIR(now.st_mode) and fsops.same(now, expect)):
            return CHANGED
    return CHANGED


class _Frame:
    """A directory being emptied: its name in its parent, its identity, its descriptor while held."""

    __slots__ = ("name", "st", "fd", "pending", "retries")

    def __init__(self, name: str, st: os.stat_result, fd: int) -> None:
        self.name = name
        self.st = st
        self.fd: int | None = fd
        self.pending: list[str] | None = None  # subdirectories still to empty; None until listed
        self.retries = 0


def _unlink_or_keep(fd: int, name: str) -> bool:
    """Unlink the non-directory ``name`` (a link is removed as a link); False when it is a directory now."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno not in (errno.EISDIR, errno.EPERM):
            raise
        now = fsops.lstat_at(fd, name)
        if now is None:
            return True
        if stat.S_ISDIR(now.st_mode):
            return False
        raise
    return True


def _list(fd: int) -> list[str]:
    """Unlink every non-directory in the directory ``fd``; the names of its subdirectories."""
    with os.scandir(fd) as it:
        children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    return [name for name, is_dir in children if is_dir or not _unlink_or_keep(fd, name)]


def _path(frames: list[_Frame], name: object = "") -> str:
    names = [f.name for f in frames[1:]]
    return "/".join([*names, name] if isinstance(name, str) and name else names)


def remove_tree(dir_fd: int, name: str, expect: os.stat_result) -> str:
    """Remove the directory ``name`` in ``dir_fd`` (``expect`` is its ``lstat``) and everything in it.

    Returns "" when it is gone, or LINK, GONE or CHANGED (see :func:`enter`) when ``name`` did not hold
    that directory when it was entered or removed.  A link inside is unlinked, never followed.  No Python
    recursion, and at most ``_WINDOW`` descriptors held however deep the tree.  Raises OSError (its
    ``filename`` relative to ``name``), or :class:`Changed` when the tree moved under the removal.
    """
    for _ in range(_TRIES):
        top = enter(dir_fd, name, expect)
        if isinstance(top, str):
            return top
        _empty(top, name, expect)
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return ""
        except FileNotFoundError:
            return GONE
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise OSError(e.errno, e.strerror, "") from None
        now = fsops.lstat_at(dir_fd, name)  # refilled, or swapped for something else
        if now is None:
            return GONE
        if stat.S_ISLNK(now.st_mode):
            return LINK
        if not (stat.S_ISDIR(now.st_mode) and fsops.same(now, expect)):
            return CHANGED
    raise Changed(errno.ENOTEMPTY, "it keeps changing", "")


def _retry(frame: _Frame, frames: list[_Frame], name: str) -> None:
    """Look at ``name`` in ``frame`` again later, a bounded number of times."""
    frame.retries += 1
    if frame.retries > _TRIES:
        raise Changed(errno.EAGAIN, "it keeps changing", _path(frames, name))
    assert frame.pending is not None
    frame.pending.append(name)


def _empty(top: int, name: str, expect: os.stat_result) -> None:
    """Remove everything in the directory ``top`` (closed on return), depth first, without recursion."""
    frames = [_Frame(name, expect, top)]
    low = 0  # frames[low:] hold their descriptors
    try:
        while frames:
            frame = frames[-1]
            fd = frame.fd
            assert fd is not None
            try:
                if frame.pending is None:
                    frame.pending = _list(fd)
                if frame.pending:
                    child = frame.pending.pop()
                    st = fsops.lstat_at(fd, child)
                    if st is None:
                        continue
                    if not stat.S_ISDIR(st.st_mode):
                        if not _unlink_or_keep(fd, child):
                            _retry(frame, frames, child)
                        continue
                    entered = enter(fd, child, st)
                    if isinstance(entered, str):
                        if entered != GONE:  # a link or another directory now: looked at again
                            _retry(frame, frames, child)
                        continue
                    frames.append(_Frame(child, st, entered))
                    if len(frames) - low > _WINDOW:
                        outer, frames[low].fd = frames[low].fd, None
                        assert outer is not None
                        os.close(outer)
                        low += 1
                    continue
                # frame is empty: remove it from its parent (the caller removes the top, closed below)
                if len(frames) == 1:
                    break
                parent = frames[-2]
                if parent.fd is None:
                    up = os.open("..", fsops.DIR_FLAGS, dir_fd=fd)
                    if not fsops.same(os.fstat(up), parent.st):
                        os.close(up)
                        raise Changed(errno.EXDEV, "it was moved while it was being removed", _path(frames))
                    parent.fd = up
                    low = len(frames) - 2
                frames.pop()
                frame.fd = None
                os.close(fd)
                try:
                    os.rmdir(frame.name, dir_fd=parent.fd)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                        raise
                    _retry(parent, frames, frame.name)  # refilled, or swapped for something else
            except Changed:
                raise
            except OSError as e:
                raise OSError(e.errno, e.strerror, _path(frames, e.filename)) from None
    finally:
        for frame in frames:
            if frame.fd is not None:
                os.close(frame.fd)


#: The most entries :func:`newest_tree` looks at below one folder, and the deepest it goes (one descriptor a
#: level): past either, the folder's age is not told.  As many entries as an S3 listing holds at most.
NEWEST_ENTRIES = 1_000_000
NEWEST_DEPTH = 128
#: What :func:`newest_tree` returns for a tree seen changing while it was walked.
CHANGING = float("inf")


class Untold(Exception):
    """The newest change of a tree could not be told: more entries or levels than the walk looks at."""


def changed_at(st: os.stat_result) -> float:
    """When the file ``st`` describes last changed: its mtime, or its ctime when later (a ctime cannot be set
    back, so a tree copied with its old mtimes is still new)."""
    return max(st.st_mtime, st.st_ctime)


#: The most entries below a folder that :func:`newest_tree` records for :func:`remove_seen` (and at most
#: _WINDOW levels): a larger tree is not recorded, and its removal lists it again.
SEEN_ENTRIES = 64


def newest_tree(
    top: int,
    entries: int = NEWEST_ENTRIES,
    depth: int = NEWEST_DEPTH,
    seen: dict[str, tuple[os.stat_result, list[str], list[str]]] | None = None,
) -> float:
    """The newest :func:`changed_at` of the directory ``top`` (a descriptor, left open) and of everything below
    it, never following a link (a link counts by its own ``lstat``); CHANGING when an entry vanished or was
    swapped while the walk ran.  :class:`Untold` past ``entries`` entries or ``depth`` levels; an OSError
    carries the path (relative to ``top``) it met.

    ``seen``: filled with what the walk saw, when the tree holds at most SEEN_ENTRIES entries in at most
    _WINDOW levels (else left empty): per folder, by its path relative to ``top`` (``""``: ``top``), its
    ``lstat`` (``top``'s ``fstat``), the names in it of what is not a folder, and of its folders.  Only
    what a walk that returned a finite time filled is the tree as it was."""
    here = os.fstat(top)
    newest = changed_at(here)
    count = 0
    # (descriptor, its path relative to top, its subdirectories not yet entered, each with its lstat)
    stack: list[tuple[int, str, list[tuple[str, os.stat_result]]]] = []
    fd, where = top, ""  # top is the caller's: never closed here
    try:
        while True:
            subdirs: list[tuple[str, os.stat_result]] = []
            others: list[str] = []
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        count += 1
                        if count > entries:
                            raise Untold(f"more than {entries} files and folders below it")
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            return CHANGING
                        newest = max(newest, changed_at(st))
                        if stat.S_ISDIR(st.st_mode):
                            subdirs.append((entry.name, st))
                        else:
                            others.append(entry.name)
            except OSError as e:
                raise OSError(e.errno, e.strerror, where) from None
            if seen is not None:
                if count > SEEN_ENTRIES or len(stack) >= _WINDOW:
                    seen.clear()
                    seen = None
                else:
                    seen[where] = (here, others, [name for name, _ in subdirs])
            stack.append((fd, where, subdirs))
            fd = -1
            while stack and not stack[-1][2]:
                done, _, _ = stack.pop()
                if done != top:
                    os.close(done)
            if not stack:
                return newest
            parent, parent_where, pending = stack[-1]
            name, here = pending.pop()
            where = f"{parent_where}/{name}" if parent_where else name
            if len(stack) >= depth:
                raise Untold(f"more than {depth} levels of folders below it")
            try:
                entered = enter(parent, name, here)
            except OSError as e:
                raise OSError(e.errno, e.strerror, where) from None
            if isinstance(entered, str):
                return CHANGING  # gone, a link now, or another directory: it changed under the walk
            fd = entered
    finally:
        if fd >= 0 and fd != top:
            os.close(fd)
        for held, _, _ in stack:
            if held != top:
                os.close(held)


def remove_seen(dir_fd: int, name: str, seen: dict[str, tuple[os.stat_result, list[str], list[str]]]) -> bool:
    """Remove the directory ``name`` in ``dir_fd`` as :func:`newest_tree` saw it (``seen``), without listing it
    again: ``name`` and each folder seen in it entered as :func:`enter` does (opened with ``O_NOFOLLOW`` and
    compared with what the walk saw), each file seen unlinked, each folder removed once emptied, relative to
    its parent's descriptor; a folder seen empty is removed with ``rmdir`` alone (which removes only an empty
    directory, never through a link).  True when ``name`` is gone; False as soon as anything is not as seen
    (another folder, a link, something added or gone, any error), what is left being the caller's to look
    at and remove as :func:`remove_tree` does."""
    try:
        top = enter(dir_fd, name, seen[""][0])
    except (OSError, KeyError):
        return False
    if isinstance(top, str):
        return False
    # (descriptor, its path relative to name, its name in its parent, the folders in it still to remove)
    stack = [(top, "", name, list(seen[""][2]))]
    try:
        for file in seen[""][1]:
            _unlink_seen(top, file)
        while stack:
            fd, where, _, pending = stack[-1]
            if pending:
                child = pending.pop()
                rel = f"{where}/{child}" if where else child
                st, files, folders = seen[rel]
                if not files and not folders:
                    _rmdir_seen(fd, child)
                    continue
                entered = enter(fd, child, st)
                if isinstance(entered, str):
                    return False
                stack.append((entered, rel, child, list(folders)))
                for file in files:
                    _unlink_seen(entered, file)
                continue
            _, _, own, _ = stack.pop()
            os.close(fd)
            if stack:
                _rmdir_seen(stack[-1][0], own)
        os.rmdir(name, dir_fd=dir_fd)  # gone meanwhile: remove_tree tells
        return True
    except OSError:
        return False
    finally:
        for held, _, _, _ in stack:
            os.close(held)


def _unlink_seen(fd: int, name: str) -> bool:
    """Unlink what is not a folder, seen as ``name`` in ``fd``: False when it is gone already; OSError when it
    is a folder now."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True


def _rmdir_seen(fd: int, name: str) -> bool:
    """Remove the empty folder ``name`` in ``fd``: False when it is gone already; OSError when it is not empty,
    or not a folder, now."""
    try:
        os.rmdir(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True
