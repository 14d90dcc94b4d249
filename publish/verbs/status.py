"""status: what a root holds, read only: publications, unpublished saves under exec/, leftovers, tombstones.

It fails only where resolve or prune would (the root, a bad name in pub/ or tomb/, the store); a save that
is incomplete, or that a framework's check refuses, is reported, never a failure.
"""

from __future__ import annotations

from publish.frameworks import FRAMEWORKS, LISTED
from publish.ops import Say, command, scan_flags
from publish.ops.capacity import Size, policy_text, save_size, size_note, space, space_line
from publish.ops.idle import MARK
from publish.ops.mirror_flags import MirrorFlags
from publish.ops.retention import STALE_TOMB_AGE, NoSaves, Policy, Saves, Schedule, would_remove
from publish.ops.retention_flags import RetentionFlags
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError, StoreError, UsageError
from publish.rules.layout import EXEC, PUB, TOMB
from publish.rules.redact import shown
from publish.stores.base import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any

#: The attempts under exec/ looked into (the greatest names): one LIST each on S3, so thousands would take
#: minutes.  The others are counted, not listed.
ATTEMPT_LIMIT = 200

VERSION = 1


def _check(dl: Deadline, store: Store, framework: str, path: str, step: int) -> tuple[str, str]:
    """A framework's verdict on the save at ``path``: complete, incomplete or faulty (with the message).  An
    incomplete one carries the check's note when it said why watch never publishes it (a DeepSpeed archive
    the reader refuses, a DCP save with per-rank metadata only)."""
    notes: list[str] = []
    try:
        whole = FRAMEWORKS[framework].complete(dl, store, path, step, notes.append)
    except FileError as e:
        if not e.unexaminable:
            raise  # a disk I/O error is the store failing, as on S3
        return "faulty", str(e)
    except StoreError:
        raise  # the store failing (a refusal, the -timeout passed) is not the save's fault: fail as resolve does
    except (Failure, OSError) as e:
        return "faulty", str(e)
    if whole:
        return "complete", ""
    return "incomplete", notes[0] if notes else ""


#: When more than one framework's naming rule matches a save, the order their verdicts are taken in: the first
#: that finds it complete, else the first (the most specific rule: dcp's, any name ending in digits, last).
PREFERENCE = sorted(FRAMEWORKS, key=lambda name: name == "dcp")


def _verdict(
    dl: Deadline, store: Store, path: str, matches: list[tuple[str, int]]
) -> tuple[str, int, str, str]:
    """One verdict on the save at ``path``: framework, step, state and message, from the frameworks whose
    rule matches its name (``matches``, in PREFERENCE order), each asked in turn until one finds it whole."""
    first: tuple[str, int, str, str] | None = None
    for name, step in matches:
        state, message = _check(dl, store, name, path, step)
        if state == "complete":
            return name, step, state, message
        if first is None:
            first = name, step, state, message
    assert first is not None
    return first


#: Publications handled at once: asked whether their saves exist, their manifests read, and their lines
#: written (Say.out_all), so what status holds at a time stays bounded whatever pub/ holds.
CHUNK = 4096

# -- the records the document is made of: each says itself as JSON (``json``) and as text (``text``)


class Folder:
    """A folder of the root status names: one no entry names and no framework's rule matches, or a
    tombstone's."""

    __slots__ = ("path", "location")

    def __init__(self, store: Store, path: str) -> None:
        self.path = path
        self.location = store.location(path)

    def json(self) -> dict[str, Any]:
        return {"path": self.path, "location": self.location}

    def text(self) -> str:
        return f"  {shown(self.location)}"


class Tomb(Folder):
    """A folder recorded in tomb/; ``related``: a publication names, holds or lies in it, so a prune that
    keeps that publication leaves the folder in place, and the tombstone until it is STALE_TOMB_AGE old (it
    may be a running prune's); ``written``: then, when the tombstone was written (None: gone meanwhile)."""

    __slots__ = ("related", "written", "age")

    def __init__(self, store: Store, path: str, related: bool, written: float | None, now: float) -> None:
        super().__init__(store, path)
        self.related = related
        self.written = written
        self.age = None if written is None else max(now - written, 0.0)

    def json(self) -> dict[str, Any]:
        doc = {
            "path": self.path,
            "location": self.location,
            "related": self.related,
            "time": None,
            "age": None,
        }
        if self.written is not None and self.age is not None:
            from publish.rules.timestamps import rfc3339

            doc.update(time=rfc3339(self.written), age=round(self.age, 3))
        return doc

    def text(self) -> str:
        where = shown(self.location)
        if self.age is None:
            return f"  {where}"
        if self.age >= STALE_TOMB_AGE:
            return f"  {where} (the tombstone is over an hour old: the next prune drops it)"
        minutes = int(self.age // 60)
        return f"  {where} (the tombstone is {minutes} minute{'' if minutes == 1 else 's'} old)"


class Unreadable(Folder):
    """An attempt's folder that could not be listed, and why."""

    __slots__ = ("message",)

    def __init__(self, store: Store, path: str, message: str) -> None:
        super().__init__(store, path)
        self.message = message

    def json(self) -> dict[str, Any]:
        return {"path": self.path, "location": self.location, "message": self.message}

    def text(self) -> str:
        if self.message.startswith(self.location):  # a store's message names the folder already, as a rule
            return f"  {self.message}"
        return f"  {shown(self.location)}: {self.message}"


class Save:
    """An unpublished save under exec/ and a framework's verdict on it: complete, incomplete or faulty."""

    __slots__ = ("path", "location", "framework", "step", "state", "message")

    def __init__(self, store: Store, path: str, verdict: tuple[str, int, str, str]) -> None:
        self.path = path
        self.location = store.location(path)
        self.framework, self.step, self.state, self.message = verdict

    def json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "location": self.location,
            "framework": self.framework,
            "step": self.step,
            "step_decimal": str(self.step),
            "state": self.state,
            "message": self.message,
        }

    def text(self) -> str:
        why = f": {self.message}" if self.message else ""
        return f"  {self.state:<10} {shown(self.location)} ({self.framework}, step {self.step}){why}"


class Publication:
    """One entry of pub/, newest first: its save, whether the save exists, what it holds (``size``, a
    capacity.Size; None when the save is gone), when the entry was made (``time``; None when not read:
    the text shows no time), and with -mirror whether the mirror holds the entry (``mirrored``)."""

    __slots__ = ("name", "epoch", "step", "path", "location", "exists", "time", "size", "mirrored")

    def __init__(self, name: str, path: str, location: str, exists: bool) -> None:
        self.name = name
        self.epoch = int(name[:20])
        self.step = int(name[21:41])
        self.path = path
        self.location = location
        self.exists = exists
        self.time: float | None = None
        self.size: Size | None = None
        self.mirrored: bool | None = None

    def json(self, now: float) -> dict[str, Any]:
        from publish.rules.timestamps import rfc3339

        assert self.time is not None
        size = self.size
        got = {
            "entry": self.name,
            "epoch": self.epoch,
            "step": self.step,
            "epoch_decimal": str(self.epoch),  # exact for parsers that read numbers as doubles (jq < 1.7)
            "step_decimal": str(self.step),
            "path": self.path,
            "location": self.location,
            "exists": self.exists,
            "time": rfc3339(self.time),  # when the entry was made: its file's mtime, its LastModified
            "age": round(max(now - self.time, 0.0), 3),  # seconds
            "bytes": None if size is None else size.bytes,
            "bytes_from": None if size is None else size.source or None,
            "bytes_error": None if size is None else size.why or None,
        }
        if self.mirrored is not None:
            got["mirrored"] = self.mirrored
        return got

    def text(self) -> str:
        line = f"  epoch {self.epoch} step {self.step} {shown(self.location)} "
        if not self.exists:
            return line + "(MISSING)"
        size = self.size
        assert size is not None
        note = {"exists": True, "bytes": size.bytes, "bytes_from": size.source, "bytes_error": size.why}
        return line + "(exists)" + size_note(note)


class Idle:
    """run -requeue's count of idle requeues (publish.ops.idle): the save a dispatch would resume from
    now (None: no save), the marks of it in a row, and all marks."""

    __slots__ = ("save", "requeues", "marks")

    def __init__(self, save: Publication | None, requeues: int, marks: int) -> None:
        self.save = save
        self.requeues = requeues
        self.marks = marks

    def json(self) -> dict[str, Any]:
        return {
            "save": None if self.save is None else self.save.path,
            "location": None if self.save is None else self.save.location,
            "requeues": self.requeues,
            "marks": self.marks,
        }

    def text(self, both: bool) -> list[str]:
        if not self.marks:
            return []
        since = shown(self.save.location) if self.save is not None else "no save"
        return [
            f"run -requeue: {self.requeues} idle requeues in a row from {since} "
            f"({self.marks} marks {EXEC}/.idle-* in all{' on both tiers' if both else ''}; "
            "removing them starts the count again)"
        ]


class Plan:
    """What prune -keep N (and its other flags) would do: the entries it removes and the lines prune
    -dry-run prints, or why it would remove nothing (``refused``); ``notes``: what it would say on stderr
    of -keep-bytes; ``orphans``: -orphans's findings (None: not asked)."""

    __slots__ = ("policy", "orphans", "entries", "lines", "refused", "notes")

    def __init__(self, policy: Policy, entries: list[str], lines: list[str], refused: str = "") -> None:
        self.policy = policy
        self.orphans: dict[str, Any] | None = None
        self.entries = entries
        self.lines = lines
        self.refused = refused
        self.notes: list[str] = []

    def json(self) -> dict[str, Any]:
        policy = self.policy
        return {
            "keep": policy.keep,
            "keep_every": policy.every or None,
            "keep_within": policy.within,
            "keep_bytes": policy.bytes,
            "notes": self.notes,
            "orphans": self.orphans,
            "entries": self.entries,
            "lines": self.lines,
            "refused": self.refused or None,
        }

    def text(self) -> list[str]:
        from publish.rules.go.gocompat import format_duration

        policy, orphans = self.policy, self.orphans
        flags = f"-keep {policy.keep}"
        if policy.every:
            flags += f" -keep-every {policy.every}"
        if policy.within is not None:
            flags += f" -keep-within {format_duration(policy.within)}"
        flags += policy_text({"keep_bytes": policy.bytes})
        if orphans is not None:
            flags += f" -orphans -orphans-age {format_duration(orphans['age'])}"
            if orphans["attempt"] is not None:
                flags += f" -attempt {shown(orphans['attempt'])}"
        if self.refused:
            return [f"prune {flags} would remove nothing and fail: {self.refused}"]
        lines = [f"prune {flags} would remove entries: {len(self.entries)}, and:"]
        lines.extend([f"  {line}" for line in self.lines] or ["  (none)"])
        return lines + [f"  ({note})" for note in self.notes]


class Tier:
    """One publication of either tier (-mirror) and its state on each: ``exists``, ``missing`` (published,
    its save gone) or ``none``; on the mirror also ``pending``."""

    __slots__ = ("name", "root", "mirror")

    def __init__(self, name: str, root: str, mirror: str) -> None:
        self.name, self.root, self.mirror = name, root, mirror

    def json(self) -> dict[str, Any]:
        return {
            "entry": self.name,
            "epoch_decimal": str(int(self.name[:20])),
            "step_decimal": str(int(self.name[21:41])),
            "root": self.root,
            "mirror": self.mirror,
        }

    def text(self) -> str:
        return f"  epoch {int(self.name[:20])} step {int(self.name[21:41])}  root: {self.root:<7} mirror: {self.mirror}"


class Listing:
    """A root's publications, newest first, held compactly (each entry's name and save, whether the save
    exists, what it holds, when the entry was made) and made into :class:`Publication` records one at a
    time: 100,000 entries cost a few MB, not a record each."""

    __slots__ = ("store", "names", "paths", "times", "exists", "bytes", "source", "why", "on_mirror")

    def __init__(
        self, store: Store, names: list[str], paths: list[str], times: dict[str, float] | None
    ) -> None:
        from array import array

        self.store = store
        self.names = names  # newest first: names sort as (epoch, step, name), both zero-padded
        self.paths = paths
        self.times = times
        self.exists = bytearray(len(names))
        # What each save that exists holds (capacity.Size, set by measure): its bytes (-1: not told), where
        # that was read (an index of SOURCES), and why it could not be told.
        self.bytes = array("q", bytes(8 * len(names)))
        self.source = bytearray(len(names))
        self.why: dict[int, str] = {}
        self.on_mirror: set[str] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def size(self, i: int) -> Size | None:
        """What the save of the ``i``th publication holds; None when it is gone."""
        if not self.exists[i]:
            return None
        n = self.bytes[i]
        return Size(None if n < 0 else n, SOURCES[self.source[i]], self.why.get(i, ""))

    def set_size(self, i: int, size: Size) -> None:
        self.bytes[i] = -1 if size.bytes is None else size.bytes
        self.source[i] = SOURCES.index(size.source)
        if size.why:
            self.why[i] = size.why

    def record(self, i: int) -> Publication:
        name, path = self.names[i], self.paths[i]
        pub = Publication(name, path, self.store.location(path), bool(self.exists[i]))
        pub.size = self.size(i)
        if self.times is not None:
            pub.time = self.times[name]
        if self.on_mirror is not None:
            pub.mirrored = name in self.on_mirror
        return pub

    def __iter__(self) -> Iterator[Publication]:
        return map(self.record, range(len(self.names)))

    def lines(self) -> Iterator[str]:
        """Each publication's line of the text, newest first: what ``record(i).text()`` says, made without
        the record (a record, a Size and a dict a line cost a third of the text's time)."""
        from publish.rules.sizes import human

        location, exists, held, source, why = (
            self.store.location,
            self.exists,
            self.bytes,
            self.source,
            self.why,
        )
        numbers: dict[str, int] = {}  # each epoch as a number, once: a root holds few
        for i, (name, path) in enumerate(zip(self.names, self.paths)):
            epoch = numbers.get(name[:20])
            if epoch is None:
                epoch = numbers[name[:20]] = int(name[:20])
            line = f"  epoch {epoch} step {int(name[21:41])} {shown(location(path))} "
            if not exists[i]:
                yield line + "(MISSING)"
                continue
            n = held[i]
            if n < 0:
                yield f"{line}(exists), size not known: {why.get(i, '')}"
            elif source[i] == _FILES:
                yield f"{line}(exists), {human(n)} by its files"
            else:
                yield f"{line}(exists), {human(n)}"

    def newest(self) -> Publication | None:
        """The newest publication whose save exists."""
        i = self.exists.find(1)
        return None if i < 0 else self.record(i)

    def entries(self) -> list[layout.Entry]:
        """Every entry, oldest first (as layout.parse_all gives them)."""
        pairs = zip(self.names[::-1], self.paths[::-1])
        return [layout.Entry(int(n[:20]), int(n[21:41]), p, n) for n, p in pairs]

    def known(self) -> dict[str, bool]:
        """Whether each save exists, by path: asked once, as prune asks."""
        return {p: bool(held) for p, held in zip(self.paths, self.exists)}

    def sized(self) -> dict[str, Size]:
        """What each save that exists holds, by entry name (for -keep-bytes)."""
        found = {}
        for i, name in enumerate(self.names):
            size = self.size(i)
            if size is not None:
                found[name] = size
        return found

    def held(self) -> int:
        """How many saves' sizes are told."""
        return sum(1 for i, n in enumerate(self.bytes) if n >= 0 and self.exists[i])

    def total(self) -> int:
        """The bytes the saves hold in all."""
        return sum(n for i, n in enumerate(self.bytes) if n > 0 and self.exists[i])


#: Where a save's size was read (capacity.Size.source), as Listing keeps it: one byte each.
SOURCES = ("", "manifest", "files")
_FILES = SOURCES.index("files")


class Exec:
    """What exec/ holds that no entry names: the attempts (``total``; the last ATTEMPT_LIMIT by name looked
    into), the unpublished saves with their verdicts, the folders no rule matches, the attempts that could
    not be read, and exec/'s own files (the idle marks among them)."""

    __slots__ = ("total", "looked", "saves", "unnamed", "unreadable", "files")

    def __init__(self) -> None:
        self.total = self.looked = 0
        self.saves: list[Save] = []
        self.unnamed: list[Folder] = []
        self.unreadable: list[Unreadable] = []
        self.files: list[str] = []

    def json(self) -> dict[str, Any]:
        return {
            "attempts": {"total": self.total, "looked_into": self.looked},
            "saves": [s.json() for s in self.saves],
            "unnamed": [u.json() for u in self.unnamed],
            "unreadable": [u.json() for u in self.unreadable],
        }

    def text(self, root: str, only: str | None) -> Iterator[str]:
        head = f"saves not published under {shown(root + '/' + EXEC + '/')} ({self.total} attempts"
        if self.looked < self.total:
            head += f", the last {self.looked} by name looked into"
        if only:
            head += f"; {only} only"
        saves = [s.text() for state in STATES for s in self.saves if s.state == state]
        yield from _section(head + ")", saves)
        yield from _section(
            f"folders under {EXEC}/<attempt>/ that no entry names and no framework's naming rule matches:",
            [u.text() for u in self.unnamed],
        )
        if self.unreadable:
            yield f"attempts under {EXEC}/ that could not be read:"
            yield from (u.text() for u in self.unreadable)


#: The verdicts, in the order the text lists them.
STATES = ("complete", "incomplete", "faulty")


def _section(head: str, items: Iterable[str]) -> Iterator[str]:
    yield head
    empty = True
    for item in items:
        empty = False
        yield item
    if empty:
        yield "  (none)"


class Report:
    """One root's status document (README: "publish status -json"), said as one JSON line (``json``, in
    pieces) or as text for a person (``text``), both made from the same records.  ``failed``: -mirror, the
    root could not be read (why); with -mirror also the mirror's report, the entries pending and the rows
    of both tiers."""

    __slots__ = (
        "store", "only", "failed", "listing", "exec", "tombs", "prune", "idle", "now", "mirror", "pending",
        "tiers",
    )  # fmt: skip

    def __init__(self, store: Store, only: str | None, listing: Listing, now: float) -> None:
        self.store = store
        self.only = only
        self.failed: str | None = None
        self.listing = listing
        self.exec = Exec()
        self.tombs: list[Tomb] = []
        self.prune: Plan | None = None
        self.idle = Idle(None, 0, 0)
        self.now = now
        self.mirror: Report | None = None
        self.pending: list[str] = []
        self.tiers: list[Tier] = []

    def head(self) -> dict[str, Any]:
        """The document's fields, but the publications (``publications``: None, said in pieces)."""
        doc: dict[str, Any] = {"version": VERSION, "root": self.store.root, "framework": self.only}
        if self.failed is not None:
            doc["failed"] = self.failed
        doc["publications"] = None
        doc.update(self.exec.json())
        doc["tombstones"] = [t.json() for t in self.tombs]
        doc["prune"] = None if self.prune is None else self.prune.json()
        doc["idle"] = self.idle.json()
        doc["bytes"] = None if self.failed is not None else self.listing.total()
        doc["space"] = None if self.failed is not None else space(self.store)
        return doc

    def json(self) -> Iterator[str]:
        """The document, as json.dumps(ensure_ascii=True) writes it, in pieces: a publication at a time."""
        import json

        dumps = json.JSONEncoder(ensure_ascii=True).encode
        doc = self.head()
        if self.mirror is not None:
            doc.update(mirror=None, pending=self.pending, tiers=[t.json() for t in self.tiers])
        for i, (key, value) in enumerate(doc.items()):
            yield (", " if i else "{") + dumps(key) + ": "
            if key == "publications":
                yield "["
                for n, pub in enumerate(self.listing):  # one piece each: never the list joined twice
                    yield (", " if n else "") + dumps(pub.json(self.now))
                yield "]"
            elif key == "mirror":
                assert self.mirror is not None
                yield from self.mirror.json()
            else:
                yield dumps(value)
        yield "}"

    def text(self) -> Iterator[str]:
        """The document as lines for a person."""
        root = self.store.root
        if self.failed is not None:  # -mirror, the root lost: nothing of it to show but why
            yield f"the root {shown(root)} could not be read: {self.failed}"
        else:
            pubs = self.listing
            yield f"publications in {shown(root + '/' + PUB)}: {len(pubs)}, newest first"
            yield from pubs.lines() if len(pubs) else ["  (none)"]
            yield self.space_line()
            yield from self.exec.text(root, self.only)
            yield from self.tombs_text(root)
        mirror = self.mirror
        if mirror is not None:
            yield from _section(
                f"both tiers, newest first (root {shown(root)}, mirror {shown(mirror.store.root)}):",
                [t.text() for t in self.tiers],
            )
        yield from self.idle.text(mirror is not None)
        if self.prune is not None:
            yield from self.prune.text()
        if mirror is not None:
            yield f"the mirror {shown(mirror.store.root)}:"
            yield from ("  " + line for line in mirror.text())

    def tombs_text(self, root: str) -> Iterator[str]:
        """The tombstones: those the next prune finishes, then those whose folder a publication relates to."""
        where = shown(root + "/" + TOMB)
        finished = [t.text() for t in self.tombs if not t.related]
        kept = [t.text() for t in self.tombs if t.related]
        if finished or not kept:
            yield from _section(
                f"tombstones in {where} (an interrupted prune; the next prune finishes them):", finished
            )
        if kept:
            yield (
                f"tombstones in {where} whose folder a publication names, holds or lies in (a prune that keeps "
                "the publication leaves the folder in place, and the tombstone until it is an hour old: it may "
                "be a running prune's, which removes the folder):"
            )
            yield from kept

    def space_line(self) -> str:
        """capacity.space_line of what the publications hold: it counts those whose size is told."""
        told = [_TOLD] * self.listing.held()
        doc = {"publications": told, "bytes": self.listing.total(), "space": space(self.store)}
        return space_line({**doc, "root": self.store.root})


#: A publication whose size is told, as capacity.space_line counts them.
_TOLD = {"bytes": 0}


# -- reading a root


def collect(
    dl: Deadline,
    store: Store,
    keep: int | Policy | None,
    only: str | None = None,
    timed: bool = True,
    marks: list[str] | None = None,
) -> Report:
    """The root's report; ``only``: one framework's verdicts; ``timed``: each entry's time read (the text
    shows none); ``marks``: given, the names of the idle marks in exec/ are added to it.  Everything that
    can fail is read here, before a line is written."""
    import time

    store.check_root(dl)
    names, times = _names(dl, store, timed)
    now = time.time()
    paths = _paths(names, store.location(PUB))
    tombs = layout.parse_tombs(store.list_tombs(dl), store.location(TOMB))
    if not names and not tombs:
        store.check_exists(dl)
    listing = Listing(store, names, paths, times)
    if not _exist_and_measure(dl, store, listing):
        _exist(dl, store, listing)
        measure(dl, store, listing)  # each one's bytes: one manifest read each
    report = Report(store, only, listing, now)
    report.exec = _Scan(dl, store, only, paths, tombs).run()
    if tombs:  # listed as tombstones, not as saves or leftovers
        report.tombs = _tombs(dl, store, tombs, paths, now)
    report.idle = _idle(listing, report.exec.files)
    if marks is not None:
        marks.extend(name for name in report.exec.files if name.startswith(MARK))
    if keep is not None:
        report.prune = _plan(dl, store, keep, report, tombs)
    return report


def _tombs(dl: Deadline, store: Store, tombs: list[str], paths: list[str], now: float) -> list[Tomb]:
    """The tombstones' records: whether a publication (of ``paths``) relates to each folder, and for those
    that one does, when the tombstone was written (tomb/ listed once more, only then)."""
    nest = layout.Nest(paths)
    related = [nest.related(f) for f in tombs]
    times = store.tomb_times(dl) if any(related) else {}
    return [
        Tomb(store, f, rel, times.get(layout.tomb_name(f)) if rel else None, now)
        for f, rel in zip(tombs, related)
    ]


def _names(dl: Deadline, store: Store, timed: bool) -> tuple[list[str], dict[str, float] | None]:
    """pub/'s names, newest first (zero-padded, they sort as (epoch, step, name)), and when ``timed`` (or
    on S3, where it is the same one LIST) each entry's time."""
    if timed or not store.cheap_listing:
        times = store.entry_times(dl)
        return sorted(times, reverse=True), times
    return sorted(store.list_entries(dl), reverse=True), None


def _paths(names: list[str], where: str) -> list[str]:
    """The save each of ``names`` (newest first) names; the first name in sorted order that is not an
    entry's is a Failure naming it, as layout.parse_all says it."""
    found: list[str] = []
    for start in range(0, len(names), CHUNK):  # CHUNK at once, in C, with parse's rule: a bounded transient
        part = layout.paths_of(names[start : start + CHUNK])
        if part is None:
            break  # a name parse refuses: the loop below names the first
        found += part
    else:
        return found
    paths = [""] * len(names)
    for i in range(len(names) - 1, -1, -1):
        try:
            paths[i] = layout.parse(names[i]).path
        except ValueError:
            layout.parse_all([names[i]], where)
            raise AssertionError("parse_all took a name parse refused") from None  # never: the same rule
    return paths


def _exist(dl: Deadline, store: Store, listing: Listing) -> None:
    """Whether each publication's save exists: at once where the store can (POSIX: each parent folder
    opened once per CHUNK saves, so a bounded number of their stats is held at a time), else one ``holds`` each."""
    at_once = getattr(store, "holds_all", None)
    paths = listing.paths
    for start in range(0, len(paths), CHUNK):
        part = paths[start : start + CHUNK]
        held = at_once(dl, part) if at_once is not None else [store.holds(dl, path) for path in part]
        listing.exists[start : start + len(part)] = bytes(map(bool, held))


def _exist_and_measure(dl: Deadline, store: Store, listing: Listing) -> bool:
    """_exist and measure together, CHUNK publications at a time, where the store can (POSIX
    ``held_sizes``: a save no manifest measures is opened once, which tells that it is there): the same
    answers, and the same error raised (whether each save exists is asked of all before a fault measuring
    one is raised).  False where the store cannot."""
    if getattr(store, "held_sizes", None) is None or getattr(store, "read_manifests", None) is None:
        return False
    from publish.ops.capacity import held_and_sized

    names, paths = listing.names, listing.paths
    failed: BaseException | None = None
    for start in range(0, max(len(names), 1), CHUNK):
        end = start + CHUNK
        held, sizes, fault = held_and_sized(dl, store, names[start:end], paths[start:end], failed is None)
        listing.exists[start : start + len(held)] = bytes(held)
        failed = failed or fault
        if failed is None:
            for i, size in enumerate(sizes, start):
                if size is not None:
                    listing.set_size(i, size)
    if failed is not None:
        raise failed
    return True


def measure(dl: Deadline, store: Store, listing: Listing) -> None:
    """What each save that exists holds (capacity.save_size), its manifests read CHUNK at a time where the
    store reads many at once (POSIX: man/ opened once for each), and the saves no manifest measures
    measured at once where the store can (POSIX: each parent folder opened once for each)."""
    from publish.ops.capacity import sizes_of
    from publish.rules import manifest

    at_once = getattr(store, "read_manifests", None)
    files_at_once = at_once is not None and getattr(store, "save_sizes", None) is not None
    names, paths, exists = listing.names, listing.paths, listing.exists
    for start in range(0, max(len(names), 1), CHUNK):
        held = [i for i in range(start, min(start + CHUNK, len(names))) if exists[i]]
        read = {} if at_once is None else at_once(dl, [names[i] for i in held], manifest.MANIFEST_LIMIT)
        if files_at_once:
            sizes = sizes_of(dl, store, [names[i] for i in held], [paths[i] for i in held], read)
            for i, size in zip(held, sizes):
                listing.set_size(i, size)
            continue
        for i in held:
            name = names[i]
            entry = layout.Entry(int(name[:20]), int(name[21:41]), paths[i], name)
            if name in read:
                listing.set_size(i, save_size(dl, store, entry, read[name]))
            else:
                listing.set_size(i, save_size(dl, store, entry))


class _Scan:
    """The look into exec/: each of the last ATTEMPT_LIMIT attempts listed once, each child of it that no
    entry names and no tombstone dooms matched against the frameworks' naming rules."""

    __slots__ = ("dl", "store", "only", "paths", "published", "doomed", "nest", "found")

    def __init__(
        self, dl: Deadline, store: Store, only: str | None, paths: list[str], tombs: list[str]
    ) -> None:
        self.dl, self.store, self.only = dl, store, only
        self.paths = paths
        self.published = set(paths)
        self.doomed = set(tombs)  # listed as tombstones, not as saves or leftovers
        self.nest: layout.Nest | None = None  # the entries' paths, made when a folder no rule matches is met
        self.found = Exec()

    def run(self) -> Exec:
        found = self.found
        folders, found.files = self.store.children(self.dl, EXEC)  # one LIST on S3: the attempts and marks
        attempts = sorted(folders)
        looked = attempts[-ATTEMPT_LIMIT:]
        found.total, found.looked = len(attempts), len(looked)
        for attempt in looked:
            self.attempt(f"{EXEC}/{attempt}")
        return found

    def attempt(self, where: str) -> None:
        try:
            folders, files = self.store.children(self.dl, where)
        except FileError as e:
            if not e.unexaminable:
                raise
            self.found.unreadable.append(Unreadable(self.store, where, str(e)))
            return
        except StoreError:
            raise
        except (Failure, OSError) as e:  # one attempt's folder (a link the store refuses)
            self.found.unreadable.append(Unreadable(self.store, where, str(e)))
            return
        candidates = [(n, "folder") for n in folders] + [(n, "file") for n in files]
        for child, kind in sorted(candidates):
            self.child(f"{where}/{child}", child, kind)

    def child(self, path: str, child: str, kind: str) -> None:
        if path in self.published:
            return  # a published save: neither a save to report nor a folder no entry names
        parts = path.split("/")
        if any("/".join(parts[:i]) in self.doomed for i in range(1, len(parts) + 1)):
            return
        matches = []
        matched = False
        for name in PREFERENCE:
            fw = FRAMEWORKS[name]
            step = fw.step(child)
            if step is None or (fw.kind == "files") != (kind == "file"):
                continue
            matched = True
            if self.only is None or name == self.only:
                matches.append((name, step))
        if matches:
            self.found.saves.append(Save(self.store, path, _verdict(self.dl, self.store, path, matches)))
        if not matched and kind == "folder" and not self.named(path):
            self.found.unnamed.append(Folder(self.store, path))

    def named(self, path: str) -> bool:
        """Whether an entry names the folder ``path``, one inside it or one around it."""
        if self.nest is None:
            self.nest = layout.Nest(self.paths)
        return self.nest.related(path)


def _idle(listing: Listing, files: list[str], mirrored: Listing | None = None) -> Idle:
    """run -requeue's count of idle requeues (publish.ops.idle): the marks among ``files`` (exec/'s) of
    the save a dispatch would resume from now (the newest publication whose save exists; none: no save),
    and all marks.  With ``mirrored`` (the mirror's publications; ``files`` then both tiers' marks), that
    save is resolve -mirror's answer: the mirror's when its newest is newer, else the root's."""
    from publish.ops.idle import mark_prefix

    marks = {name for name in files if name.startswith(MARK)}  # a mark on both tiers counts once
    newest = listing.newest()
    other = None if mirrored is None else mirrored.newest()
    if other is not None and (newest is None or (other.epoch, other.step) > (newest.epoch, newest.step)):
        newest = other
    resumed = None if newest is None else layout.Entry(newest.epoch, newest.step, newest.path, newest.name)
    prefix = mark_prefix(resumed)
    return Idle(newest, sum(1 for name in marks if name.startswith(prefix)), len(marks))


def _plan(dl: Deadline, store: Store, keep: int | Policy, report: Report, tombs: list[str]) -> Plan:
    """What prune -keep would do (the document's ``prune``)."""
    listing = report.listing
    if isinstance(keep, Policy) and keep.within is not None:
        keep.times, keep.now = listing.times or {}, report.now
    entries = listing.entries()
    if isinstance(keep, Policy) and keep.protect is not None:
        keep.held = keep.protect(dl, entries)
    policy = keep if isinstance(keep, Policy) else Policy(keep)
    try:  # each save's existence and size asked once, as prune asks
        sched = Schedule(entries, tombs, keep, Saves(dl, store, listing.known(), listing.sized()))
    except NoSaves as e:  # what prune would do: nothing, and say why
        return Plan(policy, [], [], str(e))
    orphans = None
    if policy.orphans is not None:
        sched.find_orphans(dl, store, policy.orphans, report.now)
        orphans = {
            "age": policy.orphans.age,
            "attempt": policy.orphans.attempt or None,
            "folders": sched.orphans,
            "uploads": [
                {"path": u.path, "location": store.location(u.path), "upload_id": u.upload_id}
                for u in sched.uploads
            ],
            "left": [{"path": p, "location": store.location(p), "why": why} for p, why in sched.left],
        }
    plan = Plan(policy, [e.name for e in sched.gone], would_remove(dl, store, sched))
    plan.orphans, plan.notes = orphans, sched.notes
    return plan


# -- the verb


class Ask:
    """What a status is asked for: the prune -keep N to show (``keep``), -json, one framework's verdicts
    (``only``), the mirror and its -mirror-keep, and the health checks' bounds (-max-age, -max-mirror-lag)."""

    __slots__ = ("keep", "as_json", "only", "mirror", "mirror_keep", "max_age", "max_lag")

    def __init__(
        self, keep: int | Policy | None = None, as_json: bool = False, only: str | None = None
    ) -> None:
        self.keep = keep
        self.as_json = as_json
        self.only = only
        self.mirror: Store | None = None
        self.mirror_keep: int | None = None
        self.max_age: float | None = None
        self.max_lag: float | None = None

    @property
    def timed(self) -> bool:
        """Whether each entry's time is read: -json shows them, the health checks and -keep-within use them,
        the text alone does not."""
        within = isinstance(self.keep, Policy) and self.keep.within is not None
        return self.as_json or self.max_age is not None or self.max_lag is not None or within


def status(dl: Deadline, store: Store, say: Say, ask: Ask) -> None:
    """Print the status document, as one JSON line or as text for a person, a block of lines at a time.
    With ``ask.mirror`` (-mirror), the mirror's document too, under ``"mirror"``, and which publications it
    holds.  ``ask.max_age`` and ``ask.max_lag`` (-max-age, -max-mirror-lag): when what they bound is
    stale, a Failure naming it in one line instead (publish.ops.health)."""
    if ask.mirror is None:
        report = collect(dl, store, ask.keep, ask.only, ask.timed)
    else:
        report = _two_tiers(dl, store, say, ask, ask.mirror)
    if ask.max_age is not None or ask.max_lag is not None:
        from publish.ops.health import check

        check(_health(report), ask.max_age, ask.max_lag)
    if ask.as_json:
        say.out("".join(report.json()))
        return
    block: list[str] = []
    for line in report.text():
        block.append(line)
        if len(block) == CHUNK:
            say.out_all(block)
            block = []
    say.out_all(block)


def _two_tiers(dl: Deadline, store: Store, say: Say, ask: Ask, mirror: Store) -> Report:
    """The root's report with the mirror's (-mirror): the root lost with its node, the mirror's alone, as
    resolve -mirror answers."""
    from publish.ops.tiers import Tiers

    pair = Tiers(store, mirror, say, 0.0, ask.mirror_keep)
    if isinstance(ask.keep, Policy):
        ask.keep.protect = pair.protected  # prune -keep N keeps what is pending
    fast_marks: list[str] = []
    mirror_marks: list[str] = []
    try:
        report = collect(dl, store, ask.keep, ask.only, ask.timed, fast_marks)
    except Failure as e:
        try:
            mirrored = collect(dl, pair.mirror, None, ask.only, ask.timed, mirror_marks)
        except Failure as m:
            raise Failure(f"{_fact(e)}; the mirror failed too: {_fact(m)}") from None
        say.warn(f"{_fact(e)}: showing the mirror alone")
        report = Report(store, ask.only, Listing(store, [], [], {}), mirrored.now)
        report.failed = _fact(e)
    else:
        mirrored = collect(dl, pair.mirror, None, ask.only, ask.timed, mirror_marks)
    fast, other = report.listing, mirrored.listing
    pending = pair.pending_of(dl, fast.entries()[::-1], other.names, fast.known(), other.known())
    tiers(report, mirrored, [e.name for e in pending])
    # run -requeue -mirror's count: resolve -mirror's answer, the union of both tiers' marks
    report.idle = _idle(fast, fast_marks + mirror_marks, other)
    return report


def _fact(e: Failure) -> str:
    """What failed, without a missing root's advice (publish init): the mirror is there."""
    from publish.rules.errors import MissingRoot

    return e.fact if isinstance(e, MissingRoot) else str(e)


def tiers(report: Report, mirrored: Report, pending: list[str]) -> None:
    """Add the mirror's report to the root's: whether it holds each publication, the ``pending`` entry
    names (newest first), and each (epoch, step, entry) of either tier, newest first, with its state on
    each (``exists``, ``missing``: published but the save is gone, ``none``; on the mirror also
    ``pending``)."""
    on_mirror = dict(zip(mirrored.listing.names, mirrored.listing.exists))
    on_fast = dict(zip(report.listing.names, report.listing.exists))
    report.listing.on_mirror = set(on_mirror)
    report.mirror = mirrored
    report.pending = pending
    rows = []
    for name in sorted(set(on_mirror) | set(on_fast), key=_order, reverse=True):
        there = (
            _state(on_mirror.get(name)) if name in on_mirror else ("pending" if name in pending else "none")
        )
        rows.append(Tier(name, _state(on_fast.get(name)), there))
    report.tiers = rows


def _order(name: str) -> tuple[int, int, str]:
    return (int(name[:20]), int(name[21:41]), name)


def _state(held: int | None) -> str:
    """``exists``, ``missing`` (published, its save gone) or ``none`` (not published there)."""
    if held is None:
        return "none"
    return "exists" if held else "missing"


def _health(report: Report) -> dict[str, Any]:
    """What publish.ops.health reads of the document: each tier's publications, the pending ones."""
    doc: dict[str, Any] = {
        "root": report.store.root,
        "publications": [p.json(report.now) for p in report.listing],
    }
    if report.mirror is not None:
        mirror = report.mirror
        doc["mirror"] = {"publications": [p.json(mirror.now) for p in mirror.listing]}
        doc["pending"] = report.pending
    return doc


class Status(command.Command):
    name = "status"
    synopsis = (
        f"publish status {command.ROOT_FLAGS} [-framework F] "
        "[-keep N [-keep-every K] [-keep-within D] [-keep-bytes SIZE] [-orphans [-orphans-age 1h] [-attempt A]]] "
        "[-mirror URL [-mirror-keep M] [-max-mirror-lag D]] [-max-age D] [-json]"
    )
    summary = "show what a root holds: publications, unpublished saves, leftovers, pending prunes"

    def __init__(self) -> None:
        super().__init__()
        self.keep = self.fs.integer(
            "keep", 0, "also show what prune -keep `N` would remove", minimum=1, int64=True
        )
        self.json = self.fs.boolean("json", False, "print one JSON document (version 1) instead of text")
        self.max_age = self.fs.duration(
            "max-age",
            0.0,
            "exit 1, naming it in one line, when the newest publication (of either tier) was made longer than "
            "the duration `D` ago",
        )
        self.max_lag = self.fs.duration(
            "max-mirror-lag",
            0.0,
            "with -mirror: exit 1, naming it in one line, when the newest save not yet mirrored was published "
            "longer than the duration `D` ago",
        )
        self.framework = scan_flags.framework_flag(self.fs, f"only this framework's verdicts: {LISTED}")
        self.retention = RetentionFlags(self.fs, attempt=True)
        self.mirror = MirrorFlags(self.fs, keep=True)

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        if not self.keep.is_set:
            self.retention.without_keep("shows")
        orphans = self.retention.given_orphans(call.env)
        root = self.root(call)
        store = self.open(call, root).store
        given = self.mirrored
        mirror = self.open_mirror(call, given.root).store if given is not None else None
        if mirror is None and self.max_lag.is_set:
            raise UsageError("-max-mirror-lag applies to -mirror: give -mirror")
        policy = None
        if self.keep.is_set:
            policy = self.retention.policy(self.keep.value, orphans)
        ask = Ask(policy, self.json.value, self.framework.value)
        ask.mirror, ask.mirror_keep = mirror, None if given is None else given.keep
        ask.max_age = self.max_age.value if self.max_age.is_set else None
        ask.max_lag = self.max_lag.value if self.max_lag.is_set else None
        status(self.deadline(call), store, call.say, ask)
        return 0


COMMAND = Status
