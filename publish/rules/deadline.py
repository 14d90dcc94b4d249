"""The time a bounded piece of work (a verb, one watch scan) may take, handed to every call that can wait.

A leaf value: no I/O, no import from the command.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable


class Deadline:
    """An instant of ``clock`` (monotonic seconds) by which the work must be done, and the ``timeout`` it was
    made from (for messages); both None when the work is unbounded."""

    __slots__ = ("at", "timeout", "clock")

    def __init__(self, timeout: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self.at = None if timeout is None else clock() + timeout

    @classmethod
    def until(cls, at: float, timeout: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """The instant ``at`` of ``clock``, of work given ``timeout`` seconds in all (messages show that)."""
        deadline = cls(None, clock)
        deadline.at, deadline.timeout = at, timeout
        return deadline

    @classmethod
    def none(cls) -> Deadline:
        """No bound."""
        return cls(None)

    def left(self) -> float | None:
        """Seconds left (zero or less once passed); None when unbounded."""
        return None if self.at is None else self.at - self.clock()

    def __repr__(self) -> str:
        return f"Deadline(timeout={self.timeout!r}, left={self.left()!r})"


#: The deadline of work nothing bounds.
UNBOUNDED = Deadline.none()
