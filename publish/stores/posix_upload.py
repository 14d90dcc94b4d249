"""A save of a POSIX root opened to be uploaded (:meth:`PosixStore.open_save`, for publish.stores.transfer).

Every regular file of the save is found by a walk through descriptors and read through one (``O_NOFOLLOW``
at every step below the save: a link inside a save is an error naming it, never followed).  An S3 key is
UTF-8: a name below the save that is not (POSIX names are bytes) is an error naming it, as a link is, before
anything is sent.  A file is opened once, checked to be the file the walk found, and read with ``preadv``
straight into the caller's buffer; after its last byte it is checked again (same file, same size, mtime and
ctime, nothing past its end).
"""

from __future__ import annotations

import errno
import os
import stat

from publish.rules.errors import UploadError
from publish.rules.files import fsops
from publish.rules.manifest import utf8
from publish.rules.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, kind
from publish.stores.posix_saves import raw, recorded

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.stores.posix_root import RootDirs

#: Why a file whose name is not UTF-8 is not uploaded.
NOT_UTF8 = "a name that is not UTF-8 is not uploaded (an S3 key must be UTF-8)"
_READ_STEP = 4 * (1 << 20)
_PREADV = hasattr(os, "preadv")  # Linux, the BSDs; macOS from Python 3.10 on macOS 11


class PosixSave:
    """The save ``save`` (a folder or one file, relative to the root) walked: ``files`` lists each regular
    file (its path relative to the save, "" for a save that is one file, and its size), sorted by path.
    Holds a descriptor of the save's folder until :meth:`close`."""

    def __init__(self, dirs: RootDirs, save: str) -> None:
        self.dirs = dirs
        self.save = save
        self.fd, walked = _walk(dirs, save)  # fd -1: the save is one file
        self.files = [(path, st.st_size) for path, st in walked]
        self._stats = dict(walked)

    def open(self, path: str) -> PosixFile:
        """The file ``path`` (as listed), opened step by step with ``O_NOFOLLOW`` from the save's folder and
        checked to be the file the walk found, unchanged; UploadError naming it otherwise."""
        where = shown(self.dirs.full(f"{self.save}/{path}" if path else self.save))
        try:
            if self.fd < 0:  # the save is this one file
                parent, _, name = self.save.rpartition("/")
                d = self.dirs.open_folder(parent)
                if d is None:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory")
            else:
                parent, _, name = path.rpartition("/")
                d = _open_below(self.fd, parent) if parent else os.dup(self.fd)
            try:
                fd = os.open(raw(name) if self.fd >= 0 else name, MARKER_FLAGS, dir_fd=d)
            finally:
                os.close(d)
            st = os.fstat(fd)
        except OSError as e:
            raise UploadError(where, _why(e)) from None
        if not _same(st, self._stats[path]):
            os.close(fd)
            raise UploadError(where, "changed while it was being uploaded")
        return PosixFile(fd, st)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PosixFile:
    """One regular file of a save, open for reading."""

    def __init__(self, fd: int, st: os.stat_result) -> None:
        self.fd = fd
        self.st = st

    def read_into(self, buf: memoryview, offset: int) -> int:
        """Fill ``buf`` with the bytes from ``offset``; the count read (fewer where the file ends)."""
        fd = self.fd
        got = 0
        while got < len(buf):
            piece = buf[got : got + _READ_STEP]
            if _PREADV:  # straight into the buffer
                n = os.preadv(fd, [piece], offset + got)
            else:
                data = os.pread(fd, len(piece), offset + got)
                n = len(data)
                piece[:n] = data
            if not n:
                break
            got += n
        return got

    def whole(self) -> bool:
        """After the last byte was read: the file is still the one the walk found, and ends where it did."""
        st = os.fstat(self.fd)
        more = os.pread(self.fd, 1, self.st.st_size)
        return not more and _same(st, self.st)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _walk(dirs: RootDirs, save: str) -> tuple[int, list[tuple[str, os.stat_result]]]:
    """(a descriptor of the save's folder, or -1 for a save that is one file; each regular file below it
    with its lstat).  A link, a FIFO or anything else that is not a folder or a regular file is an error
    naming it, and so is a name that is not UTF-8 (no S3 key can hold it)."""
    st = dirs.lstat(save)
    if st is None:
        raise UploadError(shown(dirs.full(save)), "no such save")
    if stat.S_ISREG(st.st_mode):
        return -1, [("", st)]
    top = dirs.open_folder(save)  # the save's own path is found as the frameworks find it
    if top is None:
        raise UploadError(shown(dirs.full(save)), "no such save")
    found: list[tuple[str, os.stat_result]] = []
    pending = [""]
    try:
        while pending:  # a loop, one descriptor at a time: a deep tree is fine
            below = pending.pop()
            where = f"{save}/{below}" if below else save
            try:
                fd = _open_below(top, below) if below else os.dup(top)
            except OSError as e:
                raise UploadError(shown(dirs.full(where)), _why(e)) from None
            try:
                _scan(dirs, save, fd, below, pending, found)
            except OSError as e:
                raise UploadError(shown(dirs.full(where)), _why(e)) from None
            finally:
                os.close(fd)
    except BaseException:
        os.close(top)
        raise
    found.sort()
    return top, found


def _scan(
    dirs: RootDirs,
    save: str,
    fd: int,
    below: str,
    pending: list[str],
    found: list[tuple[str, os.stat_result]],
) -> None:
    """The entries of the folder ``below`` (open as ``fd``): folders onto ``pending``, files onto ``found``."""
    with os.scandir(fd) as it:
        for entry in it:
            here = recorded(entry.name)
            name = f"{below}/{here}" if below else here
            if not utf8(here):
                raise UploadError(shown(dirs.full(f"{save}/{name}")), NOT_UTF8)
            est = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode):
                pending.append(name)
            elif stat.S_ISREG(est.st_mode):
                found.append((name, est))
            else:
                raise UploadError(shown(dirs.full(f"{save}/{name}")), _refusal(est.st_mode))


def _open_below(top: int, rel: str) -> int:
    """The folder ``rel`` (its names as a manifest records them) below ``top``, one element at a time with
    ``O_NOFOLLOW``."""
    d = os.dup(top)
    try:
        for part in rel.split("/"):
            nxt = os.open(raw(part), fsops.DIR_FLAGS, dir_fd=d)
            os.close(d)
            d = nxt
    except BaseException:
        os.close(d)
        raise
    return d


def _refusal(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link inside a save is not uploaded (it may name a file outside the save)"
    return f"{kind(mode)}, not a regular file: not uploaded"


def _why(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "replaced by a symbolic link while it was read (a link inside a save is not uploaded)"
    return e.strerror or str(e)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
    )
