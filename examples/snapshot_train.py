"""A tiny training loop that saves with publish.snapshots and resumes from one snapshot directory.

    python examples/snapshot_train.py SAVES [--steps N] [--resume SNAPSHOT_DIR] [--keep-last K]

SAVES is where snapshots go (under a checkpoint root: ``$CHECKPOINT/exec/$DISPATCH_ATTEMPT``); SNAPSHOT_DIR
is what ``publish resolve`` printed.  Model, optimizer and RNG state are restored, so a resumed run makes
exactly the updates and random draws the uninterrupted run would have made.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

import torch

from publish.snapshots import load, save_checkpoint

SEED = 0


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(SEED)
    random.seed(SEED)
    model = torch.nn.Linear(8, 1)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def state(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What a snapshot holds: only what weights-only loading accepts."""
    return {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }


def restore(payload: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["torch_rng"])
    random.setstate(payload["python_rng"])
    return int(payload["step"])


def train(
    saves: str, steps: int, resume: str | None = None, keep_last: int | None = None
) -> tuple[list[tuple[int, float, float]], torch.nn.Module, torch.optim.Optimizer]:
    """Train up to ``steps``, saving after every step; returns (step, loss, first random draw) per step."""
    model, optimizer = build()
    start = 0
    if resume:
        payload, info = load(resume)
        start = restore(payload, model, optimizer)
        print(f"resumed from {info['path']} at step {start}", flush=True)
    history = []
    for step in range(start + 1, steps + 1):
        x = torch.randn(32, 8)
        y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(32, 1) + random.gauss(0.0, 0.01)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append((step, loss.item(), x[0, 0].item()))
        path = save_checkpoint(saves, state(step, model, optimizer), keep_last=keep_last)
        print(f"step {step} loss {loss.item():.6f} saved {path}", flush=True)
    return history, model, optimizer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saves", help="directory for the snapshots, e.g. $CHECKPOINT/exec/$DISPATCH_ATTEMPT")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--resume", help="a snapshot directory to resume from (what publish resolve printed)")
    parser.add_argument(
        "--keep-last",
        type=int,
        default=None,
        help="retention by the library (default: none, publish prune rotates)",
    )
    args = parser.parse_args(argv)
    train(args.saves, args.steps, args.resume or None, args.keep_last)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
