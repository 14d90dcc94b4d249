"""publish.snapshots: ``step_<12 digits>_<32 hex>/``, whole when READY matches manifest.json."""

from __future__ import annotations

from publish.rules import snapshot_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"


def step_of(name: str) -> str:
    parsed = snapshot_name.parse(name)
    return parsed[0] if parsed else ""


#: A READY or manifest.json up to this many times the format's cap is read, and judged not whole when over
#: the cap; a larger one is refused (the store's read says it is over the limit).
READ_FACTOR = 64


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    # The format's rules, not the library: publish.snapshots imports torch's neighbours (threading, uuid, ...)
    from publish.rules import snapshot_format as fmt

    ready = store.read(dl, f"{path}/{fmt.READY}", READ_FACTOR * fmt.READY_LIMIT)
    if ready is None:
        return False
    manifest = store.read(dl, f"{path}/{fmt.MANIFEST}", READ_FACTOR * fmt.MANIFEST_LIMIT)
    if manifest is None or not fmt.ready_matches(manifest, ready):  # each within its cap, and by the rules
        return False
    # The manifest's step and id must also be the folder's.
    try:
        doc = fmt.parse_manifest(manifest, path.rsplit("/", 1)[-1])
    except fmt.SnapshotError:
        return False
    return bool(doc["step"] == step)
