"""Which of a root's saves are pending: published on the (fast) root and not yet on its mirror.

Kept apart from publish.ops.tiers, which moves the saves and prunes the mirror through
publish.ops.retention: retention needs only this, to keep what is pending (``prune -mirror``).

With -mirror-keep M an entry is pending only when the mirror would keep it once uploaded, judged as the
mirror's prune judges (publish.ops.retention.split): among the newest M publications whose saves exist, of
the mirror's entries and the fast root's not yet mirrored.  A mirror entry whose save is gone there (a hand,
a prefix lifecycle rule) counts for nothing, so the fast root keeps what the mirror would take; so does a
fast-root entry whose save is gone (it cannot be uploaded).  Saves are asked about newest first, as the
prune asks (publish.ops.retention.Saves), and only while an entry not yet mirrored lies below: on the mirror
at most M questions (a LIST with max-keys=1 each) when its newest saves exist, one more for each gone save
above them (and for its folder), none when every entry not yet mirrored is newer than the mirror's.
"""

from __future__ import annotations

from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.layout import PUB
from publish.stores.base import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    Held = Callable[[str], bool]


def pending_of(
    entries: list[layout.Entry],
    on_mirror: list[str],
    mirror: Store,
    keep: int | None,
    fast_held: Held,
    mirror_held: Held,
    keep_bytes: int | None = None,
    failing: set[str] | None = None,
) -> list[layout.Entry]:
    """The entries of ``entries`` (the fast root's) not in ``on_mirror`` (the names in ``mirror``'s pub/),
    newest first; with -mirror-keep ``keep`` only those the mirror would keep once uploaded: newer than the
    ``keep``-th publication whose save exists, of both tiers (an older one the mirror would prune at once).
    ``fast_held`` and ``mirror_held`` tell whether a save exists on each tier (publish.ops.retention.Saves);
    they are asked newest first, and no further than needed.  ``keep_bytes`` (-mirror-keep-bytes): also
    only while the saves that exist, newest first, add up to at most that many bytes, the newest always
    (as the mirror's prune caps, publish.ops.capacity.cap): a save past the cap would be uploaded, then
    pruned from the mirror at once, and pending again on the next pass.  What a save holds is asked of the
    ``size`` of its tier's ``*_held`` (publish.ops.retention.Saves.size); one that has none counts 0.
    ``failing``: entries whose upload failed in this process (a save damaged since its publication, one
    holding a link): pending still, but counted for nothing, since the mirror will not hold them, so the
    older saves the mirror would then keep stay pending too."""
    have = set(on_mirror)
    todo = sorted((e for e in entries if e.name not in have), key=layout.Entry.key, reverse=True)
    if keep is None or not todo:
        return todo
    mirrored = [(e, False) for e in layout.parse_all(on_mirror, mirror.location(PUB))]
    both = sorted([(e, True) for e in todo] + mirrored, key=lambda pair: pair[0].key(), reverse=True)
    oldest = todo[-1].key()
    pending: list[layout.Entry] = []
    found, total = 0, 0
    for entry, unmirrored in both:
        if found >= max(keep, 1) or entry.key() < oldest:
            break  # the mirror keeps no more, or no entry below is pending either way
        tier = fast_held if unmirrored else mirror_held
        held = tier(entry.path) and not (unmirrored and failing and entry.name in failing)
        if held and keep_bytes is not None:
            n = _bytes(tier, entry)
            if found and total + n > keep_bytes:
                break  # past -mirror-keep-bytes: the mirror keeps none from here on
            total += n
        if unmirrored:
            pending.append(entry)
        found += held
    return pending


def _bytes(tier: Held, entry: layout.Entry) -> int:
    """What the save of ``entry`` holds, asked of ``tier`` when it can tell (Saves.size), else 0."""
    size = getattr(tier, "size", None)
    if size is None:
        return 0
    n = size(entry).bytes
    return n if isinstance(n, int) else 0


def pending_names(
    dl: Deadline,
    entries: list[layout.Entry],
    mirror: Store,
    keep: int | None,
    fast_held: Held,
    mirror_held: Held,
    keep_bytes: int | None = None,
    failing: set[str] | None = None,
) -> set[str]:
    """The names of the pending ones of ``entries`` (the fast root's, as its prune read them): the mirror's
    pub/ is read now, after the root's, so an entry mirrored meanwhile is kept this once, never the other
    way round.  ``*_held``: as for :func:`pending_of`."""
    on_mirror = mirror.list_entries(dl)
    pending = pending_of(entries, on_mirror, mirror, keep, fast_held, mirror_held, keep_bytes, failing)
    return {e.name for e in pending}
