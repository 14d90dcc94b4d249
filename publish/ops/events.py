"""``-on-publish CMD`` and ``-on-mirror CMD`` of watch and run: a command run after each publication.

A trainer's "checkpoint saved" callback fires when the framework has written the save; these fire when the
save is published, the entry created (and, for ``-on-mirror``, when the save is published on the mirror):
what the command is told is then true.  Each event is queued where the ``published`` line is printed and
run by one thread of its own, one at a time in the order of publication (both flags share the queue), as
``/bin/sh -c CMD`` with the process's environment and the ``PUBLISH_EVENT_*`` variables (:data:`NAMES`),
its stdout and stderr both on publish's stderr (stdout carries the ``published`` lines that scripts read).

A command is started in a process group of its own and bounded by -timeout: one that overruns is killed,
its group with it.  A command that fails (a status other than 0, a signal, killed, not started) is said
once on stderr, naming its entry, and counted (-metrics ``publish_events_failed_total``); nothing else
follows from it: a publication, a prune, an upload, the exit status and the end of the job never wait for,
or depend on, an event.  At the end (:meth:`Events.finish`) the queue is given -timeout more to run; then
the command still running is killed and the events not yet run are dropped, their number said.

Nothing here is imported unless one of the two flags is given.
"""

from __future__ import annotations

import _thread
import os
import time

from publish.process import child
from publish.process import signals as signal
from publish.process.threads import Flag, Worker
from publish.rules import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from publish.ops import Say
    from publish.ops.metrics import Metrics
    from publish.stores.base import Store

#: The tiers, as PUBLISH_EVENT_TIER says them, and the flag that runs a command for each.
ROOT = "root"
MIRROR = "mirror"
FLAGS = {ROOT: "on-publish", MIRROR: "on-mirror"}
#: The variables each command finds in its environment.
NAMES = ("ENTRY", "LOCATION", "EPOCH", "STEP", "FRAMEWORK", "TIER")
PREFIX = b"PUBLISH_EVENT_"
SHELL = "/bin/sh"
#: How long a killed command's exit is waited for before it is left (a process stuck in the kernel).
REAP = 5.0
#: How often a command's exit is looked for when no pidfd can wake the wait.
POLL = 0.1
#: The metrics counter.
FAILED = "publish_events_failed_total"


class Event:
    """One command to run: for which tier and entry, and its whole environment."""

    __slots__ = ("tier", "entry", "env")

    def __init__(self, tier: str, entry: str, env: dict[bytes, bytes]) -> None:
        self.tier = tier
        self.entry = entry
        self.env = env


class Events:
    """The queue of a watch or a run, and the thread that runs it (started at the first event).

    ``commands``: the CMD of each tier given (ROOT, MIRROR); ``env``: the process's environment as publish
    got it (names and values decoded with surrogateescape: each is passed on as the bytes it was)."""

    def __init__(
        self,
        commands: Mapping[str, str],
        framework: str,
        env: Mapping[str, str],
        say: Say,
        timeout: float,
        metrics: Metrics | None = None,
        output: int = 2,
        verb: str = "run",
    ) -> None:
        self.commands = dict(commands)
        self.verb = verb
        self.framework = framework
        self.say = say
        self.timeout = timeout
        self.metrics = metrics
        self.output = output
        self.base = {
            os.fsencode(k): os.fsencode(v) for k, v in env.items() if not os.fsencode(k).startswith(PREFIX)
        }
        self._lock = _thread.allocate_lock()
        self._queue: list[Event] = []
        self._wake = Flag()
        self._closing = False
        self._cut = False  # the end's -timeout passed: nothing more is started
        self._ended = False  # the thread has returned, or will: nothing queued now would run
        self._running: child.Spawned | None = None
        self._worker: Worker | None = None

    def fire(self, tier: str, store: Store, epoch: int, step: int, path: str) -> None:
        """Queue the event of the entry (``epoch``, ``step``, ``path``) just published on ``store``, the
        ``tier`` given; returns at once."""
        if tier not in self.commands:
            return
        entry = layout.name(epoch, step, path)
        env = dict(self.base)
        values = (entry, store.location(path), str(epoch), str(step), self.framework, tier)
        for name, value in zip(NAMES, values):
            env[PREFIX + name.encode()] = os.fsencode(value)
        event = Event(tier, entry, env)
        with self._lock:
            late = self._cut or self._ended  # a scan given up at the end, that went on and published
            if not late:
                self._queue.append(event)
                if self._worker is None:
                    self._worker = Worker(self._loop)
            wake = self._wake
        if late:
            self._drop([event], "published after the last events had run")
            return
        wake.set()

    def finish(self) -> None:
        """Run what is queued for at most -timeout; then kill the command still running and drop the
        events left, saying how many.  Called once, at the end of the watch or run."""
        with self._lock:
            self._closing = True
            worker = self._worker
            wake = self._wake
            if worker is None:  # nothing was queued: a late event is dropped, said
                self._ended = True
        wake.set()
        if worker is None:
            return
        worker.join(self.timeout)
        if not worker.is_alive():
            return
        with self._lock:
            self._cut = True
            left = self._queue[:]
            self._queue.clear()
            running = self._running
        if running is not None:
            _kill(running.pid)
        worker.join(REAP)
        self._drop(left, f"-timeout passed at the end of the {self.verb}")

    # -- the worker

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._cut:
                    self._ended = True
                    return
                if self._queue:
                    event: Event | None = self._queue.pop(0)
                else:
                    event = None
                    if self._closing:
                        self._ended = True
                        return
                    self._wake = Flag()
                    wake = self._wake
            if event is None:
                wake.wait(child.SAFETY)
                continue
            try:
                self._run(event)
            except Exception as e:  # never the end of the queue: said, counted, and the next one runs
                self._failed(event, f"internal error: {type(e).__name__}: {e}")

    def _run(self, event: Event) -> None:
        try:
            started = child.start([SHELL, "-c", self.commands[event.tier]], event.env, output=self.output)
        except OSError as e:
            self._failed(event, f"cannot start {SHELL}: {e.strerror or e}")
            return
        with self._lock:
            self._running = started
            cut = self._cut
        if cut:
            _kill(started.pid)
        code = _wait(started, time.monotonic() + self.timeout)
        overran = code is None
        if overran:
            _kill(started.pid)
            code = _wait(started, time.monotonic() + REAP)
        with self._lock:
            self._running = None
            cut = self._cut
        if overran:
            self._failed(event, "killed after -timeout")
        elif cut and code == -signal.SIGKILL:
            self._failed(event, f"killed: -timeout passed at the end of the {self.verb} while it ran")
        elif code is None:
            self._failed(event, "still running after it was killed: left")
        elif code > 0:
            self._failed(event, f"exited {code}")
        elif code < 0:
            self._failed(event, f"killed by {signal.name(-code)}")

    def _failed(self, event: Event, why: str) -> None:
        if self.metrics is not None:
            self.metrics.count(FAILED)
        self.say.warn(f"{FLAGS[event.tier]}: {event.entry}: {why}")

    def _drop(self, events: list[Event], why: str) -> None:
        for tier, flag in FLAGS.items():
            mine = [e for e in events if e.tier == tier]
            if not mine:
                continue
            if self.metrics is not None:
                self.metrics.count(FAILED, len(mine))
            which = (
                f"for {mine[0].entry}"
                if len(mine) == 1
                else f"the first for {mine[0].entry}, the last for {mine[-1].entry}"
            )
            count = f"{len(mine)} event{'' if len(mine) == 1 else 's'}"
            self.say.warn(f"{flag}: {count} dropped, not run: {why} ({which})")


def _wait(started: child.Spawned, until: float) -> int | None:
    """The command's status once it exits, or None at ``until`` (monotonic) if it has not."""
    import select

    opener = getattr(os, "pidfd_open", None)
    fd = -1
    if opener is not None:
        try:
            fd = opener(started.pid)
        except OSError:  # ENOSYS: a kernel before 5.3; or it was reaped already (ChildProcessError below)
            fd = -1
    try:
        while True:
            code = started.poll()
            if code is not None:
                return code
            left = until - time.monotonic()
            if left <= 0:
                return None
            if fd >= 0:
                select.select([fd], [], [], min(left, child.SAFETY))
            else:
                time.sleep(min(left, POLL))
    finally:
        if fd >= 0:
            os.close(fd)


def _kill(pid: int) -> None:
    """SIGKILL to the command's process group (its children too)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already
        return
