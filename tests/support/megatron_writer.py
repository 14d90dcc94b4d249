"""Write Megatron-LM saves on the CPU with megatron-core's own writer: run under torchrun,
``torchrun --standalone --nproc_per_node 2 -m tests.support.megatron_writer OUT FORMAT STEPS [--async]
[--stop-before-tracker]``, FORMAT ``torch_dist``, ``legacy-tp`` / ``legacy-pp`` (two tensor- or two
pipeline-parallel ranks), or ``nemo``.

What runs is what Megatron-LM's ``save_checkpoint`` (megatron/training/checkpointing.py) does for each
format, in its order; megatron.training itself is not in the megatron-core package (it needs the whole
Megatron-LM tree, a tokenizer and a GPT model), so its steps are followed here:

- ``torch_dist``: rank 0 makes ``OUT/iter_<7 digits>/``; every rank calls megatron-core's
  ``dist_checkpointing.save`` (the real one: ``common.pt``, DCP's ``__<rank>_<n>.distcp`` and
  ``.metadata`` through its ``TorchDistSaveShardedStrategy``, then ``metadata.json``) with a state dict
  whose tensors are sharded over the two ranks as tensor-parallel weights are; then a barrier, then rank 0
  writes the tracker ``OUT/latest_checkpointed_iteration.txt`` with a plain ``open(..., 'w')``.  With
  ``--async`` the save is ``async_sharded_save=True``: its request runs after the next "training step"
  and the tracker is written by a finalize function added after megatron-core's own (which writes
  ``metadata.json``), as ``--async-save`` does.  ``--stop-before-tracker`` ends the job after the last save's
  files and before its tracker (a job killed before its async save finalized).
- ``legacy-*``: each rank ``torch.save``\\ s ``generate_state_dict``'s dict (``args`` an
  ``argparse.Namespace`` holding the parallel sizes, ``checkpoint_version``, ``iteration``, ``model``,
  ``optimizer``, ``opt_param_scheduler``, ``rng_state`` with numpy's state) into
  ``mp_rank_<tp:02d>[_<pp:03d>]/model_optim_rng.pt``, then a barrier, then the tracker.

- ``nemo``: NeMo 2's ``ModelCheckpoint._save_checkpoint`` (nemo/lightning/pytorch/callbacks/
  model_checkpoint.py, NeMo 2.6.0rc0) around the same megatron-core writer: rank 0 touches
  ``<folder>-unfinished`` and all meet at a barrier; ``MegatronCheckpointIO.save_checkpoint`` (every rank
  makes ``<folder>/weights`` and calls ``dist_checkpointing.save`` into it); rank 0 dumps ``context/``
  (``io.json``, then ``model.yaml``); then, after a barrier or in the async request's finalize step, rank 0
  removes the marker.  The folder is named as NeMo's recipes name it.  ``--stop-before-tracker`` leaves the
  last save's marker (a job killed before it finalized).  NeMo itself is not installed (its dependencies
  are the whole NeMo stack); its steps are followed here.

Two stand-ins, for the CPU: megatron-core's writer calls ``torch.cuda.synchronize()`` before it writes and
builds its failure count on ``torch.cuda.current_device()``; here the first does nothing (there is no
device to wait for) and the second answers ``"cpu"``, so that count is all-reduced over gloo.
"""

from __future__ import annotations

import argparse
import os
import sys

TRACKER = "latest_checkpointed_iteration.txt"


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("format", choices=["torch_dist", "legacy-tp", "legacy-pp", "nemo"])
    p.add_argument("steps", type=int)
    p.add_argument("--async", dest="async_save", action="store_true")
    p.add_argument("--stop-before-tracker", action="store_true")
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]  # the stand-ins (see above)
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4 * world)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pending: list[object] = []
    for iteration in range(1, args.steps + 1):
        loss = model(torch.randn(2, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        for request in pending:  # an async save runs while the next step trains, then finalizes
            request.execute_sync()  # type: ignore[attr-defined]
        pending.clear()
        last = iteration == args.steps
        folder = os.path.join(args.out, f"iter_{iteration:07d}")
        tracker = _tracker(args.out, iteration) if rank == 0 else (lambda: None)
        if args.format == "nemo":
            folder = os.path.join(args.out, nemo_name(iteration))
            tracker = _unfinished(folder, rank)
            dist.barrier()  # set_checkpoint_unfinished_marker(barrier_after=True)
        if args.format in ("torch_dist", "nemo"):
            weights = os.path.join(folder, "weights") if args.format == "nemo" else folder
            request = _torch_dist(model, rank, world, weights, iteration, args.async_save)
            if args.format == "nemo" and rank == 0:
                _context(folder)
            if request is not None:
                if not (last and args.stop_before_tracker):
                    request.add_finalize_fn(tracker)
                pending.append(request)
                continue
        else:
            _legacy(model, optimizer, rank, world, folder, iteration, args.format)
        dist.barrier()
        if not (last and args.stop_before_tracker):
            tracker()
    for request in pending:
        request.execute_sync()  # type: ignore[attr-defined]
    dist.barrier()
    dist.destroy_process_group()


def nemo_name(step: int) -> str:
    """NeMo's recipes' ``{model_name}--{val_loss:.2f}-{step}-{consumed_samples}``."""
    return f"megatron_gpt--val_loss=0.00-step={step}-consumed_samples={step * 8}.0"


def _unfinished(folder: str, rank: int) -> object:
    """Rank 0 touches ``<folder>-unfinished`` now; the function returned removes it (on rank 0)."""
    marker = folder + "-unfinished"
    if rank == 0:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "a").close()

    def remove() -> None:
        if rank == 0 and os.path.exists(marker):
            os.unlink(marker)

    return remove


def _context(folder: str) -> None:
    """TrainerContext.io_dump: ``context/io.json`` (a plain write), then ``context/model.yaml``."""
    import json

    context = os.path.join(folder, "context")
    os.makedirs(context, exist_ok=True)
    with open(os.path.join(context, "io.json"), "w") as f:
        f.write(json.dumps({"root": {"type": "ref", "key": "trainer_context_1"}, "objects": {}}))
    with open(os.path.join(context, "model.yaml"), "w") as f:
        f.write("_target_: nemo.collections.llm.gpt.model.base.GPTModel\n")


def _tracker(out: str, iteration: int) -> object:
    def write() -> None:
        with open(os.path.join(out, TRACKER), "w") as f:
            f.write(str(iteration))

    return write


def _namespace(world: int, form: str) -> argparse.Namespace:
    tp, pp = (world, 1) if form != "legacy-pp" else (1, world)
    return argparse.Namespace(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        expert_model_parallel_size=1,
        use_distributed_optimizer=False,
        no_save_optim=None,
        ckpt_format="torch" if form.startswith("legacy") else "torch_dist",
        save="out",
        params_dtype=None,
        seed=1234,
    )


def _torch_dist(
    model: object, rank: int, world: int, folder: str, iteration: int, async_save: bool
) -> object:
    import torch as t
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    if rank == 0 or folder.endswith("/weights"):  # Megatron-LM: rank 0; NeMo: every rank (exist_ok)
        os.makedirs(folder, exist_ok=True)
    t.distributed.barrier()
    weight = model.weight.detach()  # type: ignore[attr-defined]
    bias = model.bias.detach()  # type: ignore[attr-defined]
    rows = weight.shape[0] // world
    state = {
        "args": _namespace(world, "torch_dist"),
        "checkpoint_version": 3.0,
        "iteration": iteration,
        "model": {
            "weight": ShardedTensor.from_rank_offsets(
                "model.weight",
                weight[rank * rows : (rank + 1) * rows].clone(),
                (0, rank, world),
                replica_id=0,
            ),
            "bias": ShardedTensor.from_rank_offsets(
                "model.bias", bias[rank * rows : (rank + 1) * rows].clone(), (0, rank, world), replica_id=0
            ),
        },
        "num_floating_point_operations_so_far": 0,
    }
    return dist_checkpointing.save(state, folder, async_sharded_save=async_save)


def _legacy(
    model: object,
    optimizer: object,
    rank: int,
    world: int,
    folder: str,
    iteration: int,
    form: str,
) -> None:
    import random

    import numpy as np
    import torch as t

    name = f"mp_rank_{rank:02d}" if form == "legacy-tp" else f"mp_rank_00_{rank:03d}"
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    state = {
        "args": _namespace(world, form),
        "checkpoint_version": 3.0,
        "iteration": iteration,
        "model": model.state_dict(),  # type: ignore[attr-defined]
        "optimizer": optimizer.state_dict(),  # type: ignore[attr-defined]
        "opt_param_scheduler": {"max_lr": 1e-3, "num_steps": iteration},
        "rng_state": [
            {
                "random_rng_state": random.getstate(),
                "np_rng_state": np.random.get_state(),
                "torch_rng_state": t.get_rng_state(),
                "rng_tracker_states": {},
            }
        ],
        "num_floating_point_operations_so_far": 0,
    }
    t.save(state, os.path.join(folder, name, "model_optim_rng.pt"))


if __name__ == "__main__":  # megatron-core's writer starts helper processes that import this module again
    main(sys.argv[1:])
