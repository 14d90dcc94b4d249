"""The only module that touches the process: argv, environment, streams, signals and the exit code."""

from __future__ import annotations

import posix  # os's functions themselves: importing os costs a sixth of a bare start
import sys

from publish import __version__
from publish.errors import PublishError, UsageError
from publish.go.flags import FlagError, HelpRequested
from publish.redact import echo, quoted
from publish.redact import line as one_line
from publish.verbs import Say
from publish.verbs.common import Call, usage_error

TYPE_CHECKING = (
    False  # typing and threading cost start-up time; mypy reads this block, the interpreter skips it
)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Callable, NoReturn, TextIO

    from publish.verbs.common import Command, Trap
    from publish.verbs.watch import Stop

#: The verbs in the order ``publish help`` lists them; each is the module publish.verbs.<verb>.
VERBS = ("resolve", "watch", "publish", "prune", "status", "probe", "run", "init")
#: The verbs main answers itself: their summaries, and their usage (``publish help VERB``, ``VERB -h``).
_OWN = {
    "version": "print the version and which build this is",
    "help": "print this list, or with a verb its usage",
    "completion": "print a shell completion script: bash or zsh",
}
_OWN_USAGE = {
    "version": "usage: publish version\n"
    "  prints publish <version>, then the build (the one file's digest, or none), the Python and the freezer\n",
    "help": "usage: publish help [VERB]\n  the verbs, or one verb's usage\n",
    "completion": "usage: publish completion bash|zsh\n"
    "  bash: source <(publish completion bash)\n"
    "  zsh: publish completion zsh > DIR/_publish, DIR a folder on $fpath before compinit\n",
}


def command(verb: str) -> Command:
    """A fresh command (its flags defined, not parsed) for one of VERBS; only its module is imported."""
    # __import__ rather than importlib.import_module: the importlib package brings warnings in, at start-up.
    name = f"publish.verbs.{verb}"
    __import__(name)
    cls: type[Command] = sys.modules[name].COMMAND
    return cls()


def verb_list() -> str:
    lines = ["usage: publish <verb> [flags] [arguments]", "", "verbs:"]
    summaries = {verb: command(verb).summary for verb in VERBS} | _OWN
    lines += [f"  {verb:<8} {text}" for verb, text in summaries.items()]
    lines += ["", "Run publish <verb> -h for a verb's flags.", ""]
    return "\n".join(lines)


def main(
    argv: list[str],
    env: Mapping[str, str],
    stdout: TextIO,
    stderr: TextIO,
    *,
    cwd: str | None = None,
    stop: Stop | None = None,
    keep_traps: bool = False,
) -> int:
    """Run one command line (without the program name) and return its exit status.

    ``stop`` ends a watch as SIGTERM does; when None and this is the main thread, SIGTERM and SIGINT set it.
    ``keep_traps`` (the process is about to exit with the status returned): the signals trapped stay
    caught, then blocked, rather than restored, so a signal arriving after the work is done cannot change
    the exit status.
    """

    # The line as it was made: the answer is never altered.  Only a raw control character left in it (every
    # value is shown with redact.shown, so a correct line holds none) is escaped, so it stays one line.
    def out(line: str) -> None:
        stdout.write(one_line(line) + "\n")
        stdout.flush()

    def warn(line: str) -> None:
        stderr.write("publish: " + one_line(line) + "\n")
        stderr.flush()

    if not argv:
        stderr.write(verb_list())
        return 2
    verb = argv[0]
    if verb in ("-h", "-help", "--help"):
        stderr.write(verb_list())
        return 0
    if verb in ("-version", "--version"):
        verb = "version"
    if verb in _OWN:
        return _own(verb, argv[1:], out, warn, stdout, stderr)
    if verb not in VERBS:
        warn(f"unknown verb {quoted(echo(verb))}")
        stderr.write(verb_list())
        return 2

    cmd = command(verb)
    try:
        args = cmd.fs.parse(argv[1:])
    except HelpRequested:
        stderr.write(cmd.usage())
        return 0
    except FlagError as e:
        warn(str(usage_error(e)))
        stderr.write(cmd.usage())
        return 2
    given = argv[1:]
    dashdash = len(given) > len(args) and given[len(given) - len(args) - 1] == "--"
    restore = None
    trap = cmd.trap() if cmd.traps and stop is None else None
    if trap is not None:
        restore = _trap(trap)
        if restore is None:  # not the main thread, where alone a handler can be set
            trap.stop.close()
        else:
            stop = trap.stop
    try:
        call = Call(args, dashdash, env, cwd if cwd is not None else posix.getcwd(), Say(out, warn), stop)
        code = cmd.run(call)
    except UsageError as e:
        warn(str(e))
        stderr.write(cmd.usage())
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
        from publish.redact import foreign  # an unexpected error's words may hold anything

        warn(f"internal error: {type(e).__name__}: {foreign(str(e))}")
        return 1
    finally:
        if restore:
            if keep_traps:
                _block_all()
            else:
                restore()
    return code


def _own(
    verb: str,
    args: list[str],
    out: Callable[[str], None],
    warn: Callable[[str], None],
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """version, help and completion: no root, no flags but -h."""
    if args[:1] and args[0] in ("-h", "-help", "--help"):
        stderr.write(_OWN_USAGE[verb])
        return 0
    most = 0 if verb == "version" else 1
    if len(args) > most:
        warn(f"unexpected argument {quoted(echo(args[most]))}")
        stderr.write(_OWN_USAGE[verb])
        return 2
    if verb == "version":
        from publish import buildinfo

        out(f"publish {__version__}")
        for line in buildinfo.lines():
            out(line)
        return 0
    if verb == "help":
        if not args:
            stdout.write(verb_list())
        elif args[0] in VERBS:
            stdout.write(command(args[0]).usage())
        elif args[0] in _OWN:
            stdout.write(_OWN_USAGE[args[0]])
        else:
            warn(f"unknown verb {quoted(echo(args[0]))}")
            stderr.write(verb_list())
            return 2
        return 0
    from publish import completion

    if not args:
        warn("missing argument SHELL")
    elif args[0] not in completion.SHELLS:
        warn(f"unknown shell {quoted(echo(args[0]))}: {' or '.join(completion.SHELLS)}")
    else:
        table = [(v, command(v).summary, command(v).fs.defined()) for v in VERBS]
        table += [(v, text, []) for v, text in _OWN.items()]
        stdout.write(completion.script(args[0], table))
        return 0
    stderr.write(_OWN_USAGE[verb])
    return 2


_blocked = False  #: set once main() has blocked every signal for the rest of the process (keep_traps)


def _block_all() -> None:
    """Block every signal that can be blocked in this thread: one arriving from now on stays pending, or
    reaches another thread, where the trap's handler (still installed) only notes it.  ``run`` then ends the
    process at once (os._exit): the interpreter's own ending would put back the default handlers while
    other threads, which this mask does not cover, can still receive a signal."""
    from publish import signals as signal

    global _blocked
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    _blocked = True


def _trap(trap: Trap) -> Callable[[], None] | None:
    """SIGTERM, SIGINT and ``trap.extra`` go to ``trap.handler`` until ``restore``, which closes the stop;
    None (nothing changed) off the main thread, where no handler can be set."""
    from publish import signals as signal  # signal's functions without its enum

    def handler(signum: int, frame: object) -> None:
        trap.handler(signum)

    extra = {trap.extra} if trap.extra is not None else set()
    old = {}
    for sig in sorted({signal.SIGTERM, signal.SIGINT} | extra):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: the first one fails, and nothing was set
            return None

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)
        trap.stop.close()

    return restore


def run() -> int:
    """The console entry point."""
    # A byte of an argument or a path that is not UTF-8 reaches Python as a lone surrogate; written back with
    # surrogateescape it is that byte again, as Go writes it (and a printed path names the same file).
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="surrogateescape")
    # A write to a closed stdout or stderr (`publish status | head -1`) ends the process as it ends a Go
    # program: by SIGPIPE, without a word.  Python ignores SIGPIPE (so a socket's EPIPE is an error, as it must
    # be); only these two streams end the process.  Installed as sys.stdout and sys.stderr, so the flush at
    # exit goes through them too.
    out: TextIO = _Closable(sys.stdout)  # type: ignore[assignment]
    err: TextIO = _Closable(sys.stderr)  # type: ignore[assignment]
    sys.stdout, sys.stderr = out, err
    code = main(sys.argv[1:], environment(), out, err, keep_traps=True)
    if _blocked:  # watch or run: exit with exactly this status, however many signals still arrive
        out.flush()
        err.flush()
        posix._exit(code)
    return code


def environment() -> dict[str, str]:
    """What os.environ holds, each name and value decoded as os.environ decodes them, without importing os:
    posix.environ is the dictionary of bytes os.environ is made from (and that a change to it changes)."""
    encoding = sys.getfilesystemencoding()
    return {
        k.decode(encoding, "surrogateescape"): v.decode(encoding, "surrogateescape")
        for k, v in posix.environ.items()
    }


class _Closable:
    """A standard stream whose write or flush to a closed pipe ends the process by SIGPIPE (exit status 141
    in a shell), as Go's runtime ends a program that writes to a closed fd 1 or 2."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _closed()

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _closed()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _closed() -> NoReturn:
    """End the process by SIGPIPE; from a thread other than the main one, which cannot set a signal's
    disposition, with the exit status a shell shows for that (128 + 13)."""
    from publish import signals as signal

    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    except ValueError:  # not the main thread
        pass
    else:
        posix.kill(posix.getpid(), signal.SIGPIPE)
    posix._exit(128 + signal.SIGPIPE)
