"""run: resolve, start COMMAND, publish its saves while it runs, pass stop signals on, scan once more, prune.

The cli parses and checks the flags and installs the signal handlers (they call :meth:`Signals.note`); this
module owns the rest of the sequence: :meth:`Run.settings` turns the flags and the environment into one
:class:`Settings`, and a :class:`Job` runs them phase by phase, with the process launcher and the batch system
as parts of it.
"""

from __future__ import annotations

import os
import time

from publish.frameworks import CHOICES, Framework
from publish.ops import Say, command, scan_flags
from publish.ops.resolution import resolve, resolve_tiers
from publish.ops.retention import Policy
from publish.ops.retention_flags import RetentionFlags
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
    from publish.ops.tiers import Tiers, Uploader


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


class Settings:
    """What a run is asked to do, in one value built once from the flags and the environment (:meth:`Run.settings`).

    The first seven have no default; the others start as a run without their flags has them: -interval 10s,
    -timeout 5m, no prune, no requeue, no Slurm job, no -metrics, -world-size not known, no -mirror, no events
    (-on-publish, -on-mirror)."""

    __slots__ = (
        "store", "framework", "attempt", "epoch", "command", "env", "root", "interval", "timeout", "keep",
        "resume_arg", "requeue", "max_idle_requeues", "batch", "metrics", "world_size", "tiers", "events",
    )  # fmt: skip

    def __init__(
        self,
        store: Store,
        framework: Framework,
        attempt: str,
        epoch: int,
        command: list[str],
        env: Mapping[str, str],
        root: str,
    ) -> None:
        self.store = store
        self.framework = framework
        self.attempt = attempt
        self.epoch = epoch
        self.command = command
        self.env = env
        self.root = root  # -checkpoint as given: COMMAND's CHECKPOINT
        self.interval = 10.0
        self.timeout = 300.0
        self.keep: int | Policy | None = None  # after COMMAND exits, prune to this
        self.resume_arg = ""
        self.requeue = False
        self.max_idle_requeues = 3
        self.batch: Batch | None = None
        self.metrics: Metrics | None = None
        self.world_size = 0
        self.tiers: Tiers | None = None
        self.events: Events | None = None


class Job:
    """One run, phase by phase: resolve, start COMMAND and wait for it while the scans (and with -mirror the
    uploads) go on, the last scan, then prune, requeue and the exit status.  :meth:`run` is the whole of it."""

    __slots__ = (
        "s", "dl", "say", "signals", "launch", "saves", "budget", "watcher", "through_srun", "scanner", "scans",
        "uploader", "stopped", "fault",
    )  # fmt: skip

    def __init__(
        self, settings: Settings, dl: Deadline, say: Say, signals: Signals, launch: Launch | None = None
    ) -> None:
        self.s = settings
        self.dl = dl  # the resolve's
        self.say = say
        self.signals = signals
        self.launch = launch  # COMMAND's launcher; None: a Process
        self.saves = f"{EXEC}/{settings.attempt}"
        self.budget: Budget | None = None  # the idle count, with -requeue
        self.through_srun = False
        self.uploader: Uploader | None = None
        self.stopped = False  # by a signal, as COMMAND exited
        self.fault = False  # of publish: the exit status is then 1 where COMMAND's was 0

    def run(self) -> int:
        """The whole lifecycle; the exit status: COMMAND's, or 1 (when it was 0) after a fault of publish, or
        after a requeue refused to an idle dispatch (publish.ops.idle).  The events (-on-publish, -on-mirror)
        are told of each publication, and given -timeout at the very end; they never change the status."""
        s = self.s
        if s.requeue and (s.batch is None or not s.batch.job):
            raise UsageError("-requeue needs a Slurm job: SLURM_JOB_ID is not set")
        argv, child_env = self.command_line(self.resume())
        self.watcher = Watcher(
            s.store, self.say, s.framework, self.saves, s.epoch, lenient=True, metrics=s.metrics,
            world_size=s.world_size,
        )  # fmt: skip
        self.watcher.events = s.events
        if s.tiers is not None:
            s.tiers.events = s.events
        if self.signals.received:
            return self.stopped_before(argv[0])
        status = status_of(self.execute(argv, child_env))
        return self.finish(status, self.last_scan(), s.events)

    def resume(self) -> str:
        """Resolve (on both tiers with -mirror), set up the idle count (with -requeue) and say what COMMAND
        resumes from: the save's location, or ``""``."""
        s, say = self.s, self.say
        found: list[str] = []
        source = s.store  # the tier the save resumed from was read on
        if s.tiers is None:
            resumed = resolve(self.dl, s.store, Say(found.append, say.warn))
        else:
            answer = resolve_tiers(self.dl, s.store, s.tiers.mirror, Say(found.append, say.warn))
            resumed = answer[1] if answer else None
            source = answer[0] if answer else s.store
            if s.store.create_root(
                self.dl
            ):  # node-local storage lost, or a new node: the mirror has the saves
                say.warn(f"run: created {shown(s.store.root)}")
        resume = found[0] if found else ""
        if s.requeue:  # a run without -requeue imports nothing of the idle count
            from publish.ops.idle import Budget

            # with -mirror the marks are on both tiers: the count survives a lost root (publish.ops.idle)
            mirror = None if s.tiers is None else s.tiers.mirror
            self.budget = Budget(s.store, s.max_idle_requeues, resumed, mirror, source)
        say.warn(f"run: resuming from {resume}" if resume else "run: no save to resume from")
        return resume

    def command_line(self, resume: str) -> tuple[list[str], dict[str, str]]:
        """COMMAND's arguments (-resume-arg and the save appended) and environment."""
        s = self.s
        child_env = dict(s.env)
        child_env.update(
            CHECKPOINT=s.root,
            DISPATCH_ATTEMPT=s.attempt,
            DISPATCH_EPOCH=str(s.epoch),
            PUBLISH_SAVES=s.store.location(self.saves),
        )
        child_env.pop("PUBLISH_RESUME", None)
        argv = list(s.command)
        if resume:
            child_env["PUBLISH_RESUME"] = resume
            if s.resume_arg:
                argv += [s.resume_arg, resume]
        return argv, child_env

    def stopped_before(self, name: str) -> int:
        """A stop signal came before COMMAND started: it is not started; nothing was scanned or published."""
        first = self.signals.received[0]
        self.say.warn(f"run: stopped by {signame(first)} before {name} started")
        if self.budget is not None:
            self.budget.dl = Deadline(self.s.timeout)  # nothing was scanned, and nothing published
        self.stopped = True
        return self.finish(status_of(-first), None, None)

    def execute(self, argv: list[str], child_env: dict[str, str]) -> int:
        """Start COMMAND, the scans and (with -mirror) the uploads; COMMAND's exit code once it has exited."""
        s = self.s
        self.through_srun = s.batch is not None and bool(s.batch.job) and is_srun(argv)
        waker = child.Waker(self.signals.wakeup_fd())
        try:
            if self.launch is None:
                proc: Child = Process(argv, child_env, s.batch if self.through_srun else None)
            else:
                proc = self.launch(argv, child_env)
            waker.watch(proc.pid)
            self.scanner = _Scanner(self.watcher, self.say, s.interval, s.timeout)
            self.scans = self.scanner.start()
            if s.tiers is not None:
                from publish.ops.tiers import Uploader

                self.uploader = Uploader(s.tiers, s.interval)
                self.watcher.on_publish = self.uploader.wake
            code = self.wait(proc, waker, argv[0])
        finally:
            waker.close()
        self.stopped = bool(self.signals.received)
        return code

    def wait(self, command: Child, waker: child.Waker, name: str) -> int:
        """COMMAND's exit status once it has exited, each stop signal received meanwhile passed on to it.

        Woken by COMMAND's exit and by each signal (child.Waker), not by a clock: it looks again at once."""
        signals = self.signals
        passed = 0
        while True:
            code = command.poll()
            while passed < len(signals.received):
                sig = signals.received[passed]
                passed += 1
                if code is None:
                    self.pass_on(sig, command, name)
            if code is not None:
                return code
            signals.wait_past(passed, waker.timeout, waker.fds())
            waker.wakes += 1

    def pass_on(self, sig: int, command: Child, name: str) -> None:
        """Send ``sig`` to COMMAND, unless Slurm has sent it to every process of the job already.

        scancel and scontrol requeue make the job COMPLETING before they signal it (and scancel would wait on
        such a job until KillWait); the warning signal (while being sent: SIGNALING) and ``scancel -b`` leave it
        RUNNING: only publish run heard."""
        batch, say = self.s.batch, self.say
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

    def last_scan(self) -> Deadline | None:
        """Stop the scans and scan once more, all within -timeout; then (with -mirror) finish the uploads.
        The deadline the prune then shares, or None when the last scan did not finish."""
        s, say = self.s, self.say
        deadline = time.monotonic() + s.timeout
        if self.stopped and self.through_srun and s.batch is not None:
            # srun waits for its tasks after a job-wide signal (as tested); should it return first, the tasks may
            # still be writing the save they make on that signal.
            try:
                while s.batch.steps_left() and time.monotonic() < deadline:
                    time.sleep(0.2)
            except PublishError as e:
                say.warn(f"run: could not wait for the job's steps: {e}")
        self.scanner.halt.set()
        self.scans.join(max(deadline - time.monotonic(), 0))
        last = None  # the last scan's deadline, which prune then shares
        if self.scans.is_alive():
            say.warn(f"a scan of {s.store.location(self.saves)} did not finish within -timeout: no last scan")
            self.fault = True
        else:
            try:
                last = bounded(self.watcher, Deadline(max(deadline - time.monotonic(), 0.001)))
            except Exception as e:
                say.warn(describe(e))
                self.fault = True
        self.fault = self.fault or self.scanner.fault or self.watcher.fault
        if self.uploader is not None:
            last = self.uploads(self.uploader, last)
        if self.budget is not None:
            self.budget.dl = last
        return last

    def uploads(self, uploader: Uploader, last: Deadline | None) -> Deadline | None:
        """The saves made before COMMAND exited, uploaded before the prune (which keeps those still pending);
        the prune's deadline: its own -timeout, after the uploads' (each step in turn)."""
        # uploads left unfinished within -timeout make the exit status non-zero, as a failed one does
        finished = uploader.finish(self.s.timeout)
        self.fault = self.fault or uploader.fault or not finished
        if isinstance(self.s.keep, Policy):
            self.s.keep.protect = uploader.tiers.protected
        return None if last is None else Deadline(self.s.timeout)

    def finish(self, status: int, last: Deadline | None, events: Events | None) -> int:
        """Prune (after a last scan that finished: ``last`` is its deadline), requeue when asked (and the idle
        budget allows), and the exit status; then ``events`` still queued are given -timeout (a requeue never
        waits for them); the metrics file is written last, whatever happens."""
        try:
            if self.s.keep is not None:
                self.prune(self.s.keep, last)
            batch = self.s.batch
            if self.s.requeue and self.stopped and batch is not None and not self.requeue(batch):
                return status or 1  # so Slurm ends the job FAILED
            return 1 if self.fault and status == 0 else status
        finally:
            if events is not None:
                events.finish()
            if self.s.metrics is not None:
                self.s.metrics.flush(self.say.warn)

    def prune(self, keep: int | Policy, last: Deadline | None) -> None:
        s, say = self.s, self.say
        if last is None:
            say.warn("run: prune left out: the last scan did not finish")
            return
        from publish.ops.retention import prune

        try:
            removed = prune(last, s.store, say, keep)
            if s.metrics is not None:
                s.metrics.count("publish_prune_removed_total", removed)
                s.metrics.measure(last, s.store, say.warn)  # what the prune left
        except Exception as e:
            say.warn(describe(e))
            self.fault = True

    def requeue(self, batch: Batch) -> bool:
        """Ask Slurm to requeue the job while it runs; False when -max-idle-requeues refused it."""
        say = self.say
        try:
            state = batch.state()
            # After scancel or scontrol requeue the job is COMPLETING: Slurm ends it or brings it back itself,
            # and a requeue now would revive a job someone cancelled.
            if state in LIVE:
                allowed, failed = self.may_requeue(batch.job)
                self.fault = self.fault or failed
                if not allowed:
                    return False
                batch.requeue()
                say.warn(f"run: asked Slurm to requeue job {batch.job}")
                if self.s.metrics is not None:
                    self.s.metrics.count("publish_requeues_total")
            else:
                say.warn(f"run: job {batch.job} is {state or 'gone'}: not requeued")
        except PublishError as e:
            say.warn(f"run: requeue failed: {e}")
            self.fault = True
        return True

    def may_requeue(self, job: str) -> tuple[bool, bool]:
        """(allowed, failed): allowed is False when -max-idle-requeues refuses this idle dispatch its requeue;
        a store failing on the way is said, and the job requeued all the same (failed: the exit status is 1
        where COMMAND's was 0)."""
        if self.budget is None:
            return True, False
        try:
            return self.budget.allows(self.say, job), self.budget.failed
        except Exception as e:
            self.say.warn(f"run: could not count the idle requeues ({describe(e)}): requeued all the same")
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
        self.retention = RetentionFlags(fs)
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
        settings = self.settings(call)
        dl = self.deadline(call)
        signals = call.stop if isinstance(call.stop, Signals) else Signals()
        settings.keep = self.keep_of(settings.attempt)
        return Job(settings, dl, call.say, signals).run()

    def settings(self, call: command.Call) -> Settings:
        """The run's settings from the flags and the environment, each checked; the store opened, and with
        -mirror the mirror too (its old multipart uploads aborted).  -keep's are :meth:`keep_of`'s."""
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
        s = Settings(store, framework, attempt, epoch, call.args, call.env, root.text)
        s.interval, s.timeout, s.batch = self.interval.value, timeout, batch
        s.metrics, s.world_size, s.events = metrics, world_size, events
        s.resume_arg, s.requeue = self.resume_arg.value, self.requeue.value
        s.max_idle_requeues = self.max_idle.value
        retention = self.retention
        orphan_age = retention.age.value if retention.orphans.value else None
        if self.mirrored is not None:  # else nothing of the mirror is imported
            from publish.ops.tiers import open_tiers

            # -mirror: its old multipart uploads aborted
            s.tiers = open_tiers(self, call, self.mirrored, store, orphan_age)
        return s

    def keep_of(self, attempt: str) -> Policy | None:
        """The prune -keep asks for (with -keep-every, -keep-within, -keep-bytes and -orphans), or None."""
        retention, keep = self.retention, self.keep.value
        if keep is None:
            retention.without_keep("asks for")
        orphans = retention.orphans_of(attempt)  # the current attempt is never touched
        return None if keep is None else retention.policy(keep, orphans)


def _decimal(minimum: int) -> Callable[[str], int]:
    """A flag's parser of a decimal count of at least ``minimum`` in Go's int range (Go's rules, imported when
    one is given)."""

    def parse(text: str) -> int:
        from publish.rules.go.gocompat import parse_go_int

        return parse_go_int(text, minimum=minimum)

    return parse


COMMAND = Run
