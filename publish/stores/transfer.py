"""Uploading a save from a POSIX root to an S3 root: several files at once, large files in parallel parts.

:func:`upload_save` knows no store: it reads through the source's :meth:`Store.open_save` (a POSIX root reads
every regular file of a save through descriptors, ``O_NOFOLLOW`` at every step below the save, a link or a
name that is not UTF-8 inside it an error naming it before anything is sent: publish.stores.posix_upload)
and writes through the destination's :meth:`Store.sender` (S3: PUT and the multipart requests), each file at
the same relative path.  A file up to the part size is one PUT; a larger one a multipart upload whose parts
are sent by several threads at once.  Each thread keeps one buffer of one part and its own sender (its own
connection), so the memory held is about ``jobs`` parts whatever the save's size (:func:`plan`).

What is checked (docs/s3.md): every PUT and part carries its CRC32 (``x-amz-checksum-crc32``), which a store
that honours it (S3, SeaweedFS) checks against the bytes it received and refuses on a mismatch; the CRC32 it
answers with must be the one sent.  A multipart upload's checksum the store keeps (HEAD) must be the composite
of the parts'.  Every object's size is read back (one LIST of the save, a HEAD for a multipart object or a
save that is one file).  The SHA-256 of each whole file is computed from the bytes read and returned.  A file
whose size, mtime or ctime changes while it is read, or that holds more or fewer bytes than its size, is an
error naming it.

Every request goes through the client's one retry policy.  The threads' senders are forks of the store's and
share its credentials (publish.s3.s3client.Keys): threads refused by the same old key resolve ``-creds`` once
for all of them, and the aborts after a failure sign with what that resolution gave, sent again (renewing the
keys each time) while :data:`ABORT_TIME` lasts, so keys rotated away mid-upload leave no upload open.
"""

from __future__ import annotations

import binascii
import zlib

from publish.rules.deadline import Deadline
from publish.rules.errors import PublishError, UploadError
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from publish.stores.base import FileReader, SaveFiles, Sender, Store

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

    def __init__(self, path: str, rel: str, size: int, part_size: int) -> None:
        import hashlib  # OpenSSL's SHA-256 (several times publish.rules.hashing's built-in one): loaded when used
        import threading

        self.path = path  # relative to the save ("" for a save that is one file)
        self.rel = rel  # relative to the root: the object's path on the destination
        self.size = size
        self.part = part_of(self.size, part_size)
        self.count = max(1, -(-self.size // self.part))
        self.multipart = self.size > self.part
        self.reader: FileReader | None = None
        self.sha = hashlib.sha256()
        self.digest = ""
        self.hashed = 0  # parts fed to sha, in order
        self.crcs = [0] * self.count
        self.etags = [""] * self.count
        self.done = 0
        self.upload_id = ""
        self.completed = False
        self.lock = threading.Lock()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


class _Run:
    """The shared state of one upload_save: the units to send, the first failure, the hash turns."""

    def __init__(self, dl: Deadline, src: Store, dst: Store, save: str, source: SaveFiles, part: int) -> None:
        import threading

        self.dl = dl
        self.src = src
        self.dst = dst
        self.save = save
        self.source = source
        self.files = [
            _File(path, f"{save}/{path}" if path else save, size, part) for path, size in source.files
        ]
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


def _open(run: _Run, f: _File) -> FileReader:
    """The file opened once (under its lock), checked by the source to be the file it listed, unchanged."""
    if f.reader is None:
        f.reader = run.source.open(f.path)
    return f.reader


def _read(run: _Run, f: _File, reader: FileReader, buf: memoryview, offset: int) -> None:
    try:
        got = reader.read_into(buf, offset)
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


def _send(run: _Run, sender: Sender, f: _File, index: int, buffer: bytearray) -> None:
    dl = run.dl
    left = dl.left()
    if left is not None and left <= 0:
        raise _error(run, f, f"timed out (the time given was {dl.timeout:g}s)")
    with f.lock:
        reader = _open(run, f)
    offset = index * f.part
    length = min(f.part, f.size - offset)
    view = memoryview(buffer)[:length]
    try:
        _read(run, f, reader, view, offset)
        crc = zlib.crc32(view)
        f.crcs[index] = crc
        _hash(run, f, index, view)
        if not f.multipart:
            _check_digest(run, f)
            _check_whole(run, f, reader)
            sender.put(dl, f.rel, view, crc_text(crc))
        else:
            with f.lock:
                if not f.upload_id:
                    f.upload_id = sender.create_upload(dl, f.rel)
            f.etags[index] = sender.upload_part(dl, f.rel, f.upload_id, index + 1, view, crc_text(crc))
    finally:
        view.release()
    with f.lock:
        f.done += 1
        last = f.done == f.count
    if last:
        _finish(run, sender, f, reader)


def _check_whole(run: _Run, f: _File, reader: FileReader) -> None:
    """After the last byte was read: the file is still the one the walk found, and ends where it did."""
    try:
        whole = reader.whole()
    except OSError as e:
        raise _error(run, f, e.strerror or str(e)) from None
    if not whole:
        raise _error(run, f, "changed while it was being uploaded")


def _check_digest(run: _Run, f: _File) -> None:
    if run.expect is None:
        return
    want = run.expect[f.path][1]
    if want is not None and want != f.digest:
        raise _error(run, f, f"its SHA-256 is {f.digest}, the fast root's manifest says {want}")


def _finish(run: _Run, sender: Sender, f: _File, reader: FileReader) -> None:
    if f.multipart:
        _check_whole(run, f, reader)
        _check_digest(run, f)
        parts = [(e, crc_text(c)) for e, c in zip(f.etags, f.crcs)]
        answered = sender.complete_upload(run.dl, f.rel, f.upload_id, parts)
        f.completed = True
        want = composite(f.crcs)
        _check_crc(run, f, answered, want)
        stored = sender.stored(run.dl, f.rel, checksum=True)
        if stored is None:
            raise _error(run, f, f"{run.dst.location(f.rel)} is not there after its upload completed")
        _check_size(run, f, stored[0])
        _check_crc(run, f, stored[1], want)
    with f.lock:
        f.close()


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


def _worker(run: _Run, sender: Sender, buffer_size: int) -> None:
    buffer = bytearray(buffer_size)
    current: _File | None = None
    try:
        while True:
            unit = run.next_unit()
            if unit is None:
                return
            current, index = unit
            _send(run, sender, current, index, buffer)
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
        sender.close()


def upload_save(
    dl: Deadline,
    src: Store,
    save: str,
    dst: Store,
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
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    part = default_part(jobs) if part_size is None else part_size
    if part < MIN_PART:
        raise ValueError(f"part_size must be at least {MIN_PART} bytes")
    save = save.strip("/")
    run = _Run(dl, src, dst, save, src.open_save(dl, save), part)
    tag = f"publish-upload-{id(run):x}"  # this upload's workers, by name
    try:
        if expect is not None:
            run.expect = _expected(run, expect)
        _send_all(run, jobs, part, tag)
        if run.failure is None:
            _verify(run)
    except BaseException:  # a signal's exception in this thread: the threads take no more parts, then end
        run.fail(UploadError(shown(src.location(save)), "interrupted"))
        raise
    finally:
        _join_all(tag)
        for f in run.files:
            f.close()
        run.source.close()
        if run.failure is not None:
            _abort(run)
    if run.failure is not None:
        raise run.failure
    return [(f.path, f.size, f.digest) for f in run.files]


def _send_all(run: _Run, jobs: int, part: int, tag: str) -> None:
    """Start the threads, each with its sender and buffer, and wait for them."""
    import threading

    count, buffer = plan([f.size for f in run.files], jobs, part)
    senders = [run.dst.sender(fork=True) for _ in range(count)]
    threads: list[threading.Thread] = []
    for sender in senders:
        t = threading.Thread(target=_worker, args=(run, sender, buffer), name=tag, daemon=True)
        threads.append(t)
        t.start()
    for t in threads:
        while t.is_alive():  # a join with a timeout: a signal's handler runs within 0.2 s
            t.join(0.2)


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
    if run.files and run.files[0].path == "":  # the save is one file
        f = run.files[0]
        if not f.multipart:
            stored = run.dst.sender(fork=False).stored(run.dl, f.rel, checksum=False)
            if stored is None:
                raise _error(run, f, f"{run.dst.location(f.rel)} is not there after its upload")
            _check_size(run, f, stored[0])
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
    from publish.stores.base import Upload

    left = run.dl.left()
    dl = Deadline(ABORT_TIME if left is None or left <= 0 else min(left, ABORT_TIME) + 1.0)
    for f in run.files:
        if f.upload_id and not f.completed:
            try:  # noqa: SIM105 - one best-effort call
                run.dst.abort_upload(dl, Upload(f.rel, f.upload_id, 0.0))
            except PublishError:
                pass
