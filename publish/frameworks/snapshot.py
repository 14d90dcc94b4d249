"""publish.snapshots: ``step_<12 digits>_<32 hex>/``, whole when READY matches manifest.json."""

from __future__ import annotations

from publish import snapshot_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"


def snapshot_id(name: str) -> str:
    """The uuid of a snapshot directory name ``step_<12 digits>_<32 lowercase hex>``, or ``""``."""
    parsed = snapshot_name.parse(name)
    return parsed[1] if parsed else ""


def step_of(name: str) -> str:
    parsed = snapshot_name.parse(name)
    return parsed[0] if parsed else ""


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    from publish.snapshots import ready_matches  # the library's own rule; it imports torch only when loading

    ready = store.read(dl, path + "/READY", 16 * 1024)
    if ready is None or len(ready) > 256:
        return False
    manifest = store.read(dl, path + "/manifest.json", 1024 * 1024)
    if manifest is None or len(manifest) > 16 * 1024 or not ready_matches(manifest, ready):
        return False
    # ready_matches checks the manifest's own rules; its step and id must also be the folder's.
    import json

    doc = json.loads(manifest)
    ident = snapshot_id(path.rsplit("/", 1)[-1])
    return bool(ident) and doc.get("step") == step and doc.get("id") == ident
