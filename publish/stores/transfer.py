"""Uploading a save from a POSIX root to an S3 root: several files at once, large files in parallel parts.

:func:`upload_save` reads every regular file of a save through descriptors (``O_NOFOLLOW`` at every step
below the save: a link inside a save is an error naming it, never followed) and puts it at the same relative
path under the S3 root.  An S3 key is UTF-8: a name below the save that is not (POSIX names are bytes) is an
error naming it, as a link is, before anything is sent.  A file up to the part size is one PUT; a larger one
a multipart upload whose parts are sent by several threads at once.  Each thread keeps one buffer of one part
and its own connection, so the memory held is about ``jobs`` parts whatever the save's size (:func:`plan`).

What is checked (docs/s3.md): every PUT and part carries its CRC32 (``x-amz-checksum-crc32``), which a store
that honours it (S3, SeaweedFS) checks against the bytes it received and refuses on a mismatch; the CRC32 it
answers with must be the one sent.  A multipart upload's checksum the store keeps (HEAD) must be the composite
of the parts'.  Every object's size is read back (one LIST of the save, a HEAD for a multipart object or a
save that is one file).  The SHA-256 of each whole file is computed from the bytes read and returned.  A file
whose size, mtime or ctime changes while it is read, or that holds more or fewer bytes than its size, is an
error naming it.

Every request goes through the client's one retry policy.  The threads' clients are forks of the store's and
share its credentials (publish.s3.s3client.Keys): threads refused by the same old key resolve ``-creds`` once
for all of them, and the aborts after a failure sign with what that resolution gave, sent again (renewing the
keys each time) while :data:`ABORT_TIME` lasts, so keys rotated away mid-upload leave no upload open.
"""

from __future__ import annotations

import binascii
import errno
import os
import stat
import zlib

from publish.rules.deadline import Deadline
from publish.rules.errors import PublishError, UploadError
from publish.rules.files import fsops
from publish.rules.manifest import utf8
from publish.rules.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, kind
from publish.stores.posix_saves import raw, recorded

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from publish.s3.s3client import S3Client
    from publish.stores.posix import PosixStore
    from publish.stores.s3 import S3Store

MIB = 1 << 20
#: S3's smallest part (the last may be smaller), its most parts, and the largest part this engine sends.
MIN_PART = 5 * MIB
MAX_PARTS = 10_000
MAX_PART = 64 * MIB
#: The bytes of part buffers held at once (jobs x part size): 8 MiB parts for 8 threads, and with the
#: interpreter's own ~40 MiB a peak RSS near 110 MiB, far below 256 MiB.  Larger parts cost the same CPU per
#: byte and no more throughput against SeaweedFS (docs/perf-mirror.md).  A file over MAX_PARTS x this needs parts larger than BUDGET / jobs: fewer threads
#: then send at once (docs/limits.md).
BUDGET = 64 * MIB
#: How long the aborts of a failed upload may take, past the deadline when it has passed (best effort).
ABORT_TIME = 10.0
_READ_STEP = 4 * MIB
_PREADV = hasattr(os, "preadv")  # Linux, the BSDs; macOS from Python 3.10 on macOS 11


def default_part(jobs: int) -> int:
    """The part size for ``jobs`` threads: BUDGET shared between them, in whole MiB, 5 to 64 MiB."""
    return max(MIN_PART, min(MAX_PART, BUDGET // max(jobs, 1) // MIB * MIB))


def part_of(size: int, part_size: int) -> int:
    """The part size of a file of ``size`` bytes: ``part_size``, or larger (in whole MiB) when the file would
    take more than MAX_PARTS parts."""
    least = -(-size // MAX_PARTS)
    return max(part_size, -(-least // MIB) * MIB)


def plan(sizes: Sequence[int], jobs: int, part_size: int) -> tuple[int, int]:
    """(threads, bytes of each thread's buffer) for files of ``sizes``: at most ``jobs`` threads, fewer when
    the largest part would put jobs x part over BUDGET, never more than there are parts to send."""
    units = 0
    buffer = 0
    for size in sizes:
        part = part_of(size, part_size)
        units += max(1, -(-size // part))
        buffer = max(buffer, min(size, part))
    threads = max(1, min(jobs, units, BUDGET // max(buffer, 1)))
    return threads, buffer


def crc_text(crc: int) -> str:
    """A CRC32 as S3 writes it: the 4 bytes big-endian, in base64."""
    return binascii.b2a_base64(crc.to_bytes(4, "big"), newline=False).decode("ascii")


def composite(crcs: Sequence[int]) -> str:
    """The checksum S3 keeps for a multipart upload with CRC32 parts: the CRC32 of the parts' CRC32s."""
    return crc_text(zlib.crc32(b"".join(c.to_bytes(4, "big") for c in crcs)))


class _File:
    """One regular file of the save, and what its upload has reached."""

    def __init__(self, path: str, rel: str, st: os.stat_result, part_size: int) -> None:
        import hashlib  # OpenSSL's SHA-256 (several times publish.rules.hashing's built-in one): loaded when used
        import threading

        self.path = path  # relative to the save ("" for a save that is one file)
        self.rel = rel  # relative to the root: the key's path on the S3 root
        self.st = st
        self.size = st.st_size
        self.part = part_of(self.size, part_size)
        self.count = max(1, -(-self.size // self.part))
        self.multipart = self.size > self.part
        self.fd = -1
        self.sha = hashlib.sha256()
        self.digest = ""
        self.hashed = 0  # parts fed to sha, in order
        self.crcs = [0] * self.count
        self.etags = [""] * self.count
        self.done = 0
        self.upload_id = ""
        self.completed = False
        self.lock = threading.Lock()


class _Run:
    """The shared state of one upload_save: the units to send, the first failure, the hash turns."""

    def __init__(self, dl: Deadline, src: PosixStore, dst: S3Store, save: str, files: list[_File]) -> None:
        import threading

        self.dl = dl
        self.src = src
        self.dst = dst
        self.save = save
        self.files = files
        self.save_fd = -1
        self.turn = threading.Condition()
        self.lock = threading.Lock()
        self.failure: PublishError | None = None
        self.units = self._order()
        self.expect: dict[str, tuple[int, str | None]] | None = None

    def _order(self) -> Iterator[tuple[_File, int]]:
        # Parts of several files interleaved: threads mostly work on different files, so the per-file
        # SHA-256 (which takes parts in order) seldom makes one wait.  Each file's parts stay in order.
        group = 8
        for start in range(0, len(self.files), group):
            batch = self.files[start : start + group]
            for index in range(max(f.count for f in batch)):
                for f in batch:
                    if index < f.count:
                        yield f, index

    def next_unit(self) -> tuple[_File, int] | None:
        with self.lock:
            if self.failure is not None:
                return None
            return next(self.units, None)

    def fail(self, error: PublishError) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = error
        with self.turn:
            self.turn.notify_all()

    def where(self, f: _File) -> str:
        return shown(self.src.location(f.rel))


def _error(run: _Run, f: _File, detail: str) -> UploadError:
    return UploadError(run.where(f), detail)


def _walk(src: PosixStore, save: str) -> tuple[int, list[tuple[str, os.stat_result]]]:
    """(a descriptor of the save's folder, or -1 for a save that is one file; each regular file below it
    with its lstat).  A link, a FIFO or anything else that is not a folder or a regular file is an error
    naming it, and so is a name that is not UTF-8 (no S3 key can hold it)."""
    st = src.dirs.lstat(save)
    if st is None:
        raise UploadError(shown(src.location(save)), "no such save")
    if stat.S_ISREG(st.st_mode):
        return -1, [("", st)]
    top = src.dirs.open_folder(save)  # the save's own path is found as the frameworks find it
    if top is None:
        raise UploadError(shown(src.location(save)), "no such save")
    found: list[tuple[str, os.stat_result]] = []
    pending = [""]
    try:
        while pending:  # a loop, one descriptor at a time: a deep tree is fine
            below = pending.pop()
            where = f"{save}/{below}" if below else save
            try:
                fd = _open_below(top, below) if below else os.dup(top)
            except OSError as e:
                raise UploadError(shown(src.location(where)), _why(e)) from None
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        here = recorded(entry.name)
                        name = f"{below}/{here}" if below else here
                        if not utf8(here):
                            raise UploadError(shown(src.location(f"{save}/{name}")), NOT_UTF8)
                        est = entry.stat(follow_symlinks=False)
                        if stat.S_ISDIR(est.st_mode):
                            pending.append(name)
                        elif stat.S_ISREG(est.st_mode):
                            found.append((name, est))
                        else:
                            raise UploadError(shown(src.location(f"{save}/{name}")), _refusal(est.st_mode))
            except OSError as e:
                raise UploadError(shown(src.location(where)), _why(e)) from None
            finally:
                os.close(fd)
    except BaseException:
        os.close(top)
        raise
    found.sort()
    return top, found


#: Why a file whose name is not UTF-8 is not uploaded.
NOT_UTF8 = "a name that is not UTF-8 is not uploaded (an S3 key must be UTF-8)"


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


def _open(run: _Run, f: _File) -> int:
    """The file's descriptor, opened once (under its lock) step by step with ``O_NOFOLLOW`` from the save's
    folder, and checked to be the file the walk found, unchanged."""
    if f.fd >= 0:
        return f.fd
    try:
        if run.save_fd < 0:  # the save is this one file
            parent, _, name = run.save.rpartition("/")
            d = run.src.dirs.open_folder(parent)
            if d is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        else:
            parent, _, name = f.path.rpartition("/")
            d = _open_below(run.save_fd, parent) if parent else os.dup(run.save_fd)
        try:
            fd = os.open(raw(name) if run.save_fd >= 0 else name, MARKER_FLAGS, dir_fd=d)
        finally:
            os.close(d)
        st = os.fstat(fd)
    except OSError as e:
        raise _error(run, f, _why(e)) from None
    if not _same(st, f.st):
        os.close(fd)
        raise _error(run, f, "changed while it was being uploaded")
    f.fd = fd
    return fd


def _read(run: _Run, f: _File, fd: int, buf: memoryview, offset: int) -> None:
    got = 0
    try:
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
    except OSError as e:
        raise _error(run, f, e.strerror or str(e)) from None
    if got < len(buf):
        raise _error(run, f, f"changed while it was being uploaded: it ended at byte {offset + got}")


def _hash(run: _Run, f: _File, index: int, data: memoryview) -> None:
    """Feed part ``index`` to the file's SHA-256 once every part before it was fed."""
    with run.turn:
        while f.hashed != index:
            if run.failure is not None:
                raise _Stop
            run.turn.wait(1.0)
    f.sha.update(data)  # only the holder of the turn gets here
    with run.turn:
        f.hashed += 1
        if f.hashed == f.count:
            f.digest = f.sha.hexdigest()
        run.turn.notify_all()


class _Stop(Exception):
    """Another thread failed: this one stops without a failure of its own."""


def _send(run: _Run, client: S3Client, f: _File, index: int, buffer: bytearray) -> None:
    dl = run.dl
    left = dl.left()
    if left is not None and left <= 0:
        raise _error(run, f, f"timed out (the time given was {dl.timeout:g}s)")
    with f.lock:
        fd = _open(run, f)
    offset = index * f.part
    length = min(f.part, f.size - offset)
    view = memoryview(buffer)[:length]
    try:
        _read(run, f, fd, view, offset)
        crc = zlib.crc32(view)
        f.crcs[index] = crc
        _hash(run, f, index, view)
        key = run.dst.key(f.rel)
        if not f.multipart:
            _check_digest(run, f)
            _check_whole(run, f, fd)
            client.put_bytes(key, view, crc_text(crc), deadline=dl)
        else:
            with f.lock:
                if not f.upload_id:
                    f.upload_id = client.create_upload(key, deadline=dl)
            f.etags[index] = client.upload_part(key, f.upload_id, index + 1, view, crc_text(crc), deadline=dl)
    finally:
        view.release()
    with f.lock:
        f.done += 1
        last = f.done == f.count
    if last:
        _finish(run, client, f, fd)


def _check_whole(run: _Run, f: _File, fd: int) -> None:
    """After the last byte was read: the file is still the one the walk found, and ends where it did."""
    try:
        st = os.fstat(fd)
        more = os.pread(fd, 1, f.size)
    except OSError as e:
        raise _error(run, f, e.strerror or str(e)) from None
    if more or not _same(st, f.st):
        raise _error(run, f, "changed while it was being uploaded")


def _check_digest(run: _Run, f: _File) -> None:
    if run.expect is None:
        return
    want = run.expect[f.path][1]
    if want is not None and want != f.digest:
        raise _error(run, f, f"its SHA-256 is {f.digest}, the fast root's manifest says {want}")


def _finish(run: _Run, client: S3Client, f: _File, fd: int) -> None:
    if f.multipart:
        _check_whole(run, f, fd)
        _check_digest(run, f)
        key = run.dst.key(f.rel)
        parts = [(e, crc_text(c)) for e, c in zip(f.etags, f.crcs)]
        answered = client.complete_upload(key, f.upload_id, parts, deadline=run.dl)
        f.completed = True
        want = composite(f.crcs)
        _check_crc(run, f, answered, want)
        head = client.head(key, checksum=True, deadline=run.dl)
        if head is None:
            raise _error(run, f, f"{run.dst.location(f.rel)} is not there after its upload completed")
        _check_size(run, f, head.get("content-length", ""))
        _check_crc(run, f, head.get("x-amz-checksum-crc32", ""), want)
    with f.lock:
        os.close(f.fd)
        f.fd = -1


def _check_crc(run: _Run, f: _File, got: str, want: str) -> None:
    value, _, parts = got.partition("-")
    if got and (value != want or (parts and parts != str(f.count))):
        raise _error(
            run,
            f,
            f"the store keeps the checksum {shown(got)} for {run.dst.location(f.rel)}, "
            f"not {want}-{f.count} (the CRC32 of its parts' CRC32s)",
        )


def _check_size(run: _Run, f: _File, text: str) -> None:
    if text != str(f.size):
        raise _error(
            run,
            f,
            f"the store holds {shown(text) or 'no size'} bytes at {run.dst.location(f.rel)}, not {f.size}",
        )


def _worker(run: _Run, client: S3Client, buffer_size: int) -> None:
    buffer = bytearray(buffer_size)
    current: _File | None = None
    try:
        while True:
            unit = run.next_unit()
            if unit is None:
                return
            current, index = unit
            _send(run, client, current, index, buffer)
    except _Stop:
        return
    except UploadError as e:
        run.fail(e)
    except PublishError as e:
        assert current is not None
        run.fail(_error(run, current, str(e)))
    except BaseException as e:  # a bug, or MemoryError: reported, never a hang of the other threads
        where = run.where(current) if current is not None else shown(run.src.location(run.save))
        run.fail(UploadError(where, f"{type(e).__name__}: {e}"))
    finally:
        client.close()


def upload_save(
    dl: Deadline,
    src: PosixStore,
    save: str,
    dst: S3Store,
    *,
    jobs: int = 8,
    part_size: int | None = None,
    expect: Sequence[tuple[str, int, str | None]] | None = None,
) -> list[tuple[str, int, str]]:
    """Upload every regular file of the save ``save`` (a folder or one file, relative to the roots) from
    ``src`` to ``dst`` at the same relative path; the manifest rows (path relative to the save, "" for a save
    that is one file; size; SHA-256 of the bytes read), sorted by path.

    ``jobs`` threads send at once, each over its own connection with one buffer of one part; ``part_size``
    (default: :func:`default_part`) is raised for a file that would need more than 10,000 parts.  ``expect``:
    the fast root's manifest rows; a file missing from it or from the save, or whose size or SHA-256
    differs, is an error naming it.  Any failure raises :class:`UploadError` naming the file, after the
    multipart uploads started were aborted (best effort)."""
    import threading

    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    part = default_part(jobs) if part_size is None else part_size
    if part < MIN_PART:
        raise ValueError(f"part_size must be at least {MIN_PART} bytes")
    save = save.strip("/")
    save_fd, walked = _walk(src, save)
    files = [_File(path, f"{save}/{path}" if path else save, st, part) for path, st in walked]
    run = _Run(dl, src, dst, save, files)
    run.save_fd = save_fd
    threads: list[threading.Thread] = []
    tag = f"publish-upload-{id(run):x}"  # this upload's workers, by name
    try:
        if expect is not None:
            run.expect = _expected(run, expect)
        count, buffer = plan([f.size for f in files], jobs, part)
        clients = [dst.client.fork() for _ in range(count)]
        for client in clients:
            t = threading.Thread(target=_worker, args=(run, client, buffer), name=tag, daemon=True)
            threads.append(t)
            t.start()
        for t in threads:
            while t.is_alive():  # a join with a timeout: a signal's handler runs within 0.2 s
                t.join(0.2)
        if run.failure is None:
            _verify(run)
    except BaseException:  # a signal's exception in this thread: the threads take no more parts, then end
        run.fail(UploadError(shown(src.location(save)), "interrupted"))
        raise
    finally:
        _join_all(tag)
        for f in files:
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1
        if save_fd >= 0:
            os.close(save_fd)
        if run.failure is not None:
            _abort(run)
    if run.failure is not None:
        raise run.failure
    return [(f.path, f.size, f.digest) for f in files]


def _join_all(tag: str) -> None:
    """Wait for every worker named ``tag``, also one whose start a signal's exception cut short: such a
    thread is listed by threading.enumerate from the moment its start begins, and, as the run has failed,
    ends after the part it holds.  Bounded: a thread that never comes to run is waited for 10 s at most."""
    import threading
    import time

    end = time.monotonic() + 10.0
    while time.monotonic() < end:
        mine = [t for t in threading.enumerate() if t.name == tag]
        if not mine:
            return
        for t in mine:
            if t.is_alive():
                t.join()
            else:
                time.sleep(0.001)  # its start has begun, its thread not yet run


def _expected(run: _Run, expect: Sequence[tuple[str, int, str | None]]) -> dict[str, tuple[int, str | None]]:
    want = {path: (size, digest) for path, size, digest in expect}
    have = {f.path: f for f in run.files}
    for path in sorted(set(want) - set(have)):
        rel = f"{run.save}/{path}" if path else run.save
        raise UploadError(shown(run.src.location(rel)), "in the fast root's manifest, but not in the save")
    for f in run.files:
        if f.path not in want:
            raise _error(run, f, "in the save, but not in the fast root's manifest")
        if want[f.path][0] != f.size:
            raise _error(run, f, f"{f.size} bytes, the fast root's manifest says {want[f.path][0]}")
    return want


def _verify(run: _Run) -> None:
    """Every object's size as the store lists it (one LIST of the save; a HEAD for a save of one file)."""
    client = run.dst.client
    if run.save_fd < 0:
        f = run.files[0]
        if not f.multipart:
            head = client.head(run.dst.key(f.rel), deadline=run.dl)
            if head is None:
                raise _error(run, f, f"{run.dst.location(f.rel)} is not there after its upload")
            _check_size(run, f, head.get("content-length", ""))
        return
    try:
        listed = run.dst.sizes(run.dl, run.save)
    except PublishError as e:
        run.failure = UploadError(shown(run.src.location(run.save)), str(e))
        return
    for f in run.files:
        size = listed.get(f.path)
        if size is None:
            run.failure = _error(run, f, f"{run.dst.location(f.rel)} is not listed after its upload")
            return
        if size != f.size:
            run.failure = _error(
                run, f, f"the store lists {size} bytes at {run.dst.location(f.rel)}, not {f.size}"
            )
            return


def _abort(run: _Run) -> None:
    """Abort every multipart upload this run started and did not complete, with the credentials the threads
    renewed (the store's client shares them); failures pass (prune -orphans aborts what is left)."""
    left = run.dl.left()
    dl = Deadline(ABORT_TIME if left is None or left <= 0 else min(left, ABORT_TIME) + 1.0)
    client = run.dst.client
    for f in run.files:
        if f.upload_id and not f.completed:
            try:  # noqa: SIM105 - one best-effort call
                client.abort_upload(run.dst.key(f.rel), f.upload_id, deadline=dl)
            except PublishError:
                pass
