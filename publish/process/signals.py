"""The signal module's functions and numbers without its enums: ``signal`` imports ``enum`` (and
``enum`` ``types`` and ``functools``), a cost every start of ``run`` and ``watch`` paid for names it never
prints.  At run time these are ``_signal``'s, the C module ``signal`` wraps (numbers, not ``Signals``);
mypy reads ``signal``'s."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _module
    from signal import SIG_BLOCK as SIG_BLOCK
    from signal import SIG_DFL as SIG_DFL
    from signal import SIGCHLD as SIGCHLD
    from signal import SIGINT as SIGINT
    from signal import SIGKILL as SIGKILL
    from signal import SIGPIPE as SIGPIPE
    from signal import SIGTERM as SIGTERM
    from signal import SIGXFSZ as SIGXFSZ
    from signal import pthread_sigmask as pthread_sigmask
    from signal import set_wakeup_fd as set_wakeup_fd
    from signal import signal as signal
    from signal import valid_signals as valid_signals
else:
    import _signal as _module
    from _signal import (
        SIG_BLOCK,
        SIG_DFL,
        SIGCHLD,
        SIGINT,
        SIGKILL,
        SIGPIPE,
        SIGTERM,
        SIGXFSZ,
        pthread_sigmask,
        set_wakeup_fd,
        signal,
        valid_signals,
    )


def name(signum: int) -> str:
    """``signal.Signals(signum).name`` without the enum: of the names a number has (SIGABRT and SIGIOT), the
    first in alphabetical order, as the enum chooses; ``signal N`` for a number that has none.  (A start
    would otherwise import the enum on its first stop signal, just to say which it was.)"""
    names = [n for n in dir(_module) if n[:3] == "SIG" and n[:4] != "SIG_" and getattr(_module, n) == signum]
    return min(names) if names else f"signal {signum}"


__all__ = [
    "SIG_BLOCK",
    "SIG_DFL",
    "SIGCHLD",
    "SIGINT",
    "SIGKILL",
    "SIGPIPE",
    "SIGTERM",
    "SIGXFSZ",
    "pthread_sigmask",
    "set_wakeup_fd",
    "signal",
    "valid_signals",
    "name",
]
