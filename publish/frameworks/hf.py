"""Hugging Face Trainer: ``checkpoint-<step>/``, whole when trainer_state.json parses with that global_step
and every shard a shard index names is there.

Trainer writes the weights (and, for a sharded model, ``model.safetensors.index.json`` or
``pytorch_model.bin.index.json``), then the optimizer, scheduler and RNG states, and trainer_state.json
last.  An uploader that copies files in parallel can land trainer_state.json first: the shard index is
then the one other record of what the save must hold.
"""

from __future__ import annotations

from publish.rules import layout
from publish.rules.errors import Failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
STATE_LIMIT = 64 * 1024 * 1024  #: trainer_state.json over this is refused
INDEX_LIMIT = 64 * 1024 * 1024  #: a shard index over this is refused
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def step_of(name: str) -> str:
    """``checkpoint-<digits>``."""
    digits = name[len("checkpoint-") :]
    return digits if name.startswith("checkpoint-") and layout.digits(digits) else ""


#: Each rank writes a file of its own into the save (``rng_state_<rank>.pth``): given the world size, the save
#: is whole only when every rank's is there.
RANKED = True


def _ranks_present(dl: Deadline, store: Store, path: str, world_size: int) -> bool:
    """True when ``rng_state_<rank>.pth`` is there for every rank below ``world_size`` (one directory read,
    one LIST on S3): Trainer writes each rank's RNG state from that rank, and rank 0's trainer_state.json
    can land before another rank's file."""
    files = set(store.list_files(dl, path))
    return all(f"rng_state_{rank}.pth" in files for rank in range(world_size))


def complete(
    dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None], world_size: int = 0
) -> bool:
    from publish.frameworks.parse import trainer_state
    from publish.rules.redact import shown

    where = shown(store.location(path + "/trainer_state.json"))
    data = store.read(dl, path + "/trainer_state.json", STATE_LIMIT)
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
    if not all(_shards_present(dl, store, path, index) for index in SHARD_INDEXES):
        return False
    return world_size <= 1 or _ranks_present(dl, store, path, world_size)


def _shards_present(dl: Deadline, store: Store, path: str, index: str) -> bool:
    """True when the shard index ``index`` is absent, or every shard it names is there."""
    from publish.frameworks.parse import trainer_state
    from publish.rules.redact import shown

    where = shown(store.location(f"{path}/{index}"))
    data = store.read(dl, f"{path}/{index}", INDEX_LIMIT)
    if data is None:
        return True
    try:
        doc = trainer_state.parse(data)
    except trainer_state.Incomplete:
        return False
    except ValueError as e:
        raise Failure(f"{where}: does not parse: {e}") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise Failure(f"{where}: no weight_map naming the shards")
    shards = set()
    for shard in weight_map.values():
        if not isinstance(shard, str) or not shard or not layout.clean_relative(shard):
            raise Failure(f"{where}: a shard {shard!r} is not a file name inside the save")
        shards.add(shard)
    return all(store.exists(dl, f"{path}/{shard}") for shard in sorted(shards))
