"""publish: publish one save, for frameworks without a completion marker."""

from __future__ import annotations

from publish import layout, roots
from publish.deadline import Deadline
from publish.errors import Failure, UsageError
from publish.redact import quoted, shown
from publish.stores.base import Store
from publish.verbs import Say, common


def publish_entry(dl: Deadline, store: Store, say: Say, epoch: int, step: int, path: str) -> bool:
    """Create the entry for the save at ``path``; print it, or say it was already there.  True when created."""
    where = shown(store.location(path))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8 in a name, kept by Python as a lone surrogate
        raise Failure(
            f"save {where}: its path below the root is not UTF-8, which an entry name must be"
        ) from None
    name = layout.name(epoch, step, path)
    if store.create_entry(dl, name):
        say.out(f"published {name} (epoch {epoch}, step {step}, {where})")
        return True
    say.warn(f"{name} already published (epoch {epoch}, step {step}, {where})")
    return False


def publish(dl: Deadline, store: Store, say: Say, path: str, epoch: int, step: int) -> None:
    store.check_root(dl)
    if not store.holds(dl, path):
        raise Failure(f"save {shown(store.location(path))} does not exist")
    publish_entry(dl, store, say, epoch, step, path)


class Publish(common.Command):
    name = "publish"
    synopsis = f"publish publish {common.ROOT_FLAGS} [-epoch N] SAVE STEP"
    summary = "publish one complete save"

    def __init__(self) -> None:
        super().__init__()
        self.epoch = common.epoch_flag(self.fs, "0")

    def run(self, call: common.Call) -> int:
        common.expect_args(call, ["SAVE", "STEP"])
        root = self.root(call)
        epoch = common.epoch(self.epoch, call.env)
        try:
            step = common.decimal("STEP")(call.args[1])
        except ValueError as e:
            raise UsageError(f"invalid STEP {quoted(call.args[1])}: {e}") from None
        path = roots.below(root, call.args[0], call.cwd, "SAVE")  # before any credential source is tried
        store = self.open(call, root).store
        publish(self.deadline(call), store, call.say, path, epoch, step)
        return 0


COMMAND = Publish
