"""prune: remove all but the latest entries (then their manifests), then the folders only they named;
crash-consistent (publish.ops.retention says how).  With -mirror, the mirror first (-mirror-keep), then the
root, keeping every save not yet on the mirror.
"""

from __future__ import annotations

from publish.ops import command
from publish.ops.mirror_flags import MirrorFlags
from publish.ops.retention import Saves, mirror_policy, prune
from publish.ops.retention_flags import RetentionFlags


class Prune(command.Command):
    name = "prune"
    synopsis = (
        f"publish prune {command.ROOT_FLAGS} [-keep 3] [-keep-every K] [-keep-within D] [-keep-bytes SIZE] "
        "[-orphans [-orphans-age 1h] [-attempt A]] [-mirror URL [-mirror-keep M [-mirror-keep-bytes SIZE]]] "
        "[-dry-run]"
    )
    summary = "remove all but the latest publications and the folders only they named"

    def __init__(self) -> None:
        super().__init__()
        self.keep = self.fs.integer(
            "keep", 3, "how many of the latest publications to keep", minimum=1, int64=True
        )
        self.dry_run = self.fs.boolean(
            "dry-run", False, "print what would be removed (would remove <location>), remove nothing"
        )
        self.retention = RetentionFlags(self.fs, attempt=True)
        self.mirror = MirrorFlags(self.fs, keep=True, keep_bytes=True)

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        orphans = self.retention.given_orphans(call.env)
        root = self.root(call)
        given = self.mirrored
        store = self.open(call, root).store
        policy = self.retention.policy(self.keep.value, orphans)
        dl = self.deadline(call)
        if given is None:
            prune(dl, store, call.say, policy, dry_run=self.dry_run.value)
            return 0
        from publish.ops.pending import pending_names

        mirror = self.open_mirror(call, given.root).store
        mirror_keep, mirror_bytes = given.keep, given.keep_bytes
        if mirror_keep is not None:  # first: a mirror that fails (one never written) leaves the root as it is
            store.check_root(dl)  # and a root that fails (gone with its node) leaves the mirror as it is
            prune(dl, mirror, call.say, mirror_policy(mirror_keep, mirror_bytes), dry_run=self.dry_run.value)
        # As run -keep: a save not yet on the mirror stays (the mirror's pub/ read after the root's).
        policy.protect = lambda dl, entries: pending_names(
            dl, entries, mirror, mirror_keep, Saves(dl, store), Saves(dl, mirror), mirror_bytes
        )
        prune(dl, store, call.say, policy, dry_run=self.dry_run.value)
        return 0


COMMAND = Prune
