"""Two commands at once, interleaved at every store operation, in a chosen and replayable order.

Each actor is one command line run through ``publish.cli.main`` in a thread of its own.  While a round runs,
``publish.stores.open`` hands each command its store wrapped in :class:`Gated`: before every call of the
store protocol (publish/stores/base.py) the calling thread parks and waits for its turn.  Exactly one thread
runs between two store operations; :meth:`Scheduler.drive` picks which one goes next with ``choose``, given
what each thread waits at (the test draws it from Hypothesis, so a failing order shrinks and replays).

The threads a command starts itself (``publish.process.threads.Worker``: the uploads beside the scans, a run's
scanner, the bounded last scan) are threads of the same actor, parked as they start.  A wait on a
``publish.process.threads.Flag`` (a join, an uploader's nap) parks too: it goes on once the flag is set, and a wait
with a timeout may also be chosen to end as if the time had run out (offered last, so a shrunk example
only times out when it must).  When an actor's main thread returns, the process it stands for has ended:
its other threads are never run again (each is unwound at its next park, touching nothing more).

Outside a round (``Scheduler.active`` None) the wrapper passes straight through, so the oracle's own
``resolve`` runs as usual.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import Result

#: The store protocol's calls (publish/stores/base.py): each is one operation the scheduler may put
#: another actor's before.  ``location`` only formats a path, and is not one.
OPERATIONS = frozenset(
    [
        "check_root",
        "check_exists",
        "create_root",
        "list_entries",
        "entry_times",
        "create_entry",
        "remove_entries",
        "list_tombs",
        "create_tombs",
        "remove_tombs",
        "tomb_times",
        "create_mark",
        "write_manifest",
        "read_manifest",
        "list_manifests",
        "manifest_times",
        "remove_manifests",
        "save_rows",
        "check_rows",
        "holds",
        "exists",
        "size",
        "read",
        "read_range",
        "list_folders",
        "list_files",
        "children",
        "sizes",
        "newest",
        "uploads",
        "abort_upload",
        "remove_folder",
    ]
)

#: Choices after which a round no longer lets waits time out unless nothing else can go (a bound, so a
#: drawn order that keeps waking an uploader's nap still ends).
FREE_CHOICES = 400
#: Seconds a round may take in all before it counts as hung.
LIMIT = 120.0


class Gone(SystemExit):
    """Raised in a thread of an actor whose process has ended; SystemExit, so the thread ends silently."""


@dataclass(eq=False)
class Part:
    """One thread of an actor."""

    actor: str
    order: int
    state: str = "start"  # start | gate | wait | run | done
    label: str = "start"
    flag: Any = None
    timed: bool = False
    granted: bool = False
    dead: bool = False
    in_op: int = 0
    ops: list[str] = field(default_factory=list)


class Scheduler:
    """The baton: which thread of which actor may run now."""

    active: Scheduler | None = None

    def __init__(self, choose: Callable[[list[str]], int]) -> None:
        self.choose = choose
        self.cv = threading.Condition()
        self.parts: list[Part] = []
        self.local = threading.local()
        self.running: Part | None = None
        self.choices = 0
        self.trace: list[str] = []

    # -- what the threads of the actors call

    def current(self) -> Part | None:
        p: Part | None = getattr(self.local, "part", None)
        return None if p is None or p.in_op else p

    def add(self, actor: str) -> Part:
        with self.cv:
            p = Part(actor, len(self.parts))
            self.parts.append(p)
            return p

    def bind(self, p: Part) -> None:
        self.local.part = p

    def park(self, p: Part, state: str, label: str, flag: Any = None, timed: bool = False) -> None:
        with self.cv:
            if not p.granted:  # (a thread granted before it came to park goes on at once)
                p.state, p.label, p.flag, p.timed = state, label, flag, timed
                if self.running is p:
                    self.running = None
                self.cv.notify_all()
                while not p.granted:
                    self.cv.wait()
            p.granted = False
            p.state = "run"
        if p.dead:
            raise Gone()

    def gate(self, label: str) -> None:
        p = self.current()
        if p is not None:
            self.park(p, "gate", label)
            p.ops.append(label)

    def done(self, p: Part, main: bool) -> None:
        with self.cv:
            p.state = "done"
            if main:  # the process has ended: its other threads never run again
                for other in self.parts:
                    if other.actor == p.actor and other.state != "done":
                        other.dead = True
            if self.running is p:
                self.running = None
            self.cv.notify_all()

    # -- the test's thread

    def drive(self) -> None:
        """Let one thread go at a time, as ``choose`` picks, until every thread of every actor is done."""
        import time

        deadline = time.monotonic() + LIMIT
        with self.cv:
            while True:
                while self.running is not None:
                    waited = self.cv.wait(timeout=max(deadline - time.monotonic(), 0.01))
                    if not waited and time.monotonic() > deadline:
                        raise AssertionError(f"a round did not end within {LIMIT} s: {self.trace[-20:]}")
                live = [p for p in self.parts if p.state != "done"]
                if not live:
                    return
                dead = [p for p in live if p.dead]
                ready = [
                    p for p in live if p.state in ("start", "gate") or (p.state == "wait" and p.flag.is_set())
                ]
                timed = [p for p in live if p.state == "wait" and p.timed and not p.flag.is_set()]
                if dead:
                    pick = dead[0]  # unwinding an ended process's thread is no choice
                else:
                    offered = ready + timed if self.choices < FREE_CHOICES else (ready or timed)
                    if not offered:
                        raise AssertionError(
                            f"every thread waits for another: {[(p.actor, p.label) for p in live]}"
                        )
                    labels = [f"{p.actor}:{p.label}" + (" (time out)" if p in timed else "") for p in offered]
                    pick = offered[self.choose(labels) if len(offered) > 1 else 0]
                    self.choices += 1
                self.trace.append(f"{pick.actor}:{pick.label}")
                self.running = pick
                pick.granted = True
                self.cv.notify_all()


class Gated:
    """A store whose protocol calls each wait for the scheduler; anything else passes through."""

    def __init__(self, store: Any, tier: str) -> None:
        self._store = store
        self._tier = tier

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in OPERATIONS:
            return attr

        def operation(*args: Any, **kwargs: Any) -> Any:
            sched = Scheduler.active
            if sched is None:
                return attr(*args, **kwargs)
            sched.gate(f"{self._tier}.{name}")
            p = getattr(sched.local, "part", None)
            if p is not None:
                p.in_op += 1
            try:
                return attr(*args, **kwargs)
            finally:
                if p is not None:
                    p.in_op -= 1

        return operation


@contextmanager
def gated_stores() -> Iterator[None]:
    """For the whole test: every store a command opens is :class:`Gated`, every Worker and Flag wait of
    an actor's thread goes through the active scheduler."""
    from publish import stores
    from publish.process import threads

    real_open = stores.open
    real_init, real_wait = threads.Worker.__init__, threads.Flag.wait

    def open_gated(root: Any, **kw: Any) -> Any:
        opened = real_open(root, **kw)
        tier = "s3" if type(opened.store).__name__ == "S3Store" else "posix"
        return stores.Opened(Gated(opened.store, tier), opened.source, opened.probe)  # type: ignore[arg-type]

    def worker_init(self: Any, work: Callable[[], None]) -> None:
        sched = Scheduler.active
        parent = sched.current() if sched is not None else None
        if sched is None or parent is None:
            real_init(self, work)
            return
        p = sched.add(parent.actor)

        def run() -> None:
            sched.bind(p)
            try:
                sched.park(p, "start", "started")
                work()
            finally:
                sched.done(p, main=False)

        real_init(self, run)

    def flag_wait(self: Any, timeout: float | None = None) -> bool:
        sched = Scheduler.active
        p = sched.current() if sched is not None else None
        if p is None or self.is_set():
            return bool(real_wait(self, timeout))
        import sys

        caller = sys._getframe(1).f_code.co_name
        if caller == "join":  # Worker.join: who joins
            caller = sys._getframe(2).f_code.co_name
        sched.park(p, "wait", f"wait in {caller}", self, timeout is not None)  # type: ignore[union-attr]
        return bool(self.is_set())

    stores.open = open_gated  # type: ignore[assignment]
    threads.Worker.__init__ = worker_init  # type: ignore[method-assign]
    threads.Flag.wait = flag_wait  # type: ignore[method-assign]
    try:
        yield
    finally:
        stores.open = real_open
        threads.Worker.__init__ = real_init  # type: ignore[method-assign]
        threads.Flag.wait = real_wait  # type: ignore[method-assign]


@dataclass
class Actor:
    """One command line, as one process would run it."""

    name: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    stop: Callable[[], Any] | None = None  # makes main's ``stop`` in the actor's thread
    #: called with each line the command writes to stdout, as it writes it: in the writing thread, while no
    #: other thread runs (the roots are as they were at that moment)
    on_line: Callable[[str], None] | None = None
    result: Result | None = None
    ops: list[str] = field(default_factory=list)


def together(
    actors: list[Actor], choose: Callable[[list[str]], int], restore: Callable[[], None]
) -> list[str]:
    """Run ``actors`` at once, interleaved as ``choose`` picks at each store operation; each actor's result
    is set.  The order the threads went in is returned (for a failure's message)."""
    from publish.cli import main

    restore()
    sched = Scheduler(choose)
    failures: list[BaseException] = []
    parts = [sched.add(f"{i}:{a.name}") for i, a in enumerate(actors)]

    def body(actor: Actor, p: Part) -> None:
        sched.bind(p)
        out, err = Lines(actor.on_line), io.StringIO()
        code = -1
        try:
            sched.park(p, "start", "started")
            stop = actor.stop() if actor.stop is not None else _stopped()
            code = main(actor.argv, dict(actor.env), out, err, cwd="/", stop=stop)
        except Gone:
            pass
        except BaseException as e:  # reported in the test's thread
            failures.append(e)
        finally:
            actor.result = Result(code, out.getvalue(), err.getvalue())
            actor.ops = list(p.ops)
            sched.done(p, main=True)

    Scheduler.active = sched
    try:
        threads = [threading.Thread(target=body, args=(a, p), daemon=True) for a, p in zip(actors, parts)]
        for t in threads:
            t.start()
        sched.drive()
        for t in threads:
            t.join(LIMIT)
    finally:
        Scheduler.active = None
    if failures:
        raise failures[0]
    return sched.trace


class Lines(io.StringIO):
    """A stdout that hands each whole line to ``on_line`` as it is written."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        super().__init__()
        self.on_line = on_line
        self.partial = ""

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.on_line is not None:
            *whole, self.partial = (self.partial + s).split("\n")
            for line in whole:
                self.on_line(line)
        return n


def _stopped() -> Any:
    """A stop already set: a watch makes only the scan it makes on its way out (what SIGTERM asks for)."""
    ev = threading.Event()
    ev.set()
    return ev
