"""Which of a root's saves are pending: published on the (fast) root and not yet on its mirror.

Kept apart from publish.ops.tiers, which moves the saves and prunes the mirror through
publish.ops.retention: retention needs only this, to keep what is pending (``prune -mirror``).

With -mirror-keep M an entry is pending only when the mirror would keep it once uploaded, judged as the
mirror's prune judges (publish.ops.retention.split): among the newest M publications whose saves exist, of
the mirror's entries and the fast root's not yet mirrored.  A mirror entry whose save is gone there (a hand,
a prefix lifecycle rule), or damaged (not as its manifest records: Saves.intact), counts for nothing, so the fast root keeps what the mirror would take; so does a
fast-root entry whose save is gone (it cannot be uploaded).  Saves are asked about newest first, as the
prune asks (publish.ops.retention.Saves), and only while an entry not yet mirrored lies below: on the mirror
at most M questions (a LIST with max-keys=1 each) when its newest saves exist, one more for each gone save
above them (and for its folder), none when every entry not yet mirrored is newer than the mirror's.

Mirrored means the mirror holds the save, not only its entry: a fast-root entry whose mirror entry is there
but whose save is gone there is pending again (it is uploaded again under that entry), or -keep would
remove from the fast root a save then on neither tier.  That costs one question to the mirror for each
entry of both tiers (a run's passes ask once for each save they find there, its prunes every time).
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
    Whole = Callable[[layout.Entry], bool]


def pending_of(
    entries: list[layout.Entry],
    on_mirror: list[str],
    mirror: Store,
    keep: int | None,
    fast_held: Held,
    mirror_held: Held,
    keep_bytes: int | None = None,
    failing: set[str] | None = None,
    whole: Whole | None = None,
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
    older saves the mirror would then keep stay pending too.

    An entry of both tiers whose save is not whole on the mirror (gone or damaged there: a hand, a
    lifecycle rule) and still on the fast root is not mirrored: it is pending again, so -keep leaves it on
    the root until it is uploaded again under the mirror's entry (publish.ops.tiers).  ``whole`` asks
    whether the mirror holds such an entry's save whole (:func:`whole_on`); by default whether
    ``mirror_held`` holds it at all."""
    have = set(on_mirror)
    lost = _lost(entries, have, fast_held, whole or (lambda e: mirror_held(e.path)))
    todo = sorted(
        (e for e in entries if e.name not in have or e.name in lost), key=layout.Entry.key, reverse=True
    )
    if keep is None or not todo:
        return todo
    mirrored = [(e, False) for e in layout.parse_all(on_mirror, mirror.location(PUB)) if e.name not in lost]
    both = sorted([(e, True) for e in todo] + mirrored, key=lambda pair: pair[0].key(), reverse=True)
    oldest = todo[-1].key()
    pending: list[layout.Entry] = []
    found, total = 0, 0
    for entry, unmirrored in both:
        if found >= max(keep, 1) or entry.key() < oldest:
            break  # the mirror keeps no more, or no entry below is pending either way
        tier = fast_held if unmirrored else mirror_held
        held = tier(entry.path) and not (unmirrored and failing and entry.name in failing)
        if held and not unmirrored:  # as the mirror's prune counts: a damaged save there counts for nothing
            held = _intact(tier, entry)
        if held and keep_bytes is not None:
            n = _bytes(tier, entry)
            if found and total + n > keep_bytes:
                break  # past -mirror-keep-bytes: the mirror keeps none from here on
            total += n
        if unmirrored:
            pending.append(entry)
        found += held
    return pending


def _lost(entries: list[layout.Entry], have: set[str], fast_held: Held, whole: Whole) -> set[str]:
    """The names of ``entries`` (the fast root's) that the mirror has an entry of (``have``) but whose save
    is not whole there while it is still on the fast root: one question to the mirror for each entry of
    both tiers, and one to the fast root for each save not whole on the mirror."""
    return {e.name for e in entries if e.name in have and not whole(e) and fast_held(e.path)}


def whole_on(dl: Deadline, mirror: Store) -> Whole:
    """Whether ``mirror`` holds an entry's save whole: each file its manifest there records, with its size
    (one GET of the manifest, one LIST of the save's prefix); without a manifest, whether the save is there
    at all (one LIST).  A manifest that cannot be read or decoded says no (the upload writes it again); the
    store failing (a refusal, a failing LIST, the deadline) is raised: "I cannot tell" is never "gone"."""
    from publish.rules import manifest
    from publish.rules.errors import Failure, StoreError

    def whole(entry: layout.Entry) -> bool:
        try:
            data = mirror.read_manifest(dl, entry.name, manifest.MANIFEST_LIMIT)
            if data is None:
                return mirror.holds(dl, entry.path)
            rows = manifest.decode(entry.name, data, mirror.location(f"{layout.MAN}/{entry.name}"))
        except StoreError:
            raise
        except Failure:  # over the limit, not a manifest: damaged
            return False
        return mirror.check_rows(dl, entry.path, rows, deep=False) is None

    return whole


def _intact(tier: Held, entry: layout.Entry) -> bool:
    """Whether the save of ``entry`` matches its manifest's sizes, asked of ``tier`` when it can tell
    (publish.ops.retention.Saves.intact), else taken as so."""
    intact = getattr(tier, "intact", None)
    return True if intact is None else bool(intact(entry))


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
    whole: Whole | None = None,
) -> set[str]:
    """The names of the pending ones of ``entries`` (the fast root's, as its prune read them): the mirror's
    pub/ is read now, after the root's, so an entry mirrored meanwhile is kept this once, never the other
    way round.  ``*_held``, ``whole``: as for :func:`pending_of` (``whole``: :func:`whole_on` the mirror
    by default, since a prune asks before it removes)."""
    on_mirror = mirror.list_entries(dl)
    whole = whole or whole_on(dl, mirror)
    pending = pending_of(entries, on_mirror, mirror, keep, fast_held, mirror_held, keep_bytes, failing, whole)
    return {e.name for e in pending}
