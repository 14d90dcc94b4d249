"""run: resolve, start COMMAND, publish its saves while it runs, pass stop signals on, scan once more, prune.

The cli parses and checks the flags and installs the signal handlers (they call :meth:`Signals.note`); this
module owns the rest of the sequence, with the process launcher and the batch system as parameters.
"""

from __future__ import annotations

import os
import time

from publish.frameworks import CHOICES, Framework
from publish.ops import Say, command, scan_flags
from publish.ops.resolution import resolve, resolve_tiers
from publish.ops.retention import Policy, bytes_flag, orphan_flags, orphans_of, policy_flags, policy_of
from publish.ops.scan import SignalStop, Watcher, bounded
from publish.ops.scan_flags import describe
from publish.process import child
from publish.process.slurm import LIVE, Batch, signame
from publish.process.threads import Flag, Worker
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, PublishError, UsageError
from publish.rules.layout import EXEC
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Callable, Protocol

    from publish.stores.base import Store

    class Child(Protocol):
        """COMMAND once started: its exit status (``Popen.returncode`` style) and a way to signal it."""

        pid: int

        def poll(self) -> int | None: ...
        def signal(self, signum: int) -> None: ...

    Launch = Callable[[list[str], dict[str, str]], Child]

    from publish.ops.events import Events
    from publish.ops.idle import Budget
    from publish.ops.metrics import Metrics
    from publish.ops.tiers import Tiers


class Signals(SignalStop):
    """A :class:`SignalStop` that also keeps the stop signals received, in order (``append`` takes no lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[int] = []

    def note(self, signum: int) -> None:
        self.received.append(signum)
        self.set()

    def wakeup_fd(self) -> int:
        """The pipe's write end (non-blocking), for ``signal.set_wakeup_fd``."""
        return self._write

    def wait_past(self, count: int, timeout: float, also: tuple[int, ...] = ()) -> None:
        """Return once more than ``count`` signals were received, a descriptor of ``also`` is readable (a
        pidfd: COMMAND exited), or after ``timeout`` seconds."""
        import select

        ready, _, _ = select.select([self._read, *also], [], [], 0 if len(self.received) > count else timeout)
        if self._read in ready:
            os.read(self._read, 4096)  # the wake-up bytes; a flood of signals never fills the pipe


def attempt_and_epoch(attempt: str, epoch: int | None, env: Mapping[str, str]) -> tuple[str, int]:
    """The attempt and epoch when neither flag nor environment gave them (``""`` and None: derive).

    On Slurm the attempt is ``<job>.<restarts>``, ``<array job>_<task>.<restarts>`` for an array task;
    elsewhere ``<host>-<pid>-<ns>``.  The epoch is the wall clock in nanoseconds: it grows with each dispatch
    as long as the nodes' clocks are kept in step, and two dispatches in the same second still differ."""
    now = time.time_ns()
    if not attempt:
        job = env.get("SLURM_JOB_ID", "")
        task = env.get("SLURM_ARRAY_TASK_ID", "")
        array = env.get("SLURM_ARRAY_JOB_ID", "")
        restarts = env.get("SLURM_RESTART_COUNT", "") or "0"
        if job:
            attempt = f"{array}_{task}.{restarts}" if array and task else f"{job}.{restarts}"
        else:
            attempt = f"{os.uname().nodename}-{os.getpid()}-{now:x}"
    return attempt, now if epoch is None else epoch


class Process:
    """COMMAND in a process group of its own, so a signal reaches all of it (a wrapping shell script too).

    An ``srun`` inside a Slurm job is signalled through ``scancel`` instead: srun answers SIGTERM by killing
    its tasks with SIGKILL, while the step's tasks get what scancel sends them."""

    def __init__(self, argv: list[str], env: dict[str, str], batch: Batch | None) -> None:
        try:
            self.started = child.start(argv, env)  # as subprocess.Popen(argv, env=env, process_group=0)
        except OSError as e:
            raise Failure(f"cannot start {shown(argv[0])}: {e.strerror or e}") from None
        self.pid = self.started.pid
        self.batch = batch

    def poll(self) -> int | None:
        return self.started.poll()

    def signal(self, signum: int) -> None:
        if self.batch is not None:
            self.batch.signal_steps(signum)
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:  # exited (and reaped) meanwhile
            return


def is_srun(argv: Sequence[str]) -> bool:
    return os.path.basename(argv[0]) == "srun"


class _Scanner:
    """The periodic scans, in a thread of their own so a slow or hung store never delays a signal.

    A failed scan is reported (once per distinct message) and retried every interval; COMMAND keeps running."""

    def __init__(self, watcher: Watcher, say: Say, interval: float, timeout: float) -> None:
        self.watcher = watcher
        self.say = say
        self.interval = interval
        self.timeout = timeout
        self.halt = Flag()
        self.fault = False
        self.thread: Worker | None = None

    def start(self) -> Worker:
        self.thread = Worker(self._loop)
        return self.thread

    def _loop(self) -> None:
        last = ""
        while not self.halt.is_set():
            try:
                self.watcher.scan(Deadline(self.timeout))
                if last:
                    self.say.warn("run: scans work again")
                last = ""
            except Exception as e:  # reported; COMMAND is never stopped for a fault of publish
                self.fault = True
                text = describe(e)
                if text != last:
                    self.say.warn(f"{text} (COMMAND keeps running; the scan is tried again every -interval)")
                last = text
            self.halt.wait(self.interval)


def status_of(returncode: int) -> int:
    """A shell's status for ``Popen.returncode``: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run(
    dl: Deadline,
    store: Store,
    say: Say,
    framework: Framework,
    attempt: str,
    epoch: int,
    command: list[str],
    *,
    env: Mapping[str, str],
    root: str,
    interval: float,
    timeout: float,
    signals: Signals,
    keep: int | Policy | None = None,
    resume_arg: str = "",
    requeue: bool = False,
    launch: Launch | None = None,
    batch: Batch | None = None,
    metrics: Metrics | None = None,
    world_size: int = 0,
    max_idle_requeues: int = 3,
    tiers: Tiers | None = None,
    events: Events | None = None,
) -> int:
    """The whole lifecycle; the exit status: COMMAND's, or 1 (when it was 0) after a fault of publish, or
    after a requeue refused to an idle dispatch (publish.ops.idle).  ``events`` (-on-publish, -on-mirror)
    are told of each publication, and given -timeout at the very end; they never change the status."""
    if requeue and (batch is None or not batch.job):
        raise UsageError("-requeue needs a Slurm job: SLURM_JOB_ID is not set")
    saves = f"{EXEC}/{attempt}"
    found: list[str] = []
    source = store  # the tier the save resumed from was read on
    if tiers is None:
        resumed = resolve(dl, store, Say(found.append, say.warn))
    else:
        answer = resolve_tiers(dl, store, tiers.mirror, Say(found.append, say.warn))
        resumed = answer[1] if answer else None
        source = answer[0] if answer else store
        if store.create_root(dl):  # node-local storage lost, or a new node: the mirror has the saves
            say.warn(f"run: created {shown(store.root)}")
    resume = found[0] if found else ""
    budget = None
    if requeue:  # a run without -requeue imports nothing of the idle count
        from publish.ops.idle import Budget

        # with -mirror the marks are on both tiers: the count survives a lost root (publish.ops.idle)
        budget = Budget(store, max_idle_requeues, resumed, None if tiers is None else tiers.mirror, source)
    say.warn(f"run: resuming from {resume}" if resume else "run: no save to resume from")

    child_env = dict(env)
    child_env.update(
        CHECKPOINT=root,
        DISPATCH_ATTEMPT=attempt,
        DISPATCH_EPOCH=str(epoch),
        PUBLISH_SAVES=store.location(saves),
    )
    child_env.pop("PUBLISH_RESUME", None)
    argv = list(command)
    if resume:
        child_env["PUBLISH_RESUME"] = resume
        if resume_arg:
            argv += [resume_arg, resume]

    watcher = Watcher(
        store, say, framework, saves, epoch, lenient=True, metrics=metrics, world_size=world_size
    )
    watcher.events = events
    if tiers is not None:
        tiers.events = events
    if signals.received:
        say.warn(f"run: stopped by {signame(signals.received[0])} before {argv[0]} started")
        if budget is not None:
            budget.dl = Deadline(timeout)  # nothing was scanned, and nothing published
        return _finish(
            say, status_of(-signals.received[0]), False, None, keep, requeue, batch, metrics, budget
        )
    through_srun = batch is not None and bool(batch.job) and is_srun(argv)
    waker = child.Waker(signals.wakeup_fd())
    try:
        if launch is None:
            proc: Child = Process(argv, child_env, batch if through_srun else None)
        else:
            proc = launch(argv, child_env)
        waker.watch(proc.pid)
        scanner = _Scanner(watcher, say, interval, timeout)
        scans = scanner.start()
        if tiers is not None:
            from publish.ops.tiers import Uploader

            uploader = Uploader(tiers, interval)
            watcher.on_publish = uploader.wake
        code = _wait(proc, signals, waker, batch, say, argv[0])
    finally:
        waker.close()
    status = status_of(code)
    fault = False
    stopped = bool(signals.received)

    deadline = time.monotonic() + timeout
    if stopped and through_srun and batch is not None:
        # srun waits for its tasks after a job-wide signal (as tested); should it return first, the tasks may
        # still be writing the save they make on that signal.
        try:
            while batch.steps_left() and time.monotonic() < deadline:
                time.sleep(0.2)
        except PublishError as e:
            say.warn(f"run: could not wait for the job's steps: {e}")
    scanner.halt.set()
    scans.join(max(deadline - time.monotonic(), 0))
    last = None  # the last scan's deadline, which prune then shares
    if scans.is_alive():
        say.warn(f"a scan of {store.location(saves)} did not finish within -timeout: no last scan")
        fault = True
    else:
        try:
            last = bounded(watcher, Deadline(max(deadline - time.monotonic(), 0.001)))
        except Exception as e:
            say.warn(describe(e))
            fault = True
    fault = fault or scanner.fault or watcher.fault
    if tiers is not None:
        # The saves made before COMMAND exited, uploaded before the prune (which keeps those still pending).
        # uploads left unfinished within -timeout make the exit status non-zero, as a failed one does
        finished = uploader.finish(timeout)
        fault = fault or uploader.fault or not finished
        if isinstance(keep, Policy):
            keep.protect = tiers.protected
        if last is not None:
            last = Deadline(timeout)  # the prune's own -timeout, after the uploads' (each step in turn)
    if budget is not None:
        budget.dl = last
    return _finish(
        say, status, fault, (store, last) if last else None, keep, requeue and stopped, batch, metrics, budget,
        events,
    )  # fmt: skip


def _wait(
    command: Child, signals: Signals, waker: child.Waker, batch: Batch | None, say: Say, name: str
) -> int:
    """COMMAND's exit status once it has exited, each stop signal received meanwhile passed on to it.

    Woken by COMMAND's exit and by each signal (child.Waker), not by a clock: it looks again at once."""
    passed = 0
    while True:
        code = command.poll()
        while passed < len(signals.received):
            sig = signals.received[passed]
            passed += 1
            if code is None:
                _pass_on(sig, command, batch, say, name)
        if code is not None:
            return code
        signals.wait_past(passed, waker.timeout, waker.fds())
        waker.wakes += 1


def _pass_on(sig: int, command: Child, batch: Batch | None, say: Say, name: str) -> None:
    """Send ``sig`` to COMMAND, unless Slurm has sent it to every process of the job already.

    scancel and scontrol requeue make the job COMPLETING before they signal it (and scancel would wait on such
    a job until KillWait); the warning signal (while being sent: SIGNALING) and ``scancel -b`` leave it
    RUNNING: only publish run heard."""
    if batch is not None and batch.job:
        try:
            state = batch.state()
        except PublishError:
            state = ""  # not known: pass it on
        if state and state not in LIVE:
            say.warn(f"run: job {batch.job} is {state}: Slurm signalled every process of it, {name} too")
            return
    say.warn(f"run: passing {signame(sig)} on to {name}")
    try:
        command.signal(sig)
    except PublishError as e:  # COMMAND's own exit status tells what came of it
        say.warn(f"run: could not pass {signame(sig)} on: {e}")


def _finish(
    say: Say,
    status: int,
    fault: bool,
    scanned: tuple[Store, Deadline] | None,
    keep: int | Policy | None,
    requeue: bool,
    batch: Batch | None,
    metrics: Metrics | None = None,
    budget: Budget | None = None,
    events: Events | None = None,
) -> int:
    """Prune (after a last scan that finished), requeue when asked (and the idle budget allows), and the exit
    status; then the events still queued are given -timeout (a requeue never waits for them); the metrics
    file is written last, whatever happens."""
    try:
        return _prune_and_requeue(say, status, fault, scanned, keep, requeue, batch, metrics, budget)
    finally:
        if events is not None:
            events.finish()
        if metrics is not None:
            metrics.flush(say.warn)


def _prune_and_requeue(
    say: Say,
    status: int,
    fault: bool,
    scanned: tuple[Store, Deadline] | None,
    keep: int | Policy | None,
    requeue: bool,
    batch: Batch | None,
    metrics: Metrics | None,
    budget: Budget | None,
) -> int:
    if keep is not None:
        if scanned is None:
            say.warn("run: prune left out: the last scan did not finish")
        else:
            from publish.ops.retention import prune

            try:
                removed = prune(scanned[1], scanned[0], say, keep)
                if metrics is not None:
                    metrics.count("publish_prune_removed_total", removed)
                    metrics.measure(scanned[1], scanned[0], say.warn)  # what the prune left
            except Exception as e:
                say.warn(describe(e))
                fault = True
    if requeue and batch is not None:
        try:
            state = batch.state()
            # After scancel or scontrol requeue the job is COMPLETING: Slurm ends it or brings it back itself,
            # and a requeue now would revive a job someone cancelled.
            if state in LIVE:
                allowed, failed = _may_requeue(budget, say, batch.job)
                fault = fault or failed
                if not allowed:
                    return status or 1  # so Slurm ends the job FAILED
                batch.requeue()
                say.warn(f"run: asked Slurm to requeue job {batch.job}")
                if metrics is not None:
                    metrics.count("publish_requeues_total")
            else:
                say.warn(f"run: job {batch.job} is {state or 'gone'}: not requeued")
        except PublishError as e:
            say.warn(f"run: requeue failed: {e}")
            fault = True
    if fault and status == 0:
        return 1
    return status


def _may_requeue(budget: Budget | None, say: Say, job: str) -> tuple[bool, bool]:
    """(allowed, failed): allowed is False when -max-idle-requeues refuses this idle dispatch its requeue;
    a store failing on the way is said, and the job requeued all the same (failed: the exit status is 1
    where COMMAND's was 0)."""
    if budget is None:
        return True, False
    try:
        return budget.allows(say, job), budget.failed
    except Exception as e:
        say.warn(f"run: could not count the idle requeues ({describe(e)}): requeued all the same")
        return True, True


class Run(scan_flags.SavesCommand):
    name = "run"
    synopsis = (
        f"publish run {command.ROOT_FLAGS} -framework {CHOICES} [-interval 10s] [-metrics FILE] [-world-size N] "
        "[-keep N [-keep-every K] [-keep-within D] [-keep-bytes SIZE] [-orphans [-orphans-age 1h]]] [-mirror URL [-mirror-keep M [-mirror-keep-bytes SIZE]]] [-on-publish CMD] [-on-mirror CMD] [-epoch N] [-attempt A] [-resume-arg FLAG] [-signal SIG] [-requeue [-max-idle-requeues K]] -- COMMAND [ARG...]"
    )
    summary = "resolve, run COMMAND while publishing its saves, pass stop signals on, scan once more, prune"
    attempt_usage = "the execution `A`: saves go to ROOT/exec/A (env DISPATCH_ATTEMPT; default: from Slurm's job, else unique)"
    epoch_default = "the wall clock in nanoseconds"

    def __init__(self) -> None:
        super().__init__()
        fs = self.fs
        keep = "after COMMAND exits, prune to the latest `N` (default: no prune)"
        self.keep = fs.custom("keep", None, keep, _decimal(1), "N")
        self.keep_every, self.keep_within = policy_flags(fs)
        self.keep_bytes = bytes_flag(fs)
        self.orphans, self.orphans_age = orphan_flags(fs)
        resume = "when there is a save, append `FLAG` and its location to COMMAND"
        self.resume_arg = fs.string("resume-arg", "", resume)
        sig = "a `SIG` passed on as SIGTERM and SIGINT are (e.g. USR1)"
        self.signal = fs.custom("signal", None, sig, scan_flags.parse_signal, "SIG")
        requeue = "Slurm only: after a stop by a signal, ask Slurm to run the job again"
        self.requeue = fs.boolean("requeue", False, requeue)
        idle = "with -requeue: after `K` dispatches in a row were requeued without publishing, do not requeue"
        self.max_idle = fs.custom("max-idle-requeues", 3, idle, _decimal(0), "K")

    def trap(self) -> scan_flags.Trap:
        signals = Signals()
        return scan_flags.Trap(signals, signals.note, self.signal.value)

    def run(self, call: command.Call) -> int:
        scan_flags.expect_command(call)
        root = self.root(call)
        framework = self.chosen()
        if self.resume_arg.is_set and not self.resume_arg.value:
            raise UsageError("-resume-arg is empty")
        attempt = command.flag_or_env(self.attempt, call.env, "DISPATCH_ATTEMPT")
        attempt, epoch = attempt_and_epoch(attempt, scan_flags.given_epoch(self.epoch, call.env), call.env)
        command.check_attempt(attempt)
        timeout = self.timeout.value
        batch = Batch(call.env, timeout) if call.env.get("SLURM_JOB_ID") else None
        if self.requeue.value and batch is None:
            raise UsageError("-requeue needs a Slurm job: SLURM_JOB_ID is not set")
        if self.max_idle.is_set and not self.requeue.value:
            raise UsageError("-max-idle-requeues applies to -requeue: give -requeue")
        metrics = self.metrics_for(call, root)
        world_size = self.world_size_of(call)
        events = self.events_for(call, framework, metrics)
        store = self.open(call, root, renew=True).store
        orphan_age = self.orphans_age.value if self.orphans.value else None
        tiers = None
        if self.mirrored is not None:  # else nothing of the mirror is imported
            from publish.ops.tiers import open_tiers

            # -mirror: its old multipart uploads aborted
            tiers = open_tiers(self, call, self.mirrored, store, orphan_age)
        dl = self.deadline(call)
        signals = call.stop if isinstance(call.stop, Signals) else Signals()
        resume_arg, requeue = self.resume_arg.value, self.requeue.value
        keep = (
            None
            if self.keep.value is None
            else policy_of(self.keep.value, self.keep_every, self.keep_within, self.keep_bytes)
        )
        if keep is None and (self.keep_every.is_set or self.keep_within.is_set):
            raise UsageError("-keep-every and -keep-within apply to the prune -keep N asks for: give -keep")
        if keep is None and self.keep_bytes.is_set:
            raise UsageError("-keep-bytes applies to the prune -keep N asks for: give -keep")
        orphans = orphans_of(self.orphans, self.orphans_age, attempt)  # the current attempt is never touched
        if keep is None and orphans is not None:
            raise UsageError("-orphans applies to the prune -keep N asks for: give -keep")
        if keep is not None:
            keep.orphans = orphans
        return run(
            dl, store, call.say, framework, attempt, epoch, call.args, env=call.env, root=root.text,
            interval=self.interval.value, timeout=timeout, signals=signals, keep=keep, resume_arg=resume_arg,
            requeue=requeue, batch=batch, metrics=metrics, world_size=world_size,
            max_idle_requeues=self.max_idle.value, tiers=tiers, events=events,
        )  # fmt: skip


def _decimal(minimum: int) -> Callable[[str], int]:
    """A flag's parser of a decimal count of at least ``minimum`` in Go's int range (Go's rules, imported when
    one is given)."""

    def parse(text: str) -> int:
        from publish.rules.go.gocompat import parse_go_int

        return parse_go_int(text, minimum=minimum)

    return parse


COMMAND = Run
