"""DeepSpeed: ``global_step<step>/`` folders, whole once ``latest`` beside them names that step or a later one
and every file the save must hold is there, each a whole torch archive.

``DeepSpeedEngine.save_checkpoint`` (deepspeed/runtime/engine.py, 0.19) has the data-parallel rank 0 of each
model-parallel rank write ``mp_rank_<mp:02d>_model_states.pt`` (``_save_checkpoint``), then every rank write
its optimizer shard ``zero_pp_rank_<dp>_mp_rank_<mp:02d>_optim_states.pt`` (``_save_zero_checkpoint``;
``bf16_zero_pp_rank_...`` under bf16), then rank 0 writes the tag into ``<save_dir>/latest``
(``open(..., 'w')``, no rename), then all ranks meet at a barrier.  Under ZeRO stage 3 every rank also
writes ``zero_pp_rank_<dp>_mp_rank_<mp:02d>_model_states.pt`` instead of ``mp_rank_...``.  Nothing waits for
the other ranks before ``latest`` is written: a slow rank may still be writing its shard, and an uploader
copying the folder to S3 in parallel lands the files in any order.  So ``latest`` only says the save was
begun and rank 0's part is done; the model-states file says how many ranks wrote (``dp_world_size``,
``mp_world_size``) and whether the optimizer is sharded (publish.frameworks.parse.deepspeed_states), and the save is whole when
every one of those files is a whole zip archive.  ``latest`` naming a later step counts: a save written
between two scans is published too.
"""

from __future__ import annotations

from publish.rules import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.frameworks.parse.deepspeed_states import Layout
    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
LATEST = "latest"
PREFIX = "global_step"
LATEST_LIMIT = 4096
OPTIM_SUFFIX = "_optim_states.pt"


def step_of(name: str) -> str:
    """``global_step<digits>``, DeepSpeed's default tag."""
    digits = name[len(PREFIX) :]
    return digits if name.startswith(PREFIX) and layout.digits(digits) else ""


def model_states(mp: int, dp: int | None = None) -> str:
    """The model-states file of model-parallel rank ``mp`` (and, under ZeRO stage 3, data-parallel rank
    ``dp``): ``_get_ckpt_name``."""
    name = f"mp_rank_{mp:02d}_model_states.pt"
    return name if dp is None else f"zero_pp_rank_{dp}_{name}"


def optim_states(dp: int, mp: int, bf16: bool) -> str:
    """The optimizer shard of ranks ``dp``, ``mp``: ``_get_rank_zero_ckpt_name``."""
    return f"{'bf16_' if bf16 else ''}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"


def _latest_step(dl: Deadline, store: Store, saves: str) -> int | None:
    """The step of the tag ``latest`` holds, or None (absent, empty while rank 0 rewrites it, not a
    ``global_step<N>`` tag)."""
    data = store.read(dl, f"{saves}/{LATEST}" if saves else LATEST, LATEST_LIMIT)
    if data is None:
        return None
    try:
        tag = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    digits = step_of(tag)
    return int(digits) if digits else None


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    from publish.frameworks.parse import deepspeed_states, ziptail
    from publish.rules.errors import Failure, StoreError
    from publish.rules.redact import shown

    saves = path.rpartition("/")[0]
    latest = _latest_step(dl, store, saves)
    if latest is None or latest < step:
        return False
    sizes = store.sizes(dl, path)
    stage3 = model_states(0) not in sizes
    first = model_states(0, 0 if stage3 else None)
    if first not in sizes:
        return False

    def reader(name: str) -> Callable[[int, int], bytes]:
        def read(offset: int, length: int) -> bytes:
            return store.read_range(dl, f"{path}/{name}", offset, length) or b""

        return read

    def states_of(name: str) -> deepspeed_states.Layout | None:
        try:
            return deepspeed_states.read(
                sizes[name], reader(name), shown(store.location(f"{path}/{name}")), dl
            )
        except deepspeed_states.Incomplete:
            return None
        except StoreError:
            raise  # the store failing is no fault of the file
        except Failure as e:
            note(
                f"{e}: the save is not published (publish it with `publish publish` once you know it is whole)"
            )
            return None

    states = states_of(first)
    if states is None:
        return False
    count = states.mp * (states.dp if stage3 else 1) + (states.dp * states.mp if states.sharded else 0)
    if count > len(sizes):  # up to 2^40 names a file could ask for: counted before any is made
        return False
    needed: list[str] = []
    for mp in range(states.mp):
        needed += [model_states(mp, dp) for dp in range(states.dp)] if stage3 else [model_states(mp)]
    if states.sharded:
        bf16 = optim_states(0, 0, True) in sizes
        needed += [optim_states(dp, mp, bf16) for mp in range(states.mp) for dp in range(states.dp)]
    if any(name not in sizes for name in needed):
        return False
    extra = _extra_files(states, sizes, stage3, first, states_of)
    if extra is None:
        return False
    return all(name == first or ziptail.whole(sizes[name], reader(name)) for name in needed + extra)


def _extra_files(
    states: Layout,
    sizes: dict[str, int],
    stage3: bool,
    first: str,
    states_of: Callable[[str], Layout | None],
) -> list[str] | None:
    """The pipeline layers' and MoE experts' files the save must hold beyond the model states and the
    shards, or None while one is missing: each pipeline stage's layers (read from that stage's model
    states), every expert of every MoE layer for each model-parallel rank, and under MoE without ZeRO the
    expert-parallel ranks' optimizer files (rank 0's at least, and every one there)."""
    extra: list[str] = []
    if states.layers and not stage3:
        layers = set(states.layers)
        for mp in range(1, states.mp):
            stage = states_of(model_states(mp))
            if stage is None:
                return None
            layers.update(stage.layers)
        for layer in sorted(layers):
            files = [name for name in sizes if _layer_file(name, layer)]
            if not files:
                return None
            extra += files
    count = sum(states.experts) * states.mp
    if count > len(sizes):  # counted before any name is made
        return None
    for moe, experts in enumerate(states.experts):
        extra += [expert_states(moe, e, mp) for e in range(experts) for mp in range(states.mp)]
    if states.expert_optim:
        extra += [expert_optim(0, mp) for mp in range(states.mp)]
        extra += [name for name in sizes if name.startswith("expp_rank_") and name.endswith(OPTIM_SUFFIX)]
    if any(name not in sizes for name in extra):
        return None
    return [name for name in dict.fromkeys(extra) if name != first]


def _layer_file(name: str, layer: int) -> bool:
    """``layer_<layer:02d>-model_states.pt``, or ``layer_<layer:02d>-<rank>-model_states.pt`` under tensor
    parallelism (``PipelineModule.ckpt_layer_path``)."""
    head = f"layer_{layer:02d}-"
    return name.startswith(head) and name.endswith("-model_states.pt") and "/" not in name


def expert_states(moe: int, expert: int, mp: int) -> str:
    """The file of expert ``expert`` of MoE layer ``moe`` of model-parallel rank ``mp``:
    ``_get_expert_ckpt_name``."""
    return f"layer_{moe}_expert_{expert}_mp_rank_{mp:02d}_model_states.pt"


def expert_optim(rank: int, mp: int) -> str:
    """The optimizer file of expert-parallel rank ``rank`` of an MoE save without ZeRO:
    ``_get_optimizer_ckpt_name``."""
    return f"expp_rank_{rank}_mp_rank_{mp:02d}{OPTIM_SUFFIX}"
