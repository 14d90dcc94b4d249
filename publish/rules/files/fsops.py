"""Directory work relative to descriptors that never follows a symbolic link: pure os, no policy.

Every name is looked up in a directory already open (``dir_fd``), so no path string is resolved twice:
a directory swapped for a link between a check and a use is seen, never followed. Here: the flags, one
``lstat`` and the fsyncs; the walks through a tree (entering a directory as checked, removing a tree, a
tree's newest change) are :mod:`publish.rules.files.walks`, which a POSIX resolve does not load.
"""

from __future__ import annotations

import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
DIR_FLAGS = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC


def same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``dir_fd``; None when there is nothing there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def fsync_fd(fd: int) -> None:
    """fsync a directory's descriptor; a filesystem that refuses fsync on directories is as durable as it gets."""
    try:
        os.fsync(fd)
    except OSError as e:
        import errno  # here: a resolve needs none of it

        if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise


def fsync_dir(path: str, *, unsupported_ok: bool, unopenable_ok: bool) -> None:
    """fsync the directory ``path``, opened without following a link at its last element.

    ``unsupported_ok``: a refusal of fsync itself (EINVAL, EOPNOTSUPP) passes, as :func:`fsync_fd`.
    ``unopenable_ok``: a directory that cannot be opened is skipped (Windows opens none)."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError:
        if unopenable_ok:
            return
        raise
    try:
        if unsupported_ok:
            fsync_fd(fd)
        else:
            os.fsync(fd)
    finally:
        os.close(fd)
