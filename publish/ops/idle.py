"""``run -requeue -max-idle-requeues K``: requeue only while training advances.

A dispatch is *idle* when the save ``resolve`` answers after it (after its last scan and prune) is still the
one it resumed from, or there is still none: it published nothing newer.  Before ``run`` requeues an idle
dispatch, it counts the marks ``exec/.idle-<R>-<token>`` whose ``<R>`` names that same save: one for each
earlier idle dispatch that was requeued.  With K of them there already, it does not requeue (it says why,
and exits non-zero); else it makes its own mark, then requeues.  A dispatch that published something is
requeued without a mark, and the next one resumes from a newer save, whose count starts at 0.

Why marks named by the save resumed from, and not a count of the attempts in exec/:

- Order without clocks.  The dispatches since the last progress are exactly those that resumed from the
  same save; no epoch, mtime or LastModified has to be compared, so nodes whose clocks disagree, a
  directory whose mtime a prune changed, or an epoch given by hand cannot reorder them.
- No name is parsed.  An attempt may be named anything (``-attempt``, ``DISPATCH_ATTEMPT``), and on Slurm
  its restart number starts again at 0 in a new job; the marks hold neither.
- Each idle dispatch requeued leaves one, whatever it wrote.  A trainer that crashes before its first save
  writes nothing into its attempt's folder, and on S3 an empty folder does not exist; a mark is an object
  of its own.  It lies beside the attempts, not in one: a trainer may refuse an output folder that is not
  empty (Hugging Face's example scripts do), and the attempt may be the next dispatch's too.
- Judged last.  After the last scan and the prune: the save a trainer makes on the stop signal, which only
  the last scan publishes, is progress; an entry whose save is gone is not, as resolve passes it over.
- One listing.  The marks are files directly in exec/: one directory read on POSIX, one delimited LIST
  (its pages) on S3, whatever the saves hold.
- Only what run requeued counts.  An attempt made by hand, by ``watch``, or by a job that ended without a
  requeue leaves no mark.  Every job that resumes from the same save shares the count (array tasks on one
  root), as they share what they resume from.

With -mirror the count belongs to the job, not to the node.  The save resumed from, and the one a dispatch
would resume from now, are ``resolve -mirror``'s answers (either tier's), and each mark is made, under one
name, on both tiers: the fast root's exec/ and the mirror's.  The count is the union of the two tiers'
marks of that save, by name: a fast root lost with its node leaves the mirror's marks, a mirror that did
not answer when a mark was made leaves the fast root's, and a mark on both counts once.  A tier that fails
while the marks are read or made is said, and the other counts alone (run's exit status is then 1 where
COMMAND's was 0); both failing is the store failure run requeues all the same for.
"""

from __future__ import annotations

import os

from publish.ops import Say
from publish.ops.resolution import newest_save, resolve_tiers
from publish.rules.errors import Failure, PublishError
from publish.rules.layout import EXEC
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.rules.deadline import Deadline
    from publish.rules.layout import Entry
    from publish.stores.base import Store

#: Every mark's name starts with this; then 32 hex digits naming the save resumed from, "-" and a token.
MARK = ".idle-"


def mark_prefix(resumed: Entry | None) -> str:
    """``.idle-<the first 32 hex digits of the SHA-256 of the save's path>-``; the path is "" for none."""
    from publish.rules.hashing import sha256_hex  # here: only a dispatch about to be requeued needs it

    path = "" if resumed is None else resumed.path
    return f"{MARK}{sha256_hex(path.encode('utf-8', 'surrogateescape'))[:32]}-"


class Budget:
    """The idle requeues left to a run that resumed from ``resumed`` (an entry, or None: no save).

    ``mirror``: -mirror's store (None: the root alone), the second tier the marks are read from and made on;
    ``source``: the tier ``resumed`` was answered from (None: the root).
    ``dl``: the deadline the store calls share (the last scan's, which the prune shares too); None when the
    last scan did not finish, and then nothing is judged.  ``failed``: a tier failed on the way (said)."""

    def __init__(
        self,
        store: Store,
        limit: int,
        resumed: Entry | None,
        mirror: Store | None = None,
        source: Store | None = None,
    ) -> None:
        self.store = store
        self.mirror = mirror
        self.source = source or store  # the tier the save resumed from was read on
        self.limit = limit
        self.resumed = resumed
        self.dl: Deadline | None = None
        self.failed = False

    def _nothing_newer(self) -> str:
        if self.resumed is None:
            return "nothing (it had no save to resume from)"
        return f"nothing newer than {shown(self.source.location(self.resumed.path))}"

    def _now(self, dl: Deadline) -> Entry | None:
        """The save the next dispatch would resume from: resolve's answer (with -mirror, either tier's)."""
        quiet = Say(_quiet, _quiet)
        if self.mirror is None:
            return newest_save(dl, self.store, quiet)
        answer = resolve_tiers(dl, self.store, self.mirror, quiet)
        return None if answer is None else answer[1]

    def _marks(self, dl: Deadline, say: Say, prefix: str) -> tuple[set[str], list[Store]]:
        """The names of the marks starting ``prefix`` on the tiers (their union), and the tiers that
        answered.  A tier that fails while another answers is said; every tier failing raises the root's
        failure."""
        names: set[str] = set()
        answered: list[Store] = []
        failures: list[tuple[Store, PublishError]] = []
        for store in [self.store] if self.mirror is None else [self.store, self.mirror]:
            try:
                names.update(name for name in store.list_files(dl, EXEC) if name.startswith(prefix))
            except PublishError as e:
                failures.append((store, e))
                continue
            answered.append(store)
        if not answered:
            raise failures[0][1]
        for store, fault in failures:
            self.failed = True
            where = shown(store.location(EXEC))
            say.warn(f"run: the idle marks in {where} could not be read ({fault}): counted without them")
        return names, answered

    def _mark(self, dl: Deadline, say: Say, prefix: str, names: set[str], tiers: list[Store]) -> None:
        """Make one mark, under one name, on each of ``tiers``: a tier that fails while another makes it is
        said; none making it raises."""
        for _ in range(3):  # a token drawn twice is drawn again
            name = prefix + os.urandom(8).hex()
            if name in names:
                continue
            made, drawn = 0, False
            failures: list[tuple[Store, PublishError]] = []
            for store in tiers:
                try:
                    if store.create_mark(dl, name):
                        made += 1
                    else:
                        drawn = True  # there already: a mark of that name counts once, whoever made it
                except PublishError as e:
                    failures.append((store, e))
            if made:
                for store, fault in failures:
                    self.failed = True
                    where = shown(store.location(EXEC))
                    say.warn(f"run: no idle mark could be made in {where} ({fault}): made on the other tier")
                return
            if failures and not drawn:
                raise failures[0][1]
        raise Failure(f"{shown(self.store.location(EXEC))}: no new mark could be made in it")

    def allows(self, say: Say, job: str) -> bool:
        """Whether this dispatch may be requeued, its mark made when it was idle; said on stderr either way.
        A store's failure is raised (the caller requeues all the same, and says so)."""
        if self.dl is None:
            say.warn(
                "run: the last scan did not finish: whether this dispatch was idle is not known; requeued"
            )
            return True
        now = self._now(self.dl)
        was = None if self.resumed is None else self.resumed.path
        if (None if now is None else now.path) != was:
            return True  # it advanced: the next dispatch resumes from a newer save
        prefix = mark_prefix(self.resumed)
        names, answered = self._marks(self.dl, say, prefix)
        before = len(names)
        if before >= self.limit:
            earlier = f" and the {before} before it, each requeued," if before else ""
            say.warn(
                f"run: job {job} not requeued: this dispatch{earlier} published {self._nothing_newer()}"
                f" (-max-idle-requeues {self.limit}); exiting non-zero, so the job ends FAILED"
            )
            return False
        self._mark(self.dl, say, prefix, names, answered)
        say.warn(
            f"run: this dispatch published {self._nothing_newer()}: idle requeue {before + 1} of at most "
            f"{self.limit} in a row (-max-idle-requeues)"
        )
        return True


def _quiet(line: str) -> None:
    """newest_save's notes of entries passed over: resolve said them at the start already."""
