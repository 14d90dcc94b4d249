"""resolve: print the location of the newest publication whose save exists, or nothing."""

from __future__ import annotations

from publish.ops import command
from publish.ops.mirror_flags import MirrorFlags
from publish.ops.resolution import OFF, resolve, resolve_tiers, verify_value
from publish.rules.errors import UsageError
from publish.rules.redact import shown
from publish.rules.roots import S3Root

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass


class Resolve(command.Command):
    name = "resolve"
    synopsis = f"publish resolve {command.ROOT_FLAGS} [-probe] [-verify[=deep]] [-mirror URL]"
    summary = "print the latest publication's save location, or nothing"

    def __init__(self) -> None:
        super().__init__()
        self.probe = self.fs.boolean("probe", False, "S3 only: run the probe checks first")
        self.verify = self.fs.boolean_like(
            "verify",
            OFF,
            "check the chosen save against its manifest: every file there with its size (-verify=deep: and "
            "its SHA-256); a save that fails is passed over, naming the first bad file",
            verify_value,
        )
        self.mirror = MirrorFlags(self.fs)

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        root = self.root(call)
        s3 = isinstance(root, S3Root)
        if not s3 and self.probe.value:
            raise UsageError(f"-probe applies only to s3:// roots; {shown(root.text)} is a POSIX root")
        opened = self.open(call, root)
        dl = self.deadline(call)
        if self.mirrored is not None:
            resolve_tiers(
                dl,
                opened.store,
                self.open_mirror(call, self.mirrored.root).store,
                call.say,
                self.verify.value,
            )
            return 0
        if s3 and self.probe.value:
            from publish.ops.resolution import probe

            probe(opened, dl)
        resolve(dl, opened.store, call.say, self.verify.value)
        return 0


COMMAND = Resolve
