"""resolve: print the latest publication's save location, or nothing."""

from __future__ import annotations

from publish import layout
from publish.frameworks import FRAMEWORKS
from publish.stores.base import EXEC, PUB, Store
from publish.verbs import Say


def latest(store: Store) -> layout.Entry | None:
    """The latest entry in pub/; every name there must parse."""
    return layout.latest_of(store.list_entries(), store.location(PUB))


def unpublished_saves(store: Store) -> int:
    """How many folders under exec/<attempt>/ look like saves of any framework."""
    count = 0
    for attempt in store.list_folders(EXEC):
        for child in store.list_folders(f"{EXEC}/{attempt}"):
            if any(fw.step(child) is not None for fw in FRAMEWORKS.values()):
                count += 1
    return count


def resolve(store: Store, say: Say) -> None:
    store.check_root()
    entry = latest(store)
    if entry is not None:
        say.out(store.location(entry.path))
        return
    if store.cheap_listing:
        n = unpublished_saves(store)
        if n:
            say.warn(f"no publication, but {EXEC}/ holds {n} save folders: was watch running?")
