"""examples/snapshot_train.py: a resumed run continues exactly where the snapshot left off."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import publish.snapshots as snapshots

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "snapshot_train.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("snapshot_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_resume_restores_model_optimizer_and_rng(tmp_path: Path) -> None:
    example = _example()
    rng_before = torch.get_rng_state()
    try:
        full, full_model, _ = example.train(str(tmp_path / "full" / "exec" / "a"), steps=6)

        saves = tmp_path / "cut" / "exec" / "a"
        first, model, optimizer = example.train(str(saves), steps=3)
        assert first == full[:3]
        newest = snapshots.list_valid(saves)[0]
        payload, info = snapshots.load(newest)
        assert info["step"] == 3
        assert _equal(payload["model"], model.state_dict())
        assert _equal(payload["optimizer"], optimizer.state_dict())
        assert _equal(payload["torch_rng"], torch.get_rng_state())
        assert _equal(payload["python_rng"], random.getstate())

        resumed, resumed_model, _ = example.train(str(saves), steps=6, resume=str(newest))
        assert resumed[0][2] == full[3][2]  # the next random draw is the uninterrupted run's
        assert resumed == full[3:]
        assert _equal(resumed_model.state_dict(), full_model.state_dict())
        # keep_last=None, the example's default: publish prune rotates, the library removes nothing
        assert [int(p.name[5:17]) for p in snapshots.list_valid(saves)] == [6, 5, 4, 3, 2, 1]
    finally:
        torch.set_rng_state(rng_before)


def test_the_command_line(tmp_path: Path) -> None:
    saves = tmp_path / "root" / "exec" / "a"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = [sys.executable, str(EXAMPLE), str(saves)]
    out = subprocess.run([*run, "--steps", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    newest = snapshots.list_valid(saves)[0]
    out = subprocess.run(
        [*run, "--steps", "3", "--resume", str(newest)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"resumed from {newest} at step 2"
    assert out.stdout.splitlines()[1].startswith("step 3 loss ")
