"""The verbs, each written once over the Store protocol.

Each verb is one module here declaring a ``COMMAND`` (a :class:`publish.verbs.common.Command`: its
synopsis, summary, typed flags and ``run``); publish.cli lists the modules and dispatches to them.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable


class Say:
    """Where a verb's lines go: ``out`` to stdout (flushed per line), ``warn`` to stderr after ``publish: ``."""

    __slots__ = ("out", "warn")

    def __init__(self, out: Callable[[str], None], warn: Callable[[str], None]) -> None:
        self.out = out
        self.warn = warn
