"""A real Hugging Face Trainer under DDP, for tests/frameworks/test_hf_ddp.py: ``torchrun --nproc_per_node 2 -m
tests.support.hf_ddp_writer OUTPUT_DIR STEPS SLOW``.  A tiny model on CPU (gloo) saves every step; rank 1 writes its
``rng_state_1.pth`` SLOW seconds late, as a rank held up by its file system would, so rank 0's
``trainer_state.json`` and the model are there well before the save is whole."""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from transformers import Trainer, TrainingArguments


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}


class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.full((4,), float(i % 7))
        return {"x": x, "labels": x.sum()}


class SlowRank(Trainer):
    slow = 0.0

    def _save_rng_state(self, output_dir: str) -> None:  # each rank writes rng_state_<rank>.pth here
        if self.args.process_index == 1:
            time.sleep(self.slow)
        super()._save_rng_state(output_dir)


def main() -> None:
    out, steps, slow = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    args = TrainingArguments(
        output_dir=out,
        max_steps=steps,
        save_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
        logging_strategy="no",
        save_only_model=False,
        dataloader_num_workers=0,
        ddp_backend="gloo",
    )
    SlowRank.slow = slow
    SlowRank(model=Tiny(), args=args, train_dataset=Data()).train()
    # The process group is ended before the interpreter is: left to the interpreter's exit, gloo's threads
    # are torn down joinable, and a rank can abort ("terminate called without an active exception").
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
