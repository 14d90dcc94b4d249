"""The verbs the command answers itself: ``version``, ``help`` and ``completion``: no root, no store.

publish.cli dispatches to :func:`answer` only for these, so a verb's start loads none of it."""

from __future__ import annotations

from publish import __version__
from publish.rules.redact import echo, quoted

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Callable, TextIO

    from publish.ops.command import Command


class Table:
    """The verb table publish.cli hands over: the verbs (in ``help``'s order), a fresh command for one, the
    verb list ``help`` prints, and the summaries of the verbs answered here."""

    __slots__ = ("verbs", "command", "verb_list", "own")

    def __init__(
        self,
        verbs: tuple[str, ...],
        command: Callable[[str], Command],
        verb_list: Callable[[], str],
        own: dict[str, str],
    ) -> None:
        self.verbs = verbs
        self.command = command
        self.verb_list = verb_list
        self.own = own


#: Their usage (``publish help VERB``, ``VERB -h``).
USAGE = {
    "version": "usage: publish version\n"
    "  prints publish <version>, then the build (the one file's digest, or none), the Python and the freezer\n",
    "help": "usage: publish help [VERB]\n  the verbs, or one verb's usage\n",
    "completion": "usage: publish completion bash|zsh\n"
    "  bash: source <(publish completion bash)\n"
    "  zsh: publish completion zsh > DIR/_publish, DIR a folder on $fpath before compinit\n",
}


def answer(
    verb: str,
    args: list[str],
    out: Callable[[str], None],
    warn: Callable[[str], None],
    stdout: TextIO,
    stderr: TextIO,
    table: Table,
) -> int:
    """version, help and completion: no root, no flags but -h; the exit status. ``table`` is the command's
    verb table."""
    if args[:1] and args[0] in ("-h", "-help", "--help"):
        stderr.write(USAGE[verb])
        return 0
    most = 0 if verb == "version" else 1
    if len(args) > most:
        warn(f"unexpected argument {quoted(echo(args[most]))}")
        stderr.write(USAGE[verb])
        return 2
    if verb == "version":
        from publish.cli import buildinfo

        out(f"publish {__version__}")
        for line in buildinfo.lines():
            out(line)
        return 0
    if verb == "help":
        if not args:
            stdout.write(table.verb_list())
        elif args[0] in table.verbs:
            stdout.write(table.command(args[0]).usage())
        elif args[0] in USAGE:
            stdout.write(USAGE[args[0]])
        else:
            warn(f"unknown verb {quoted(echo(args[0]))}")
            stderr.write(table.verb_list())
            return 2
        return 0
    from publish.cli import completion

    if not args:
        warn("missing argument SHELL")
    elif args[0] not in completion.SHELLS:
        warn(f"unknown shell {quoted(echo(args[0]))}: {' or '.join(completion.SHELLS)}")
    else:
        rows = [(v, table.command(v).summary, table.command(v).fs.defined()) for v in table.verbs]
        rows += [(v, text, []) for v, text in table.own.items()]
        stdout.write(completion.script(args[0], rows))
        return 0
    stderr.write(USAGE[verb])
    return 2
