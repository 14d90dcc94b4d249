"""The Store protocol: every verb is written once over it, and every store passes one conformance suite.

Paths given to a store are relative to the checkpoint root, ``/``-separated, already clean (no empty, ``.``
or ``..`` element, no leading ``/``).  A *folder* is a POSIX directory, or on S3 every object whose key
starts with ``PREFIX/<path>/``.  Every method raises :class:`publish.rules.errors.Failure` (or its subclass
:class:`publish.rules.errors.StoreError`) naming the path or key at fault; none returns a partial answer.
Every method but ``location`` takes first the :class:`publish.rules.deadline.Deadline` of the work it is part of (a
verb, one watch scan): S3 passes it to each request, POSIX ignores it.  A store keeps no state for a scan.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Protocol

    from publish.rules.deadline import Deadline
else:
    Protocol = object


class Removal:
    """What :meth:`Store.remove_folder` did.

    ``removed`` is true when something was there and is now gone.  ``link`` is set (to the path, relative to
    the root, of the first symbolic link on the folder's path) when the folder was left in place because of it.
    """

    __slots__ = ("removed", "link")

    def __init__(self, removed: bool, link: str = "") -> None:
        self.removed = removed
        self.link = link

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Removal) and (self.removed, self.link) == (other.removed, other.link)

    def __hash__(self) -> int:
        return hash((self.removed, self.link))

    def __repr__(self) -> str:
        return f"Removal(removed={self.removed!r}, link={self.link!r})"


class LastChange:
    """What :meth:`Store.newest` found at a path.

    ``at``: the newest time anything there changed, in seconds since the epoch (``math.inf`` when it was seen
    changing), or None when nothing is there or the time could not be told.  ``link``: the path (relative to
    the root) of the first symbolic link on the path, when there is one (nothing below it was looked at).
    ``why``: why the time could not be told ("" when it was, or for a link)."""

    __slots__ = ("at", "link", "why")

    def __init__(self, at: float | None, link: str = "", why: str = "") -> None:
        self.at = at
        self.link = link
        self.why = why

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LastChange) and (self.at, self.link, self.why) == (
            other.at,
            other.link,
            other.why,
        )

    def __hash__(self) -> int:
        return hash((self.at, self.link, self.why))

    def __repr__(self) -> str:
        return f"LastChange(at={self.at!r}, link={self.link!r}, why={self.why!r})"


class Upload:
    """An incomplete S3 multipart upload: the ``path`` of its object (relative to the root), its ``upload_id``,
    and ``at``, the newest time it changed (when it was initiated, or its newest part's, seconds since the
    epoch)."""

    __slots__ = ("path", "upload_id", "at")

    def __init__(self, path: str, upload_id: str, at: float) -> None:
        self.path = path
        self.upload_id = upload_id
        self.at = at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Upload) and (self.path, self.upload_id, self.at) == (
            other.path,
            other.upload_id,
            other.at,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.upload_id, self.at))

    def __repr__(self) -> str:
        return f"Upload(path={self.path!r}, upload_id={self.upload_id!r}, at={self.at!r})"


class FileReader(Protocol):
    """One file of a save opened to be uploaded (:meth:`SaveFiles.open`).  OSError on a fault of the read."""

    def read_into(self, buf: memoryview, offset: int) -> int:
        """Fill ``buf`` with the file's bytes from ``offset``; the count read (fewer where the file ends)."""
        ...

    def whole(self) -> bool:
        """After its last byte was read: True when the file is still the one listed, unchanged, and ends at
        its listed size."""
        ...

    def close(self) -> None: ...


class SaveFiles(Protocol):
    """A save opened to be uploaded to another root (:meth:`Store.open_save`), closed when the upload ends."""

    #: Each regular file: its path relative to the save ("" for a save that is one file) and its size in
    #: bytes, sorted by path.
    files: list[tuple[str, int]]

    def open(self, path: str) -> FileReader:
        """The file ``path`` (as listed) opened for reading, checked to be the one listed; UploadError naming
        it otherwise."""
        ...

    def close(self) -> None: ...


class Sender(Protocol):
    """Requests that put the files of a save into a root (:meth:`Store.sender`), paths relative to the root.
    Each body goes with its CRC32 in base64 (``crc``), which the store checks; a refusal is a StoreError."""

    def put(self, dl: Deadline, path: str, body: memoryview, crc: str) -> None:
        """Put the whole file ``path`` in one request."""
        ...

    def create_upload(self, dl: Deadline, path: str) -> str:
        """Start a multipart upload of ``path``; its upload id."""
        ...

    def upload_part(
        self, dl: Deadline, path: str, upload_id: str, number: int, body: memoryview, crc: str
    ) -> str:
        """Send part ``number`` (from 1) of the upload; its ETag."""
        ...

    def complete_upload(self, dl: Deadline, path: str, upload_id: str, parts: list[tuple[str, str]]) -> str:
        """Complete the upload of ``parts`` ((ETag, CRC32) of parts 1, 2, ...); the checksum the store
        answered with ("" when it sent none)."""
        ...

    def stored(self, dl: Deadline, path: str, checksum: bool) -> tuple[str, str] | None:
        """(its size, and with ``checksum`` the CRC32 the store keeps, as the store wrote them, "" when it
        did not) of the file at ``path``, or None when there is none."""
        ...

    def close(self) -> None: ...


class Store(Protocol):
    """A checkpoint root: the pub/ entries, their manifests in man/, and the save folders they name."""

    #: The root as printed in locations: an absolute POSIX path, or ``s3://BUCKET[/PREFIX]``; no trailing /.
    root: str

    #: True when listing folders costs nothing worth counting (POSIX).  resolve then looks at exec/ to
    #: warn about saves nobody published; on S3 resolve sends LIST requests of pub/ (and of the save it prints) and nothing else.
    cheap_listing: bool

    def location(self, path: str) -> str:
        """``<root>/<path>``: the path or URL a user sees for ``path``."""
        ...

    def check_root(self, dl: Deadline) -> None:
        """Fail unless the root is usable: a POSIX root must exist as a directory, and its pub/ and exec/, where
        they exist, be real directories (not links).  S3 sends nothing."""
        ...

    def check_exists(self, dl: Deadline) -> None:
        """Fail (naming the root, and what to run for a new one) unless the root exists.  POSIX: check_root
        has checked it already (nothing more is done).  S3: one LIST of ``PREFIX/`` with max-keys=1; a root
        holding no object at all is missing.  The verbs call it only when pub/ is empty, so a root in use
        costs nothing more."""
        ...

    def create_root(self, dl: Deadline) -> bool:
        """Make a new, empty root; True when this call made it, False when it was there already.

        POSIX: the directory and its missing parents.  S3: when no object is under ``PREFIX/``, an empty
        object ``PREFIX/<layout.ROOT_OBJECT>`` put with ``If-None-Match: *``."""
        ...

    # -- entry operations: the only methods that know pub/ and tomb/ (publish.rules.layout names them)

    def list_entries(self, dl: Deadline) -> list[str]:
        """Every name directly in pub/, in no set order, parsing none of them.

        Anything there is listed: a hidden file, a name holding ``/`` (an S3 key below pub/ with a further
        ``/``), so the caller can refuse it by name; POSIX refuses a child that is not a regular file (a
        folder, a link, a FIFO) itself, naming it.  A missing pub/ holds nothing.  On S3 the key
        ``PREFIX/pub/`` itself is not listed.
        """
        ...

    def entry_times(self, dl: Deadline) -> dict[str, float]:
        """Every name directly in pub/ (as list_entries lists them) and the time its entry was made, in
        seconds since the epoch: POSIX its file's mtime, S3 its LastModified (one LIST, as list_entries)."""
        ...

    def create_entry(self, dl: Deadline, name: str) -> bool:
        """Create the empty entry ``pub/<name>`` exclusively, durable before returning.

        True when this call created it; False when it was already there (it is left untouched).  pub/ is
        created when missing.  POSIX: ``O_CREAT|O_EXCL``, then fsync of the file and of pub/.  S3: an empty PUT
        with ``If-None-Match: *``.
        """
        ...

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        """Remove ``pub/<name>`` for each name, durable (pub/ fsynced) before returning.  A missing one is fine."""
        ...

    def list_tombs(self, dl: Deadline) -> list[str]:
        """Every name directly in tomb/, in no set order, parsing none of them; a missing tomb/ holds nothing.

        POSIX: tomb/ must be a real directory (a link there, dangling or not, or a non-directory is a Failure
        naming it).  On S3 the key ``PREFIX/tomb/`` itself is not listed."""
        ...

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        """Create the empty ``tomb/<name>`` for each name exclusively (one already there is fine, untouched),
        all durable before returning; tomb/ is created when missing.  POSIX: ``O_CREAT|O_EXCL``, fsync of each
        file, then of tomb/.  S3: an empty PUT with ``If-None-Match: *`` each."""
        ...

    def tomb_times(self, dl: Deadline) -> dict[str, float]:
        """Every name list_tombs lists and when it was written, in seconds since the epoch: POSIX its mtime
        (a tombstone is never written to: the time its prune made it), S3 its LastModified (one LIST)."""
        ...

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        """Remove ``tomb/<name>`` for each name, durable (tomb/ fsynced) before returning; a missing one is
        fine.  S3: one DELETE each."""
        ...

    def create_mark(self, dl: Deadline, name: str) -> bool:
        """Create the empty file ``exec/<name>`` exclusively, durable before returning: ``run -requeue``'s
        record of a dispatch requeued without progress (``name`` is one path element, never a save's folder).

        True when this call created it; False when it was already there.  exec/ is created when missing.
        POSIX: ``O_CREAT|O_EXCL`` in exec/ opened without following a link, then fsync of the file and of
        exec/.  S3: an empty PUT with ``If-None-Match: *``.  They are listed with ``list_files(exec)``.
        """
        ...

    # -- manifests: man/<entry name>, what each publication published (publish.rules.manifest)

    def write_manifest(self, dl: Deadline, entry: str, data: bytes) -> None:
        """Write ``data`` as ``man/<entry>``, replacing what was there, durable before returning; man/ is
        created when missing.  POSIX: man/ a real directory (never through a link), a temporary file in it
        (``.tmp-`` and random hex), fsync, rename over ``<entry>``, fsync of man/.  S3: one PUT."""
        ...

    def read_manifest(self, dl: Deadline, entry: str, limit: int) -> bytes | None:
        """The bytes of ``man/<entry>``, or None when there is none.  Over ``limit`` bytes is refused; on POSIX
        so is a link, a FIFO or anything else that is not a regular file, and a man/ that is a link."""
        ...

    def list_manifests(self, dl: Deadline) -> list[str]:
        """Every name directly in man/, in no set order, parsing none of them; a missing man/ holds nothing.
        POSIX leaves out the temporary files of writes (names starting with ``.``; no entry name does)."""
        ...

    def manifest_times(self, dl: Deadline) -> dict[str, float]:
        """Every name list_manifests lists and when it was last written, in seconds since the epoch: POSIX
        the later of its mtime and ctime, S3 its LastModified (one LIST, as list_manifests)."""
        ...

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        """Remove ``man/<name>`` for each name, durable before returning; a missing one is fine.  POSIX: also
        the temporary files of writes cut off more than :data:`publish.stores.posix_writes.TEMP_AGE` ago."""
        ...

    def save_rows(self, dl: Deadline, path: str, digests: bool) -> list[tuple[str, int, str | None]]:
        """What a manifest records of the save at ``path``: every regular file below the folder (by its path
        relative to it; a save that is one file is the one row ``""``), its size, and its SHA-256 when
        ``digests`` and the store can tell it cheaply (else None).  Sorted by path.  POSIX: read through
        descriptors that never follow a link below the save (publish.stores.posix_saves), a link, a FIFO or
        a device inside it left out.  S3: one LIST (digests None)."""
        ...

    def check_rows(
        self, dl: Deadline, path: str, rows: list[tuple[str, int, str | None]], deep: bool
    ) -> tuple[str, str] | None:
        """The first of ``rows`` (in their order) the save at ``path`` does not match, as (the file's
        location, why), or None: each file is there with that size and (``deep``) the SHA-256 of a row that
        has one.  POSIX: through descriptors, never following a link below the save, several files hashed
        at once.  S3: one LIST for the sizes; deep, ranged GETs of :data:`CHUNK` bytes."""
        ...

    # -- generic file operations on paths relative to the root: saves and what the frameworks read

    def holds(self, dl: Deadline, path: str) -> bool:
        """True when something is at ``path``: on POSIX any file, folder or link; on S3 at least one object
        under ``path/`` (or the object ``path`` itself)."""
        ...

    def exists(self, dl: Deadline, path: str) -> bool:
        """True when a file (an object) is at ``path``; on POSIX anything there but a regular file is refused."""
        ...

    def size(self, dl: Deadline, path: str) -> int | None:
        """The size of the regular file (object) at ``path``, or None when there is none."""
        ...

    def read(self, dl: Deadline, path: str, limit: int) -> bytes | None:
        """The bytes of the file at ``path``, or None when there is none.  A file over ``limit`` bytes is refused;
        on POSIX so is a link, a FIFO or anything else that is not a regular file (never opened to wait)."""
        ...

    def read_range(self, dl: Deadline, path: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of the file at ``path`` from ``offset`` (fewer at its end), or None when
        there is no such regular file.  POSIX opens it with O_NOFOLLOW|O_NONBLOCK.  S3: a ranged GET."""
        ...

    def list_folders(
        self, dl: Deadline, path: str, unexamined: list[tuple[str, str]] | None = None
    ) -> list[str]:
        """Names of the direct child folders of ``path``; a missing ``path`` has none.

        POSIX: subdirectories (a symbolic link to a directory counts, as the framework would follow it); a
        child that cannot be examined (a link loop, a name too long, a permission) is left out, and
        appended to ``unexamined`` as (name, why) when that is given.
        S3: the common prefixes of a LIST of ``path/`` delimited by ``/``.
        """
        ...

    def list_files(self, dl: Deadline, path: str) -> list[str]:
        """Names of the regular files (objects) directly in ``path``; a missing ``path`` has none.

        POSIX: regular files, not links.  S3: the keys of a LIST of ``path/`` delimited by ``/``."""
        ...

    def children(self, dl: Deadline, path: str) -> tuple[list[str], list[str]]:
        """``(list_folders(path), list_files(path))`` at once: one LIST on S3, two directory reads on POSIX."""
        ...

    def sizes(self, dl: Deadline, path: str) -> dict[str, int]:
        """Every regular file (object) below the folder ``path``, by its path relative to it, and its size in
        bytes.  POSIX: a walk that never follows a link; a link, a FIFO or any other file that is not regular is
        refused, naming it.  S3: one LIST of ``path/`` (pages of 1,000)."""
        ...

    def newest(self, dl: Deadline, path: str) -> LastChange:
        """When anything at ``path`` last changed: the folder itself and everything below it, or the one file.

        POSIX: the greatest ``st_mtime`` or ``st_ctime`` (which no one can set back) of the folder and of every
        file, folder and link below it, by a walk down from the root's descriptor that never follows a
        link (``O_NOFOLLOW``, each directory compared with its ``lstat``); a symbolic link on the path
        itself is reported in ``link``.  Something that vanishes or is swapped while the walk runs is a change
        seen now (``math.inf``).  More than :data:`publish.rules.files.walks.NEWEST_ENTRIES` entries below it, more than
        :data:`publish.rules.files.walks.NEWEST_DEPTH` levels, or a folder it may not read: not told (``why``).
        S3: the greatest LastModified of one LIST of ``path/`` (all pages); with no object there, the object
        ``path`` itself (HEAD, its Last-Modified)."""
        ...

    def uploads(self, dl: Deadline, path: str, cutoff: float) -> list[Upload]:
        """The incomplete multipart uploads of objects below the folder ``path``, in the store's order.  An
        upload initiated at or before ``cutoff`` (seconds since the epoch) has its time raised to its newest
        part's (one ListParts each), and one gone meanwhile is left out.  POSIX: none."""
        ...

    def abort_upload(self, dl: Deadline, upload: Upload) -> bool:
        """Abort the multipart upload; False when there was none (completed or aborted meanwhile).  POSIX:
        never called (it has none)."""
        ...

    def remove_folder(self, dl: Deadline, path: str) -> Removal:
        """Remove the folder at ``path`` and everything in it, never following a symbolic link.

        POSIX: when any element of ``path`` (the folder itself or a parent below the root) is a symbolic link,
        nothing is removed and the result names the first such link.  A link inside the folder is removed as a
        link.  A ``path`` that is one file is unlinked.  The walk goes from the root's descriptor with
        ``O_NOFOLLOW``, so an element swapped for a link while it runs is such a link too, never followed.
        S3: every object under ``path/``, with DeleteObjects.
        """
        ...

    # -- the upload of a save to another root (publish.stores.transfer): POSIX the source, S3 the destination

    def open_save(self, dl: Deadline, path: str) -> SaveFiles:
        """The save at ``path`` (a folder or one file) opened to be uploaded elsewhere.  POSIX: every regular
        file below it, found and read through descriptors that never follow a link below the save
        (publish.stores.posix_upload); a link, a FIFO or a name that is not UTF-8 inside it is an UploadError
        naming it.  S3: refused (a Failure): a mirror's source is a POSIX root."""
        ...

    def sender(self, fork: bool) -> Sender:
        """Requests that put files into this root: with ``fork``, over a connection of its own (one for each
        thread that sends at the same time as others), else over the store's.  S3: its client (forked).
        POSIX: refused (a Failure): a mirror is an S3 root."""
        ...
