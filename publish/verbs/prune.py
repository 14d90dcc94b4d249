"""prune: remove all but the latest entries, then the folders only they named; crash-consistent.

Before removing an entry, prune records each folder it is about to remove as a tombstone in tomb/ (durable),
and removes a tombstone only after its folder.  So a prune killed at any point leaves tombstones for every
folder it planned and had not finished, and the next prune finishes them: exactly what an uninterrupted one
would have left.
"""

from __future__ import annotations

from publish import layout
from publish.deadline import Deadline
from publish.layout import PUB, TOMB
from publish.redact import shown
from publish.stores.base import Store
from publish.verbs import Say, common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.flags import Flag, FlagSet

#: How many finished tombstones are dropped at once (one fsync of tomb/ on POSIX).
TOMB_BATCH = 512


class Policy:
    """Which entries stay: the latest ``keep`` (at least one, so the newest always stays), and also those whose
    step is a multiple of ``every`` (0: none) and those made within ``within`` seconds before ``now`` (None:
    none), by ``times`` (entry name to seconds since the epoch, Store.entry_times)."""

    __slots__ = ("keep", "every", "within", "times", "now")

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

    def also_kept(self, entry: layout.Entry) -> bool:
        if self.every and entry.step % self.every == 0:
            return True
        if self.within is not None:
            made = self.times.get(entry.name)
            return made is not None and self.now - made <= self.within
        return False


def split(entries: list[layout.Entry], keep: int | Policy) -> tuple[list[layout.Entry], list[layout.Entry]]:
    """The entries to remove (oldest first) and those that stay: the latest ``keep`` (at least one), and
    what a :class:`Policy` also keeps.  O(n log n)."""
    policy = keep if isinstance(keep, Policy) else Policy(keep)
    ordered = layout.oldest_first(entries)
    cut = max(len(ordered) - max(policy.keep, 1), 0)
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
    and drops, and the folders it removes in order (``resumed`` from tomb/, then its own ``folders``)."""

    __slots__ = ("gone", "folders", "recorded", "stale", "resumed")

    def __init__(self, entries: list[layout.Entry], tombs: list[str], keep: int | Policy) -> None:
        self.gone, kept_entries = split(entries, keep)
        kept = layout.Nest([k.path for k in kept_entries])
        self.folders = unrelated(self.gone, kept)
        planned, self.recorded = set(self.folders), set(tombs)
        # A recorded folder that a remaining entry relates to (published again since) stays, and only its
        # tombstone goes.  Every other one is removed with this prune's own folders, after the entries: an
        # entry about to go may still name it, or a folder inside it.
        self.stale = [f for f in tombs if f not in planned and kept.related(f)]
        self.resumed = sorted(f for f in tombs if f not in planned and not kept.related(f))

    def removals(self) -> list[str]:
        return self.resumed + self.folders


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
    tombs = layout.parse_tombs(store.list_tombs(dl), store.location(TOMB))
    if not entries and not tombs:
        store.check_exists(dl)
    return Schedule(entries, tombs, keep)


def prune(dl: Deadline, store: Store, say: Say, keep: int | Policy, dry_run: bool = False) -> int:
    """Prune the root, finishing first what an interrupted prune recorded in tomb/.

    ``dry_run``: the same reads and checks, then ``would remove <location>`` per folder the prune would
    remove, and nothing written.  Returns how many folders it removed."""
    sched = read_schedule(dl, store, keep)
    if dry_run:
        for line in would_remove(dl, store, sched):
            if line.startswith("would remove "):
                say.out(line)
            else:
                say.warn(line)
        return 0
    folders = sched.folders
    count = 0
    store.create_tombs(dl, [layout.tomb_name(f) for f in folders if f not in sched.recorded])
    if sched.gone:
        # Entries first: a crash never leaves one naming a missing save.
        store.remove_entries(dl, [e.name for e in sched.gone])
    store.remove_tombs(dl, [layout.tomb_name(f) for f in sched.stale])
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
            finished.append(layout.tomb_name(folder))
            if len(finished) >= TOMB_BATCH:
                store.remove_tombs(dl, finished)
                finished = []
    finally:
        # A tombstone outlives its folder by at most a batch: a crash before this leaves it for the next
        # prune, which finds the folder gone and drops it.
        if finished:
            store.remove_tombs(dl, finished)
    return count


def would_remove(dl: Deadline, store: Store, sched: Schedule) -> list[str]:
    """The lines a prune following ``sched`` would print, with ``would`` in them, reading only: ``would
    remove <location>`` per folder that is there, and (for stderr) a folder a link would keep in place.

    A folder inside one removed before it is gone by then; one holding folders removed before it is
    removed (S3: printed) only when something else is left in it."""
    lines = []
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


class Prune(common.Command):
    name = "prune"
    synopsis = f"publish prune {common.ROOT_FLAGS} [-keep 3] [-keep-every K] [-keep-within D] [-dry-run]"
    summary = "remove all but the latest publications and the folders only they named"

    def __init__(self) -> None:
        super().__init__()
        self.keep = self.fs.integer(
            "keep", 3, "how many of the latest publications to keep", minimum=1, int64=True
        )
        self.dry_run = self.fs.boolean(
            "dry-run", False, "print what would be removed (would remove <location>), remove nothing"
        )
        self.keep_every, self.keep_within = policy_flags(self.fs)

    def run(self, call: common.Call) -> int:
        common.expect_args(call, [])
        store = self.open(call, self.root(call)).store
        policy = policy_of(self.keep.value, self.keep_every, self.keep_within)
        prune(self.deadline(call), store, call.say, policy, dry_run=self.dry_run.value)
        return 0


def policy_flags(fs: FlagSet) -> tuple[Flag[int], Flag[float]]:
    """-keep-every and -keep-within, for prune, run and status."""
    every = fs.integer(
        "keep-every", 0, "also keep the publications whose step is a multiple of `K`", minimum=1, int64=True
    )
    within = fs.duration("keep-within", 0.0, "also keep the publications made within the duration `D`")
    return every, within


def policy_of(keep: int, every: Flag[int], within: Flag[float]) -> Policy:
    return Policy(keep, every.value if every.is_set else 0, within.value if within.is_set else None)


COMMAND = Prune
