"""DeepSpeed: ``global_step<step>/`` folders, whole when the ``latest`` file beside them names the folder.

``DeepSpeedEngine.save_checkpoint`` (deepspeed/runtime/engine.py, 0.19: ``save_checkpoint``) has every rank
write its files into ``<save_dir>/<tag>/`` (``_save_checkpoint``, ``_save_zero_checkpoint``), then rank 0
writes the tag into ``<save_dir>/latest`` (``open(..., 'w')``, no rename), then all ranks meet at a barrier.
So a folder is taken as whole when ``latest`` names it at the time of a scan, and a folder that ``latest``
never named while watch looked is never published.  Rank 0 writes ``latest`` before that last barrier:
with several ranks, another rank may still be finishing its own files of the same tag for a moment.
"""

from __future__ import annotations

from publish import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
LATEST = "latest"
PREFIX = "global_step"
LATEST_LIMIT = 4096


def step_of(name: str) -> str:
    """``global_step<digits>``, DeepSpeed's default tag."""
    digits = name[len(PREFIX) :]
    return digits if name.startswith(PREFIX) and layout.digits(digits) else ""


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    saves, _, folder = path.rpartition("/")
    data = store.read(dl, f"{saves}/{LATEST}" if saves else LATEST, LATEST_LIMIT)
    if data is None:
        return False
    try:
        tag = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False
    return tag == folder
