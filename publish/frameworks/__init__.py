"""Which entries of SAVES are saves, their step, and whether they are whole: one small module per framework.

Each module gives ``KIND`` (saves are ``"folders"`` or ``"files"``), ``step_of(name) -> str`` (the decimal
step a save's name holds, or ``""``: a pure rule, no I/O, cheap to import since a POSIX resolve reads these
names) and ``complete(dl, store, path, step, note) -> bool`` (reads the save through the Store within ``dl``; ``note`` takes
a hint for the user, said once per save).  A new framework is one module and a line in FRAMEWORKS.

A framework's module is imported when first asked about a save, so a verb given one framework loads only
that one (``run -framework hf`` no DeepSpeed reader); the table holds each one's KIND so that choosing among
them imports none.
"""

from __future__ import annotations

from publish.rules.layout import LIMIT

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store


class Framework:
    """How one framework lays out its saves inside SAVES."""

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind  # the module's KIND (tests/frameworks/test_frameworks.py checks that they agree)
        self._module: ModuleType | None = None

    @property
    def _rules(self) -> ModuleType:
        """publish.frameworks.<name>, imported on first use."""
        rules = self._module
        if rules is None:
            import sys

            full = f"publish.frameworks.{self.name}"
            __import__(full)
            rules = self._module = sys.modules[full]
        return rules

    def step(self, name: str) -> int | None:
        """The step of a save named ``name``, or None when the name is not a save's."""
        text = self._rules.step_of(name)
        if not text:
            return None
        step = int(text)
        return step if step < LIMIT else None

    def unpublishable(self, name: str) -> str:
        """Why a child of SAVES named ``name``, recognised as this framework's save, can never be published
        (and what to change), or ``""``: said once on stderr by watch and run."""
        rule = getattr(self._rules, "unpublishable", None)
        return str(rule(name)) if rule is not None else ""

    def complete(
        self,
        dl: Deadline,
        store: Store,
        path: str,
        step: int,
        note: Callable[[str], None] | None = None,
        world_size: int = 0,
    ) -> bool:
        """True when the save at ``path`` is whole; False while it is still being written.

        ``world_size`` (0: not known) is the number of ranks that write the save, for a framework whose
        ranks each write a file of their own (hf under DDP: ``rng_state_<rank>.pth``).

        Raises Failure when the save holds something that can never become whole (hf: a trainer_state.json
        that does not parse, or disagrees with the folder; dcp: a .metadata that is not a DCP one)."""
        check = self._rules.complete
        if world_size > 1 and getattr(self._rules, "RANKED", False):
            return bool(check(dl, store, path, step, note or (lambda _: None), world_size))
        return bool(check(dl, store, path, step, note or (lambda _: None)))


FRAMEWORKS = {
    "hf": Framework("hf", "folders"),
    "dcp": Framework("dcp", "folders"),
    "snapshot": Framework("snapshot", "folders"),
    "lightning": Framework("lightning", "files"),
    "megatron": Framework("megatron", "folders"),
    "nemo": Framework("nemo", "folders"),
    "deepspeed": Framework("deepspeed", "folders"),
}

#: The names as a synopsis shows the choice (``hf|dcp|...``) and as a sentence lists them (``hf, dcp, ... or
#: deepspeed``): every usage line and message about frameworks is made from the table.
CHOICES = "|".join(FRAMEWORKS)
LISTED = " or ".join([", ".join(list(FRAMEWORKS)[:-1]), list(FRAMEWORKS)[-1]])
