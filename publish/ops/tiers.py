"""-mirror: a second tier.  Each save published on a POSIX root is copied to an S3 mirror, then published there.

The order makes the promise hold on the mirror too: every file of the save is uploaded and checked
(publish.stores.transfer.upload_save), then the mirror's manifest is written, and only then is the mirror's
entry created, with the same name, by ``If-None-Match: *``.  A pass that is cut off (a timeout, a kill)
leaves no entry; the next pass, of this process or of any ``run`` or ``watch`` given the same mirror,
uploads the save again.

A fast-root entry is *pending* while the mirror has no entry of that name, unless -mirror-keep M would
prune it from the mirror at once (it is not among the newest M publications of both tiers whose saves
exist, as the mirror's prune counts: publish.ops.pending).  The fast root's
prune keeps every pending save and the one being uploaded (:meth:`Tiers.protected`).
"""

from __future__ import annotations

import time

from publish.ops import Say, command, scan_flags
from publish.ops.orphans import AGE
from publish.ops.pending import pending_names, pending_of, whole_on
from publish.process.threads import Flag, Worker
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import PublishError
from publish.rules.layout import EXEC, MAN, PUB
from publish.rules.redact import shown
from publish.stores.base import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.ops.events import Events
    from publish.ops.mirror_flags import Mirror
    from publish.ops.pending import Whole

#: An upload is given -timeout, and a second more for each MiB of the save (a slower one is cut off and
#: redone by the next pass).
RATE_FLOOR = 1 << 20


class Tiers:
    """The fast root (POSIX) and its mirror (S3), and what moves saves from one to the other.

    ``keep``: -mirror-keep (None: the mirror is never pruned), capped by ``keep_bytes`` (-mirror-keep-bytes;
    it changes nothing of what is pending); ``stale``: how old a multipart upload into the mirror's exec/
    must be before a pass aborts it."""

    def __init__(
        self,
        fast: Store,
        mirror: Store,
        say: Say,
        timeout: float,
        keep: int | None = None,
        stale: float = AGE,
        keep_bytes: int | None = None,
    ) -> None:
        self.keep_bytes = keep_bytes
        self.fast = fast
        self.mirror = mirror
        self.say = say
        self.timeout = timeout
        self.keep = keep
        self.stale = stale
        self.busy: set[str] = set()  # the entries being uploaded now
        self.failing: set[str] = set()  # the entries whose last upload failed (a damaged save, a link...)
        self.noted: set[str] = set()  # what was said once
        self.aborted_stale = False  # the stale multipart uploads were looked for
        self.failed = False  # an upload failed (said on stderr)
        self.seen: list[str] = []  # the mirror's entry names at its last listing, and those published since
        self.events: Events | None = None  # -on-mirror: told of each entry published on the mirror
        self.known: dict[str, bool] = {}  # which of the mirror's saves existed when pending was last judged
        self.held: set[str] = set()  # the saves found on the mirror by this process's passes (or put there)

    # -- what is pending

    def pending_of(
        self,
        dl: Deadline,
        entries: list[layout.Entry],
        on_mirror: list[str],
        fast_known: dict[str, bool] | None = None,
        mirror_known: dict[str, bool] | None = None,
        remember: bool = False,
    ) -> list[layout.Entry]:
        """The pending ones of ``entries`` (the fast root's), given the mirror's entry names, newest first
        (publish.ops.pending); ``*_known``: which saves exist on each tier, answers already had.
        ``remember``: whether an entry of both tiers still has its save on the mirror is asked once in this
        process (:attr:`held`), as a pass asks it; else afresh."""
        from publish.ops.retention import Saves

        fast, mirror = Saves(dl, self.fast, fast_known), Saves(dl, self.mirror, mirror_known)
        whole = self._whole(dl, remember)
        try:
            return pending_of(
                entries, on_mirror, self.mirror, self.keep, fast, mirror, self.keep_bytes, whole=whole
            )
        finally:
            self.known = mirror.known

    def _whole(self, dl: Deadline, remember: bool) -> Whole:
        """Whether the mirror holds an entry's save whole (publish.ops.pending.whole_on), the answer kept
        in :attr:`held`; ``remember``: a save found whole by this process (or put there by it) is not asked
        again, as a pass asks.  A prune asks afresh (:meth:`protected`) and forgets a save it finds not
        whole, so the next pass uploads it again."""
        ask, held = whole_on(dl, self.mirror), self.held

        def whole(entry: layout.Entry) -> bool:
            if remember and entry.path in held:
                return True
            there = ask(entry)
            if there:
                held.add(entry.path)
            else:
                held.discard(entry.path)
            return there

        return whole

    def pending(self, dl: Deadline) -> list[layout.Entry]:
        """The pending entries, newest first: pub/ of the fast root, then of the mirror."""
        entries = layout.parse_all(self.fast.list_entries(dl), self.fast.location(PUB))
        on_mirror = self.mirror.list_entries(dl)
        self.seen = on_mirror
        return self.pending_of(dl, entries, on_mirror, remember=True)

    def unmirrored(self) -> int:
        """How many of the fast root's entries are not known to be on the mirror, when the mirror cannot be
        read: those pending at its last listing (every entry, when it was never listed), its saves as last
        asked (one not asked counted as there); -1 when the fast root cannot be read either."""
        from publish.ops.retention import Saves

        try:
            dl = Deadline(self.timeout)
            entries = layout.parse_all(self.fast.list_entries(dl), self.fast.location(PUB))
            known = self.known
            return len(
                pending_of(
                    entries,
                    self.seen,
                    self.mirror,
                    self.keep,
                    Saves(dl, self.fast),
                    lambda p: known.get(p, True),
                    self.keep_bytes,
                )
            )
        except (PublishError, OSError):  # the root too: what is left is not known
            return -1

    def protected(self, dl: Deadline, entries: list[layout.Entry]) -> set[str]:
        """The names of ``entries`` (the fast root's, as its prune read them) that its prune must keep: the
        pending ones (the mirror's pub/ read after the root's) and those being uploaded."""
        from publish.ops.retention import Saves

        busy = set(self.busy)
        fast, mirror = Saves(dl, self.fast), Saves(dl, self.mirror)
        failing = set(self.failing)  # not on the mirror after this run: no older save makes room for them
        whole = self._whole(dl, remember=False)
        pending = pending_names(
            dl, entries, self.mirror, self.keep, fast, mirror, self.keep_bytes, failing, whole
        )
        return pending | busy

    # -- moving saves

    def sync(self, halt: Flag | None = None, until: Deadline | None = None, last: bool = False) -> int:
        """One pass: upload each pending save, newest first, and publish it on the mirror; then, when one
        was published and -mirror-keep is given, prune the mirror.  Stops between saves once ``halt`` is
        set; ``until`` bounds the whole pass (else each store call is given -timeout, each upload more by
        its size).  A save that fails is said (once for each message) and the pass goes on.  Returns how
        many saves it published on the mirror; raises when the tiers cannot be listed.  ``last``: the
        mirror is pruned (-mirror-keep) even when nothing was published, finishing an interrupted prune."""
        dl = until or Deadline(self.timeout)
        if not self.aborted_stale:
            self.mirror.create_root(dl)  # as publish init makes it, so resolve and status find it
            self.abort_stale(dl)
            self.aborted_stale = True
        done = 0
        for entry in self.pending(dl):
            if halt is not None and halt.is_set():
                break
            try:
                if self.upload(entry, until):
                    done += 1
                self.failing.discard(entry.name)
            except PublishError as e:
                self.failed = True
                self.failing.add(entry.name)
                self._once(f"{e}: not mirrored (tried again on the next pass)")
        if (done or last) and self.keep is not None:
            from publish.ops.retention import mirror_policy, prune

            policy = mirror_policy(self.keep, self.keep_bytes)
            prune(until or Deadline(self.timeout), self.mirror, self.say, policy)
        return done

    def upload(self, entry: layout.Entry, until: Deadline | None = None) -> bool:
        """Upload the save of ``entry``, write its manifest on the mirror, then create its mirror entry.
        True when this call created the entry, or put back the save of an entry the mirror had already
        (its save gone or damaged there: a hand, a lifecycle rule; published again, no -on-mirror
        event)."""
        fast, mirror = self.fast, self.mirror
        self.busy.add(entry.name)
        try:
            dl = until or Deadline(self.timeout)
            again = mirror.exists(dl, f"{PUB}/{entry.name}")
            if again and whole_on(dl, mirror)(entry):
                self.seen.append(entry.name)
                self.held.add(entry.path)
                return False  # mirrored meanwhile, by another node
            if not fast.holds(dl, entry.path):
                self._once(
                    f"{shown(fast.location(PUB + '/' + entry.name))} names {shown(fast.location(entry.path))}, "
                    "which does not exist: not mirrored"
                )
                return False
            expect = _manifest_rows(dl, fast, entry.name)
            if until is None:
                dl = Deadline(self.timeout + _size(dl, fast, entry.path, expect) / RATE_FLOOR)
            from publish.ops.publishing import DOOMED, Overlapped, doomed_folders, enter
            from publish.stores.transfer import upload_save

            try:
                rows = upload_save(dl, fast, entry.path, mirror, expect=expect)
            except PublishError as e:  # objects a prune of the mirror removes under the upload: said as such
                if not doomed_folders(dl, mirror).related(entry.path):
                    raise
                raise Overlapped(
                    f"{shown(mirror.location(entry.path))}: {DOOMED} on the mirror ({e}): not published there"
                ) from None
            if doomed_folders(dl, mirror).related(entry.path):
                self._once(
                    f"{shown(mirror.location(entry.path))}: {DOOMED} on the mirror: not published there"
                )
                return False
            from publish.rules import manifest

            mirror.write_manifest(dl, entry.name, manifest.encode(entry.name, rows))
            # The entry is this side's mark; then tomb/ and the save are read: a -mirror-keep prune (of
            # this process or another) that overlapped is seen, or sees the entry (publish_entry).
            created = enter(dl, mirror, self.say, entry, rows, " on the mirror", again=again)
            self.seen.append(entry.name)
            self.held.add(entry.path)
            if created and not again and self.events is not None:
                self.events.fire("mirror", mirror, entry.epoch, entry.step, entry.path)
            return created
        finally:
            self.busy.discard(entry.name)

    def abort_stale(self, dl: Deadline) -> None:
        """Abort the multipart uploads into the mirror's exec/ unchanged for ``stale`` seconds (a killed
        upload's), as prune -orphans does."""
        from publish.ops.retention import aborted

        cutoff = time.time() - self.stale
        for upload in self.mirror.uploads(dl, EXEC, cutoff):
            if upload.at <= cutoff and self.mirror.abort_upload(dl, upload):
                self.say.out(aborted(self.mirror, upload))

    def _once(self, text: str) -> None:
        if text not in self.noted:
            self.noted.add(text)
            self.say.warn(text)


def _size(dl: Deadline, store: Store, path: str, rows: list[tuple[str, int, str | None]] | None) -> int:
    """The bytes of the save at ``path``, for its upload's deadline: the manifest's sum, else the files'.
    A save the walk refuses (a link inside it) counts 0: the upload refuses it too, and that one failure
    names it (a save is named once, whatever pass meets it)."""
    if rows is not None:
        return sum(size for _, size, _ in rows)
    try:
        one = store.size(dl, path)
        return one if one is not None else sum(store.sizes(dl, path).values())
    except PublishError:
        return 0


def _manifest_rows(dl: Deadline, store: Store, name: str) -> list[tuple[str, int, str | None]] | None:
    """The rows of the fast root's manifest of the entry ``name``, or None when it has none (a save
    published before manifests)."""
    from publish.rules import manifest

    data = store.read_manifest(dl, name, manifest.MANIFEST_LIMIT)
    if data is None:
        return None
    return manifest.decode(name, data, store.location(f"{MAN}/{name}"))


class Uploader:
    """The uploads of a watch or a run, in a thread of their own, so a slow store never delays a scan or a
    signal: a pass every ``interval`` seconds, and at once when :meth:`wake` is called (a save was
    published).  A failed pass is said (once for each message) and tried again."""

    def __init__(self, tiers: Tiers, interval: float) -> None:
        self.tiers = tiers
        self.interval = interval
        self.halt = Flag()
        self._wake = Flag()
        self.final: Deadline | None = None
        self.left = -1  # pending saves after the last pass (-1: not known)
        self.thread = Worker(self._loop)

    @property
    def fault(self) -> bool:
        """An upload or a pass failed (each said on stderr): run and watch exit 1."""
        return self.tiers.failed

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        last = ""
        while True:
            final = self.halt.is_set()
            if final and self.final is None:
                return  # abandoned: the watch failed
            try:
                self.tiers.sync(None if final else self.halt, self.final if final else None, last=final)
                if final:
                    self.left = len(self.tiers.pending(self.final or Deadline(self.tiers.timeout)))
                last = ""
            except Exception as e:
                self.tiers.failed = True
                text = scan_flags.describe(e)
                if final:  # the end's own line, even when an earlier pass said the same
                    self.tiers.say.warn(f"mirror: {text} (the next run or watch tries again)")
                    self.left = self.tiers.unmirrored()
                elif text != last:
                    self.tiers.say.warn(f"mirror: {text} (tried again every -interval)")
                last = text
            if final:
                return
            woken = self._wake
            woken.wait(self.interval)
            if woken.is_set():
                self._wake = Flag()

    def finish(self, timeout: float) -> bool:
        """Stop after one more pass (within ``timeout`` seconds, which the current upload may overrun: then
        the thread is left to its fate); True when every pending save was mirrored in time."""
        self.final = Deadline(timeout)
        self.halt.set()
        self._wake.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.tiers.say.warn(
                "mirror: the uploads did not finish within -timeout: the next run or watch finishes them"
            )
            return False
        if self.left > 0:
            self.tiers.say.warn(f"mirror: {self.left} saves not mirrored: the next run or watch uploads them")
        return self.left == 0  # -1: the last pass failed, as said


def open_tiers(
    cmd: scan_flags.SavesCommand, call: command.Call, mirror: Mirror, fast: Store, stale: float | None = None
) -> Tiers:
    """The tiers of a watch or a run given -mirror (``mirror``, as the command parsed it), the mirror's store
    opened with -creds and -proxy.  ``stale``: -orphans-age when given."""
    store = cmd.open_mirror(call, mirror.root, renew=True).store
    return Tiers(
        fast,
        store,
        call.say,
        cmd.timeout.value,
        mirror.keep,
        AGE if stale is None else stale,
        mirror.keep_bytes,
    )
