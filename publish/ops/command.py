"""What every verb's command line shares: the root and credential flags (one group), the root and argument
checks, opening the store (and the mirror's, once -mirror is parsed: publish.ops.mirror_flags).

A verb module declares one :class:`Command` subclass: its ``name``, ``synopsis``, ``summary``, its flags
(typed :class:`publish.rules.go.flags.Flag` attributes defined in ``__init__``) and ``run``.
"""

from __future__ import annotations

import time

from publish import stores
from publish.rules import redact, roots
from publish.rules.deadline import Deadline
from publish.rules.errors import UsageError
from publish.rules.go.flags import FlagSet
from publish.rules.redact import quoted, shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable, Protocol

    from publish.ops import Say
    from publish.ops.mirror_flags import Mirror, MirrorFlags
    from publish.rules.go.flags import Flag, FlagError

    class Trap(Protocol):
        """What a verb that runs until a signal asks of the cli (publish.ops.scan_flags.Trap makes one)."""

        stop: Any
        handler: Callable[[int], None]
        extra: int | None


ROOT_FLAGS = "-checkpoint ROOT [-creds LIST [-proxy URL]] [-timeout 5m]"


class Call:
    """One command line once its flags are parsed: arguments, environment, streams and what stops it."""

    __slots__ = ("args", "dashdash", "env", "cwd", "say", "stop", "started")

    def __init__(
        self, args: list[str], dashdash: bool, env: Mapping[str, str], cwd: str, say: Say, stop: Any
    ) -> None:
        self.args = args
        self.dashdash = dashdash  # the arguments followed "--"
        self.env = env
        self.cwd = cwd
        self.say = say
        self.stop = stop  # what ends a watch or a run as SIGTERM does, or None
        self.started = time.monotonic()


class Command:
    """One verb: its declarations, and the checks every verb makes before it runs."""

    name = ""
    synopsis = ""
    summary = ""
    traps = False  #: runs until SIGTERM or SIGINT: the cli traps them with ``trap()``
    mirror: MirrorFlags | None = None  #: -mirror and its companions, for the verbs that take them
    mirrored: Mirror | None = None  #: what they asked for, parsed once by ``root()`` (None: no mirror)

    def __init__(self) -> None:
        fs = self.fs = FlagSet(self.name)
        self.checkpoint = fs.string(
            "checkpoint", "", "the checkpoint `ROOT`: a directory, or s3://BUCKET/PREFIX (env CHECKPOINT)"
        )
        self.creds = fs.string(
            "creds",
            "",
            "S3 only: the credential sources, a comma-separated `LIST` of kind:location, tried in order",
        )
        self.proxy = fs.string(
            "proxy", "", "S3 only: the proxy `URL` for the store, http:// or https:// and host[:port]"
        )
        self.timeout = fs.duration(
            "timeout", 300.0, "time an S3 verb may take, or one watch scan (and watch's last scan)"
        )

    def usage(self) -> str:
        return f"usage: {self.synopsis}\n{self.fs.usage()}"

    def trap(self) -> Trap:
        """What the signals do, for a command with ``traps``: called after its flags are parsed."""
        raise NotImplementedError

    def run(self, call: Call) -> int:
        """Do the verb; return the exit status (errors are raised, and the cli maps them)."""
        raise NotImplementedError

    # The checks and steps the verbs share

    def root(self, call: Call) -> roots.Root:
        """The checkpoint root (flag, else CHECKPOINT), with the S3-only flags checked against its kind; the
        mirror's flags are parsed here, once, into ``self.mirrored``."""
        text = flag_or_env(self.checkpoint, call.env, "CHECKPOINT")
        if not text:
            raise UsageError("-checkpoint is required (or set CHECKPOINT)")
        root = roots.parse_root(text, call.cwd)
        mirror = self.mirrored = None if self.mirror is None else self.mirror.parse(root, call.cwd)
        s3: roots.Root = root
        if mirror is not None:
            s3 = mirror.root  # -creds and -proxy are the mirror's: checked as an S3 root's
        elif not isinstance(root, roots.S3Root):
            for flag in (self.creds, self.proxy):
                if flag.is_set:
                    raise UsageError(
                        f"-{flag.name} applies only to s3:// roots; {shown(root.text)} is a POSIX root"
                    )
            return root
        if not self.creds.is_set:
            what = "mirror" if mirror is not None else "root"
            raise UsageError(f"-creds is required for the s3:// {what} {shown(s3.text)}")
        if self.proxy.is_set:
            from publish.rules.go.gocompat import go_quote
            from publish.rules.urls import parse_proxy

            value = self.proxy.value
            try:
                parse_proxy(value)
            except ValueError as e:
                raise UsageError(
                    f"invalid value {go_quote(redact.echo(value))} for flag -proxy: {e}"
                ) from None
        return root

    def open_mirror(self, call: Call, mirror: roots.S3Root, *, renew: bool = False) -> stores.Opened:
        """The mirror's store: -creds and -proxy are its own."""
        return self.open(call, mirror, renew=renew)

    def open(self, call: Call, root: roots.Root, *, renew: bool = False) -> stores.Opened:
        """The store for ``root``, its credentials resolved within -timeout of the start."""
        timeout = self.timeout.value
        return stores.open(
            root,
            env=call.env,
            deadline=call.started + timeout,
            creds=self.creds.value,
            proxy=self.proxy.value,
            renew_timeout=timeout if renew else None,
            warn=call.say.warn,
        )

    def deadline(self, call: Call) -> Deadline:
        """What is left of -timeout since the start (at least 1 ms): the verb's store calls share it, and a
        timeout's message names -timeout as given."""
        timeout = self.timeout.value
        return Deadline.until(max(call.started + timeout, time.monotonic() + 0.001), timeout)


def usage_error(e: FlagError) -> UsageError:
    """The command's usage error for what the flags refused: Go's words, each value from the command line
    shown with its URL password hidden (``redact.echo``)."""
    return UsageError(e.message(redact.echo, _why))


def _why(why: str, text: str) -> str:
    """Why a flag's value was refused, its password hidden when the value is a URL that holds one (a
    duration's error echoes the value)."""
    from publish.rules.go.gocompat import PARSE_ERROR

    found: list[str] = []
    masked = redact.url(text, found)
    why = why.replace(text, masked) if masked != text else why
    return PARSE_ERROR if any(p and p in why for p in found) else why


def expect_args(call: Call, names: list[str], optional: int = 0) -> None:
    """Exactly the positional arguments ``names`` (the last ``optional`` of them may be left out)."""
    need = len(names) - optional
    if len(call.args) < need:
        raise UsageError(f"missing argument {names[len(call.args)]}")
    if len(call.args) > len(names):
        extra = call.args[len(names)]
        raise UsageError(
            f"unexpected argument {quoted(redact.echo(extra))}"
            + (" (flags go before arguments)" if extra[:1] == "-" else "")
        )


def flag_or_env(flag: Flag[str], env: Mapping[str, str], var: str) -> str:
    """The flag's text when given, else the variable's; an explicitly empty flag is a usage error."""
    if flag.is_set:
        if flag.value == "":
            raise UsageError(f"-{flag.name} is empty")
        return flag.value
    return env.get(var, "")


def check_attempt(attempt: str) -> str:
    """The attempt (from -attempt or DISPATCH_ATTEMPT), when it names one folder of exec/ as it was meant
    to: not with a ``/``, nor with a control character (a stray newline or tab would name another folder
    than the trainer's, leaving the real one to ``-orphans``)."""
    if not attempt or "/" in attempt or "\0" in attempt or attempt in (".", ".."):
        raise UsageError(f"attempt {quoted(attempt)} is not one path element")
    if redact.has_control(attempt):
        raise UsageError(f"attempt {quoted(attempt)} holds a control character")
    return attempt


def size_flag(fs: FlagSet, name: str, usage: str) -> Flag[int | None]:
    """A size in bytes (publish.rules.sizes: ``500GB``, ``2TiB``, plain bytes), or None when not given."""
    return fs.custom(name, None, usage, _size, "SIZE")


def _size(text: str) -> int:
    from publish.rules.sizes import parse_size  # here: a command line without a size needs none of its rules

    return parse_size(text)
