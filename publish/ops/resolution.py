"""Resolution: the newest publication whose save exists (and, with -verify, matches its manifest), on one
root or on a fast root and its mirror; what resolve prints, and what run resumes from and counts idle
dispatches by.  Also the probe of an S3 root (resolve -probe, probe).
"""

from __future__ import annotations

from publish.ops import Say
from publish.rules import layout
from publish.rules.errors import Failure, MissingRoot, advice
from publish.rules.layout import EXEC, PUB
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from publish.rules.deadline import Deadline
    from publish.stores import Opened
    from publish.stores.base import Store


def newest_first(names: list[str], where: str) -> Iterator[layout.Entry]:
    """The entries ``names`` stand for, newest first; every name must parse (else Failure naming one).

    Zero-padded epochs and steps make the greatest name the newest entry, so the names are sorted only
    when the newest is passed over."""
    top = layout.latest_of(names, where)
    if top is None:
        return
    yield top
    for name in sorted(names, reverse=True)[1:]:
        yield layout.parse(name)


def newest_save(dl: Deadline, store: Store, say: Say, verify: str = "") -> layout.Entry | None:
    """The newest entry whose save exists (and with ``verify``, ``sizes`` or ``deep``, matches its
    manifest), passing over (on stderr) the others; None when pub/ is empty.  Entries but no such save is
    a Failure."""
    names = store.list_entries(dl)
    where = store.location(PUB)
    for entry in newest_first(names, where):
        # One lstat on POSIX, one LIST (max-keys=1) on S3 for a save that is there: the answer is never a
        # save deleted by hand, by a framework's rotation or by a library's retention.
        if not store.holds(dl, entry.path):
            say.warn(
                f"{shown(where + '/' + entry.name)} names {shown(store.location(entry.path))}, which does not exist: passed over"
            )
        elif not verify:
            return entry
        else:
            from publish.ops.resolve_checks import verified  # -verify's alone

            if verified(dl, store, say, entry, verify == DEEP):
                return entry
    if names:
        also = " and matches its manifest" if verify else ""
        raise Failure(f"{shown(where)}: none of its {len(names)} entries names a save that exists{also}")
    return None


#: -verify's values: off, the sizes, the sizes and the SHA-256 digests.
OFF, SIZES, DEEP = "", "sizes", "deep"


def verify_value(text: str) -> str:
    """-verify's value: a Go boolean (true: the sizes; false: off) or ``deep``."""
    if text == DEEP:
        return DEEP
    from publish.rules.go.gocompat import parse_go_bool

    try:
        return SIZES if parse_go_bool(text) else OFF
    except ValueError:
        raise ValueError("must be true, false or deep") from None


def resolve(dl: Deadline, store: Store, say: Say, verify: str = "") -> layout.Entry | None:
    """Print the newest entry's save that exists (newest_save; with ``verify``, that matches its manifest),
    and return its entry.

    With nothing published: a missing root fails, and a hint about unpublished saves never fails the verb."""
    store.check_root(dl)
    entry = newest_save(dl, store, say, verify)
    if entry is not None:
        say.out(shown(store.location(entry.path)))  # a control character: quoted, never ambiguous
        return entry
    store.check_exists(dl)  # S3: a prefix holding nothing at all is a typo, not a new run
    if store.cheap_listing:
        from publish.ops.resolve_checks import unpublished_saves  # only when pub/ is empty

        try:
            n = unpublished_saves(dl, store)
        except (Failure, OSError) as e:  # advice only: it never changes the answer or the exit code
            say.warn(f"no publication; could not look for unpublished saves: {e}")
            return None
        if n:
            say.warn(f"no publication, but {EXEC}/ holds {n} saves: was watch running?")
    return None


def newest_whole(
    dl: Deadline, store: Store, say: Say, verify: str = "", must_exist: bool = True
) -> layout.Entry | None:
    """resolve's answer on one root, printing nothing; ``must_exist``: a root that does not exist fails."""
    store.check_root(dl)
    entry = newest_save(dl, store, say, verify)
    if entry is None and must_exist:
        store.check_exists(dl)
    return entry


def resolve_tiers(
    dl: Deadline, fast: Store, mirror: Store, say: Say, verify: str = ""
) -> tuple[Store, layout.Entry] | None:
    """Print the newest save that exists whole on either tier (the fast root's when both have that epoch
    and step), and return it with its store; with ``verify``, each tier's answer is the newest of its
    saves that matches its manifest there.  A tier that fails is said and the other answers; both
    failing is a Failure naming both.  A mirror nothing was ever written to holds nothing (the first
    upload makes it), unless the fast root failed.  A missing root's advice (``publish init``) is given
    only when both tiers are missing: a new run."""
    try:
        first: layout.Entry | None = newest_whole(dl, fast, say, verify)
    except Failure as e:
        try:
            entry = newest_whole(dl, mirror, say, verify)
        except Failure as m:
            if isinstance(e, MissingRoot) and isinstance(m, MissingRoot):  # a new run: the root is made first
                raise Failure(f"{e.fact}; the mirror: {m.fact}; {advice(e.init)}") from None
            raise Failure(f"{_fact(e)}; the mirror failed too: {_fact(m)}") from None
        say.warn(f"{_fact(e)}: answering from the mirror")
        return _answer(say, mirror, entry, mirror)
    try:
        other = newest_whole(dl, mirror, say, verify, must_exist=False)
    except Failure as e:
        say.warn(f"{_fact(e)}: answering from the root")
        return _answer(say, fast, first, mirror)
    if other is not None and (first is None or (other.epoch, other.step) > (first.epoch, first.step)):
        return _answer(say, mirror, other, mirror)
    return _answer(say, fast, first, mirror)


def _fact(e: Failure) -> str:
    """What failed, without a missing root's advice for a new run (the other tier answers, or failed
    otherwise: the run is not new)."""
    return e.fact if isinstance(e, MissingRoot) else str(e)


def _answer(
    say: Say, store: Store, entry: layout.Entry | None, mirror: Store
) -> tuple[Store, layout.Entry] | None:
    if entry is None:
        return None
    say.out(shown(store.location(entry.path)))
    if store is mirror:
        say.warn(f"answered from the mirror: {shown(mirror.location(PUB + '/' + entry.name))}")
    return store, entry


def probe(opened: Opened, dl: Deadline) -> None:
    """Run the store's preflight checks; a store without the probe capability is a Failure."""
    if opened.probe is None:
        raise Failure("probe needs an s3:// root")
    opened.probe(dl)
