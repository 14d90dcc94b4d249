"""Retention after a restart: older snapshots are checked by their READY, manifest and payload digest, with
bounded memory, never deserialised; what that check refuses is left in place as before."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import torch

import publish.snapshots as snapshots
from publish.snapshots import _payload
from tests.conftest import need

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]


def payload_for(step: int, elements: int = 64) -> dict[str, Any]:
    return {"step": step, "w": torch.arange(elements, dtype=torch.float32) + step}


def steps(paths: list[Path]) -> list[int]:
    return [int(p.name[5:17]) for p in paths]


def restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget what this process verified, as a new process would."""
    monkeypatch.setattr(snapshots, "_verified", {})


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = torch.load

    def counting(f: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(f)
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return calls


def flip(path: Path, where: int) -> None:
    data = bytearray(path.read_bytes())
    data[where % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


def test_the_first_save_after_a_restart_does_not_load_older_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for step in (1, 2, 3):
        snapshots.save_checkpoint(tmp_path, payload_for(step), keep_last=3)
    restart(monkeypatch)
    calls = count_loads(monkeypatch)
    new = snapshots.save_checkpoint(tmp_path, payload_for(4))
    assert len(calls) == 1  # the new snapshot's own verification, as the contract asks
    monkeypatch.undo()
    assert steps(snapshots.list_valid(tmp_path)) == [4, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [new.name, snapshots.list_valid(tmp_path)[1].name]
    )


@pytest.mark.parametrize("where", [0, 1 << 12, -1], ids=["first", "middle", "last"])
def test_a_corrupt_byte_in_an_older_snapshot_is_found_by_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, where: int
) -> None:
    made = [snapshots.save_checkpoint(tmp_path, payload_for(s, 4096), keep_last=3) for s in (1, 2, 3)]
    flip(made[1] / "checkpoint.pt", where)
    restart(monkeypatch)
    calls = count_loads(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        snapshots.save_checkpoint(tmp_path, payload_for(4))
    assert len(calls) == 1
    monkeypatch.undo()
    # 2 is corrupt: left in place, not counted, so the newest two valid ones are 4 and 3; 1 goes.
    assert sorted(os.listdir(made[1])) == ["READY", "checkpoint.pt", "manifest.json"]
    assert not made[0].exists()
    assert f"retention: left {made[1]} in place: {made[1]}/checkpoint.pt: SHA-256 differs" in caplog.text
    assert steps(snapshots.list_valid(tmp_path)) == [4, 3]


def test_a_payload_of_another_size_is_left_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [snapshots.save_checkpoint(tmp_path, payload_for(s), keep_last=3) for s in (1, 2)]
    with open(made[0] / "checkpoint.pt", "ab") as f:
        f.write(b"x")
    with open(made[1] / "checkpoint.pt", "r+b") as f:
        f.truncate(10)
    restart(monkeypatch)
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert all((d / "READY").exists() for d in made)  # neither was good: both stay beside the new one


def test_the_new_snapshot_is_kept_when_every_older_one_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [snapshots.save_checkpoint(tmp_path, payload_for(s), keep_last=3) for s in (1, 2, 3)]
    for d in made:
        flip(d / "checkpoint.pt", 100)
    restart(monkeypatch)
    snapshots.save_checkpoint(tmp_path, payload_for(4))
    assert all((d / "READY").exists() for d in made)
    assert steps(snapshots.list_valid(tmp_path)) == [4]


def test_a_checked_snapshot_changed_before_removal_is_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = snapshots.save_checkpoint(tmp_path, payload_for(1))
    snapshots.save_checkpoint(tmp_path, payload_for(2))
    restart(monkeypatch)
    real = _payload.check_digests

    def check_then_change(jobs: Any, threads: int) -> Any:
        results = real(jobs, threads)
        with open(old / "checkpoint.pt", "r+b") as f:  # rewritten between the check and the removal
            f.write(f.read(1))
        return results

    monkeypatch.setattr(_payload, "check_digests", check_then_change)
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert (old / "READY").exists()


def test_the_digest_check_holds_one_small_buffer_whatever_the_size(tmp_path: Path) -> None:
    directory = snapshots.save_checkpoint(
        tmp_path, {"step": 1, "w": torch.zeros(16 << 20, dtype=torch.uint8)}
    )
    manifest = snapshots._read_meta(str(directory), directory.name).manifest
    assert manifest["bytes"] > 16 << 20
    tracemalloc.start()
    try:
        _payload.check_digest(str(directory / "checkpoint.pt"), manifest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * _payload._DIGEST_CHUNK


def test_a_restarted_process_does_not_hold_older_payloads_in_memory(tmp_path: Path) -> None:
    """The peak memory of the first save after a restart does not grow with the older snapshots' size."""
    need(os.path.exists("/proc/self/clear_refs"), "Linux's /proc/self/clear_refs resets the peak RSS")
    for step in (1, 2):
        snapshots.save_checkpoint(tmp_path, payload_for(step, 48 << 20), keep_last=2)  # 192 MiB each
    # The peak is reset after torch's import (whose own peak is higher than what is measured here).
    script = textwrap.dedent(
        f"""
        import torch
        import publish.snapshots as snapshots
        def peak_kib():
            with open("/proc/self/status") as f:
                return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = peak_kib()
        snapshots.save_checkpoint({str(tmp_path)!r}, {{"step": 3, "w": torch.zeros(16)}})
        print(peak_kib() - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    grew_kib = int(out.stdout.strip())
    assert grew_kib < 64 << 10, f"peak memory grew by {grew_kib} KiB"
    assert steps(snapshots.list_valid(tmp_path)) == [3, 2]


def wait_for(condition: Any, seconds: float = 20.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_the_first_save_checks_older_snapshots_while_the_new_one_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from publish.snapshots import _save

    made = [snapshots.save_checkpoint(tmp_path, payload_for(s), keep_last=3) for s in (1, 2)]
    restart(monkeypatch)
    real = _save.write
    seen: list[bool] = []

    def write_once_checked(*args: Any) -> Any:
        # The older snapshots' digests are checked on another thread before this write ends.
        seen.append(wait_for(lambda: all(str(d) in snapshots._verified for d in made)))
        return real(*args)

    monkeypatch.setattr(_save, "write", write_once_checked)
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert seen == [True]
    assert steps(snapshots.list_valid(tmp_path)) == [3, 2]


def test_a_snapshot_changed_after_the_early_check_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from publish.snapshots import _save

    made = [snapshots.save_checkpoint(tmp_path, payload_for(s, 4096), keep_last=3) for s in (1, 2)]
    restart(monkeypatch)
    real = _save.write

    def corrupt_after_the_check(*args: Any) -> Any:
        assert wait_for(lambda: str(made[0]) in snapshots._verified)
        flip(made[0] / "checkpoint.pt", 100)  # after the early check said it was good
        return real(*args)

    monkeypatch.setattr(_save, "write", corrupt_after_the_check)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        snapshots.save_checkpoint(tmp_path, payload_for(3), keep_last=2)
    # Retention hashed it again: corrupt now, so left in place and not counted; 3 and 2 are kept.
    assert sorted(os.listdir(made[0])) == ["READY", "checkpoint.pt", "manifest.json"]
    assert f"retention: left {made[0]} in place: {made[0]}/checkpoint.pt: SHA-256 differs" in caplog.text
    assert steps(snapshots.list_valid(tmp_path)) == [3, 2]
