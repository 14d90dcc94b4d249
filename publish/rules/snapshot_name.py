"""The snapshot directory name ``step_<12 ASCII digits>_<32 lowercase hex>``: the one rule the snapshot
library and the command's snapshot framework both use.  Pure, stdlib-free (no ``re``: a POSIX resolve must not
pay for it)."""

from __future__ import annotations

PREFIX = "step_"
STEP_DIGITS = 12
ID_HEX = 32
LENGTH = len(PREFIX) + STEP_DIGITS + 1 + ID_HEX
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdef")


def parse(name: str) -> tuple[str, str] | None:
    """(the step's 12 digits, the 32 hex digits of the id) of a snapshot directory name, or None."""
    cut = len(PREFIX) + STEP_DIGITS
    if len(name) != LENGTH or not name.startswith(PREFIX) or name[cut] != "_":
        return None
    step, ident = name[len(PREFIX) : cut], name[cut + 1 :]
    if not _DIGITS.issuperset(step) or not _HEX.issuperset(ident):
        return None
    return step, ident


def make(step: int, ident: str) -> str:
    """The directory name of the snapshot of ``step`` with the id ``ident``."""
    return f"{PREFIX}{step:0{STEP_DIGITS}d}_{ident}"
