"""publish.snapshots: ``step_<12 digits>_<32 hex>/``, whole when READY matches manifest.json."""

from __future__ import annotations

from publish import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.stores.base import Store

KIND = "folders"
_HEX = frozenset("0123456789abcdef")


# Written out rather than as the library's regular expression: re would be the costliest import of a POSIX
# resolve.  tests/test_frameworks.py checks that both rules agree.
def snapshot_id(name: str) -> str:
    """The uuid of a snapshot directory name ``step_<12 digits>_<32 lowercase hex>``, or ``""``."""
    if len(name) == 50 and name.startswith("step_") and name[17] == "_" and _HEX.issuperset(name[18:]):
        return name[18:] if layout.digits(name[5:17]) else ""
    return ""


def step_of(name: str) -> str:
    return name[5:17] if snapshot_id(name) else ""


def complete(store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
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
