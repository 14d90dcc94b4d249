"""publish: publish one save, for frameworks without a completion marker."""

from __future__ import annotations

from publish.ops import Say, command, scan_flags
from publish.ops.publishing import DOOMED, doomed_folders, doomed_save, publish_entry, refuse_reserved
from publish.rules import layout, roots
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, UsageError
from publish.rules.redact import quoted, shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.stores.base import Store

    Rows = list[tuple[str, int, str | None]]


def publish(dl: Deadline, store: Store, say: Say, path: str, epoch: int, step: int) -> None:
    refuse_reserved(store, path, "save")
    store.check_root(dl)
    if not store.holds(dl, path):
        raise Failure(f"save {shown(store.location(path))} does not exist")
    if doomed_save(dl, store, doomed_folders(dl, store), path):
        raise Failure(f"save {shown(store.location(path))}: {DOOMED}; run publish prune to finish it first")
    if publish_entry(dl, store, say, epoch, step, path):
        _outranked(dl, store, say, epoch)


def _outranked(dl: Deadline, store: Store, say: Say, epoch: int) -> None:
    """Warn when an entry of a greater epoch is published already: resolve will never choose this one."""
    top = -1
    for name in store.list_entries(dl):
        head = name[:20]
        if name[20:21] == "-" and layout.digits(head):
            top = max(top, int(head))
    if top > epoch:
        say.warn(
            f"an entry of epoch {top} is already published, so resolve will choose it over this one (epoch "
            f"{epoch}); to publish a save that resolve chooses, give -epoch {top + 1} or more (or set DISPATCH_EPOCH)"
        )


class Publish(command.Command):
    name = "publish"
    synopsis = f"publish publish {command.ROOT_FLAGS} [-epoch N] SAVE STEP"
    summary = "publish one complete save"

    def __init__(self) -> None:
        super().__init__()
        self.epoch = scan_flags.epoch_flag(self.fs, "0")

    def run(self, call: command.Call) -> int:
        command.expect_args(call, ["SAVE", "STEP"])
        root = self.root(call)
        epoch = scan_flags.epoch(self.epoch, call.env)
        try:
            step = scan_flags.decimal("STEP")(call.args[1])
        except ValueError as e:
            raise UsageError(f"invalid STEP {quoted(call.args[1])}: {e}") from None
        path = roots.below(root, call.args[0], call.cwd, "SAVE")  # before any credential source is tried
        store = self.open(call, root).store
        publish(self.deadline(call), store, call.say, path, epoch, step)
        return 0


COMMAND = Publish
