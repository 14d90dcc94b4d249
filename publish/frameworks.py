"""Which folders are saves, their step, and whether they are complete: hf, dcp and snapshot."""

from __future__ import annotations

from publish import layout
from publish.errors import Failure
from publish.layout import LIMIT

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Callable

    from publish.stores.base import Store

STATE_LIMIT = 64 * 1024 * 1024  #: trainer_state.json over this is refused
_HEX = frozenset("0123456789abcdef")


# The name rules are written out rather than as regular expressions: re would be the costliest import of a
# POSIX resolve, which reads these names (to warn about saves nobody published).
def _hf_step(name: str) -> str:
    """``checkpoint-<digits>``."""
    digits = name[len("checkpoint-") :]
    return digits if name.startswith("checkpoint-") and layout.digits(digits) else ""


def _dcp_step(name: str) -> str:
    """Any name ending in digits: the trailing digits."""
    end = len(name)
    while end and "0" <= name[end - 1] <= "9":
        end -= 1
    return name[end:]


def snapshot_id(name: str) -> str:
    """The uuid of a snapshot directory name ``step_<12 digits>_<32 lowercase hex>``, or ``""``."""
    if len(name) == 50 and name.startswith("step_") and name[17] == "_" and _HEX.issuperset(name[18:]):
        return name[18:] if layout.digits(name[5:17]) else ""
    return ""


def _snapshot_step(name: str) -> str:
    return name[5:17] if snapshot_id(name) else ""


class Framework:
    """How one framework lays out its saves inside SAVES."""

    def __init__(self, name: str, step: Callable[[str], str], complete: Callable[[Store, str, int], bool]):
        self.name = name
        self._step = step
        self._complete = complete

    def step(self, folder: str) -> int | None:
        """The step of a save folder named ``folder``, or None when the name is not a save's."""
        text = self._step(folder)
        if not text:
            return None
        step = int(text)
        return step if step < LIMIT else None

    def complete(self, store: Store, path: str, step: int) -> bool:
        """True when the save at ``path`` is whole; False while it is still being written.

        Raises Failure when the save holds something that can never become whole (hf: a trainer_state.json
        that does not parse, or disagrees with the folder)."""
        return self._complete(store, path, step)


def _hf_complete(store: Store, path: str, step: int) -> bool:
    from publish import trainer_state
    from publish.redact import shown

    where = shown(store.location(path + "/trainer_state.json"))
    data = store.read(path + "/trainer_state.json", STATE_LIMIT)
    if data is None:
        return False
    try:
        state = trainer_state.parse(data)
    except trainer_state.Incomplete:
        return False
    except ValueError as e:
        raise Failure(f"{where}: does not parse: {e}") from None
    if not isinstance(state, dict) or "global_step" not in state:
        raise Failure(f"{where}: no global_step")
    global_step = state["global_step"]
    if isinstance(global_step, bool) or not isinstance(global_step, int):
        raise Failure(f"{where}: global_step {global_step!r} is not an integer")
    if global_step != step:
        raise Failure(f"{where}: global_step {global_step} disagrees with the folder's step {step}")
    return True


def _dcp_complete(store: Store, path: str, step: int) -> bool:
    return store.exists(path + "/.metadata")


def _snapshot_complete(store: Store, path: str, step: int) -> bool:
    from publish.snapshots import ready_matches  # the library's own rule; it imports torch only when loading

    ready = store.read(path + "/READY", 16 * 1024)
    if ready is None or len(ready) > 256:
        return False
    manifest = store.read(path + "/manifest.json", 1024 * 1024)
    if manifest is None or len(manifest) > 16 * 1024 or not ready_matches(manifest, ready):
        return False
    # ready_matches checks the manifest's own rules; its step and id must also be the folder's.
    import json

    doc = json.loads(manifest)
    ident = snapshot_id(path.rsplit("/", 1)[-1])
    return bool(ident) and doc.get("step") == step and doc.get("id") == ident


FRAMEWORKS = {
    "hf": Framework("hf", _hf_step, _hf_complete),
    "dcp": Framework("dcp", _dcp_step, _dcp_complete),
    "snapshot": Framework("snapshot", _snapshot_step, _snapshot_complete),
}
