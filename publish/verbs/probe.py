"""probe: check that an S3 root and its credentials work, before a job is accepted."""

from __future__ import annotations

from publish.errors import Failure, UsageError
from publish.redact import shown
from publish.roots import S3Root
from publish.verbs import common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from publish.deadline import Deadline
    from publish.stores import Opened


def probe(opened: Opened, dl: Deadline) -> None:
    """Run the store's preflight checks; a store without the probe capability is a Failure."""
    if opened.probe is None:
        raise Failure("probe needs an s3:// root")
    opened.probe(dl)


class Probe(common.Command):
    name = "probe"
    synopsis = "publish probe -checkpoint s3://BUCKET/PREFIX -creds LIST [-proxy URL] [-timeout 5m]"
    summary = "check that an S3 root and its credentials work, before a job is accepted"

    def run(self, call: common.Call) -> int:
        common.expect_args(call, [])
        root = self.root(call)
        if not isinstance(root, S3Root):
            raise UsageError(f"probe checks an s3:// root; {shown(root.text)} is a POSIX root")
        opened = self.open(call, root)
        probe(opened, self.deadline(call))
        call.say.out(f"{root.text} ok, credentials from {opened.source}")
        return 0


COMMAND = Probe
