"""How watch and run trap signals: SIGTERM, SIGINT and a verb's own go to its handler while it runs, and every
signal is blocked once it is done (publish.cli calls these only for a verb whose command traps)."""

from __future__ import annotations

from publish.process import signals as signal  # signal's functions without its enum

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Callable

    from publish.ops.command import Trap


def block_all() -> None:
    """Block every signal that can be blocked in this thread: one arriving from now on stays pending, or
    reaches another thread, where the trap's handler (still installed) only notes it.  ``run`` then ends the
    process at once (os._exit): the interpreter's own ending would put back the default handlers while
    other threads, which this mask does not cover, can still receive a signal."""
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())


def divert(trap: Trap) -> Callable[[], None] | None:
    """SIGTERM, SIGINT and ``trap.extra`` go to ``trap.handler`` until ``restore``, which closes the stop;
    None (nothing changed) off the main thread, where no handler can be set."""

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
