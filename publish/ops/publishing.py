"""Publishing one entry: the save's manifest, then its entry, then the check against a prune that overlapped
(its tombstones, the save against its manifest), then the published line; shared by publish, watch's and
run's scans, and the mirror's uploads (``enter``).
"""

from __future__ import annotations

from publish.ops import Say
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Sequence

    from publish.stores.base import Store

    Rows = list[tuple[str, int, str | None]]


class Overlapped(Failure):
    """A prune removed (or is removing) a save while it was being published: its entry, when this
    publication made it, is withdrawn again, and the save is not published."""


def publish_entry(dl: Deadline, store: Store, say: Say, epoch: int, step: int, path: str) -> bool:
    """Write the manifest of the save at ``path``, then create its entry; print it, or say it was already
    there (its manifest left alone).  True when created.

    A prune may overlap.  Each side makes its mark, durable, before it reads the other's: this entry first,
    then tomb/ is read (:func:`overlapped`); a prune writes its tombstones first, then reads pub/ (and keeps
    what an entry published meanwhile relates to).  So at least one sees the other.  When this side sees a
    tombstone relating to the save, or finds the save no longer whole (a prune that finished, tombstone
    and all, before tomb/ was read), it withdraws the entry it made (and its manifest) and raises
    :class:`Overlapped` naming the prune; ``published`` is printed only after both checks passed."""
    where = shown(store.location(path))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8 in a name, kept by Python as a lone surrogate
        raise Failure(
            f"save {where}: its path below the root is not UTF-8, which an entry name must be"
        ) from None
    name = layout.name(epoch, step, path)
    rows: Rows | None = None
    if not store.exists(dl, f"{layout.PUB}/{name}"):
        try:
            rows = write_manifest(dl, store, name, path, say)
        except Failure as e:  # a save a prune removes while it is hashed: said as such
            try:
                why = overlapped(dl, store, path, None)
            except Failure:
                raise e from None  # the store failing: its first failure is the one said
            if why:
                # the hashing's own failure adds what it met, unless it only says the save is gone
                detail = f" ({e})" if why == DOOMED else ""
                raise Overlapped(f"save {where}: {why}{detail}: not published") from None
            raise
    return enter(dl, store, say, layout.Entry(epoch, step, path, name), rows)


def enter(
    dl: Deadline,
    store: Store,
    say: Say,
    entry: layout.Entry,
    rows: Sequence[tuple[str, int, str | None]] | None,
    tier: str = "",
    again: bool = False,
) -> bool:
    """Create ``entry`` (its manifest ``rows`` written, or None: it was there already), then read tomb/ and
    the save (:func:`overlapped`): a prune that overlapped withdraws it, raising :class:`Overlapped`; else
    print it, or say it was already there.  True when created.  ``tier``: ``" on the mirror"`` for the
    mirror's entry (publish.ops.tiers), which its messages name.  ``again``: the entry was there before
    and its save gone, which the caller has just put back: when no prune overlapped, it is printed as
    published (the save is there again) and True returned, with a note on stderr."""
    name, path = entry.name, entry.path
    where = shown(store.location(path))
    created = store.create_entry(dl, name)
    why = overlapped(dl, store, path, rows)
    if why:
        if created:
            withdraw(dl, store, name, rows is not None)
        if tier:
            raise Overlapped(f"{where}: {why}{tier}: not published there")
        if created:
            raise Overlapped(f"save {where}: {why}: its entry {name} withdrawn, not published")
        raise Overlapped(f"save {where}: {why}: not published")
    if created or again:
        rebind(dl, store, name, path, rows, say)
        if not created:
            say.warn(f"{where}: its entry {name} was there{tier}, its save gone: uploaded again")
        say.out(f"published {name} (epoch {entry.epoch}, step {entry.step}, {where})")
        return True
    say.warn(f"{name} already published (epoch {entry.epoch}, step {entry.step}, {where})")
    return False


def overlapped(
    dl: Deadline, store: Store, path: str, rows: Sequence[tuple[str, int, str | None]] | None
) -> str:
    """Why the save at ``path``, its entry made (the mark), is not to be published, or "": tomb/ (one LIST)
    names it or a folder around or inside it (a prune is removing it), or, read after that, the save is no
    longer what ``rows`` (its manifest) records, or (no rows) no longer there: a prune removed it before
    tomb/ was read, its tombstone dropped already."""
    if doomed_save(dl, store, doomed_folders(dl, store), path):
        return DOOMED
    if rows:
        bad = store.check_rows(dl, path, list(rows), deep=False)
        if bad is not None:
            return f"{shown(bad[0])}: {bad[1]}: a prune removed it meanwhile (or a hand changed it)"
    elif not store.holds(dl, path):
        return "a prune removed it meanwhile (or a hand did): it does not exist"
    return ""


def rebind(
    dl: Deadline,
    store: Store,
    name: str,
    path: str,
    rows: Sequence[tuple[str, int, str | None]] | None,
    say: Say,
) -> None:
    """Look at the manifest of the entry ``name`` again, now that this publication made the entry and read
    tomb/, and write it again (``rows``, else from the save) if it is gone.  A prune that removed an entry
    of the same name (an older publication of this save, epoch and step) removes its manifest by name
    after the entry, so it may take the one this publication wrote; it reads pub/ after that removal and
    writes the manifest again for an entry it finds there (publish.ops.retention), and this look, after the
    entry was made, covers an entry made after that read: one of the two sees the other."""
    if store.exists(dl, f"{layout.MAN}/{name}"):
        return
    if rows is None:
        write_manifest(dl, store, name, path, say)
        return
    from publish.rules import manifest

    store.write_manifest(dl, name, manifest.encode(name, list(rows)))


def withdraw(dl: Deadline, store: Store, name: str, manifest: bool) -> None:
    """Remove the entry ``name`` this publication made, then (``manifest``: it wrote it) its manifest."""
    store.remove_entries(dl, [name])
    if manifest:
        store.remove_manifests(dl, [name])


def write_manifest(dl: Deadline, store: Store, name: str, path: str, say: Say) -> Rows:
    """Record every file of the save at ``path`` (size, and SHA-256 where the store can tell it) as the
    manifest of the entry ``name``, durably: before the entry, so no entry made here is ever without one.
    On POSIX, files the hashing had no time for (publish.stores.posix_saves.hash_budget) are said on
    stderr: their rows hold sizes only.  Returns the rows written."""
    from publish.rules import manifest

    rows = store.save_rows(dl, path, digests=True)
    if store.cheap_listing:  # POSIX hashes every file it has time for (S3 rows never hold a digest)
        unhashed = sum(1 for row in rows if row[2] is None)
        if unhashed:
            say.warn(
                f"{shown(store.location(path))}: {unhashed} of {len(rows)} files not hashed within half "
                "of what was left of -timeout: the manifest holds their sizes only (resolve -verify=deep "
                "checks their sizes)"
            )
    store.write_manifest(dl, name, manifest.encode(name, rows))
    return rows


#: Why a save that a tombstone relates to is never published.
DOOMED = "a prune was removing it (tomb/ names it, or a folder around or inside it)"


def doomed_folders(dl: Deadline, store: Store) -> layout.Nest:
    """The folders tomb/ names: a save one of them is, lies in or holds is being removed by a prune.

    A name there that is no tombstone is left out here: prune and status refuse it, naming it, and a name
    planted in tomb/ must not stop every scan of a job."""
    folders = []
    for name in store.list_tombs(dl):
        try:
            folders.append(layout.parse_tomb(name))
        except ValueError:
            continue
    return layout.Nest(folders)


def doomed_save(dl: Deadline, store: Store, doomed: layout.Nest, path: str) -> bool:
    """True when ``doomed`` (:func:`doomed_folders`) relates to the save at ``path``, or to the folder its
    path leads to through a link (a prune records the folder itself, never the link)."""
    if doomed.related(path):
        return True
    return bool(len(doomed)) and any(doomed.related(p) for p in through_links(dl, store, [path]))


def through_links(dl: Deadline, store: Store, paths: list[str]) -> list[str]:
    """The paths below the root that those of ``paths`` with a symbolic link on them lead to (an attempt's
    folder that is a link to another's, a save that is a link to a sibling folder), in their order: what a
    prune must keep, and a publication look for in tomb/, besides the paths the entries name.  Nothing on
    S3, nor for a path that leads out of the root."""
    real = getattr(store, "real_paths", None)
    if real is None or not paths:
        return []
    return [p for p in real(dl, paths) if p is not None]


def refuse_reserved(store: Store, path: str, what: str) -> None:
    """Failure naming ``path`` when it is one of the root's own folders (or lies in pub/ or tomb/)."""
    why = layout.reserved(path)
    if why:
        raise Failure(f"{what} {shown(store.location(path))}: never a save: {why}")
