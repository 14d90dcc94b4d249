"""Megatron-LM saves shaped as ``save_checkpoint`` (megatron/training/checkpointing.py, Megatron-LM main at
core 0.20.0) writes them, without torch or Megatron: ``iter_<7 digits>/`` folders and the tracker
``latest_checkpointed_iteration.txt`` beside them.

``torch_dist``: ``common.pt`` (a torch.save archive), DCP's storage files and ``.metadata``
(tests/support/dcp_shapes.py), then ``metadata.json``.  Legacy (``--ckpt-format torch``):
``mp_rank_<tp:02d>[_<pp:03d>][_<ep:03d>]/model_optim_rng.pt``, a torch.save archive of a dict whose
``args`` is an ``argparse.Namespace`` pickled as pickle pickles one (NEWOBJ of the class, then its
``__dict__`` by BUILD); ``distrib_optim.pt`` beside each under the distributed optimizer.
tests/frameworks/test_megatron.py checks these against megatron-core's own writer's files.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from tests.support import dcp_shapes
from tests.support import deepspeed_saves as ds
from tests.support.dcp_shapes import Raw

TRACKER = "latest_checkpointed_iteration.txt"
CONFIG = b'{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}'
SHARDS = {"__0_0.distcp": 900, "__0_1.distcp": 700, "__1_0.distcp": 800, "__1_1.distcp": 600}


def folder(step: int) -> str:
    return f"iter_{step:07d}"


def namespace(fields: dict[str, object]) -> Raw:
    """An ``argparse.Namespace`` with ``fields``, as pickle writes one at protocol 2."""
    body = ds.dumps(fields)[2:-1]
    return Raw(b"cargparse\nNamespace\n)\x81" + body + b"b")


def args(
    tp: int = 1, pp: int = 1, ep: int | None = 1, optim: bool = False, **more: object
) -> dict[str, object]:
    fields: dict[str, object] = {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "use_distributed_optimizer": optim,
        "no_save_optim": None,
        "ckpt_format": "torch",
        "seed": 1234,
    }
    if ep is not None:
        fields["expert_model_parallel_size"] = ep
    return {**fields, **more}


def legacy_file(step: int, fields: dict[str, object] | Raw, **more: object) -> bytes:
    """A ``model_optim_rng.pt`` recording ``fields`` as its args."""
    state = {
        "args": fields if isinstance(fields, Raw) else namespace(fields),
        "checkpoint_version": 3.0,
        "iteration": step,
        "model": ds.Ordered({"weight": ds.tensor("0", (4, 8)), "bias": ds.tensor("1", (4,))}),
        "num_floating_point_operations_so_far": 0,
        **more,
    }
    return ds.archive("model_optim_rng", ds.dumps(state), {"0": 32, "1": 4})


def rank_folders(tp: int, pp: int, ep: int) -> list[str]:
    names = []
    for t in range(tp):
        for p in range(pp):
            for e in range(ep):
                name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") + (f"_{e:03d}" if ep > 1 else "")
                names.append(name)
    return names


def legacy_files(
    step: int, tp: int = 1, pp: int = 1, ep: int = 1, optim: bool = False
) -> list[tuple[str, bytes]]:
    """Every file of a legacy save and then the tracker, in the order Megatron-LM writes them."""
    files = []
    for name in rank_folders(tp, pp, ep):
        files.append(
            (f"{folder(step)}/{name}/model_optim_rng.pt", legacy_file(step, args(tp, pp, ep, optim)))
        )
        if optim:
            files.append(
                (f"{folder(step)}/{name}/distrib_optim.pt", ds.archive("distrib_optim", ds.dumps({})))
            )
    return [*files, (TRACKER, str(step).encode())]


def torch_dist_files(step: int) -> list[tuple[str, bytes]]:
    """Every file of a torch_dist save and then the tracker, in the order Megatron-LM writes them."""
    common = ds.archive("common", ds.dumps({"args": namespace(args()), "iteration": step}))
    files = [(f"{folder(step)}/common.pt", common)]
    files += [(f"{folder(step)}/{name}", b"\x01" * size) for name, size in SHARDS.items()]
    files.append((f"{folder(step)}/.metadata", dcp_shapes.metadata_for(SHARDS)))
    files.append((f"{folder(step)}/metadata.json", CONFIG))
    return [*files, (TRACKER, str(step).encode())]


def nemo_name(step: int, tail: str = "") -> str:
    """As NeMo's recipes name a save: ``{model_name}--{val_loss:.2f}-{step}-{consumed_samples}``."""
    return f"megatron_gpt--val_loss=0.00-step={step}-consumed_samples={step * 8}.0{tail}"


IO_JSON = b'{"root": {"type": "ref", "key": "trainer_context_1"}, "objects": {}}'


def nemo_files(step: int, tail: str = "") -> list[tuple[str, bytes]]:
    """NeMo 2's save in its order (NeMo 2.6.0rc0 ``ModelCheckpoint._save_checkpoint``): the unfinished
    marker beside the folder, ``weights/`` (a torch_dist save), ``context/``; removing the marker (the
    last step) is the caller's."""
    name = nemo_name(step, tail)
    weights = [(f"{name}/weights/{p.split('/', 1)[1]}", d) for p, d in torch_dist_files(step)[:-1]]
    context = [(f"{name}/context/io.json", IO_JSON), (f"{name}/context/model.yaml", b"_target_: GPTModel\n")]
    return [(f"{name}-unfinished", b""), *weights, *context]


def write(saves: Path, files: list[tuple[str, bytes]]) -> None:
    for path, data in files:
        (saves / path).parent.mkdir(parents=True, exist_ok=True)
        (saves / path).write_bytes(data)


def hostile_args(call: str) -> Raw:
    """Args whose pickle calls ``call`` (``module\\nname``) with "echo pwned": a crafted file's payload."""
    return Raw(b"c" + call.encode() + b"\n" + pickle.dumps(("echo pwned",), protocol=2)[2:-1] + b"R")
