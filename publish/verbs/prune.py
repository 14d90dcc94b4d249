"""prune: remove all but the latest entries, then the folders only they named."""

from __future__ import annotations

from publish import layout
from publish.stores.base import PUB, Store
from publish.verbs import Say


def plan(entries: list[layout.Entry], keep: int) -> tuple[list[layout.Entry], list[str]]:
    """The entries to remove, and the folders to remove after them (oldest first, each once).

    The latest ``keep`` entries stay; a folder stays while a remaining entry names it, a folder inside it or
    a folder around it."""
    ordered = layout.oldest_first(entries)
    cut = max(len(ordered) - max(keep, 1), 0)
    gone, kept = ordered[:cut], ordered[cut:]
    folders: list[str] = []
    for entry in gone:
        if entry.path in folders or any(layout.related(entry.path, k.path) for k in kept):
            continue
        folders.append(entry.path)
    return gone, folders


def prune(store: Store, say: Say, keep: int) -> None:
    store.check_root()
    entries = layout.parse_all(store.list_entries(), store.location(PUB))
    gone, folders = plan(entries, keep)
    if not gone:
        return
    store.remove_entries(
        [e.name for e in gone]
    )  # entries first: a crash never leaves one naming a missing save
    for folder in folders:
        result = store.remove_folder(folder)
        if result.link:
            say.warn(
                f"prune: left {store.location(folder)} in place: {store.location(result.link)} is a symbolic link"
            )
        elif result.removed:
            say.out(f"removed {store.location(folder)}")
