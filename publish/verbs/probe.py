"""probe: check that an S3 root and its credentials work, before a job is accepted."""

from __future__ import annotations

from publish.ops import command
from publish.ops.resolution import probe
from publish.rules.errors import UsageError
from publish.rules.redact import shown
from publish.rules.roots import S3Root

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass


class Probe(command.Command):
    name = "probe"
    synopsis = "publish probe -checkpoint s3://BUCKET/PREFIX -creds LIST [-proxy URL] [-timeout 5m]"
    summary = "check that an S3 root and its credentials work, before a job is accepted"

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        root = self.root(call)
        if not isinstance(root, S3Root):
            raise UsageError(f"probe checks an s3:// root; {shown(root.text)} is a POSIX root")
        opened = self.open(call, root)
        probe(opened, self.deadline(call))
        call.say.out(f"{root.text} ok, credentials from {opened.source}")
        return 0


COMMAND = Probe
