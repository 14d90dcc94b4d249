"""PyTorch Lightning's ModelCheckpoint: a file ``<...>step=<step><...>.ckpt`` directly in SAVES (by default
``epoch=E-step=S.ckpt``; any ``filename`` template holding ``{step}``), whole when its torch archive is: the
zip's end records and central directory are there and agree (publish.frameworks.parse.ziptail).

``last.ckpt`` and names without ``step=`` are not saves.  Lightning writes a checkpoint in one piece (into
a temporary file that is renamed, or with a single write), so a file whose archive is whole was written to
its end.
"""

from __future__ import annotations

from publish.rules import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "files"
SUFFIX = ".ckpt"


def step_of(name: str) -> str:
    """The digits after ``step=`` where ``step=`` starts the name or follows ``-`` (Lightning's join
    character), in a name ending ``.ckpt``; ``""`` when there are none, or more than one such ``step=``."""
    if not name.endswith(SUFFIX):
        return ""
    found = ""
    at = name.find("step=")
    while at >= 0:
        if at == 0 or name[at - 1] == "-":
            end = at + 5
            while end < len(name) and "0" <= name[end] <= "9":
                end += 1
            digits = name[at + 5 : end]
            if layout.digits(digits):
                if found:
                    return ""  # two steps in one name: not ours to choose
                found = digits
        at = name.find("step=", at + 1)
    return found


def unpublishable(name: str) -> str:
    """A ``.ckpt`` whose name holds no single ``step=<N>`` (``ModelCheckpoint(filename="{epoch}")``); not
    ``last.ckpt`` and its versions, which are copies of a save, never saves of their own."""
    if not name.endswith(SUFFIX) or name.startswith("last") or step_of(name):
        return ""
    return (
        "a Lightning checkpoint whose name holds no single step=<N>: it is never published; put {step} in "
        "ModelCheckpoint's filename (its default, {epoch}-{step}, has it)"
    )


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    from publish.frameworks.parse import ziptail

    size = store.size(dl, path)
    if size is None:
        return False

    def read(offset: int, length: int) -> bytes:
        return store.read_range(dl, path, offset, length) or b""

    return ziptail.whole(size, read)
