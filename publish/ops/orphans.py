"""prune -orphans: what in exec/ no entry will ever name, found for prune to remove through its tombstones.

A candidate is an attempt's folder ``exec/<A>`` that no kept entry relates to, or, in an attempt that a kept
entry lies in, each child ``exec/<A>/<name>`` (folder or file) that no kept entry relates to (names, holds or
lies in).  The current attempt is never one.  A candidate goes only when nothing in it (nor, on S3, any
multipart upload into it) has changed for the age asked for; a symbolic link on its path, or a folder whose
age cannot be told, is left in place with why.  On S3 the incomplete multipart uploads under exec/ unchanged
for as long are aborted, but for the current attempt's and those in a kept save.
"""

from __future__ import annotations

from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import FileError, StoreError
from publish.rules.layout import EXEC
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.stores.base import LastChange, Store, Upload

#: -orphans-age's default: an hour, so a live dispatch on another node, or a zombie, is never touched.
AGE = 3600.0


class Orphans:
    """What -orphans asks: leftovers in exec/ unchanged for ``age`` seconds go, outside ``attempt`` (the
    current attempt; ``""`` when none was given: every attempt is looked at, the age still applies)."""

    __slots__ = ("age", "attempt")

    def __init__(self, age: float = AGE, attempt: str = "") -> None:
        self.age = age
        self.attempt = attempt


class Found:
    """What :func:`find` found: the folders to remove (sorted), the uploads to abort, and the candidates left
    in place, each with why (the text after ``left <location> in place: ``)."""

    __slots__ = ("folders", "uploads", "left")

    def __init__(self) -> None:
        self.folders: list[str] = []
        self.uploads: list[Upload] = []
        self.left: list[tuple[str, str]] = []


def _within(path: str, folders: set[str]) -> bool:
    """True when ``path`` is one of ``folders`` or lies inside one."""
    parts = path.split("/")
    return any("/".join(parts[:i]) in folders for i in range(1, len(parts) + 1))


def _attempt_of(path: str) -> str:
    """The attempt a path below exec/ lies in."""
    return path.split("/", 2)[1] if path.count("/") >= 1 else ""


def find(
    dl: Deadline, store: Store, orphans: Orphans, kept: layout.Nest, planned: list[str], now: float
) -> Found:
    """The orphans of the root: ``kept`` holds the paths of the entries that stay; ``planned`` the folders the
    prune removes anyway (a candidate inside one is not looked at); ``now`` is the time ages are counted to."""
    cutoff = now - orphans.age
    found = Found()
    uploads = store.uploads(dl, EXEC, cutoff)  # S3 only; first, as an upload into a folder is a change in it
    latest: dict[str, float] = {}
    for upload in uploads:
        parts = upload.path.split("/")
        for i in (2, 3):  # the candidates it may lie in: exec/<A>, exec/<A>/<name>
            if len(parts) >= i:
                where = "/".join(parts[:i])
                latest[where] = max(latest.get(where, upload.at), upload.at)
    skip = set(planned)
    unexamined: list[tuple[str, str]] = []
    candidates: list[str] = []  # to date, in order: each run dated at once, before the next read
    for attempt in sorted(store.list_folders(dl, EXEC, unexamined)):
        if attempt == orphans.attempt:
            continue
        top = f"{EXEC}/{attempt}"
        if not kept.related(top):
            candidates.append(top)
            continue
        _consider(dl, store, candidates, cutoff, latest, skip, found)
        candidates = []
        try:
            folders, files = store.children(dl, top)
        except FileError as e:
            if not e.unexaminable:
                raise
            found.left.append((top, f"it cannot be read: {e}"))
            continue
        for name in sorted(set(folders) | set(files)):
            path = f"{top}/{name}"
            if not kept.related(path):
                candidates.append(path)
    _consider(dl, store, candidates, cutoff, latest, skip, found)
    for name, why in sorted(unexamined):
        if name != orphans.attempt:
            found.left.append((f"{EXEC}/{name}", f"it cannot be examined: {why}"))
    current = orphans.attempt
    found.uploads = [
        u
        for u in uploads
        if u.at <= cutoff and not (current and _attempt_of(u.path) == current) and not kept.related(u.path)
    ]
    return found


def _consider(
    dl: Deadline,
    store: Store,
    paths: list[str],
    cutoff: float,
    latest: dict[str, float],
    skip: set[str],
    found: Found,
) -> None:
    """Add each of ``paths``, in their order, to what goes when nothing in it changed after ``cutoff``, or to
    what is left with why."""
    todo = []  # each path looked at, and whether its age is to be told
    for path in paths:
        # reserved: never below exec/, said for the reader
        if (skip and _within(path, skip)) or layout.reserved(path):
            continue
        todo.append((path, layout.clean_relative(path)))  # not: an S3 key with an empty, . or .. element
    changes = iter(_ages(dl, store, [path for path, clean in todo if clean]))
    for path, clean in todo:
        if not clean:  # no tombstone can name it
            found.left.append((path, "an empty, . or .. element in its path cannot be recorded in tomb/"))
            continue
        change = next(changes)
        if isinstance(change, FileError):
            found.left.append((path, f"its age cannot be told: {change}"))
        elif change.link:
            found.left.append((path, f"{shown(store.location(change.link))} is a symbolic link"))
        elif change.why:
            found.left.append((path, change.why))
        elif change.at is not None and max(change.at, latest.get(path, change.at)) <= cutoff:
            found.folders.append(path)


def _ages(dl: Deadline, store: Store, paths: list[str]) -> list[LastChange | FileError]:
    """Store.newest of each of ``paths``, in their order, or the FileError saying it cannot be examined.  At
    once where the store can (POSIX: the walk down to exec/ made once)."""
    at_once = getattr(store, "newest_all", None)
    if at_once is not None and paths:
        try:
            return list(at_once(dl, paths))
        except FileError as e:
            if not e.unexaminable:
                raise  # else one at a time, each told apart
    ages: list[LastChange | FileError] = []
    for path in paths:
        try:
            ages.append(store.newest(dl, path))
        except StoreError as e:
            if not isinstance(e, FileError) or not e.unexaminable:
                raise
            ages.append(e)
    return ages
