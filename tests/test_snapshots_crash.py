"""A saving process killed at random points never leaves a snapshot that loads wrong."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch

import publish.snapshots as snapshots

pytestmark = pytest.mark.torch

TRIALS = 120


def content(step: int) -> dict[str, object]:
    return {"step": step, "w": torch.full((256,), float(step)), "tag": f"step {step}"}


def assert_whole(payload: dict[str, object], step: int) -> None:
    assert payload["step"] == step
    assert torch.equal(payload["w"], content(step)["w"])  # type: ignore[arg-type]
    assert payload["tag"] == f"step {step}"


def _saver(root: Path, first: int, done: int) -> None:
    """The child: save snapshots one after another, reporting each save that returned, until killed."""
    try:
        for step in range(first, first + 1000):
            snapshots.save_checkpoint(root, content(step))
            os.write(done, f"{step}\n".encode())
    finally:
        os._exit(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    root = tmp_path / "root"
    newest_returned = -1
    for trial in range(TRIALS):
        # Mostly forward, sometimes behind the newest (an out-of-order save).
        first = trial * 1000 if trial % 7 else max(0, (trial - 2) * 1000 + 500)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _saver(root, first, write_end)
        os.close(write_end)
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as reports:
            returned = [int(line) for line in reports.read().split()]
        if returned:
            newest_returned = max(newest_returned, *returned)

        found = snapshots.load_latest(root)
        if newest_returned >= 0:
            assert found is not None, f"trial {trial}: nothing recovered after saves returned"
        if found is None:
            continue
        payload, info = found
        assert info["step"] >= newest_returned, f"trial {trial}: a save that returned was lost"
        assert_whole(payload, info["step"])
        for path in snapshots.list_valid(root):
            loaded, _ = snapshots.load(path)
            assert_whole(loaded, int(path.name[5:17]))
    assert newest_returned > 0
