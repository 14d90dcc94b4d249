"""The only module that touches the process: argv, environment, streams, signals and the exit code."""

from __future__ import annotations

import os
import sys
import time

from publish import __version__, layout, redact, roots
from publish.errors import Failure, PublishError, UsageError
from publish.flags import FlagSet, HelpRequested
from publish.frameworks import FRAMEWORKS
from publish.gocompat import go_quote
from publish.layout import EXEC
from publish.redact import line as guarded
from publish.redact import quoted, shown
from publish.verbs import Say

TYPE_CHECKING = (
    False  # typing and threading cost start-up time; mypy reads this block, the interpreter skips it
)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable, TextIO

    from publish.stores.base import Store
    from publish.verbs.watch import SignalStop, Stop

_ROOT_FLAGS = "-checkpoint ROOT [-creds LIST [-proxy URL]] [-timeout 5m]"
SYNOPSIS = {
    "resolve": f"publish resolve {_ROOT_FLAGS} [-probe]",
    "watch": f"publish watch {_ROOT_FLAGS} -framework hf|dcp|snapshot|lightning|deepspeed [-interval 10s] [-epoch N] [-attempt A] [SAVES]",
    "publish": f"publish publish {_ROOT_FLAGS} [-epoch N] SAVE STEP",
    "prune": f"publish prune {_ROOT_FLAGS} [-keep 3] [-dry-run]",
    "status": f"publish status {_ROOT_FLAGS} [-keep N] [-json]",
    "probe": "publish probe -checkpoint s3://BUCKET/PREFIX -creds LIST [-proxy URL] [-timeout 5m]",
    "run": f"publish run {_ROOT_FLAGS} -framework hf|dcp|snapshot|lightning|deepspeed [-interval 10s] [-keep N] [-epoch N] "
    "[-attempt A] [-resume-arg FLAG] [-signal SIG] [-requeue] -- COMMAND [ARG...]",
}
SUMMARY = {
    "resolve": "print the latest publication's save location, or nothing",
    "watch": "publish each save once it is complete, until SIGTERM or SIGINT",
    "publish": "publish one complete save",
    "prune": "remove all but the latest publications and the folders only they named",
    "status": "show what a root holds: publications, unpublished saves, leftovers, pending prunes",
    "probe": "check that an S3 root and its credentials work, before a job is accepted",
    "run": "resolve, run COMMAND while publishing its saves, pass stop signals on, scan once more, prune",
    "version": "print the version",
    "help": "print this list",
}


def verb_list() -> str:
    lines = ["usage: publish <verb> [flags] [arguments]", "", "verbs:"]
    lines += [f"  {verb:<8} {text}" for verb, text in SUMMARY.items()]
    lines += ["", "Run publish <verb> -h for a verb's flags.", ""]
    return "\n".join(lines)


def _decimal(what: str) -> Callable[[str], int]:
    """A parser for a plain decimal in [0, 10^20): epochs and steps."""

    def parse(text: str) -> int:
        if not text.isascii() or not text.isdigit():
            raise ValueError("parse error")
        if len(text.lstrip("0")) > 20 or int(text) >= layout.LIMIT:
            raise ValueError(f"{what} must be below 10^20")
        return int(text)

    return parse


def _framework(text: str) -> str:
    if text not in FRAMEWORKS:
        raise ValueError("must be " + ", ".join(FRAMEWORKS))
    return text


def _flags(verb: str) -> FlagSet:
    fs = FlagSet(verb)
    fs.string("checkpoint", "", "the checkpoint `ROOT`: a directory, or s3://BUCKET/PREFIX (env CHECKPOINT)")
    fs.string(
        "creds",
        "",
        "S3 only: the credential sources, a comma-separated `LIST` of kind:location, tried in order",
    )
    fs.string("proxy", "", "S3 only: the proxy `URL` for the store, http:// or https:// and host[:port]")
    fs.duration("timeout", 300.0, "time an S3 verb may take, or one watch scan (and watch's last scan)")
    if verb == "resolve":
        fs.boolean("probe", False, "S3 only: run the probe checks first")
    if verb in ("watch", "run"):
        fs.custom(
            "framework",
            None,
            "which saves to publish: hf, dcp, snapshot, lightning or deepspeed",
            _framework,
            "name",
        )
        fs.duration("interval", 10.0, "time between scans")
        fs.string(
            "attempt",
            "",
            "the execution `A`; SAVES defaults to ROOT/exec/A (env DISPATCH_ATTEMPT)"
            if verb == "watch"
            else "the execution `A`: saves go to ROOT/exec/A (env DISPATCH_ATTEMPT; default: from Slurm's "
            "job, else unique)",
        )
    if verb in ("watch", "publish", "run"):
        fs.custom(
            "epoch",
            None,
            "the dispatch epoch `N` (env DISPATCH_EPOCH; default "
            + ("the wall clock in nanoseconds)" if verb == "run" else "0)"),
            _decimal("epoch"),
            "N",
        )
    if verb == "prune":
        fs.integer("keep", 3, "how many of the latest publications to keep", minimum=1, int64=True)
        fs.boolean("dry-run", False, "print what would be removed (would remove <location>), remove nothing")
    if verb == "run":
        from publish.gocompat import parse_decimal
        from publish.verbs.run import parse_signal

        fs.custom(
            "keep", None, "after COMMAND exits, prune to the latest `N` (default: no prune)",
            lambda t: parse_decimal(t, minimum=1), "N",
        )  # fmt: skip
        fs.string("resume-arg", "", "when there is a save, append `FLAG` and its location to COMMAND")
        fs.custom(
            "signal", None, "a `SIG` passed on as SIGTERM and SIGINT are (e.g. USR1)", parse_signal, "SIG"
        )
        fs.boolean("requeue", False, "Slurm only: after a stop by a signal, ask Slurm to run the job again")
    if verb == "status":
        fs.integer("keep", 0, "also show what prune -keep `N` would remove", minimum=1, int64=True)
        fs.boolean("json", False, "print one JSON document (version 1) instead of text")
    return fs


class _Run:
    """What one command line asks for, once its flags, variables and arguments are checked."""

    def __init__(self, verb: str, fs: FlagSet, args: list[str], env: Mapping[str, str], cwd: str) -> None:
        self.verb = verb
        self.fs = fs
        self.args = args
        self.env = env
        self.cwd = cwd
        self.dashdash = False  # run: COMMAND followed "--"

    def flag_or_env(self, flag: str, var: str) -> str:
        """The flag's text when given, else the variable's; an explicitly empty flag is a usage error."""
        if self.fs.is_set(flag):
            value = str(self.fs.value(flag))
            if value == "":
                raise UsageError(f"-{flag} is empty")
            return value
        return self.env.get(var, "")

    def epoch(self) -> int:
        if self.fs.is_set("epoch"):
            return int(self.fs.value("epoch"))
        text = self.env.get("DISPATCH_EPOCH", "")
        if not text:
            return 0
        try:
            return _decimal("epoch")(text)
        except ValueError as e:
            raise UsageError(f"invalid value {go_quote(text)} for DISPATCH_EPOCH: {e}") from None


def _expect_args(run: _Run, names: list[str], optional: int = 0) -> None:
    need = len(names) - optional
    if len(run.args) < need:
        raise UsageError(f"missing argument {names[len(run.args)]}")
    if len(run.args) > len(names):
        extra = run.args[len(names)]
        raise UsageError(
            f"unexpected argument {quoted(extra)}"
            + (" (flags go before arguments)" if extra[:1] == "-" else "")
        )


def _check_attempt(attempt: str) -> str:
    if not attempt or "/" in attempt or "\0" in attempt or attempt in (".", ".."):
        raise UsageError(f"attempt {quoted(attempt)} is not one path element")
    return attempt


def _open_store(run: _Run, root: roots.Root, say: Say, deadline: float, renew: bool) -> tuple[Store, str]:
    """The Store for ``root`` and, for S3, the credential source that answered."""
    if isinstance(root, roots.PosixRoot):
        from publish.stores.posix import PosixStore

        return PosixStore(root.path), ""
    from publish.creds import sources
    from publish.stores.s3 import S3Store

    spec = str(run.fs.value("creds"))
    left = max(deadline - time.monotonic(), 0.001)
    creds, source = sources.resolve(spec, run.env, left)
    renewer = None
    if renew:

        def renewer(code: str) -> Any:
            say.warn(f"the store rejected the credentials ({code}); resolving the sources again")
            fresh, again = sources.resolve(spec, run.env, float(run.fs.value("timeout")))
            say.warn(f"credentials from {again}")
            return fresh

    proxy = str(run.fs.value("proxy")) or None
    store = S3Store(root.bucket, root.prefix, creds, proxy=proxy, env=run.env, renew=renewer)
    return store, source


def _execute(run: _Run, say: Say, stop: Stop | None) -> int:
    verb, fs = run.verb, run.fs
    started = time.monotonic()
    timeout = float(fs.value("timeout"))
    if verb == "publish":
        _expect_args(run, ["SAVE", "STEP"])
    elif verb == "watch":
        _expect_args(run, ["SAVES"], optional=1)
    elif verb == "run":
        if not run.dashdash:
            raise UsageError("COMMAND must follow --: publish run [flags] -- COMMAND [ARG...]")
        if not run.args:
            raise UsageError("missing COMMAND after --")
    else:
        _expect_args(run, [])
    text = run.flag_or_env("checkpoint", "CHECKPOINT")
    if not text:
        raise UsageError("-checkpoint is required (or set CHECKPOINT)")
    root = roots.parse_root(text, run.cwd)
    s3 = isinstance(root, roots.S3Root)
    if not s3:
        for name in ("creds", "proxy"):
            if fs.is_set(name):
                raise UsageError(f"-{name} applies only to s3:// roots; {shown(root.text)} is a POSIX root")
        if verb == "resolve" and fs.value("probe"):
            raise UsageError(f"-probe applies only to s3:// roots; {shown(root.text)} is a POSIX root")
        if verb == "probe":
            raise UsageError(f"probe checks an s3:// root; {shown(root.text)} is a POSIX root")
    else:
        if not fs.is_set("creds"):
            raise UsageError(f"-creds is required for the s3:// root {shown(root.text)}")
        if fs.is_set("proxy"):
            from publish.urls import parse_proxy

            value = str(fs.value("proxy"))
            try:
                parse_proxy(value)
            except ValueError as e:
                raise UsageError(
                    f"invalid value {go_quote(redact.url(value))} for flag -proxy: {e}"
                ) from None

    epoch = run.epoch() if verb in ("watch", "publish") else 0
    saves = ""
    if verb == "run":
        return _run_verb(run, root, say, stop, started)
    if verb == "watch":
        if fs.value("framework") is None:
            raise UsageError("-framework is required: hf, dcp, snapshot, lightning or deepspeed")
        if run.args:
            saves = roots.below(root, run.args[0], run.cwd, "SAVES")
        else:
            attempt = run.flag_or_env("attempt", "DISPATCH_ATTEMPT")
            if not attempt:
                raise UsageError("no SAVES argument and no attempt: give -attempt or set DISPATCH_ATTEMPT")
            saves = f"{EXEC}/{_check_attempt(attempt)}"
    step, path = 0, ""
    if verb == "publish":
        try:
            step = _decimal("STEP")(run.args[1])
        except ValueError as e:
            raise UsageError(f"invalid STEP {quoted(run.args[1])}: {e}") from None
        path = roots.below(root, run.args[0], run.cwd, "SAVE")  # before any credential source is tried

    store, source = _open_store(run, root, say, started + timeout, renew=(verb == "watch"))
    if verb != "watch":
        store.begin(max(started + timeout - time.monotonic(), 0.001))

    if verb == "resolve":
        from publish.verbs.resolve import resolve

        if s3 and fs.value("probe"):
            _probe(store)
        resolve(store, say)
    elif verb == "probe":
        _probe(store)
        say.out(f"{root.text} ok, credentials from {source}")
    elif verb == "publish":
        from publish.verbs.publish import publish

        publish(store, say, path, epoch, step)
    elif verb == "prune":
        from publish.verbs.prune import prune

        prune(store, say, int(fs.value("keep")), dry_run=bool(fs.value("dry-run")))
    elif verb == "status":
        from publish.verbs.status import status

        keep = int(fs.value("keep")) if fs.is_set("keep") else None
        status(store, say, keep, as_json=bool(fs.value("json")))
    elif verb == "watch":
        import threading

        from publish.verbs.watch import watch

        framework = FRAMEWORKS[str(fs.value("framework"))]
        watch(
            store,
            say,
            framework,
            saves,
            epoch,
            float(fs.value("interval")),
            timeout,
            stop or threading.Event(),
        )
    return 0


def _run_verb(run: _Run, root: roots.Root, say: Say, stop: Stop | None, started: float) -> int:
    """``publish run``: its own checks, then the lifecycle in publish.verbs.run."""
    from publish.verbs import run as lifecycle

    fs = run.fs
    if fs.value("framework") is None:
        raise UsageError("-framework is required: hf, dcp, snapshot, lightning or deepspeed")
    if fs.is_set("resume-arg") and not fs.value("resume-arg"):
        raise UsageError("-resume-arg is empty")
    given_epoch = run.epoch() if fs.is_set("epoch") or run.env.get("DISPATCH_EPOCH") else None
    attempt, epoch = lifecycle.attempt_and_epoch(
        run.flag_or_env("attempt", "DISPATCH_ATTEMPT"), given_epoch, run.env
    )
    _check_attempt(attempt)
    timeout = float(fs.value("timeout"))
    batch = lifecycle.Batch(run.env, timeout) if run.env.get("SLURM_JOB_ID") else None
    if fs.value("requeue") and batch is None:
        raise UsageError("-requeue needs a Slurm job: SLURM_JOB_ID is not set")
    store, _ = _open_store(run, root, say, started + timeout, renew=True)
    store.begin(max(started + timeout - time.monotonic(), 0.001))
    keep = fs.value("keep")
    return lifecycle.run(
        store,
        say,
        FRAMEWORKS[str(fs.value("framework"))],
        attempt,
        epoch,
        run.args,
        env=run.env,
        root=root.text,
        interval=float(fs.value("interval")),
        timeout=timeout,
        signals=stop if isinstance(stop, lifecycle.Signals) else lifecycle.Signals(),
        keep=None if keep is None else int(keep),
        resume_arg=str(fs.value("resume-arg")),
        requeue=bool(fs.value("requeue")),
        batch=batch,
    )


def _probe(store: Store) -> None:
    probe = getattr(store, "probe", None)
    if probe is None:
        raise Failure("probe needs an s3:// root")
    probe()


def main(
    argv: list[str],
    env: Mapping[str, str],
    stdout: TextIO,
    stderr: TextIO,
    *,
    cwd: str | None = None,
    stop: Stop | None = None,
) -> int:
    """Run one command line (without the program name) and return its exit status.

    ``stop`` ends a watch as SIGTERM does; when None and this is the main thread, SIGTERM and SIGINT set it.
    """

    def out(line: str) -> None:
        stdout.write(guarded(line) + "\n")  # the last guard: no secret, no URL password, one line
        stdout.flush()

    def warn(line: str) -> None:
        stderr.write("publish: " + guarded(line) + "\n")
        stderr.flush()

    if not argv:
        stderr.write(verb_list())
        return 2
    verb = argv[0]
    if verb in ("help", "-h", "-help", "--help"):
        (stdout if verb == "help" else stderr).write(verb_list())
        return 0
    if verb == "version":
        if len(argv) > 1:
            warn(f"unexpected argument {quoted(argv[1])}")
            return 2
        out(f"publish {__version__}")
        return 0
    if verb not in SYNOPSIS:
        warn(f"unknown verb {quoted(verb)}")
        stderr.write(verb_list())
        return 2

    fs = _flags(verb)

    def usage() -> str:
        return f"usage: {SYNOPSIS[verb]}\n{fs.usage()}"

    try:
        args = fs.parse(argv[1:])
    except HelpRequested:
        stderr.write(usage())
        return 0
    except UsageError as e:
        warn(str(e))
        stderr.write(usage())
        return 2
    run = _Run(verb, fs, args, env, cwd if cwd is not None else os.getcwd())
    given = argv[1:]
    run.dashdash = len(given) > len(args) and given[len(given) - len(args) - 1] == "--"
    restore = None
    if verb == "run" and stop is None:
        import threading

        if threading.current_thread() is threading.main_thread():
            from publish.verbs.run import Signals

            signals = Signals()
            stop = signals
            restore = _trap_run(signals, fs.value("signal"))
    if verb == "watch" and stop is None:
        import threading

        if threading.current_thread() is threading.main_thread():
            from publish.verbs.watch import SignalStop

            signal_stop = SignalStop()
            stop = signal_stop
            restore = _trap_signals(signal_stop)
    try:
        code = _execute(run, Say(out, warn), stop)
    except UsageError as e:
        warn(str(e))
        stderr.write(usage())
        return 2
    except PublishError as e:
        warn(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        warn("interrupted")
        return 1
    except OSError as e:
        warn(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        return 1
    except Exception as e:  # never a traceback on a compute node's job log
        warn(f"internal error: {type(e).__name__}: {e}")
        return 1
    finally:
        if restore:
            restore()
    return code


def _trap_signals(stop: SignalStop) -> Callable[[], None]:
    """SIGTERM and SIGINT set ``stop`` (which a handler may set: see SignalStop) until ``restore``."""
    import signal

    def handler(signum: int, frame: object) -> None:
        stop.set()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)
        stop.close()

    return restore


def _trap_run(signals: Any, extra: int | None) -> Callable[[], None]:
    """SIGTERM, SIGINT and ``extra`` are noted in ``signals`` (a publish.verbs.run.Signals) until ``restore``."""
    import signal

    def handler(signum: int, frame: object) -> None:
        signals.note(signum)

    wanted = {signal.SIGTERM, signal.SIGINT} | ({signal.Signals(extra)} if extra is not None else set())
    old = {sig: signal.signal(sig, handler) for sig in wanted}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)
        signals.close()

    return restore


def run() -> int:
    """The console entry point."""
    # A byte of an argument or a path that is not UTF-8 reaches Python as a lone surrogate; written back with
    # surrogateescape it is that byte again, as Go writes it (and a printed path names the same file).
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="surrogateescape")
    try:
        return main(sys.argv[1:], os.environ, sys.stdout, sys.stderr)
    except BrokenPipeError:
        return 1
