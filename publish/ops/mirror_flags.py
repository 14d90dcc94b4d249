"""The mirror's flag group: -mirror, and for the verbs that prune the mirror -mirror-keep and
-mirror-keep-bytes, with their usage errors.

:meth:`MirrorFlags.parse` runs once per command, from :meth:`publish.ops.command.Command.root` (-creds and
-proxy are then the mirror's), and the :class:`Mirror` it gives is what the command carries
(``Command.mirrored``): every later step (opening the mirror, the tiers of a watch or a run, a prune of
both) takes that value and never reads the flags again.
"""

from __future__ import annotations

from publish.rules import redact, roots
from publish.rules.errors import Failure, UsageError
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.rules.go.flags import Flag, FlagSet


class Mirror:
    """What -mirror and its companions ask for: the mirror's root, -mirror-keep (None: the mirror is never
    pruned) and -mirror-keep-bytes (None: no byte cap)."""

    __slots__ = ("root", "keep", "keep_bytes")

    def __init__(self, root: roots.S3Root, keep: int | None, keep_bytes: int | None) -> None:
        self.root = root
        self.keep = keep
        self.keep_bytes = keep_bytes


class MirrorFlags:
    """-mirror (resolve, status, prune, watch, run), -mirror-keep (status, prune, watch, run) and
    -mirror-keep-bytes (prune, watch, run), declared on one FlagSet."""

    __slots__ = ("url", "keep", "keep_bytes")

    def __init__(self, fs: FlagSet, *, keep: bool = False, keep_bytes: bool = False) -> None:
        self.url = fs.string(
            "mirror",
            "",
            "the mirror `URL`, s3://BUCKET[/PREFIX]: a second root for the saves of the (POSIX) root; "
            "-creds and -proxy are then the mirror's",
        )
        self.keep: Flag[int | None] | None = None
        self.keep_bytes: Flag[int | None] | None = None
        if keep:
            from publish.rules.go.gocompat import parse_go_int

            self.keep = fs.custom(
                "mirror-keep",
                None,
                "with -mirror: after saves are mirrored, prune the mirror to the latest `M` (default: no prune)",
                lambda t: parse_go_int(t, minimum=1),
                "M",
            )
        if keep_bytes:
            from publish.ops.command import size_flag

            self.keep_bytes = size_flag(
                fs,
                "mirror-keep-bytes",
                "with -mirror-keep: of the saves it keeps on the mirror, only the newest whose sizes add up to "
                "at most `SIZE` (500GB, 2TiB; the newest save always)",
            )

    def parse(self, root: roots.Root, cwd: str) -> Mirror | None:
        """The mirror asked for (None: -mirror not given), checked against ``root``; -mirror-keep-bytes
        without -mirror-keep, and -mirror-keep without -mirror, are usage errors."""
        keep, size = self.keep, self.keep_bytes
        if size is not None and size.is_set and not (keep is not None and keep.is_set):
            raise UsageError("-mirror-keep-bytes applies to -mirror-keep: give -mirror-keep")
        mirror = parse_mirror(self.url, root, cwd)
        if mirror is None:
            if keep is not None and keep.is_set:
                raise UsageError("-mirror-keep applies to -mirror: give -mirror")
            return None
        return Mirror(mirror, None if keep is None else keep.value, None if size is None else size.value)


def parse_mirror(flag: Flag[str], root: roots.Root, cwd: str) -> roots.S3Root | None:
    """The mirror -mirror names, or None when it is not given; a usage error naming -mirror for an empty
    value, a POSIX path (inside the root or not), the root itself or a prefix inside it, and an S3 root."""
    if not flag.is_set:
        return None
    text = flag.value
    if not text:
        raise UsageError("-mirror is empty")
    if not text.startswith("s3://"):
        if roots.scheme(text) or "\0" in text:
            raise UsageError(f"-mirror {shown(redact.url(text))}: a mirror is an s3:// URL")
        path = roots.clean_posix(text, cwd)
        if isinstance(root, roots.PosixRoot) and (path + "/").startswith(root.path.rstrip("/") + "/"):
            raise UsageError(f"-mirror {shown(path)} is the root or lies inside it: a mirror is an s3:// URL")
        raise UsageError(f"-mirror {shown(path)}: a mirror is an s3:// URL (a POSIX mirror is not supported)")
    try:
        mirror = roots.parse_s3(text, "-mirror")
    except Failure as e:
        raise UsageError(str(e)) from None
    if isinstance(root, roots.S3Root):
        if mirror.bucket == root.bucket and (
            not root.prefix or (mirror.prefix + "/").startswith(root.prefix + "/")
        ):
            raise UsageError(f"-mirror {shown(mirror.text)} is the root or lies inside it")
        raise UsageError(f"-mirror applies to a POSIX root; {shown(root.text)} is an s3:// root")
    return mirror
