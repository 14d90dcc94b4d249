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
    """The child: save snapshots one after another, reporting each save that returned (its step and the
    monotonic time it returned at), until killed."""
    try:
        for step in range(first, first + 1000):
            snapshots.save_checkpoint(root, content(step))
            os.write(done, f"{step} {time.monotonic()}\n".encode())
    finally:
        os._exit(0)


SAVES_PER_WINDOW = 3  # a kill lands anywhere in the first few saves of a child, as 0-30 ms did unloaded


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    root = tmp_path / "root"
    newest_returned = -1
    # The window follows how long a save takes now (the machine may be busy): each trial's reports give the
    # time each save took; a trial killed before its first save returned widens the window.
    per_save = 0.01
    for trial in range(TRIALS):
        # Mostly forward, sometimes behind the newest (an out-of-order save).
        first = trial * 1000 if trial % 7 else max(0, (trial - 2) * 1000 + 500)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _saver(root, first, write_end)
        os.close(write_end)
        started = time.monotonic()
        delay = rng.uniform(0.0, SAVES_PER_WINDOW * per_save)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as reports:
            lines = [line.split() for line in reports.read().splitlines()]
        returned = [int(step) for step, _ in lines]
        if returned:
            newest_returned = max(newest_returned, *returned)
            times = [started] + [float(at) for _, at in lines]
            took = max(b - a for a, b in zip(times, times[1:]))
            per_save = min(max(per_save * 0.7 + took * 0.3, 0.002), 5.0)
        elif delay > SAVES_PER_WINDOW * per_save * 0.5:
            per_save = min(
                per_save * 1.5, 5.0
            )  # killed late in the window yet nothing returned: a save is slower now

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
