"""HF Trainer under DDP: each rank writes its own rng_state_<rank>.pth, and rank 0's trainer_state.json can
land before another rank's.  With -world-size N (or WORLD_SIZE), a save is whole only once every rank's is
there; without it, today's rule (trainer_state.json and the shards) holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, base_env, command, run_cli
from tests.support.trainer_saves import hf_save


def last_scan(root: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """run with a COMMAND that does nothing: its scans and its last scan, then exit."""
    cmd = command() or [sys.executable, "-m", "publish"]
    full = {**base_env(), "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [*cmd, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", *flags, "--", "true"],
        env=full, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_save_waits_for_every_ranks_rng_state(root: Path, how: str) -> None:
    save = hf_save(root / "exec/A", 5)
    (save / "rng_state_0.pth").write_bytes(b"r0")
    flags, env = (["-world-size", "2"], None) if how == "flag" else ([], {"WORLD_SIZE": "2"})
    r = last_scan(root, *flags, env=env)
    assert r.returncode == 0 and "published" not in r.stdout, r
    (save / "rng_state_1.pth").write_bytes(b"r1")
    r = last_scan(root, *flags, env=env)
    assert r.returncode == 0 and f"{save})" in r.stdout, r


def test_without_a_world_size_trainer_state_decides(root: Path) -> None:
    save = hf_save(root / "exec/A", 5)
    (save / "rng_state_0.pth").write_bytes(b"r0")
    r = last_scan(root)
    assert r.returncode == 0 and f"{save})" in r.stdout, r


def test_a_world_size_of_one_needs_no_ranked_file(root: Path) -> None:
    save = hf_save(root / "exec/A", 5)  # a single process writes rng_state.pth, not rng_state_0.pth
    r = last_scan(root, "-world-size", "1")
    assert r.returncode == 0 and f"{save})" in r.stdout, r


@pytest.mark.parametrize("value", ["0", "-1", "x", "99999999999"])
def test_a_bad_world_size_is_a_usage_error(root: Path, value: str) -> None:
    r = run_cli("watch", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-world-size", value)
    assert r.code == 2 and "-world-size" in r.err, r
    r = run_cli(
        "watch", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", env={"WORLD_SIZE": value}
    )
    assert r.code == 2 and "WORLD_SIZE" in r.err, r
