"""Retention: which publications a prune keeps (the policy of -keep and its companions, counting only saves
that exist), its schedule, and the prune itself, crash-consistent; run by prune, run -keep, watch's and run's
mirror (-mirror-keep) and shown by status -keep.

Before removing an entry, a prune records each folder it is about to remove as a tombstone in tomb/
(durable), and removes a tombstone only after its folder.  So a prune killed at any point leaves tombstones
for every folder it planned and had not finished, and the next prune finishes them: exactly what an
uninterrupted one would have left.  With -orphans it also removes, through the same tombstones, what in
other attempts' folders no remaining entry relates to and nothing has changed in for -orphans-age
(publish.ops.orphans).
"""

from __future__ import annotations

from publish.ops import Say
from publish.ops.orphans import Orphans
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.rules.layout import EXEC, MAN, PUB, TOMB
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.ops.capacity import Size
    from publish.stores.base import Store, Upload

#: How many finished tombstones are dropped at once (one fsync of tomb/ on POSIX).
TOMB_BATCH = 512


class Policy:
    """Which entries stay: the latest ``keep`` (at least one, so the newest always stays), and also those whose
    step is a multiple of ``every`` (0: none) and those made within ``within`` seconds before ``now`` (None:
    none), by ``times`` (entry name to seconds since the epoch, Store.entry_times).  ``orphans``: also remove
    the leftovers in exec/ that -orphans asks for (None: not asked).  ``bytes``: -keep-bytes, the cap on
    what the others keep (publish.ops.capacity.cap; None: no cap), given as ``bytes_flag``."""

    __slots__ = (
        "keep",
        "every",
        "within",
        "times",
        "now",
        "orphans",
        "protect",
        "held",
        "bytes",
        "bytes_flag",
    )

    def __init__(
        self,
        keep: int,
        every: int = 0,
        within: float | None = None,
        times: dict[str, float] | None = None,
        now: float = 0.0,
    ) -> None:
        self.keep = keep
        self.every = every
        self.within = within
        self.times = times or {}
        self.now = now
        self.orphans: Orphans | None = None
        #: -mirror: given the entries read, the names that stay whatever the rest says (pending uploads)
        self.protect: Callable[[Deadline, list[layout.Entry]], set[str]] | None = None
        self.held: set[str] = set()
        self.bytes: int | None = None
        self.bytes_flag = "-keep-bytes"

    def also_kept(self, entry: layout.Entry) -> bool:
        if entry.name in self.held:
            return True
        if self.every and entry.step % self.every == 0:
            return True
        if self.within is not None:
            made = self.times.get(entry.name)
            return made is not None and self.now - made <= self.within
        return False


class Saves:
    """Which saves exist, asked of the store as ``resolve`` asks it (Store.holds: one lstat through the
    root's descriptor on POSIX, one LIST with max-keys=1 on S3), so retention and ``resolve`` agree by
    construction.  Each path is asked at most once; a save found gone has its folders above it asked in
    turn, and a folder that holds nothing answers for everything below it (an unmounted or emptied
    ``exec/`` costs one question, not one per entry).  ``known``: answers already had (status asks every
    publication's save anyway).  A fault of the store (a permission, an I/O error, a failing LIST) is
    raised: "I cannot tell" is never taken for "gone".  ``sizes``: what each save holds, by entry name
    (-keep-bytes), read at most once each (:meth:`size`)."""

    __slots__ = ("dl", "store", "known", "sizes", "intact_of", "damaged")

    def __init__(
        self,
        dl: Deadline,
        store: Store,
        known: dict[str, bool] | None = None,
        sizes: dict[str, Size] | None = None,
    ) -> None:
        self.dl = dl
        self.store = store
        self.known: dict[str, bool] = dict(known or {})
        self.sizes: dict[str, Size] = dict(sizes or {})
        self.intact_of: dict[str, bool] = {}  # by entry name: its save matches its manifest's sizes
        self.damaged: list[str] = []  # what was said of each save counted for nothing as damaged

    def intact(self, entry: layout.Entry) -> bool:
        """Whether the save of ``entry`` (which exists) is as its manifest records it (each file there, of
        its size), as ``resolve -verify`` checks it (publish.ops.resolve_checks.mismatch); one without a
        manifest is.  Asked once an entry; a damaged one is noted in :attr:`damaged`."""
        ok = self.intact_of.get(entry.name)
        if ok is None:
            from publish.ops.resolve_checks import mismatch

            why = mismatch(self.dl, self.store, entry, deep=False)
            ok = self.intact_of[entry.name] = not why
            if why:
                where = shown(self.store.location(f"{PUB}/{entry.name}"))
                self.damaged.append(
                    f"prune: {where}: {why}: counted for nothing (resolve -verify passes it over), left in place"
                )
        return ok

    def size(self, entry: layout.Entry) -> Size:
        """What the save of ``entry`` (which exists) holds (publish.ops.capacity.save_size)."""
        found = self.sizes.get(entry.name)
        if found is None:
            from publish.ops.capacity import save_size

            found = self.sizes[entry.name] = save_size(self.dl, self.store, entry)
        return found

    def __call__(self, path: str) -> bool:
        held = self.known.get(path)
        if held is not None:
            return held
        parts = path.split("/")
        folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(self.known.get(f) is False for f in folders):
            held = False
        else:
            held = self.store.holds(self.dl, path)
            if not held:
                for folder in reversed(folders):
                    if folder in self.known:
                        break
                    self.known[folder] = self.store.holds(self.dl, folder)
                    if self.known[folder]:
                        break
        self.known[path] = held
        return held

    def none_exist(self, newest_first: list[layout.Entry]) -> Failure:
        """The failure of a prune that found no entry's save: it removes nothing."""
        newest = newest_first[0]
        where = self.store.location(PUB)
        return NoSaves(
            f"prune: {shown(where)}: every one of its {len(newest_first)} entries names a save that does "
            f"not exist (the newest {shown(self.store.location(newest.path))}): removed nothing (an "
            f"unmounted filesystem or an {EXEC}/ that cannot be reached makes every save look gone)"
        )


class NoSaves(Failure):
    """Every entry's save looks gone: the prune removes nothing (exit 1)."""


def split(
    entries: list[layout.Entry], keep: int | Policy, saves: Saves | None = None
) -> tuple[list[layout.Entry], list[layout.Entry]]:
    """The entries to remove (oldest first) and those that stay: the latest ``keep`` (at least one), and
    what a :class:`Policy` also keeps.  O(n log n).

    With ``saves``, the latest ``keep`` are counted among the entries whose save exists and matches its
    manifest's sizes, newest first, as ``resolve`` and ``resolve -verify`` look (so the save either answers
    with always stays); an entry newer than the last of them whose save is gone or damaged counts for
    nothing and stays in place (it names nothing a prune could remove, and a save that comes back, an
    unmounted filesystem mounted again, is still published).  Only the entries down to the last kept one
    are asked about.  When none of the entries has its save, NoSaves."""
    policy = keep if isinstance(keep, Policy) else Policy(keep)
    ordered = layout.oldest_first(entries)
    want = max(policy.keep, 1)
    if saves is None:
        cut = max(len(ordered) - want, 0)
    else:
        cut, found, there = 0, 0, False
        for i in range(len(ordered) - 1, -1, -1):
            if saves(ordered[i].path):
                there = True
                if not saves.intact(ordered[i]):
                    continue
                found += 1
                if found == want:
                    cut = i
                    break
        if ordered and not there:
            raise saves.none_exist(ordered[::-1])
    gone: list[layout.Entry] = []
    kept = ordered[cut:]
    for entry in ordered[:cut]:
        (kept if policy.also_kept(entry) else gone).append(entry)
    return gone, kept


def unrelated(gone: list[layout.Entry], kept: layout.Nest) -> list[str]:
    """The folders of ``gone`` that no path in ``kept`` relates to, in the order of ``gone``, each once."""
    seen: set[str] = set()
    folders: list[str] = []
    for entry in gone:
        if entry.path not in seen:
            seen.add(entry.path)
            if not kept.related(entry.path):
                folders.append(entry.path)
    return folders


def plan(entries: list[layout.Entry], keep: int | Policy) -> tuple[list[layout.Entry], list[str]]:
    """The entries to remove, and the folders to remove after them (oldest first, each once).

    The latest ``keep`` entries stay; a folder stays while a remaining entry names it, a folder inside it or
    a folder around it.  O(n log n) in the number of entries."""
    gone, kept = split(entries, keep)
    return gone, unrelated(gone, layout.Nest([k.path for k in kept]))


class Schedule:
    """What a prune of given entries and tombstones does: the entries it removes, the tombstones it writes
    and drops, and the folders it removes in order (``resumed`` from tomb/, then its own ``folders``, then
    the ``orphans`` -orphans found); with -orphans also the multipart ``uploads`` it aborts (first) and the
    candidates it leaves in place with why (``left``)."""

    __slots__ = (
        "gone",
        "kept",
        "staying",
        "folders",
        "recorded",
        "stale",
        "resumed",
        "orphans",
        "uploads",
        "left",
        "notes",
        "_paths",
        "_linked",
    )

    def __init__(
        self, entries: list[layout.Entry], tombs: list[str], keep: int | Policy, saves: Saves | None = None
    ) -> None:
        self.gone, kept_entries = split(entries, keep, saves)
        # said on stderr: the damaged saves counted for nothing, what -keep-bytes kept over its cap, or could
        # not measure
        self.notes: list[str] = list(saves.damaged) if saves is not None else []
        if isinstance(keep, Policy) and keep.bytes is not None and saves is not None:
            from publish.ops.capacity import cap

            more, kept_entries, notes = cap(keep, kept_entries, saves)
            self.notes += notes
            self.gone = layout.oldest_first(self.gone + more)
        self.staying = {e.name for e in kept_entries}  # the names of the entries that stay
        # What stays is also where a kept entry leads through a link (publish.ops.publishing.through_links):
        # asked only when something may be removed (one lstat per kept entry on POSIX).
        self._paths = [k.path for k in kept_entries]
        self._linked = False
        if saves is not None and (self.gone or tombs):
            self._with_links(saves.dl, saves.store)
        self.kept = kept = layout.Nest(self._paths)
        self.folders = unrelated(self.gone, kept)
        self.orphans: list[str] = []
        self.uploads: list[Upload] = []
        self.left: list[tuple[str, str]] = []
        planned, self.recorded = set(self.folders), set(tombs)
        # A recorded folder that a remaining entry relates to (published again since, or kept by a larger
        # -keep) stays, and only its tombstone goes, once old (_stale_tombs).  Every other one is removed
        # with this prune's own folders, after the entries: an entry about to go may still name it, or a
        # folder inside it.
        self.stale = [f for f in tombs if f not in planned and kept.related(f)]
        self.resumed = sorted(f for f in tombs if f not in planned and not kept.related(f))

    def _with_links(self, dl: Deadline, store: Store) -> None:
        """Add to the kept paths where those with a link on them lead, once."""
        from publish.ops.publishing import through_links

        self._paths += through_links(dl, store, self._paths)
        self._linked = True

    def removals(self) -> list[str]:
        return self.resumed + self.folders + self.orphans

    def find_orphans(self, dl: Deadline, store: Store, orphans: Orphans, now: float) -> None:
        """Add what -orphans removes (publish.ops.orphans): the folders after the others, the uploads."""
        from publish.ops.orphans import find

        if not self._linked:
            self._with_links(dl, store)
            self.kept = layout.Nest(self._paths)
        found = find(dl, store, orphans, self.kept, self.resumed + self.folders, now)
        self.orphans, self.uploads, self.left = found.folders, found.uploads, found.left


def read_schedule(dl: Deadline, store: Store, keep: int | Policy) -> Schedule:
    """Check the root and read pub/ and tomb/ as prune does (the same Failures), and plan the prune.  A
    policy with ``within`` reads the entries' times (the same one LIST on S3)."""
    store.check_root(dl)
    if isinstance(keep, Policy) and keep.within is not None:
        import time

        keep.times = store.entry_times(dl)
        keep.now = time.time()
        names = list(keep.times)
    else:
        names = store.list_entries(dl)
    entries = layout.parse_all(names, store.location(PUB))
    if isinstance(keep, Policy) and keep.protect is not None:
        keep.held = keep.protect(dl, entries)  # after pub/ was read: what it names is all it may protect
    tombs = layout.parse_tombs(store.list_tombs(dl), store.location(TOMB))
    if not entries and not tombs:
        store.check_exists(dl)
    sched = Schedule(entries, tombs, keep, Saves(dl, store))
    if isinstance(keep, Policy) and keep.orphans is not None:
        import time

        sched.find_orphans(dl, store, keep.orphans, time.time())
    return sched


def prune(dl: Deadline, store: Store, say: Say, keep: int | Policy, dry_run: bool = False) -> int:
    """Prune the root, finishing first what an interrupted prune recorded in tomb/.

    ``dry_run``: the same reads and checks, then ``would remove <location>`` per folder the prune would
    remove (and ``would abort ...`` per upload), and nothing written.  Returns how many folders it removed."""
    sched = read_schedule(dl, store, keep)
    for note in sched.notes:
        say.warn(note)
    if dry_run:
        for line in would_remove(dl, store, sched):
            if line.startswith(("would remove ", "would abort ")):
                say.out(line)
            else:
                say.warn(line)
        return 0
    count = 0
    fresh = [f for f in sched.folders + sched.orphans if f not in sched.recorded]
    tombs = [layout.tomb_name(f) for f in fresh]
    store.create_tombs(dl, tombs)
    tomb_of = dict(zip(fresh, tombs))  # each name computed once
    if sched.gone:
        # Entries first: a crash never leaves one naming a missing save, nor one without its manifest.
        store.remove_entries(dl, [e.name for e in sched.gone])
        store.remove_manifests(dl, [e.name for e in sched.gone])
    store.remove_tombs(dl, _stale_tombs(dl, store, sched.stale))
    if sched.gone or fresh:  # pub/ read again, after this prune's marks: its tombstones, its removals
        now = layout.parse_all(store.list_entries(dl), store.location(PUB))
        _named_since(dl, store, say, sched, now)
        _published_again(dl, store, say, sched.gone, now)
    for upload in sched.uploads:  # before the folders: none can complete into a folder once it is gone
        if store.abort_upload(dl, upload):
            say.out(aborted(store, upload))
    for path, why in sched.left:
        say.warn(f"prune: left {shown(store.location(path))} in place: {why}")
    finished: list[str] = []  # tombstones whose folder is gone: dropped a batch at a time, after it
    try:
        for folder in sched.removals():
            if layout.reserved(folder):  # never: entries and tombstones naming one do not parse
                raise AssertionError(f"prune planned to remove the reserved {folder!r}")
            result = store.remove_folder(dl, folder)
            if result.link:
                say.warn(
                    f"prune: left {shown(store.location(folder))} in place: {shown(store.location(result.link))} is a symbolic link"
                )
            elif result.removed:
                say.out(f"removed {shown(store.location(folder))}")
                count += 1
            finished.append(tomb_of.get(folder) or layout.tomb_name(folder))
            if len(finished) >= TOMB_BATCH:
                store.remove_tombs(dl, finished)
                finished = []
    finally:
        # A tombstone outlives its folder by at most a batch: a crash before this leaves it for the next
        # prune, which finds the folder gone and drops it.
        if finished:
            store.remove_tombs(dl, finished)
    unbound_manifests(dl, store, say, sched.staying)
    return count


#: How long a tombstone is left in place while an entry that stays relates to its folder: the prune that
#: wrote it may still be running, about to remove that entry and then the folder.
STALE_TOMB_AGE = 3600.0


def _stale_tombs(dl: Deadline, store: Store, stale: list[str]) -> list[str]:
    """The tombstones of ``stale`` (recorded folders that an entry this prune keeps relates to) to drop:
    those written STALE_TOMB_AGE ago.  A younger one may be a running prune's, written just before it
    removes that entry (this prune read pub/ before it did; another -keep): it removes the folder whatever
    this prune keeps, and a publication of that folder relies on the tombstone to see it
    (publish.ops.publishing.overlapped).  So it stays, and a later prune drops it; an interrupted prune's
    goes an hour after it was written."""
    if not stale:
        return []
    import time

    times = store.tomb_times(dl)
    now = time.time()
    names = [layout.tomb_name(f) for f in stale]
    return [n for n in names if n in times and now - times[n] > STALE_TOMB_AGE]


#: How long a manifest without an entry is left while its save is still there: a publication writes its
#: manifest just before its entry, and may be between the two.
UNBOUND_AGE = 3600.0


def unbound_manifests(dl: Deadline, store: Store, say: Say, entries: set[str]) -> None:
    """Remove the manifests in man/ whose entry is not among ``entries`` (those pub/ held and the prune
    kept): at once when their save is gone too, else once written UNBOUND_AGE ago.  So one whose entry a
    prune cut before it, or a hand, removed goes; one of an entry published since the prune read pub/ has a
    save that is there and is young, and stays.  A name that is no entry name is left, said on stderr."""
    import time

    times = store.manifest_times(dl)
    if not times:
        store.remove_manifests(dl, [])  # POSIX: the temporary files of writes cut off long ago
        return
    now = time.time()
    gone = []
    for name in sorted(set(times) - entries):
        try:
            entry = layout.parse(name)
        except ValueError as e:
            say.warn(f"prune: left {shown(store.location(MAN + '/' + name))} in place: not a manifest ({e})")
            continue
        if now - times[name] > UNBOUND_AGE or not store.holds(dl, entry.path):
            gone.append(name)
    store.remove_manifests(dl, gone)


def aborted(store: Store, upload: Upload, would: str = "") -> str:
    """``aborted <location> (multipart upload <id>)``, or with ``would`` ("would abort ...")."""
    verb = f"{would} abort" if would else "aborted"
    return f"{verb} {shown(store.location(upload.path))} (multipart upload {shown(upload.upload_id)})"


def _published_again(
    dl: Deadline, store: Store, say: Say, gone: list[layout.Entry], now: list[layout.Entry]
) -> None:
    """Write again the manifest of each entry this prune removed that ``now`` (pub/ read after the
    manifests were removed) holds again: a publication of the same name (the same save, epoch and step)
    made it meanwhile, and its manifest, written before its entry, may be the one this prune removed by
    name.  The publisher looks at its manifest again after its entry too (publish.ops.publishing.rebind):
    an entry made after this read is its to mend.  So no entry is left without its manifest."""
    back = {e.name for e in now} & {e.name for e in gone}
    if not back:
        return
    from publish.ops.publishing import write_manifest

    for entry in gone:
        if entry.name not in back or store.exists(dl, f"{MAN}/{entry.name}"):
            continue
        where = shown(store.location(f"{PUB}/{entry.name}"))
        try:
            write_manifest(dl, store, entry.name, entry.path, say)
        except Failure as e:
            say.warn(
                f"prune: {where}, published again meanwhile, has no manifest: it could not be written ({e})"
            )
            continue
        say.warn(f"prune: {where} was published again meanwhile: its manifest written again")


def _named_since(dl: Deadline, store: Store, say: Say, sched: Schedule, now: list[layout.Entry]) -> None:
    """With pub/ read again (``now``) now that this prune's tombstones are durable (its mark, made before it
    reads the publishers'): a folder it recorded now (its own, and the orphans) that an entry published since relates
    to stays, said on stderr, and its tombstone goes.  A publication makes its entry first, then reads
    tomb/ (publish.ops.publishing.overlapped), so one of the two sees the other.  A folder recorded by an
    earlier prune is removed all the same (that one may have begun): its publisher sees the tombstone, or
    finds the save gone, and withdraws.  A prune killed before this is finished the same way: the next one
    keeps a recorded folder that a remaining entry relates to."""
    fresh = [f for f in sched.folders + sched.orphans if f not in sched.recorded]
    if not fresh:
        return
    from publish.ops.publishing import through_links  # an entry published since may name it through a link

    paths = [e.path for e in now]
    named = layout.Nest(
        paths + through_links(dl, store, [e.path for e in now if e.name not in sched.staying])
    )
    taken = {f for f in fresh if named.related(f)}
    if taken:
        sched.folders = [f for f in sched.folders if f not in taken]
        sched.orphans = [f for f in sched.orphans if f not in taken]
        store.remove_tombs(dl, [layout.tomb_name(f) for f in sorted(taken)])
        for folder in sorted(taken):
            say.warn(
                f"prune: left {shown(store.location(folder))} in place: an entry published meanwhile "
                "names it, a folder inside it or one around it"
            )


def would_remove(dl: Deadline, store: Store, sched: Schedule) -> list[str]:
    """The lines a prune following ``sched`` would print, with ``would`` in them, reading only: ``would abort
    <location> (multipart upload <id>)`` per upload -orphans aborts, (for stderr) each orphan it would leave
    in place and why, ``would remove <location>`` per folder that is there, and (for stderr) a folder a link
    would keep in place.

    A folder inside one removed before it is gone by then; one holding folders removed before it is
    removed (S3: printed) only when something else is left in it."""
    lines = [aborted(store, u, "would") for u in sched.uploads]
    lines += [f"prune: would leave {shown(store.location(p))} in place: {why}" for p, why in sched.left]
    removed: list[str] = []
    done: set[str] = set()
    for folder in sched.removals():
        parts = folder.split("/")
        if any("/".join(parts[:i]) in done for i in range(1, len(parts) + 1)):
            continue
        link = _link_on_path(store, folder)
        if link:
            lines.append(
                f"prune: would leave {shown(store.location(folder))} in place: {shown(store.location(link))} is a symbolic link"
            )
            continue
        if store.holds(dl, folder):
            # POSIX removes the folder itself; S3 only the objects, which earlier removals may have taken.
            inner = (
                []
                if store.cheap_listing
                else [r[len(folder) + 1 :] for r in removed if r.startswith(folder + "/")]
            )
            if not inner or _more_than(dl, store, folder, inner):
                lines.append(f"would remove {shown(store.location(folder))}")
        removed.append(folder)
        done.add(folder)
    return lines


def _more_than(dl: Deadline, store: Store, folder: str, inner: list[str]) -> bool:
    """True when an object under ``folder`` lies outside every folder of ``inner`` (S3: one LIST)."""
    return any(not any(key == i or key.startswith(i + "/") for i in inner) for key in store.sizes(dl, folder))


def _link_on_path(store: Store, folder: str) -> str:
    """On POSIX, the first element of ``folder`` below the root that is a symbolic link (remove_folder leaves
    such a folder in place), or ``""``."""
    if not store.cheap_listing:
        return ""  # S3 has no links
    import os
    import stat

    parts = folder.split("/")
    for i in range(len(parts)):
        rel = "/".join(parts[: i + 1])
        try:
            st = os.lstat(os.path.join(store.root, rel))
        except OSError:
            return ""  # missing (or not a folder): remove_folder finds nothing there either
        if stat.S_ISLNK(st.st_mode):
            return rel
    return ""


def mirror_policy(keep: int, size: int | None) -> int | Policy:
    """What prunes the mirror: -mirror-keep M, capped by -mirror-keep-bytes when given."""
    if size is None:
        return keep
    policy = Policy(keep)
    policy.bytes = size
    policy.bytes_flag = "-mirror-keep-bytes"
    return policy
