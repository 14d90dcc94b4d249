"""What a manifest records of a save on a POSIX root, and the check of a save against it.

The save itself is found as the frameworks find it (a link to it, folder or one file, is followed, as they
follow it); below it,
every directory and file is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so a file
swapped for a link is seen, never followed.  A link, a FIFO, a socket or a device inside a save is not a
file of it: never read, never listed in a manifest.  A name is bytes: a file is listed by its name's bytes
read as UTF-8 with ``surrogateescape`` (publish.rules.manifest records that), and reached by those bytes, whatever
the locale's encoding of file names.  Files are read in large chunks into one buffer per
thread, several files at once (hashlib releases the GIL while it hashes), and every chunk checks the
deadline.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from publish.rules.errors import Failure, FileError
from publish.rules.files import fsops
from publish.rules.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, RootDirs, kind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    from publish.rules.deadline import Deadline

    T = TypeVar("T")
    Row = tuple[str, int, "str | None"]

#: A save that is one file is opened as the frameworks open it (a link followed), never waiting on a FIFO.
_FILE_FLAGS = os.O_RDONLY | fsops.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
#: The bytes one read takes (one buffer per hashing thread).  1 MiB: larger buffers (8 MiB x 4 threads) fall
#: out of the CPU's caches between the read and the hash and cost 1.1-1.5x the CPU of a plain hashlib loop
#: (bench/verify_cpu.py, docs/perf-verify.md); 1 MiB is at that floor, with the threads' wall time kept.
CHUNK = 1024 * 1024
#: How many files are hashed at once.
THREADS = 4
#: The most files one save may hold (a manifest lists no more).
FILES_LIMIT = 1_000_000


#: The interpreter reads and writes file names as UTF-8 with surrogateescape, as a manifest records them
#: (every Python 3.7+ on Linux and macOS but one given a locale of another encoding): names pass unchanged.
_NATIVE = sys.getfilesystemencoding() == "utf-8" and sys.getfilesystemencodeerrors() == "surrogateescape"


def recorded(name: str) -> str:
    """A name as the OS gave it (a directory listing's), as a manifest records it."""
    return name if _NATIVE else os.fsencode(name).decode("utf-8", "surrogateescape")


def raw(name: str) -> str:
    """A name as a manifest records it, as the OS takes it: the same bytes."""
    return name if _NATIVE else os.fsdecode(name.encode("utf-8", "surrogateescape"))


class _Missing(Exception):
    """What stands at a listed file is not a regular file there (``why`` says what)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def timed_out(dl: Deadline, where: str, doing: str) -> Failure:
    return Failure(f"{shown(where)}: {doing} did not finish within -timeout")


def hash_fd(fd: int, dl: Deadline, where: str, buf: bytearray | None = None) -> tuple[int, str]:
    """The size and SHA-256 of what ``fd`` reads from here to its end, read a CHUNK at a time; a Failure
    naming -timeout once ``dl`` passes."""
    size, digest = _hash(fd, dl, buf)
    if digest is None:
        raise timed_out(dl, where, "reading it")
    return size, digest


def _hash(fd: int, dl: Deadline, buf: bytearray | None = None) -> tuple[int, str | None]:
    """hash_fd's reading: (bytes read, None) once ``dl`` passes before the end."""
    import hashlib

    h = hashlib.sha256()
    buf = buf if buf is not None else bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    while True:
        n = os.readv(fd, [buf])
        if not n:
            return size, h.hexdigest()
        h.update(view[:n])
        size += n
        left = dl.left()
        if left is not None and left <= 0:
            return size, None


def _open_dir_below(top: int, rel: str) -> int:
    """The directory ``rel`` below the descriptor ``top``, each element opened with O_NOFOLLOW (a link is
    ELOOP or ENOTDIR, as the platform says)."""
    fd = os.dup(top)
    try:
        for part in rel.split("/") if rel else []:
            nxt = os.open(raw(part), fsops.DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_file_below(top: int, rel: str) -> int:
    """The regular file ``rel`` below ``top``, never through a link; _Missing saying why when there is none."""
    parent, _, name = rel.rpartition("/")
    try:
        dir_fd = _open_dir_below(top, parent)
    except FileNotFoundError:
        raise _Missing("missing") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Missing("a folder on its path is not a directory (a symbolic link?)") from None
        raise
    try:
        try:
            fd = os.open(raw(name), MARKER_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise _Missing("missing") from None
        except OSError:
            st = fsops.lstat_at(dir_fd, raw(name))
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise _Missing(f"{kind(st.st_mode)}, not a regular file") from None
            raise
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _Missing(f"{kind(st.st_mode)}, not a regular file")
    return fd


def parallel(work: Callable[[T], None], items: Sequence[T], threads: int = THREADS) -> None:
    """``work(item)`` for every item, on up to ``threads`` threads; the first exception is raised once all
    have stopped (the others stop taking items)."""
    if len(items) <= 1 or threads <= 1:
        for item in items:
            work(item)
        return
    from publish.process.threads import Worker

    errors: list[BaseException] = []
    queue = list(reversed(items))
    workers = []

    def loop() -> None:
        while not errors:
            try:
                item = queue.pop()
            except IndexError:
                return
            try:
                work(item)
            except BaseException as e:  # handed to the caller's thread
                errors.append(e)

    for _ in range(min(threads, len(items))):
        workers.append(Worker(loop))
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


class SaveFiles:
    """The files of the save at ``path`` of ``store``: ``top`` a descriptor of the save's folder (None for a
    save that is one file, then ``file`` is its descriptor)."""

    def __init__(self, store: RootDirs, path: str) -> None:
        self.store = store
        self.path = path
        self.top: int | None = None
        self.file: int | None = None
        parent, _, name = path.rpartition("/")
        root = store.open_root()
        try:
            try:
                self.top = store.open_dir(root, path)
            except NotADirectoryError:
                self.top = None
            except FileNotFoundError:
                raise Failure(f"save {shown(store.full(path))} does not exist") from None
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise FileError(shown(store.full(path)), e) from None
            if self.top is None:
                try:
                    self.file = self._file_in(root, parent, name)
                except _Missing as e:
                    raise Failure(f"save {shown(store.full(path))}: {e.why}") from None
                except OSError as e:
                    raise FileError(shown(store.full(path)), e) from None
        finally:
            os.close(root)

    def _file_in(self, root: int, parent: str, name: str) -> int:
        """The save that is one file, found as the frameworks find it (a link to it followed, as a link to
        a save's folder is); it must be a regular file, never a FIFO waited on."""
        try:
            dir_fd = self.store.open_dir(root, parent) if parent else os.dup(root)
        except FileNotFoundError:
            raise _Missing("missing") from None
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise _Missing("missing") from None
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise _Missing(f"{kind(st.st_mode)}, not a regular file")
        return fd

    def close(self) -> None:
        for fd in (self.top, self.file):
            if fd is not None:
                os.close(fd)
        self.top = self.file = None

    def where(self, rel: str) -> str:
        return self.store.full(f"{self.path}/{rel}" if rel else self.path)

    def listing(self) -> list[str]:
        """Every regular file below the save's folder, relative to it; links and other kinds left out."""
        if self.top is None:
            return [""]
        found: list[str] = []
        pending = [""]
        while pending:
            below = pending.pop()
            try:
                fd = _open_dir_below(self.top, below)
            except FileNotFoundError:
                continue  # gone while it was looked at: not part of the save
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    continue  # swapped for a link or a file: never followed
                raise FileError(shown(self.where(below)), e) from None
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        here = recorded(entry.name)
                        name = f"{below}/{here}" if below else here
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(name)
                        elif entry.is_file(follow_symlinks=False):
                            found.append(name)
                            if len(found) > FILES_LIMIT:
                                raise Failure(
                                    f"save {shown(self.where(''))} holds more than {FILES_LIMIT} files, "
                                    "more than a manifest may list"
                                )
            except OSError as e:
                raise FileError(shown(self.where(below)), e) from None
            finally:
                os.close(fd)
        return found

    def open(self, rel: str) -> int:
        """The regular file ``rel`` of the save (``""``: the save that is one file); _Missing says why not."""
        if self.top is None:
            assert self.file is not None
            if rel:
                raise _Missing("missing (the save is one file)")
            return os.dup(self.file)
        if not rel:
            raise _Missing("the save is a folder, not one file")
        return _open_file_below(self.top, rel)


#: The share of the time left to a publication that hashing its files may take.
HASH_SHARE = 0.5


def hash_budget(dl: Deadline) -> Deadline:
    """The part of ``dl`` that a publication's hashing may take: HASH_SHARE of what is left (unbounded when
    ``dl`` is)."""
    from publish.rules.deadline import Deadline

    left = dl.left()
    if left is None or dl.timeout is None:
        return Deadline(None)
    return Deadline.until(dl.clock() + max(left, 0.0) * HASH_SHARE, dl.timeout, dl.clock)


def save_rows(store: RootDirs, dl: Deadline, path: str, digests: bool = True) -> list[Row]:
    """Every regular file of the save at ``path`` with its size and (``digests``) SHA-256.

    The digests are taken within :func:`hash_budget` of ``dl``: a file not hashed by then is recorded with
    its size and no digest, so a save too large to read in the time a scan has (a multi-terabyte one, the
    last scan after a job's stop signal) is published all the same, its manifest checking those files' sizes
    only.  The rest of ``dl`` is left for the manifest and the entry."""
    save = SaveFiles(store, path)
    hashing = hash_budget(dl) if digests else None
    try:
        names = save.listing()
        rows: dict[str, Row] = {}
        buffers: dict[int, bytearray] = {}

        def one(rel: str) -> None:
            import _thread

            where = save.where(rel)
            try:
                fd = save.open(rel)
            except _Missing:
                return  # gone, or swapped for a link, since the listing: not a file of it
            except OSError as e:
                raise FileError(shown(where), e) from None
            try:
                left = None if hashing is None else hashing.left()
                if hashing is not None and (left is None or left > 0):
                    buf = buffers.setdefault(_thread.get_ident(), bytearray(CHUNK))
                    size, digest = _hash(fd, hashing, buf)
                    rows[rel] = (rel, size if digest is not None else os.fstat(fd).st_size, digest)
                else:
                    rows[rel] = (rel, os.fstat(fd).st_size, None)
            except OSError as e:
                raise FileError(shown(where), e) from None
            finally:
                os.close(fd)

        parallel(one, names, THREADS if digests else 1)
        return sorted(rows.values())
    finally:
        save.close()


def check_rows(
    store: RootDirs, dl: Deadline, path: str, rows: Sequence[Row], deep: bool
) -> tuple[str, str] | None:
    """The first of ``rows`` (in their order) that the save at ``path`` does not match, as (its location,
    why), or None when every one matches: the file is there, regular, of that size, and (``deep``) of
    that SHA-256 when the row has one.  Sizes are checked first, then the digests (several at once)."""
    try:
        save = SaveFiles(store, path)
    except Failure as e:
        return store.full(path), str(e)
    try:
        bad: dict[int, str] = {}
        for i, (rel, size, _) in enumerate(rows):
            try:
                fd = save.open(rel)
            except _Missing as e:
                bad[i] = e.why
                break
            except OSError as e:
                bad[i] = f"could not open it: {e.strerror or e}"
                break
            try:
                got = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if got != size:
                bad[i] = f"size {got}, manifest says {size}"
                break
            left = dl.left()
            if left is not None and left <= 0:
                raise timed_out(dl, store.full(path), "checking its files")
        first = min(bad) if bad else len(rows)
        todo = [i for i in range(first) if deep and rows[i][2] is not None]
        buffers: dict[int, bytearray] = {}

        def one(i: int) -> None:
            import _thread

            if bad and i > min(bad):
                return  # a file before it is bad already: that one is reported
            rel, size, digest = rows[i]
            buf = buffers.setdefault(_thread.get_ident(), bytearray(CHUNK))
            try:
                fd = save.open(rel)
            except _Missing as e:
                bad[i] = e.why
                return
            except OSError as e:
                bad[i] = f"could not open it: {e.strerror or e}"
                return
            try:
                got_size, got = hash_fd(fd, dl, save.where(rel), buf)
            except OSError as e:
                bad[i] = f"could not read it: {e.strerror or e}"
                return
            finally:
                os.close(fd)
            if got_size != size:
                bad[i] = f"size {got_size} when read, manifest says {size}"
            elif got != digest:
                bad[i] = f"sha256 {got}, manifest says {digest}"

        parallel(one, todo)
        if not bad:
            return None
        i = min(bad)
        return save.where(rows[i][0]), bad[i]
    finally:
        save.close()
