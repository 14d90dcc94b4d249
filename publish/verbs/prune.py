"""prune: remove all but the latest entries, then the folders only they named; crash-consistent.

Before removing an entry, prune records each folder it is about to remove as a tombstone in tomb/ (durable),
and removes a tombstone only after its folder.  So a prune killed at any point leaves tombstones for every
folder it planned and had not finished, and the next prune finishes them: exactly what an uninterrupted one
would have left.
"""

from __future__ import annotations

from publish import layout
from publish.stores.base import PUB, TOMB, Store
from publish.verbs import Say


def split(entries: list[layout.Entry], keep: int) -> tuple[list[layout.Entry], list[layout.Entry]]:
    """The entries to remove (oldest first) and the latest ``keep`` (at least one) that stay."""
    ordered = layout.oldest_first(entries)
    cut = max(len(ordered) - max(keep, 1), 0)
    return ordered[:cut], ordered[cut:]


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


def plan(entries: list[layout.Entry], keep: int) -> tuple[list[layout.Entry], list[str]]:
    """The entries to remove, and the folders to remove after them (oldest first, each once).

    The latest ``keep`` entries stay; a folder stays while a remaining entry names it, a folder inside it or
    a folder around it.  O(n log n) in the number of entries."""
    gone, kept = split(entries, keep)
    return gone, unrelated(gone, layout.Nest([k.path for k in kept]))


def prune(store: Store, say: Say, keep: int) -> None:
    """Prune the root, finishing first what an interrupted prune recorded in tomb/."""
    store.check_root()
    entries = layout.parse_all(store.list_entries(), store.location(PUB))
    tombs = layout.parse_tombs(store.list_tombs(), store.location(TOMB))
    gone, kept_entries = split(entries, keep)
    kept = layout.Nest([k.path for k in kept_entries])
    folders = unrelated(gone, kept)
    planned, recorded = set(folders), set(tombs)
    # A recorded folder that a remaining entry relates to (published again since) stays, and only its
    # tombstone goes.  Every other one is removed with this prune's own folders, after the entries: an entry
    # about to go may still name it, or a folder inside it.
    stale = [f for f in tombs if f not in planned and kept.related(f)]
    resumed = sorted(f for f in tombs if f not in planned and not kept.related(f))
    store.create_tombs([layout.tomb_name(f) for f in folders if f not in recorded])
    if gone:
        # Entries first: a crash never leaves one naming a missing save.
        store.remove_entries([e.name for e in gone])
    store.remove_tombs([layout.tomb_name(f) for f in stale])
    for folder in resumed + folders:
        result = store.remove_folder(folder)
        if result.link:
            say.warn(
                f"prune: left {store.location(folder)} in place: {store.location(result.link)} is a symbolic link"
            )
        elif result.removed:
            say.out(f"removed {store.location(folder)}")
        store.remove_tombs([layout.tomb_name(folder)])  # after its folder: a crash before leaves it to finish
