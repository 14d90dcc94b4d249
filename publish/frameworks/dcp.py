"""torch.distributed.checkpoint (torchtitan, Megatron-LM and NeMo ``torch_dist``): a folder whose name ends in
digits (``step-100``, ``iter_0000100``), whole when ``.metadata`` reads and every storage file it names holds
at least the bytes it names.

DCP writes every rank's ``__<rank>_<n>.distcp`` files, then the coordinator writes ``.metadata`` (through a
``.tmp`` and a rename).  That order holds on a filesystem; an uploader that copies the folder to S3 in
parallel can land the small ``.metadata`` first, so its presence alone proves nothing.  A save made with
``use_collectives=False`` has one ``__<rank>.metadata`` per rank and no ``.metadata``: it can never be
published by its marker, and watch says so once.
"""

from __future__ import annotations

from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
METADATA = ".metadata"


def step_of(name: str) -> str:
    """Any name ending in digits: the trailing digits."""
    end = len(name)
    while end and "0" <= name[end - 1] <= "9":
        end -= 1
    return name[end:]


def _rank_metadata(name: str) -> bool:
    """``__<rank>.metadata``: what a save without rank coordination writes instead of ``.metadata``."""
    rank = name[2 : -len(METADATA)]
    return name.startswith("__") and name.endswith(METADATA) and rank.isascii() and rank.isdigit()


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    sizes = store.sizes(dl, path)
    if METADATA not in sizes:
        if any(_rank_metadata(name) for name in sizes):
            note(
                f"{shown(store.location(path))} holds per-rank __<rank>.metadata files and no .metadata (a DCP save "
                "with use_collectives=False): it is never published by watch; publish it with `publish publish`"
            )
        return False
    return storage_whole(dl, store, path, sizes)


def storage_whole(dl: Deadline, store: Store, path: str, sizes: dict[str, int]) -> bool:
    """True when the ``.metadata`` of the folder ``path`` (whose files are ``sizes``) reads and every storage
    file it names holds the bytes it names: the rule of a DCP save, shared with Megatron-LM's and NeMo's."""
    from publish.frameworks.parse import dcp_metadata

    if METADATA not in sizes:
        return False
    where = shown(store.location(f"{path}/{METADATA}"))
    data = store.read(dl, f"{path}/{METADATA}", dcp_metadata.LIMIT)
    if data is None:
        return False
    try:
        ends = dcp_metadata.storage_ends(data, where, dl)
    except dcp_metadata.Incomplete:
        return False
    for name, end in ends.items():
        size = sizes.get(name)
        if size is None or size < end:
            return False
    return True
