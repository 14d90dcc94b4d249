"""The scan's flag group: watch's and run's :class:`SavesCommand` (-framework, -interval, -world-size,
-metrics, -attempt, -epoch, the mirror's group, -on-publish, -on-mirror), the epoch and framework flags
publish and status take too, what watch and run ask of the cli's signal traps (:class:`Trap`), run's signal
names, and how a run or a watch says an error and goes on. A verb that takes none of these (resolve, init,
probe) imports none of it.
"""

from __future__ import annotations

from publish.ops.command import Call, Command
from publish.rules import layout, roots
from publish.rules.errors import UsageError

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable

    from publish.frameworks import Framework
    from publish.ops.events import Events
    from publish.ops.metrics import Metrics
    from publish.rules.go.flags import Flag, FlagSet


class Trap:
    """What a verb that runs until a signal asks of the cli: ``handler(signum)`` for SIGTERM, SIGINT and
    ``extra``, and ``stop`` (with ``close()``), handed to ``run`` as ``call.stop``."""

    __slots__ = ("stop", "handler", "extra")

    def __init__(self, stop: Any, handler: Callable[[int], None], extra: int | None = None) -> None:
        self.stop = stop
        self.handler = handler
        self.extra = extra


def describe(e: BaseException) -> str:
    """An error as a line that a run or a watch says and goes on."""
    from publish.rules.errors import PublishError

    if isinstance(e, PublishError):
        return str(e)
    if isinstance(e, OSError):
        return f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"
    return f"internal error: {type(e).__name__}: {e}"


def expect_command(call: Call) -> None:
    """A COMMAND after ``--``, as ``publish run`` takes it."""
    if not call.dashdash:
        raise UsageError("COMMAND must follow --: publish run [flags] -- COMMAND [ARG...]")
    if not call.args:
        raise UsageError("missing COMMAND after --")


def decimal(what: str) -> Callable[[str], int]:
    """A parser for a plain decimal in [0, 10^20): epochs and steps."""

    def parse(text: str) -> int:
        from publish.rules.go.gocompat import ParseError, parse_decimal

        if text[:1] == "-":  # no sign: "-1" is malformed, not too small
            raise ParseError()
        try:
            return parse_decimal(text, below=layout.LIMIT)
        except ParseError:
            raise
        except ValueError:
            raise ValueError(f"{what} must be below 10^20") from None

    return parse


def epoch_flag(fs: FlagSet, default: str) -> Flag[int | None]:
    return fs.custom(
        "epoch",
        None,
        f"the dispatch epoch `N` (env DISPATCH_EPOCH; default {default})",
        decimal("epoch"),
        "N",
    )


def epoch(flag: Flag[int | None], env: Mapping[str, str]) -> int:
    """-epoch when given, else DISPATCH_EPOCH, else 0."""
    if flag.value is not None:
        return flag.value
    text = env.get("DISPATCH_EPOCH", "")
    if not text:
        return 0
    try:
        return decimal("epoch")(text)
    except ValueError as e:
        from publish.rules.go.gocompat import go_quote

        raise UsageError(f"invalid value {go_quote(text)} for DISPATCH_EPOCH: {e}") from None


def given_epoch(flag: Flag[int | None], env: Mapping[str, str]) -> int | None:
    """The epoch -epoch or DISPATCH_EPOCH gives, else None (the verb derives one)."""
    return epoch(flag, env) if flag.is_set or env.get("DISPATCH_EPOCH") else None


def _framework(text: str) -> str:
    from publish.frameworks import FRAMEWORKS  # here: a verb that takes no -framework imports none of them

    if text not in FRAMEWORKS:
        raise ValueError("must be " + ", ".join(FRAMEWORKS))
    return text


def framework_flag(fs: FlagSet, usage: str) -> Flag[str | None]:
    """-framework: one of FRAMEWORKS, or None when not given."""
    return fs.custom("framework", None, usage, _framework, "name")


def _world_size(text: str) -> int:
    from publish.rules.go.gocompat import (
        parse_decimal,  # here: a command line without numbers needs none of Go's rules
    )

    return parse_decimal(text, minimum=1, below=1 << 31)


class SavesCommand(Command):
    """watch and run: the saves of one framework, scanned every -interval until SIGTERM or SIGINT."""

    traps = True
    attempt_usage = ""
    epoch_default = ""

    def __init__(self) -> None:
        super().__init__()
        fs = self.fs
        from publish.frameworks import LISTED  # here: a verb without -framework imports none of them

        self.framework = framework_flag(fs, f"which saves to publish: {LISTED}")
        self.interval = fs.duration("interval", 10.0, "time between scans")
        self.world_size = fs.custom(
            "world-size",
            None,
            "the ranks that write each save (env WORLD_SIZE): hf waits for every rank's rng_state_<rank>.pth",
            _world_size,
            "N",
        )
        self.metrics = fs.string(
            "metrics",
            "",
            "after every scan, write Prometheus metrics to `FILE` (node_exporter's textfile collector)",
        )
        self.attempt = fs.string("attempt", "", self.attempt_usage)
        self.epoch = epoch_flag(fs, self.epoch_default)
        from publish.ops.mirror_flags import MirrorFlags

        self.mirror = MirrorFlags(fs, keep=True, keep_bytes=True)
        self.on_publish = fs.string(
            "on-publish",
            "",
            "after each publication, run `CMD` with /bin/sh -c, its environment PUBLISH_EVENT_* (one at a "
            "time, in order, each within -timeout; its output on stderr)",
        )
        self.on_mirror = fs.string(
            "on-mirror",
            "",
            "with -mirror: after each save is published on the mirror, run `CMD` as -on-publish",
        )

    def world_size_of(self, call: Call) -> int:
        """-world-size, else WORLD_SIZE (as torchrun sets it), else 0: not known."""
        if self.world_size.value is not None:
            return self.world_size.value
        text = call.env.get("WORLD_SIZE", "")
        if not text:
            return 0
        try:
            return _world_size(text)
        except ValueError as e:
            from publish.rules.go.gocompat import go_quote

            raise UsageError(f"invalid value {go_quote(text)} for WORLD_SIZE: {e}") from None

    def metrics_for(self, call: Call, root: roots.Root) -> Metrics | None:
        """The metrics -metrics asks for (its file made absolute against the working directory), or None; a
        file the root's own folders would hold is refused."""
        if not self.metrics.is_set:
            return None
        if not self.metrics.value:
            raise UsageError("-metrics is empty")
        from publish.ops.metrics import Metrics, refused

        path = roots.clean_posix(self.metrics.value, call.cwd)
        if isinstance(root, roots.PosixRoot):
            why = refused(path, root.path)
            if why:
                from publish.rules.redact import shown

                raise UsageError(f"-metrics {shown(self.metrics.value)}: {why}")
        return Metrics(path, root.text)

    def events_for(self, call: Call, framework: Framework, metrics: Metrics | None) -> Events | None:
        """The events -on-publish and -on-mirror ask for, or None (nothing of them is then imported); an
        empty CMD, and -on-mirror without -mirror, are usage errors."""
        commands = {}
        for flag, tier in ((self.on_publish, "root"), (self.on_mirror, "mirror")):
            if flag.is_set:
                if not flag.value.strip():
                    raise UsageError(f"-{flag.name} is empty")
                commands[tier] = flag.value
        if not commands:
            return None
        if "mirror" in commands and not (self.mirror is not None and self.mirror.url.is_set):
            raise UsageError("-on-mirror applies to -mirror: give -mirror")
        from publish.ops.events import Events

        timeout = self.timeout.value
        return Events(commands, framework.name, call.env, call.say, timeout, metrics, verb=self.name)

    def chosen(self) -> Framework:
        """The -framework given; it is required."""
        from publish.frameworks import FRAMEWORKS, LISTED

        if self.framework.value is None:
            raise UsageError(f"-framework is required: {LISTED}")

        return FRAMEWORKS[self.framework.value]


def parse_signal(text: str) -> int:
    """``USR1``, ``SIGUSR1`` or ``10``: a signal a handler can catch, other than SIGCHLD."""
    import signal

    name = text.upper()
    try:
        sig = (
            signal.Signals(int(name))
            if name.isdigit()
            else signal.Signals[name if name[:3] == "SIG" else "SIG" + name]
        )
    except (KeyError, ValueError):
        raise ValueError("not a signal name") from None
    if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
        raise ValueError(f"{sig.name} cannot be caught and passed on")
    return int(sig)
