"""The verbs, each written once over the Store protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Say:
    """Where a verb's lines go: ``out`` to stdout (flushed per line), ``warn`` to stderr after ``publish: ``."""

    out: Callable[[str], None]
    warn: Callable[[str], None]
