"""Capacity: the bytes each publication's save holds, the free space of a POSIX root's filesystem, and
``-keep-bytes``, the cap on what retention keeps, so a fast tier that fills is seen and prevented.

A save's size is read from its manifest (``man/<entry>``: one read, the sizes of every file it published);
without one, or with one that cannot be trusted, from the store: a walk of the folder on POSIX, a LIST of its
prefix on S3 (``bytes_from``: ``manifest`` or ``files``).  Only the verbs and flags that show or use sizes
import this module.
"""

from __future__ import annotations

from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError, PublishError, StoreError
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from publish.ops.retention import Policy, Saves
    from publish.stores.base import Store


class Size:
    """What a save holds: ``bytes`` (None: it cannot be told, ``why``), and where that was read
    (``source``: ``manifest`` or ``files``; ``""`` when not told)."""

    __slots__ = ("bytes", "source", "why")

    def __init__(self, size: int | None, source: str, why: str = "") -> None:
        self.bytes = size
        self.source = source
        self.why = why


#: save_size's ``read`` when the manifest was not read beforehand.
_UNREAD = object()


def save_size(dl: Deadline, store: Store, entry: layout.Entry, read: object = _UNREAD) -> Size:
    """The bytes of ``entry``'s save, which exists: its manifest's sum, else the files' own sizes.  The
    store failing (a refusal, the -timeout passing) is raised; a save the store cannot measure (a link
    inside it, a file that cannot be examined) is a Size of None, with why.  ``read``: what reading its
    manifest gave already (bytes, None, or the error), else (``_UNREAD``) it is read here."""
    if read is _UNREAD:
        from publish.rules import manifest

        try:
            read = store.read_manifest(dl, entry.name, manifest.MANIFEST_LIMIT)
        except (Failure, OSError) as e:  # _by_manifest says which the files say instead, which is raised
            read = e
    told = _by_manifest(store, entry.name, read)
    if told is not None:
        return told
    return _by_files(_measured(dl, store, entry.path))


def sizes_of(
    dl: Deadline, store: Store, names: list[str], paths: list[str], read: dict[str, Any]
) -> list[Size]:
    """:func:`save_size` of each entry of ``names`` (its save at the same place of ``paths``, and there), in
    their order, ``read`` holding what reading each one's manifest gave (``read_manifests``), the saves no
    manifest measures measured at once (``save_sizes``: POSIX, each parent folder opened once).  The same
    figures, the same sizes not known and the same error raised (the first entry's, in their order) as
    save_size of each in turn."""
    told: list[Size | StoreError | None] = []
    for name in names:
        got = read[name]
        if got is None:  # no manifest: the files say it
            told.append(None)
            continue
        try:
            told.append(_by_manifest(store, name, got))
        except StoreError as e:  # raised in its turn, after what the entries before it raise
            told.append(e)
    need = [path for path, size in zip(paths, told) if size is None]
    measured = iter(store.save_sizes(dl, need) if need else ())  # type: ignore[attr-defined]
    found = []
    for size in told:
        if size is None:
            n = next(measured)
            found.append(Size(n, "files") if type(n) is int else _by_files(n))
        elif isinstance(size, StoreError):
            raise size
        else:
            found.append(size)
    return found


def held_and_sized(
    dl: Deadline, store: Store, names: list[str], paths: list[str], measure: bool
) -> tuple[list[bool], list[Size | None], BaseException | None]:
    """Whether the save of each entry of ``names`` (at the same place of ``paths``) exists and, when
    ``measure``, what each that exists holds, asked together (POSIX ``read_manifests`` then ``held_sizes``:
    a save no manifest measures is opened once, which also tells that it is there): what :func:`sizes_of`
    says of those that exist, after ``holds_all`` of all.  What asking whether a save exists raises is
    raised; what measuring raises (reading the manifests, the store failing while measuring) is returned
    (the first, in their order), for the caller to raise once it has asked whether every save exists, as
    status asks them all before it measures any."""
    from publish.rules import manifest

    told: list[Size | StoreError | None] = [None] * len(names)  # None: the files say it
    failed: BaseException | None = None
    if measure:
        try:
            read = store.read_manifests(dl, names, manifest.MANIFEST_LIMIT)  # type: ignore[attr-defined]
        except Exception as e:  # raised after the saves' existence, as when it was asked after
            failed, measure = e, False
        else:
            for k, name in enumerate(names):  # a manifest of a save that is gone is read, never used
                got = read[name]
                if got is None:
                    continue  # no manifest: the files say it
                try:
                    told[k] = _by_manifest(store, name, got)
                except StoreError as e:
                    told[k] = e
    want = [measure and size is None for size in told]
    found = store.held_sizes(dl, paths, want)  # type: ignore[attr-defined]
    held = [n is not None for n in found]
    sizes: list[Size | None] = [None] * len(names)
    if not measure:
        return held, sizes, failed
    for k, (n, size) in enumerate(zip(found, told)):
        if n is None:
            continue  # gone: nothing to tell
        if isinstance(size, StoreError):
            return held, sizes, size
        if size is None:
            try:
                size = Size(n, "files") if type(n) is int else _by_files(n)
            except Exception as e:
                return held, sizes, e
        sizes[k] = size
    return held, sizes, None


def _by_manifest(store: Store, name: str, read: object) -> Size | None:
    """What the manifest of the entry ``name`` says its save holds (``read``: its bytes, None, or the error reading
    it raised), or None when the files must say it (none, or a damaged or unreadable one).  The store
    failing is raised."""
    from publish.rules import manifest

    try:
        if isinstance(read, Exception):
            raise read
        assert read is None or isinstance(read, bytes)
        if read is not None:
            rows = manifest.decode(name, read, store.location(f"{layout.MAN}/{name}"))
            return Size(sum(size for _, size, _ in rows), "manifest")
    except FileError as e:  # a manifest this user may not read: the files say it; a disk error fails
        if not e.unexaminable:
            raise
    except StoreError:
        raise
    except (Failure, OSError):  # a damaged or unreadable manifest: the files say it instead
        pass
    return None


def _measured(dl: Deadline, store: Store, path: str) -> int | Exception:
    """What the files of the save at ``path`` hold (``sizes``; a save that is one file, ``size``; else 0),
    or the error asking raised."""
    try:
        sizes = store.sizes(dl, path)
        if sizes:
            return sum(sizes.values())
        return store.size(dl, path) or 0  # a save that is one file
    except (Failure, OSError) as e:  # a StoreError too: raised by _by_files
        return e


def _by_files(measured: int | Exception) -> Size:
    """The Size of what the files hold (``measured``: their bytes, or the error measuring them raised): the
    store failing is raised; a save the store cannot measure is a Size of None, with why."""
    try:
        if isinstance(measured, Exception):
            raise measured
        return Size(measured, "files")
    except FileError as e:  # before StoreError, its base: a folder of the save this user may not read
        if not e.unexaminable:
            raise  # a disk I/O error, too many open files: the store failing, as on S3
        return Size(None, "", str(e))
    except StoreError:
        raise
    except (Failure, OSError) as e:
        return Size(None, "", str(e) if isinstance(e, PublishError) else f"{e.strerror or e}")


def space(store: Store) -> dict[str, int] | None:
    """The free and total bytes of the filesystem a POSIX root is on (``statvfs``: the blocks a user may
    still write, not those kept for root), or None: an S3 root, or a filesystem that does not say."""
    if not store.cheap_listing:
        return None
    import os

    try:
        st = os.statvfs(store.root)
    except OSError:
        return None
    return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


# -- status


def size_note(p: dict[str, Any]) -> str:
    """What a publication's text line ends with, after ``(exists)``: ``, 12.4 GB`` (``by its files`` when no
    manifest said it), ``, size not known: <why>``, or ``""`` for a save that is gone."""
    from publish.rules.sizes import human

    if not p.get("exists") or "bytes" not in p:
        return ""
    if p["bytes"] is None:
        return f", size not known: {p['bytes_error']}"
    return f", {human(p['bytes'])}" + (" by its files" if p["bytes_from"] == "files" else "")


def space_line(doc: dict[str, Any]) -> str:
    """``space: N publications hold 12.4 GB; <root>'s filesystem has 1.20 TB free of 20.0 TB`` (S3: the
    sizes alone)."""
    from publish.rules.sizes import human

    held = [p for p in doc["publications"] if p.get("bytes") is not None]
    line = f"space: the saves of {len(held)} publications hold {human(doc['bytes'])}"
    if doc["space"] is not None:
        free, total = doc["space"]["free_bytes"], doc["space"]["total_bytes"]
        line += f"; the filesystem of {shown(doc['root'])} has {human(free)} free of {human(total)}"
    return line


# -- -keep-bytes


def cap(
    policy: Policy, kept: list[layout.Entry], saves: Saves
) -> tuple[list[layout.Entry], list[layout.Entry], list[str]]:
    """Of ``kept`` (oldest first: what the other policies keep), those -keep-bytes also removes, those that
    stay (oldest first), and what to say on stderr.

    Newest first, the saves that exist stay while their sizes add up to at most ``policy.bytes``; from the
    first that would go over, the rest go.  The newest save that exists always stays, whatever it holds
    (said); a save held for the mirror (not yet mirrored) always stays, and its bytes count; an entry whose
    save is gone counts for nothing (it stays while newer than the cut, as for -keep); a save whose size
    cannot be told counts 0 bytes (said): never a save removed for a size not known."""
    from publish.rules.sizes import human, spell

    limit = policy.bytes
    assert limit is not None
    flag = policy.bytes_flag
    total, found, over = 0, 0, False
    stay: list[layout.Entry] = []
    go: list[layout.Entry] = []
    notes: list[str] = []
    for entry in sorted(kept, key=layout.Entry.key, reverse=True):
        held = entry.name in policy.held
        if over and not held:
            go.append(entry)
            continue
        if not saves(entry.path):
            stay.append(entry)
            continue
        size = saves.size(entry)
        where = shown(saves.store.location(entry.path))
        n = size.bytes
        if n is None:
            notes.append(f"prune: the size of {where} cannot be told ({size.why}): counted as 0 bytes")
            n = 0
        if held or found == 0 or total + n <= limit:
            if found == 0 and n > limit:
                notes.append(
                    f"prune: the newest save {where} alone holds {human(n)} ({n} bytes), over {flag} "
                    f"{spell(limit)}: kept, as a prune keeps at least one save"
                )
            total += n
            found += 1
            stay.append(entry)
        else:
            over = True
            go.append(entry)
    return go, stay[::-1], notes


def policy_text(plan: dict[str, Any]) -> str:
    """`` -keep-bytes 500GB`` for the heading of status's prune plan, or ``""``."""
    if plan.get("keep_bytes") is None:
        return ""
    from publish.rules.sizes import spell

    return f" -keep-bytes {spell(plan['keep_bytes'])}"
