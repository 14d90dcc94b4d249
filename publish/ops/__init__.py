"""The floor beneath the verbs: the operations they share (publishing an entry, retention, scanning saves,
resolution on one or two tiers, the mirror's uploads, the idle count) and the flag groups they declare.

No module here imports a verb; a verb imports what it needs from here and never another verb.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable


class Say:
    """Where a verb's lines go: ``out`` to stdout (flushed per line), ``warn`` to stderr after ``publish: ``."""

    __slots__ = ("out", "warn", "lines")

    def __init__(
        self,
        out: Callable[[str], None],
        warn: Callable[[str], None],
        lines: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.out = out
        self.warn = warn
        self.lines = lines  # many lines to stdout at once, as ``out`` would print each (None: one by one)

    def out_all(self, lines: list[str]) -> None:
        """Each of ``lines`` to stdout as ``out`` prints it, written a block at a time where ``lines`` is set."""
        if self.lines is None:
            for line in lines:
                self.out(line)
            return
        for start in range(0, len(lines), _BLOCK):
            self.lines(lines[start : start + _BLOCK])


#: The most lines Say.out_all hands over at once (a bounded string per write).
_BLOCK = 4096
