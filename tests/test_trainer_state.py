"""trainer_state.json: written exactly as Trainer writes it; every prefix incomplete, never an error."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from publish import trainer_state


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


def test_real_file_parses_with_nan() -> None:
    doc = trainer_state.parse(real_state())
    assert doc["global_step"] == 500
    assert doc["log_history"][0]["loss"] != doc["log_history"][0]["loss"]  # NaN


def test_every_prefix_is_incomplete_never_an_error() -> None:
    data = real_state()
    whole = data.rstrip()
    for cut in range(len(data)):
        prefix = data[:cut]
        if prefix.rstrip() == whole:
            # Only the trailing newline is missing: the document itself is whole.
            assert trainer_state.parse(prefix)["global_step"] == 500
            continue
        with pytest.raises(trainer_state.Incomplete):
            trainer_state.parse(prefix)


def test_prefix_cut_inside_a_multibyte_character_is_incomplete() -> None:
    data = '{"global_step": 1, "s": "\u00e9\u4e2d"}'.encode()
    for cut in range(len(data)):
        with pytest.raises(trainer_state.Incomplete):
            trainer_state.parse(data[:cut])


@pytest.mark.parametrize(
    "text",
    [
        b'{"global_step": 1} x',
        b'{"global_step": 1}{}',
        b'{"global_step" 1}',
        b"[1,]",
        b'{"a": tru e}',
        b'{"a": 01}',
        b'{"a": 1.}',
        b'{"a": "\x01"}',
        b'{"a": "\\x"}',
        b'{"a": nan}',
        b"{'a': 1}",
        b'{"a": 1,}',
        b"\xff\xfe",
    ],
)
def test_other_faults_are_errors(text: bytes) -> None:
    with pytest.raises(ValueError):
        trainer_state.parse(text)


@pytest.mark.parametrize(
    "text",
    [b"", b"  ", b"{", b'{"a', b'{"a": [1, 2', b'{"a": -', b'{"a": -Inf', b'{"a": 1e', b'{"a": "\\u00'],
)
def test_cut_off_documents_are_incomplete(text: bytes) -> None:
    with pytest.raises(trainer_state.Incomplete):
        trainer_state.parse(text)


def test_whitespace_after_the_document_is_fine() -> None:
    assert trainer_state.parse(b'{"global_step": 3}\n\n  \t') == {"global_step": 3}
