"""Which of a root's saves are pending: published on the (fast) root and not yet on its mirror.

Kept apart from publish.verbs.mirror, which moves the saves and prunes the mirror through
publish.verbs.prune: prune needs only this, to keep what is pending (``prune -mirror``).
"""

from __future__ import annotations

from publish import layout
from publish.deadline import Deadline
from publish.layout import PUB
from publish.stores.base import Store


def pending_of(
    entries: list[layout.Entry], on_mirror: list[str], mirror: Store, keep: int | None
) -> list[layout.Entry]:
    """The entries of ``entries`` (the fast root's) not in ``on_mirror`` (the names in ``mirror``'s pub/),
    newest first; with -mirror-keep ``keep`` only those among the newest ``keep`` of both tiers (an older
    one the mirror would prune at once)."""
    have = set(on_mirror)
    todo = sorted((e for e in entries if e.name not in have), key=layout.Entry.key, reverse=True)
    if keep is None or not todo:
        return todo
    mirrored = layout.parse_all(on_mirror, mirror.location(PUB))
    keys = sorted({(e.epoch, e.step, e.name) for e in entries + mirrored}, reverse=True)
    if len(keys) <= keep:
        return todo
    floor = keys[keep - 1]
    return [e for e in todo if e.key() >= floor]


def pending_names(dl: Deadline, entries: list[layout.Entry], mirror: Store, keep: int | None) -> set[str]:
    """The names of the pending ones of ``entries`` (the fast root's, as its prune read them): the mirror's
    pub/ is read now, after the root's, so an entry mirrored meanwhile is kept this once, never the other
    way round."""
    return {e.name for e in pending_of(entries, mirror.list_entries(dl), mirror, keep)}
