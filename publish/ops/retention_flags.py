"""Retention's flag group: what prune -keep N keeps besides the newest N (-keep-every, -keep-within,
-keep-bytes) and what it removes besides (-orphans, -orphans-age, and for prune and status -attempt), with
their usage errors; -keep itself is each verb's own (prune's default is 3, status and run take none).
"""

from __future__ import annotations

from publish.ops import command
from publish.ops.orphans import AGE, Orphans
from publish.ops.retention import Policy
from publish.rules.errors import UsageError

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping

    from publish.rules.go.flags import Flag, FlagSet


class RetentionFlags:
    """-keep-every, -keep-within, -keep-bytes, -orphans, -orphans-age (prune, status, run) and -attempt
    (prune and status: run's -attempt is the dispatch's own), declared on one FlagSet."""

    __slots__ = ("every", "within", "bytes", "orphans", "age", "attempt")

    def __init__(self, fs: FlagSet, *, attempt: bool = False) -> None:
        self.every = fs.integer(
            "keep-every",
            0,
            "also keep the publications whose step is a multiple of `K`",
            minimum=1,
            int64=True,
        )
        self.within = fs.duration(
            "keep-within", 0.0, "also keep the publications made within the duration `D`"
        )
        self.bytes = command.size_flag(
            fs,
            "keep-bytes",
            "of the publications the other -keep flags keep, only the newest whose saves add up to at most "
            "`SIZE` (500GB, 2TiB; the newest save always, and every save not yet mirrored)",
        )
        self.orphans = fs.boolean(
            "orphans",
            False,
            "also remove the folders and files in other attempts' folders under exec/ that no kept publication "
            "relates to, once nothing in them changed for -orphans-age (S3: and abort multipart uploads as old)",
        )
        self.age = fs.duration(
            "orphans-age", AGE, "how long nothing in a leftover must have changed before -orphans removes it"
        )
        self.attempt: Flag[str] | None = None
        if attempt:
            self.attempt = fs.string(
                "attempt",
                "",
                "with -orphans: the current attempt `A`, never touched (env DISPATCH_ATTEMPT; default: none, "
                "every attempt is looked at)",
            )

    def policy(self, keep: int, orphans: Orphans | None = None) -> Policy:
        """What prune -keep ``keep`` keeps, with these flags, and removes besides (``orphans``)."""
        every, within = self.every, self.within
        policy = Policy(keep, every.value if every.is_set else 0, within.value if within.is_set else None)
        policy.bytes = self.bytes.value
        policy.orphans = orphans
        return policy

    def without_keep(self, what: str) -> None:
        """Usage errors for the flags given without -keep: ``what`` says what -keep N does for the verb
        (``shows``, ``asks for``)."""
        if self.every.is_set or self.within.is_set:
            raise UsageError(f"-keep-every and -keep-within apply to the prune -keep N {what}: give -keep")
        if self.bytes.is_set:
            raise UsageError(f"-keep-bytes applies to the prune -keep N {what}: give -keep")
        if self.orphans.value:
            raise UsageError(f"-orphans applies to the prune -keep N {what}: give -keep")

    def orphans_of(self, current: str) -> Orphans | None:
        """What -orphans and -orphans-age ask for, outside the attempt ``current`` (``""``: none);
        -orphans-age alone is a usage error."""
        if not self.orphans.value:
            if self.age.is_set:
                raise UsageError("-orphans-age applies to -orphans: give -orphans")
            return None
        return Orphans(self.age.value, current)

    def given_orphans(self, env: Mapping[str, str]) -> Orphans | None:
        """``orphans_of`` the attempt -attempt names, else DISPATCH_ATTEMPT (prune and status); -attempt
        without -orphans is a usage error."""
        attempt = self.attempt
        assert attempt is not None, "declared with attempt=True"
        if not self.orphans.value and attempt.is_set:
            raise UsageError("-attempt applies to -orphans: give -orphans")
        current = command.flag_or_env(attempt, env, "DISPATCH_ATTEMPT") if self.orphans.value else ""
        if current:
            command.check_attempt(current)
        return self.orphans_of(current)
