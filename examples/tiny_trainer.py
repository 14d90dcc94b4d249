"""A stand-in for a Hugging Face Trainer: writes checkpoint-<step>/ saves the way Trainer does.

Each save gets its weights first and trainer_state.json last, written in two halves with a pause between, so
a watcher sees saves that are still being written.  It resumes from a save folder given with --resume.
On SIGTERM it finishes the step (and any save under way), saves once more, and exits 143.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time


def trainer_state(step: int, losses: list[float]) -> str:
    state = {
        "best_metric": None,
        "epoch": step / 100,
        "global_step": step,
        "log_history": [{"loss": loss, "step": i + 1} for i, loss in enumerate(losses)],
        "max_steps": 1000,
        "total_flos": 0.0,
    }
    # Trainer writes json.dumps(asdict(state), indent=2, sort_keys=True) + "\n"; a diverged loss is a bare NaN.
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def save(output_dir: str, step: int, losses: list[float]) -> None:
    folder = os.path.join(output_dir, f"checkpoint-{step}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(os.urandom(1024))
    text = trainer_state(step, losses)
    with open(os.path.join(folder, "trainer_state.json"), "w") as f:
        f.write(text[: len(text) // 2])
        f.flush()
        time.sleep(0.3)
        f.write(text[len(text) // 2 :])
    print(f"trainer: saved {folder}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    # publish run gives the folder in PUBLISH_SAVES; the manual recipe passes it as an argument
    parser.add_argument("output_dir", nargs="?", default=os.environ.get("PUBLISH_SAVES", ""))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--resume", default="")
    args = parser.parse_args()
    if not args.output_dir:
        parser.error("no output_dir and no PUBLISH_SAVES")
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, frame: stop.append(sig))  # a second SIGTERM changes nothing

    start = 0
    if args.resume:
        with open(os.path.join(args.resume, "trainer_state.json")) as f:
            start = json.load(f)["global_step"]
        print(f"trainer: resuming from {args.resume} at step {start}", flush=True)
    else:
        print("trainer: starting from step 0", flush=True)
    losses: list[float] = []
    step = start
    while step < start + args.steps:
        step += 1
        losses.append(math.nan if step % 5 == 0 else 1.0 / step)
        time.sleep(0.1)
        if stop:
            save(args.output_dir, step, losses)
            print(f"trainer: stopped by SIGTERM at step {step}", flush=True)
            sys.exit(128 + signal.SIGTERM)
        if step % args.save_every == 0:
            save(args.output_dir, step, losses)


if __name__ == "__main__":
    main()
