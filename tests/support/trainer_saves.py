"""Hugging Face Trainer saves for the tests: trainer_state.json written as Trainer writes it, and a
checkpoint-N folder holding it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class TrainerState:
    """The fields transformers' TrainerState has, written the way its save_to_json writes them."""

    epoch: float | None = 1.5
    global_step: int = 500
    max_steps: int = 1000
    logging_steps: int = 10
    eval_steps: int = 500
    save_steps: int = 500
    train_batch_size: int = 8
    num_train_epochs: int = 3
    num_input_tokens_seen: int = 0
    total_flos: float = 1.2e15
    log_history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    best_metric: float | None = None
    best_model_checkpoint: str | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str | None = None
    trial_params: dict[str, Any] | None = None
    stateful_callbacks: dict[str, Any] = dataclasses.field(default_factory=dict)

    def save_to_json_text(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


def real_state(step: int = 500) -> bytes:
    state = TrainerState(global_step=step)
    state.log_history = [
        {"epoch": 0.1, "grad_norm": float("nan"), "learning_rate": 5e-05, "loss": float("nan"), "step": 10},
        {"epoch": 0.2, "grad_norm": float("inf"), "loss": float("-inf"), "step": 20},
        {"epoch": 0.3, "loss": 2.25, "note": 'caf\u00e9 "quoted" \\ back', "step": 30},
    ]
    state.stateful_callbacks = {"TrainerControl": {"args": {"should_save": True}, "attributes": {}}}
    return state.save_to_json_text().encode("utf-8")


def hf_save(saves: Path, step: int, state: bytes | None = None) -> Path:
    folder = saves / f"checkpoint-{step}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"w")
    if state is None:
        state = real_state(step)
    (folder / "trainer_state.json").write_bytes(state)
    return folder
