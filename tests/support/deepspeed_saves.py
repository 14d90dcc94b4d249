"""DeepSpeed saves shaped as ``DeepSpeedEngine.save_checkpoint`` writes them, without torch or DeepSpeed.

deepspeed/runtime/engine.py (0.19.8): ``_get_ckpt_name`` names the model states ``mp_rank_<mp:02d>_
model_states.pt`` (under ZeRO stage 3 ``zero_pp_rank_<dp>_mp_rank_<mp:02d>_model_states.pt``, one per
data-parallel rank), ``_get_rank_zero_ckpt_name`` the optimizer shards ``zero_pp_rank_<dp>_mp_rank_<mp:02d>_
optim_states.pt`` (``bf16_`` first when bf16 is on).  ``save_checkpoint`` has the data-parallel rank 0 of
each model-parallel rank write its model states (``_save_checkpoint``), then every rank its shard
(``_save_zero_checkpoint``; rank 0 then copies ``zero_to_fp32.py`` and ``zero_to_torch.py`` into the save
directory itself), then rank 0 writes the tag into ``latest``, then all meet at a barrier.

Each file is a zip archive as ``torch.save`` writes it (stored members under ``<archive>/``: ``data.pkl``
first, then ``.format_version``, ``.storage_alignment``, ``byteorder``, ``data/<n>``, ``version``,
``.data/serialization_id``), and ``data.pkl`` is the pickle torch writes (protocol 2, tensors as
``torch._utils._rebuild_tensor_v2`` of a persistent id) of the dict ``_common_checkpoint_state`` makes, with
the keys and the values a tiny model has (tests/frameworks/test_deepspeed.py checks these against a real engine's).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

from tests.support.dcp_shapes import Raw


class Global:
    """``module.name`` as a pickle names it."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name


class Call:
    """``func(*args)``: REDUCE."""

    def __init__(self, func: Global, *args: object) -> None:
        self.func, self.args = func, args


class Pid:
    """A persistent id (torch.save's reference to a storage): BINPERSID."""

    def __init__(self, *items: object) -> None:
        self.items = items


class Ordered:
    """A ``collections.OrderedDict``: the class called with no arguments, then its items set."""

    def __init__(self, items: dict[str, object]) -> None:
        self.items = items


def dumps(obj: object) -> bytes:
    """The protocol 2 pickle of ``obj`` (of the shapes above, dicts, lists, tuples and plain values)."""
    out = bytearray(b"\x80\x02")

    def emit(o: object) -> None:
        if isinstance(o, Raw):
            out.extend(o.code)
        elif isinstance(o, Global):
            out.extend(f"c{o.module}\n{o.name}\n".encode())
        elif isinstance(o, Call):
            emit(o.func)
            emit(o.args)
            out.extend(b"R")
        elif isinstance(o, Pid):
            emit(o.items)
            out.extend(b"Q")
        elif isinstance(o, Ordered):
            emit(Call(Global("collections", "OrderedDict")))
            items(o.items)
        elif isinstance(o, dict):
            out.extend(b"}")
            items(o)
        elif isinstance(o, list):
            out.extend(b"](")
            for v in o:
                emit(v)
            out.extend(b"e")
        elif isinstance(o, tuple):
            out.extend(b"(")
            for v in o:
                emit(v)
            out.extend(b"t")
        else:
            out.extend(pickle.dumps(o, protocol=2)[2:-1])

    def items(d: dict[object, object]) -> None:
        if d:
            out.extend(b"(")
            for k, v in d.items():
                emit(k)
                emit(v)
            out.extend(b"u")

    emit(obj)
    out.extend(b".")
    return bytes(out)


def tensor(key: str, shape: tuple[int, ...]) -> Call:
    """A contiguous float tensor whose storage is the archive's ``data/<key>``."""
    strides = tuple(_prod(shape[i + 1 :]) for i in range(len(shape)))
    storage = Pid("storage", Global("torch", "FloatStorage"), key, "cpu", _prod(shape))
    return Call(Global("torch._utils", "_rebuild_tensor_v2"), storage, 0, shape, strides, False, Ordered({}))


def _prod(xs: tuple[int, ...]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


#: The tiny model of the real writer (tests/support/deepspeed_writer.py): Linear(8, 16), ReLU, Linear(16, 2).
PARAMS = {"0.weight": (16, 8), "0.bias": (16,), "2.weight": (2, 16), "2.bias": (2,)}


def model_states_dict(
    step: int, dp: int, mp: int = 1, stage: int = 2, bf16: bool = False, **extra: object
) -> dict[str, object]:
    """What ``_save_checkpoint`` saves: ``_common_checkpoint_state`` (its optimizer None under ZeRO, where
    ``param_shapes`` is given; the optimizer's own state dict without ZeRO), then the client state."""
    zero = stage > 0
    module = Ordered({name: tensor(str(i), shape) for i, (name, shape) in enumerate(PARAMS.items())})
    shapes = Ordered({name: Call(Global("torch", "Size"), list(shape)) for name, shape in PARAMS.items()})
    if zero:
        optimizer: object = None
    elif bf16:  # BF16_Optimizer.state_dict(): its partitions are the bf16_zero_pp_rank_* files
        optimizer = {
            "clip_grad": 0.0,
            "base_optimizer_state": {"state": {}, "param_groups": []},
            "single_partition_of_fp32_groups": [tensor("9", (128,))],  # data/9: model_states_file
            "group_paddings": [0],
            "partition_count": dp,
            "ds_version": "0.19.8",
        }
    else:
        optimizer = {"state": {}, "param_groups": [{"lr": 0.001, "params": [0, 1, 2, 3]}]}
    config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage}}
    if bf16:
        config["bf16"] = {"enabled": True}
    return {
        "module": module,
        "buffer_names": [],
        "optimizer": optimizer,
        "param_shapes": [shapes] if zero else None,
        "frozen_param_shapes": Ordered({}) if stage >= 2 else None,
        "shared_params": {} if zero else None,
        "frozen_param_fragments": Ordered({}) if stage >= 2 else None,
        "lr_scheduler": None,
        "data_sampler": None,
        "random_ltd": None,
        "skipped_steps": 0,
        "global_steps": step,
        "global_samples": step * 2 * dp,
        "dp_world_size": dp,
        "mp_world_size": mp,
        "checkpoint_parallel_dimensions": {"pp_degree": 1, "tp_degree": mp},
        "ds_config": config,
        "ds_version": "0.19.8",
        **extra,
    }


def optim_states_dict(dp: int) -> dict[str, object]:
    """What ``_save_zero_checkpoint`` saves: ZeRO stage 1 and 2's optimizer state dict (this rank's fp32
    partition, Adam's two moments of it), with its config."""
    return {
        "optimizer_state_dict": {
            "loss_scaler": Call(Global("deepspeed.runtime.fp16.loss_scaler", "LossScaler"), 1.0),
            "dynamic_loss_scale": False,
            "overflow": False,
            "clip_grad": 0.0,
            "base_optimizer_state": {
                "state": {
                    0: {
                        "step": tensor("3", ()),
                        "exp_avg": tensor("1", (90,)),
                        "exp_avg_sq": tensor("2", (90,)),
                    }
                },
                "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-08, "params": [0]}],
            },
            "single_partition_of_fp32_groups": [tensor("0", (90,))],
            "zero_stage": Call(Global("deepspeed.runtime.zero.config", "ZeroStageEnum"), 2),
            "group_paddings": [1],
            "partition_count": dp,
            "ds_version": "0.19.8",
        },
        "ds_config": {"train_micro_batch_size_per_gpu": 2},
        "ds_version": "0.19.8",
    }


def archive(
    name: str, data_pkl: bytes, storages: dict[str, int] | None = None, compress: int = zipfile.ZIP_STORED
) -> bytes:
    """A zip as torch.save writes one: ``name`` the file's name without ``.pt``, ``data.pkl`` first, then
    each storage ``data/<key>`` of its float count."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as z:
        z.writestr(f"{name}/data.pkl", data_pkl)
        z.writestr(f"{name}/.format_version", b"1")
        z.writestr(f"{name}/.storage_alignment", b"64")
        z.writestr(f"{name}/byteorder", b"little")
        for key, floats in (storages or {}).items():
            z.writestr(f"{name}/data/{key}", b"\0\0\x80?" * floats)  # 1.0
        z.writestr(f"{name}/version", b"3\n")
        z.writestr(f"{name}/.data/serialization_id", b"0" * 40)
    return buf.getvalue()


#: The storages of model_states_dict's tensors, and of optim_states_dict's.
MODEL_STORAGES = {str(i): _prod(shape) for i, shape in enumerate(PARAMS.values())}
OPTIM_STORAGES = {"0": 90, "1": 90, "2": 90, "3": 1}


def model_states_file(name: str, step: int, dp: int, **kw: object) -> bytes:
    state = model_states_dict(step, dp, **kw)  # type: ignore[arg-type]
    bf16_optimizer = isinstance(state["optimizer"], dict) and "partition_count" in state["optimizer"]
    storages = {**MODEL_STORAGES, "9": 128} if bf16_optimizer else MODEL_STORAGES
    return archive(name.removesuffix(".pt"), dumps(state), storages)


def optim_states_file(name: str, dp: int) -> bytes:
    return archive(name.removesuffix(".pt"), dumps(optim_states_dict(dp)), OPTIM_STORAGES)


def model_states(mp: int, dp: int | None = None) -> str:
    name = f"mp_rank_{mp:02d}_model_states.pt"
    return name if dp is None else f"zero_pp_rank_{dp}_{name}"


def optim_states(dp: int, mp: int = 0, bf16: bool = False) -> str:
    return f"{'bf16_' if bf16 else ''}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"


def save_files(
    step: int, dp: int = 2, mp: int = 1, stage: int = 2, bf16: bool = False, **extra: object
) -> list[tuple[str, bytes]]:
    """The files of one save, by their path in SAVES, in the order the ranks write them when each goes in
    turn (rank 0's first); ``latest`` last."""
    tag = f"global_step{step}"
    files: list[tuple[str, bytes]] = []
    sharded = stage > 0 or bf16
    for m in range(mp):
        for d in range(dp):
            if stage == 3 or d == 0:
                name = model_states(m, d if stage == 3 else None)
                data = model_states_file(name, step, dp, mp=mp, stage=stage, bf16=bf16, **extra)
                files.append((f"{tag}/{name}", data))
            if sharded:
                name = optim_states(d, m, bf16)
                files.append((f"{tag}/{name}", optim_states_file(name, dp)))
            if sharded and d == 0 and m == 0:
                files.append(("zero_to_fp32.py", b"# DeepSpeed's recovery script\n"))
                files.append(("zero_to_torch.py", b"# DeepSpeed's recovery script\n"))
    files.append(("latest", tag.encode()))
    return files


def write(saves: Path, files: list[tuple[str, bytes]]) -> None:
    for path, data in files:
        target = saves / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def write_save(saves: Path, step: int, **kw: object) -> None:
    """One whole save, written in DeepSpeed's order."""
    write(saves, save_files(step, **kw))  # type: ignore[arg-type]


def colliding(keys: int = 40_000) -> bytes:
    """A model-states file whose client state is a dict of ``keys`` int keys of one hash (k * (2^61 - 1)):
    building it takes the C unpickler time quadratic in ``keys`` inside one call (560 KB: about 20 s)."""
    body = b"".join(dumps(k * ((1 << 61) - 1))[2:-1] + b"N" for k in range(1, keys + 1))
    return archive("mp_rank_00_model_states", dumps(model_states_dict(1, 2, client=Raw(b"}(" + body + b"u"))))
