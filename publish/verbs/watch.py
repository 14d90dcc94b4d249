"""watch: publish each save once it is complete, until told to stop."""

from __future__ import annotations

from publish.frameworks import CHOICES
from publish.ops import command, scan_flags
from publish.ops.scan import SignalStop, Watcher, bounded
from publish.process.threads import Flag
from publish.rules import roots
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure, UsageError
from publish.rules.layout import EXEC, MAN, PUB, TOMB
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from publish.ops.events import Events
    from publish.ops.tiers import Tiers

    class Stop(Protocol):
        """What ``watch`` waits on: a ``threading.Event`` (or publish.process.threads.Flag), or a :class:`SignalStop`."""

        def is_set(self) -> bool: ...
        def wait(self, timeout: float | None = None) -> bool: ...


def watch(
    watcher: Watcher, interval: float, timeout: float, stop: Stop, tiers: Tiers | None, events: Events | None
) -> bool:
    """Scan every ``interval`` seconds until ``stop`` is set, then scan once more; each scan's store calls
    get a deadline of ``timeout`` seconds, and the last scan is given up after it.  With ``tiers``
    (-mirror), the uploads run beside the scans, and after the last scan they are given ``timeout`` seconds
    to finish; False when some did not (or a pass failed).  ``events``: told of each publication (the
    caller finishes them)."""
    watcher.store.check_root(UNBOUNDED)  # S3 sends nothing for it
    watcher.events = events
    uploader = None
    if tiers is not None:
        tiers.events = events
        from publish.ops.tiers import Uploader

        uploader = Uploader(tiers, interval)
        watcher.on_publish = uploader.wake
    try:
        while not stop.is_set():
            watcher.scan(Deadline(timeout))
            stop.wait(interval)
        bounded(watcher, Deadline(timeout))
    except BaseException:
        if uploader is not None:
            uploader.halt.set()  # no more passes: watch fails now
        raise
    if uploader is None:
        return not watcher.fault
    return uploader.finish(timeout) and not uploader.fault and not watcher.fault


class Watch(scan_flags.SavesCommand):
    name = "watch"
    synopsis = (
        f"publish watch {command.ROOT_FLAGS} -framework {CHOICES} [-interval 10s] [-metrics FILE] [-world-size N] "
        "[-mirror URL [-mirror-keep M [-mirror-keep-bytes SIZE]]] [-on-publish CMD] [-on-mirror CMD] [-epoch N] [-attempt A] [SAVES]"
    )
    summary = "publish each save once it is complete, until SIGTERM or SIGINT"
    attempt_usage = "the execution `A`; SAVES defaults to ROOT/exec/A (env DISPATCH_ATTEMPT)"
    epoch_default = "0"

    def trap(self) -> scan_flags.Trap:
        stop = SignalStop()
        return scan_flags.Trap(stop, lambda signum: stop.set())

    def run(self, call: command.Call) -> int:
        command.expect_args(call, ["SAVES"], optional=1)
        root = self.root(call)
        epoch = scan_flags.epoch(self.epoch, call.env)
        framework = self.chosen()
        if call.args:
            saves = roots.below(root, call.args[0], call.cwd, "SAVES")
            first = saves.partition("/")[0]
            if first in (PUB, TOMB, MAN):
                raise Failure(
                    f"SAVES {shown(root.text.rstrip('/') + '/' + saves)} lies in the root's {first}/, which holds no saves"
                )
        else:
            attempt = command.flag_or_env(self.attempt, call.env, "DISPATCH_ATTEMPT")
            if not attempt:
                raise UsageError("no SAVES argument and no attempt: give -attempt or set DISPATCH_ATTEMPT")
            saves = f"{EXEC}/{command.check_attempt(attempt)}"
        metrics = self.metrics_for(call, root)
        world_size = self.world_size_of(call)
        events = self.events_for(call, framework, metrics)
        store = self.open(call, root, renew=True).store
        tiers = None
        if self.mirrored is not None:  # else nothing of the mirror is imported
            from publish.ops.tiers import open_tiers

            tiers = open_tiers(self, call, self.mirrored, store)
        stop = call.stop or Flag()
        try:
            watcher = Watcher(
                store, call.say, framework, saves, epoch, metrics=metrics, world_size=world_size
            )
            whole = watch(watcher, self.interval.value, self.timeout.value, stop, tiers, events)
        finally:
            if events is not None:  # the events still queued, within -timeout; they never change the status
                events.finish()
                if metrics is not None:
                    metrics.flush(call.say.warn)
        return 0 if whole else 1


COMMAND = Watch
