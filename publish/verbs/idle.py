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
"""

from __future__ import annotations

import os

from publish.errors import Failure
from publish.layout import EXEC
from publish.redact import shown
from publish.verbs import Say
from publish.verbs.resolve import newest_save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.deadline import Deadline
    from publish.layout import Entry
    from publish.stores.base import Store

#: Every mark's name starts with this; then 32 hex digits naming the save resumed from, "-" and a token.
MARK = ".idle-"


def mark_prefix(resumed: Entry | None) -> str:
    """``.idle-<the first 32 hex digits of the SHA-256 of the save's path>-``; the path is "" for none."""
    from publish.hashing import sha256_hex  # here: only a dispatch about to be requeued needs it

    path = "" if resumed is None else resumed.path
    return f"{MARK}{sha256_hex(path.encode('utf-8', 'surrogateescape'))[:32]}-"


class Budget:
    """The idle requeues left to a run that resumed from ``resumed`` (an entry, or None: no save).

    ``dl``: the deadline the store calls share (the last scan's, which the prune shares too); None when the
    last scan did not finish, and then nothing is judged."""

    def __init__(self, store: Store, limit: int, resumed: Entry | None) -> None:
        self.store = store
        self.limit = limit
        self.resumed = resumed
        self.dl: Deadline | None = None

    def _nothing_newer(self) -> str:
        if self.resumed is None:
            return "nothing (it had no save to resume from)"
        return f"nothing newer than {shown(self.store.location(self.resumed.path))}"

    def allows(self, say: Say, job: str) -> bool:
        """Whether this dispatch may be requeued, its mark made when it was idle; said on stderr either way.
        A store's failure is raised (the caller requeues all the same, and says so)."""
        if self.dl is None:
            say.warn(
                "run: the last scan did not finish: whether this dispatch was idle is not known; requeued"
            )
            return True
        now = newest_save(self.dl, self.store, Say(_quiet, _quiet))
        was = None if self.resumed is None else self.resumed.path
        if (None if now is None else now.path) != was:
            return True  # it advanced: the next dispatch resumes from a newer save
        prefix = mark_prefix(self.resumed)
        before = sum(1 for name in self.store.list_files(self.dl, EXEC) if name.startswith(prefix))
        if before >= self.limit:
            earlier = f" and the {before} before it, each requeued," if before else ""
            say.warn(
                f"run: job {job} not requeued: this dispatch{earlier} published {self._nothing_newer()}"
                f" (-max-idle-requeues {self.limit}); exiting non-zero, so the job ends FAILED"
            )
            return False
        for _ in range(3):  # a token drawn twice is drawn again
            if self.store.create_mark(self.dl, prefix + os.urandom(8).hex()):
                break
        else:
            raise Failure(f"{shown(self.store.location(EXEC))}: no new mark could be made in it")
        say.warn(
            f"run: this dispatch published {self._nothing_newer()}: idle requeue {before + 1} of at most "
            f"{self.limit} in a row (-max-idle-requeues)"
        )
        return True


def _quiet(line: str) -> None:
    """newest_save's notes of entries passed over: resolve said them at the start already."""
