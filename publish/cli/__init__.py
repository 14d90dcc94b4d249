"""The only module that touches the process: argv, environment, streams, signals and the exit code."""

from __future__ import annotations

import posix  # os's functions themselves: importing os costs a sixth of a bare start
import sys

from publish.ops import Say
from publish.ops.command import Call, usage_error
from publish.rules.errors import PublishError, UsageError
from publish.rules.go.flags import FlagError, HelpRequested
from publish.rules.redact import echo, quoted
from publish.rules.redact import line as one_line

TYPE_CHECKING = (
    False  # typing and threading cost start-up time; mypy reads this block, the interpreter skips it
)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import NoReturn, TextIO

    from publish.ops.command import Command
    from publish.verbs.watch import Stop

#: The verbs in the order ``publish help`` lists them; each is the module publish.verbs.<verb>.
VERBS = ("resolve", "watch", "publish", "prune", "status", "probe", "run", "init")
#: The verbs main answers itself (publish.cli.own): their summaries.
_OWN = {
    "version": "print the version and which build this is",
    "help": "print this list, or with a verb its usage",
    "completion": "print a shell completion script: bash or zsh",
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
    width = max(map(len, summaries))  # each summary in one column, after the longest verb (completion)
    lines += [f"  {verb:<{width}} {text}" for verb, text in summaries.items()]
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
    say = _say(stdout, stderr)
    if not argv or argv[0] not in VERBS:
        return _not_a_verb(argv, say, stdout, stderr)
    cmd = command(argv[0])
    parsed = _parse(cmd, argv[1:], say, stderr)
    if isinstance(parsed, int):
        return parsed
    restore = None
    trap = cmd.trap() if cmd.traps and stop is None else None
    if trap is not None:
        from publish.cli import traps  # watch's and run's alone

        restore = traps.divert(trap)
        if restore is None:  # not the main thread, where alone a handler can be set
            trap.stop.close()
        else:
            stop = trap.stop
    args, dashdash = parsed

    def call() -> Call:  # made where its failures are said
        return Call(args, dashdash, env, cwd if cwd is not None else _cwd(), say, stop)

    try:
        return _run(cmd, call, say, stderr)
    finally:
        if restore:
            if keep_traps:
                _block_all()
            else:
                restore()


def _cwd() -> str:
    """The working folder, or roots.NO_CWD when it cannot be read (deleted under the job): only a relative
    path needs it, as for a Go program."""
    try:
        return posix.getcwd()
    except OSError:
        from publish.rules.roots import NO_CWD

        return NO_CWD


def _say(stdout: TextIO, stderr: TextIO) -> Say:
    """The command's lines: each as it was made (the answer is never altered).  Only a raw control character
    left in one (every value is shown with redact.shown, so a correct line holds none) is escaped, so it
    stays one line.  Warnings go to stderr after ``publish: ``."""

    def out(line: str) -> None:
        stdout.write(one_line(line) + "\n")
        stdout.flush()

    def out_lines(lines: list[str]) -> None:
        stdout.write("".join([one_line(line) + "\n" for line in lines]))
        stdout.flush()

    def warn(line: str) -> None:
        stderr.write("publish: " + one_line(line) + "\n")
        stderr.flush()

    return Say(out, warn, out_lines)


def _not_a_verb(argv: list[str], say: Say, stdout: TextIO, stderr: TextIO) -> int:
    """A command line whose first word is none of VERBS: nothing, -h, the verbs main answers itself
    (version, help, completion), or a word it does not know."""
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
        from publish.cli import own  # version, help and completion: a verb's start needs none of it

        table = own.Table(VERBS, command, verb_list, _OWN)
        return own.answer(verb, argv[1:], say.out, say.warn, stdout, stderr, table)
    say.warn(f"unknown verb {quoted(echo(verb))}")
    stderr.write(verb_list())
    return 2


def _parse(cmd: Command, given: list[str], say: Say, stderr: TextIO) -> tuple[list[str], bool] | int:
    """The arguments left once ``cmd``'s flags are parsed from ``given``, and whether ``--`` came before
    them; or the exit status of -h (0) or of a flag it refuses (2, said with the usage)."""
    try:
        args = cmd.fs.parse(given)
    except HelpRequested:
        stderr.write(cmd.usage())
        return 0
    except FlagError as e:
        say.warn(str(usage_error(e)))
        stderr.write(cmd.usage())
        return 2
    dashdash = len(given) > len(args) and given[len(given) - len(args) - 1] == "--"
    return args, dashdash


def _run(cmd: Command, call: Callable[[], Call], say: Say, stderr: TextIO) -> int:
    """``cmd`` run on what ``call`` makes: its exit status, or each failure said in one line with its exit
    status."""
    try:
        return cmd.run(call())
    except UsageError as e:
        say.warn(str(e))
        stderr.write(cmd.usage())
        return 2
    except PublishError as e:
        say.warn(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        say.warn("interrupted")
        return 1
    except OSError as e:
        say.warn(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        return 1
    except Exception as e:  # never a traceback on a compute node's job log
        from publish.rules.redact import foreign  # an unexpected error's words may hold anything

        say.warn(f"internal error: {type(e).__name__}: {foreign(str(e))}")
        return 1


_blocked = False  #: set once main() has blocked every signal for the rest of the process (keep_traps)


def _block_all() -> None:
    """Block every signal for the rest of the process (publish.cli.traps.block_all); run() then ends it at once."""
    from publish.cli import traps

    global _blocked
    traps.block_all()
    _blocked = True


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
    from publish.process import signals as signal

    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    except ValueError:  # not the main thread
        pass
    else:
        posix.kill(posix.getpid(), signal.SIGPIPE)
    posix._exit(128 + signal.SIGPIPE)
