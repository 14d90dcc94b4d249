"""A whole job with the snapshot library: the trainer saves, watch publishes, resolve and load resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Watch, run_cli

pytestmark = pytest.mark.torch
EXAMPLE = REPO / "examples" / "snapshot_train.py"


def train(saves: Path, *args: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), str(saves), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_train_publish_resolve_resume(root: Path) -> None:
    pytest.importorskip("torch")
    from publish import snapshots

    saves = root / "exec" / "A"
    w = Watch("-checkpoint", str(root), "-framework", "snapshot", "-interval", "100ms", "-attempt", "A")
    train(saves, "--steps", "3")
    code, err = w.stop()
    assert (code, err) == (0, "")
    newest = snapshots.list_valid(saves)[0]
    assert w.seen[-1].startswith("published ") and w.seen[-1].endswith(f"step 3, {newest})")

    resolved = run_cli("resolve", "-checkpoint", str(root)).out.strip()
    assert resolved == str(newest)
    payload, info = snapshots.load(resolved)
    assert payload["step"] == 3 and info["path"] == resolved

    lines = train(root / "exec" / "B", "--steps", "2", "--resume", resolved)
    assert lines[0] == f"resumed from {resolved} at step 3"
