"""File access that refuses symbolic links: the root, its ancestors, snapshot directories and files."""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable

from publish.rules.files import fsops
from publish.rules.files.fileio import read_at_most
from publish.rules.snapshot_format import SnapshotError

_REPARSE_POINT = 0x400  # FILE_ATTRIBUTE_REPARSE_POINT, Windows only
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_BINARY", 0)
)
_DIR_FLAGS = (
    os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_CREATE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def is_link(st: os.stat_result) -> bool:
    return stat.S_ISLNK(st.st_mode) or bool(getattr(st, "st_file_attributes", 0) & _REPARSE_POINT)


def lstat_dir(path: str) -> os.stat_result:
    """``lstat`` of a directory that must not be a link; FileNotFoundError passes through."""
    st = os.lstat(path)
    if is_link(st):
        raise SnapshotError(f"{path} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise SnapshotError(f"{path} is not a directory")
    return st


def check_root(root: str | os.PathLike[str]) -> tuple[str, bool]:
    """The root made absolute (lexically), and whether it exists.

    Every existing element of the path, the root included, must be a directory and not a link.
    """
    path = os.path.abspath(os.fspath(root))
    drive, rest = os.path.splitdrive(path)
    current = drive + os.sep
    for part in [p for p in rest.split(os.sep) if p]:
        current = os.path.join(current, part)
        try:
            lstat_dir(current)
        except FileNotFoundError:
            return path, False
    return path, True


def make_root(path: str) -> None:
    """Create the missing elements of an absolute, checked root, refusing links; fsync each new parent."""
    parent = os.path.dirname(path)
    if parent != path:
        try:
            lstat_dir(parent)
        except FileNotFoundError:
            make_root(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    else:
        fsync_dir(parent)
    lstat_dir(path)


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading: not a link (``O_NOFOLLOW``), the same file ``lstat`` saw."""
    before = os.lstat(path)
    if is_link(before):
        raise SnapshotError(f"{path} is a symbolic link")
    if not stat.S_ISREG(before.st_mode):
        raise SnapshotError(f"{path} is not a regular file")
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        if os.path.islink(path):
            raise SnapshotError(f"{path} is a symbolic link") from None
        raise e
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise SnapshotError(f"{path} changed while it was being opened")
    return fd, after


def read_limited(path: str, limit: int) -> bytes:
    """The whole of a small regular file; over ``limit`` bytes is refused."""
    fd, st = open_regular(path)
    try:
        if st.st_size > limit:
            raise SnapshotError(f"{path} is over {limit} bytes")
        data = read_at_most(fd, limit)
        if data is None:
            raise SnapshotError(f"{path} is over {limit} bytes")
        return data
    finally:
        os.close(fd)


def create_exclusive(path: str) -> int:
    """A new file opened for writing; it must not exist (not even as a link)."""
    return os.open(path, _CREATE_FLAGS, 0o666)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file(directory: str, name: str, data: bytes) -> None:
    """``<name>.partial`` created exclusively, written, fsynced, then renamed to ``name``."""
    partial = os.path.join(directory, name + ".partial")
    fd = create_exclusive(partial)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, os.path.join(directory, name))


def fsync_dir(path: str) -> None:
    """Make the names in a directory durable (a no-op where directories cannot be opened)."""
    # The library's rule: any refusal of fsync is an error; only Windows, which opens no directory, skips.
    fsops.fsync_dir(path, unsupported_ok=False, unopenable_ok=os.name == "nt")


def read_limited_at(dir_fd: int, name: str, limit: int) -> bytes:
    """The whole of the small regular file ``name`` in the directory ``dir_fd``, never through a link."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SnapshotError(f"{name} is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SnapshotError(f"{name} is not a regular file")
        data = read_at_most(fd, limit)
        if data is None:
            raise SnapshotError(f"{name} is over {limit} bytes")
        return data
    finally:
        os.close(fd)


_AT_CALLS = {os.open, os.stat, os.unlink, os.rmdir} <= os.supports_dir_fd


def _remove_by_path(root: str, path: str, files: tuple[str, ...]) -> bool:
    for i, file in enumerate(files):
        os.unlink(os.path.join(path, file))
        if i == 0:
            fsync_dir(path)
    try:
        os.rmdir(path)
    except OSError:
        return False
    fsync_dir(root)
    return True


def remove_snapshot(root: str, name: str, files: tuple[str, ...], check: Callable[[int], None]) -> bool:
    """Remove ``files`` (the first made durable before the others go) from the snapshot directory ``name``
    of ``root``, then the directory if it is empty; False when it was not (it is left).

    Every step goes through descriptors: the root is opened once, the snapshot directory is opened in it
    with ``O_NOFOLLOW`` and must be the directory ``lstat`` saw there, ``check(dir_fd)`` re-verifies it
    through that descriptor (it raises to leave it untouched), the files are unlinked relative to it and
    the directory removed relative to the root's.  A directory swapped for a link is refused, not followed.
    """
    path = os.path.join(root, name)
    if not _AT_CALLS:  # Windows: no descriptor-relative calls; the checks by path just made are all there is
        return _remove_by_path(root, path, files)
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        before = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        if is_link(before):
            raise SnapshotError(f"{path} is a symbolic link")
        if not stat.S_ISDIR(before.st_mode):
            raise SnapshotError(f"{path} is not a directory")
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SnapshotError(f"{path} changed while it was being removed") from None
            raise
        try:
            after = os.fstat(fd)
            if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
                raise SnapshotError(f"{path} changed while it was being removed")
            check(fd)
            for i, file in enumerate(files):
                os.unlink(file, dir_fd=fd)
                if i == 0:
                    os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=root_fd)
        except OSError:
            return False
        os.fsync(root_fd)
        return True
    finally:
        os.close(root_fd)


def drop_cache_of_superseded(root: str, verified: list[str], keep_last: int, payload: str) -> None:
    """Ask the kernel to drop the cached pages of the payloads this save will make retention remove.

    They are the snapshots this process verified (``verified``: their directories) beyond the newest
    ``keep_last - 1`` in ``root``.  Only a hint (``POSIX_FADV_DONTNEED`` on clean pages): nothing is read,
    written or removed, and a snapshot that
    stays (the save fails, or it is older than what it supersedes) is only read from the disk again.  The
    new payload's pages then take the memory those pages held instead of pushing other data out of the
    cache, and removing the old payload later has no pages left to free.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    prefix = root + os.sep
    mine = [p for p in verified if p.startswith(prefix) and os.sep not in p[len(prefix) :]]
    mine.sort(key=lambda p: os.path.basename(p)[5:17], reverse=True)  # by step, newest first
    for directory in mine[keep_last - 1 :]:
        try:
            fd, _ = open_regular(os.path.join(directory, payload))
        except (OSError, SnapshotError):
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
