"""Train a tiny model with a real DeepSpeed engine on the CPU, saving every step: run under torchrun,
``torchrun --standalone --nproc_per_node N -m tests.support.deepspeed_writer STEPS RUN... [--slow-rank R --slow
SECONDS]``, where each RUN is ``DIR``, ``DIR:stage=S`` or ``DIR:stage=S:bf16`` (ZeRO stage 2 and fp32 by
default), ``DIR:pipe[:stage=S]`` (a pipeline of two stages) or ``DIR:moe:stage=S`` (one MoE layer of four
experts over two expert-parallel ranks): one engine after another in the same processes, each saving STEPS times into its DIR.

Each rank joins a gloo process group; ``engine.save_checkpoint(DIR)`` writes ``DIR/global_step<N>/`` and
``DIR/latest`` as it does on GPUs.  ``--slow-rank R`` makes rank R's file system slow: each of its
``torch.save`` calls writes the first half of the file, waits SECONDS, then writes the rest (what a rank
on a loaded parallel file system does), so rank 0 writes ``latest`` while R's shard is half-written.

DeepSpeed's CPU accelerator builds a shared-memory all-reduce kernel with ninja and a C++ compiler on first
use (``deepspeed.comm.torch.build_shm_op``, a minute or two); it only speeds up inference collectives and
has nothing to do with checkpoints, so it is not built here (an engine without it uses gloo's own).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("steps", type=int)
    p.add_argument("runs", nargs="+")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow", type=float, default=0.0)
    args = p.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

    import deepspeed
    import deepspeed.comm.torch  # noqa: F401 - the attribute deepspeed.comm.torch is torch itself
    import torch

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined] # see above
    if int(os.environ["RANK"]) == args.slow_rank:
        _slow_saves(torch, args.slow)
    deepspeed.init_distributed(dist_backend="gloo")
    for run in args.runs:
        out, *options = run.split(":")
        stage = next((int(o[6:]) for o in options if o.startswith("stage=")), 2)
        bf16 = "bf16" in options
        torch.manual_seed(0)
        if "pipe" in options:
            _pipeline(deepspeed, torch, out, args.steps, stage)
            continue
        if "moe" in options:
            _moe(deepspeed, torch, out, args.steps, stage)
            continue
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        config: dict[str, object] = {
            "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": stage},
        }
        if bf16:
            config["bf16"] = {"enabled": True}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        dtype = torch.bfloat16 if bf16 else torch.float32
        for _ in range(args.steps):
            x, y = torch.randn(2, 8, dtype=dtype), torch.randn(2, 2, dtype=dtype)
            loss = ((engine(x) - y) ** 2).mean()
            engine.backward(loss)
            engine.step()
            engine.save_checkpoint(out)
        engine.destroy()
    # The process group ended before the interpreter: left to exit, gloo's threads may still be joinable
    # when their objects go, and a rank then aborts ("terminate called without an active exception").
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _pipeline(deepspeed: Any, torch: Any, out: str, steps: int, stage: int) -> None:
    """A PipelineModule of four layers (one without parameters) over two stages, one per rank: each
    stage's data-parallel rank 0 writes ``layer_<n>-model_states.pt`` for its layers."""
    from deepspeed.pipe import PipelineModule

    layers = [torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 2)]
    model = PipelineModule(layers=layers, num_stages=2, loss_fn=torch.nn.MSELoss())
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    def batches() -> Any:
        while True:
            yield torch.randn(2, 8), torch.randn(2, 2)

    data = batches()
    for _ in range(steps):
        engine.train_batch(data)
        engine.save_checkpoint(out)


def _moe(deepspeed: Any, torch: Any, out: str, steps: int, stage: int) -> None:
    """A model with one MoE layer of four experts over two expert-parallel ranks: each rank writes
    ``layer_0_expert_<e>_mp_rank_00_model_states.pt`` for its two experts (and, without ZeRO, its
    ``expp_rank_<r>_mp_rank_00_optim_states.pt``)."""
    from deepspeed.moe.layer import MoE
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    class Model(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(8, 8)
            expert = torch.nn.Linear(8, 8)
            self.moe = MoE(hidden_size=8, expert=expert, num_experts=4, ep_size=2, k=1, min_capacity=0)
            self.out = torch.nn.Linear(8, 2)

        def forward(self, x: Any) -> Any:
            hidden, _, _ = self.moe(self.inp(x))
            return self.out(hidden)

    model = Model()
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "p"}
    )
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for _ in range(steps):
        x, y = torch.randn(2, 8), torch.randn(2, 2)
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        engine.step()
        engine.save_checkpoint(out)


def _slow_saves(torch: object, seconds: float) -> None:
    """This rank's torch.save writes half a file, waits ``seconds``, then writes the rest."""
    import io

    real = torch.save  # type: ignore[attr-defined]

    def save(obj: object, f: object, *a: object, **kw: object) -> None:
        if not isinstance(f, (str, os.PathLike)):
            real(obj, f, *a, **kw)
            return
        buf = io.BytesIO()
        real(obj, buf, *a, **kw)
        data = buf.getvalue()
        with open(f, "wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            time.sleep(seconds)
            out.write(data[len(data) // 2 :])

    torch.save = save  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
