"""Time the trainer_state.json check against ``json.loads`` on the same bytes.

    python bench/trainer_state.py [--size-mb 10] [--cuts 1000] [--rounds 3] [--seed 1] [--write docs/perf-trainer-state.md]
                                  [--check]

The document is what Trainer writes for a long run with ``logging_steps=1`` (``json.dumps(..., indent=2,
sort_keys=True)`` of a TrainerState whose log_history holds one entry per step, NaN losses among them), grown
to ``--size-mb`` MB.  The inputs are the complete file and the file cut at ``--cuts`` random byte offsets
(most cuts are incomplete; a cut that leaves a whole document, or ends inside a character, is classified too).

What is compared, per round: the total time ``trainer_state.parse`` takes to classify the 1 + cuts inputs
(complete, incomplete or a fault) against the total time of as many ``json.loads`` of the complete bytes, the
two interleaved input by input so load on the machine falls on both alike.  The figure is the median of the
rounds' ratios.  Target: at most 2x.  ``--write`` puts the table between the bench markers of a markdown file;
``--check`` exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.frameworks.parse import trainer_state  # noqa: E402

BEGIN, END = "<!-- bench/trainer_state.py: begin -->", "<!-- bench/trainer_state.py: end -->"
TARGET = 2.0


def document(size: int) -> bytes:
    """A trainer_state.json of about ``size`` bytes, written as Trainer's save_to_json writes it."""
    rng = random.Random(0)
    history = []
    step = 0
    per_entry = 156
    for step in range(1, size // per_entry + 1):
        loss = float("nan") if step % 997 == 0 else round(rng.uniform(0.5, 3.0), 4)
        history.append(
            {
                "epoch": round(step / 5000, 6),
                "grad_norm": rng.uniform(0.1, 10.0),
                "learning_rate": 5e-05 * (1 - step / 10**6),
                "loss": loss,
                "step": step,
            }
        )
    state = {
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": round(step / 5000, 6),
        "eval_steps": 500,
        "global_step": step,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": history,
        "logging_steps": 1,
        "max_steps": 10**6,
        "num_input_tokens_seen": 0,
        "num_train_epochs": 3,
        "save_steps": 500,
        "stateful_callbacks": {"TrainerControl": {"args": {"should_save": True}, "attributes": {}}},
        "total_flos": 1.2e18,
        "train_batch_size": 8,
        "trial_name": None,
        "trial_params": None,
    }
    return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()


def classify(data: bytes) -> str:
    try:
        trainer_state.parse(data)
        return "complete"
    except trainer_state.Incomplete:
        return "incomplete"
    except ValueError:
        return "fault"


def one_round(whole: bytes, inputs: list[bytes]) -> tuple[float, float, dict[str, int]]:
    """(seconds of json.loads over len(inputs) loads of ``whole``, seconds of classifying every input, counts)."""
    loads = ours = 0.0
    counts: dict[str, int] = {}
    clock = time.perf_counter
    for data in inputs:
        t0 = clock()
        json.loads(whole)
        t1 = clock()
        verdict = classify(data)
        t2 = clock()
        loads += t1 - t0
        ours += t2 - t1
        counts[verdict] = counts.get(verdict, 0) + 1
    return loads, ours, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=10.0)
    ap.add_argument("--cuts", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    whole = document(int(a.size_mb * 1_000_000))
    rng = random.Random(a.seed)
    inputs = [whole] + [whole[: rng.randrange(len(whole))] for _ in range(a.cuts)]
    assert classify(whole) == "complete"

    rows = []
    for r in range(a.rounds):
        loads, ours, counts = one_round(whole, inputs)
        rows.append((loads, ours, ours / loads, counts))
        print(
            f"round {r + 1}: json.loads {loads:.2f} s, classify {ours:.2f} s, ratio {ours / loads:.2f}x {counts}"
        )
    ratio = statistics.median(row[2] for row in rows)
    met = ratio <= TARGET
    n = len(inputs)
    table = [
        BEGIN,
        "",
        f"{len(whole):,} bytes of trainer_state.json, {n:,} inputs (the complete file and {a.cuts:,} random cuts),"
        f" {a.rounds} rounds; machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs,"
        f" load average {os.getloadavg()[0]:.2f}; Python {platform.python_version()}.",
        "",
        "| round | json.loads x"
        + f"{n:,}"
        + " (complete bytes) | classify the "
        + f"{n:,}"
        + " inputs | ratio | verdicts |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, (loads, ours, r, counts) in enumerate(rows, 1):
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        table.append(f"| {i} | {loads:.2f} s | {ours:.2f} s | {r:.2f}x | {shown} |")
    table += [
        "",
        f"Median ratio {ratio:.2f}x (target <= {TARGET:.0f}x): {'met' if met else 'MISSED'}.",
        "",
        END,
    ]
    print("\n".join(table))
    if a.write:
        text = a.write.read_text() if a.write.exists() else f"# trainer_state.json check\n\n{BEGIN}\n{END}\n"
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        a.write.write_text(head + "\n".join(table) + tail)
    return 1 if a.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
