"""A real Hugging Face Trainer under DDP (torchrun, two ranks, gloo on CPU) saving every step, with rank 1's
``rng_state_1.pth`` landing about 0.3 s after rank 0's ``trainer_state.json``: with ``-world-size 2`` (or
``WORLD_SIZE``) watch publishes each save only once every rank's file is there, and publishes them all.
Without it, trainer_state.json alone decides, and the same run publishes saves still missing a rank's file
(the hazard docs/frameworks.md names)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Watch, need
from tests.support.framework_scans import run_tree, torchrun

pytestmark = pytest.mark.torch

STEPS = 5


def _trainer(out: Path, log: Path) -> None:
    """The trainer under torchrun, to its end; none of its processes is left, whatever happens."""
    try:
        import accelerate  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        need(False, "transformers and accelerate are not installed (pip install '.[test]')")
    code = run_tree(
        torchrun() + ["-m", "tests.support.hf_ddp_writer", str(out), str(STEPS), "0.3"],
        log,
        {**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert code == 0, log.read_text(errors="replace")[-4000:]


def _watched(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> list[tuple[Path, int]]:
    """Run the trainer under watch; each publication's save and the entry's mtime (ns)."""
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    saves.mkdir(parents=True)
    w = Watch(
        "-checkpoint", str(root), "-framework", "hf", "-interval", "50ms", "-attempt", "A", *flags, env=env
    )
    log = tmp_path / "trainer.log"
    try:
        _trainer(saves, log)
        lines = [w.next_line(timeout=30) for _ in range(STEPS)]
    except BaseException:
        w.proc.kill()
        w.proc.wait()
        raise
    code, err = w.stop()
    assert (code, err) == (0, ""), err
    published = []
    for line in lines:
        entry, folder = line.split()[1], Path(line.rsplit(", ", 1)[1].rstrip(")"))
        published.append((folder, (root / "pub" / entry).stat().st_mtime_ns))
    return published


def _late_files(published: list[tuple[Path, int]]) -> list[str]:
    return [str(f) for folder, made in published for f in folder.iterdir() if f.stat().st_mtime_ns > made]


def test_every_ranks_rng_state_is_there_before_a_save_is_published(tmp_path: Path) -> None:
    """(WORLD_SIZE in watch's environment is the same rule: tests/verbs/test_world_size.py.)"""
    published = _watched(tmp_path, "-world-size", "2")
    assert [p.name for p, _ in published] == [f"checkpoint-{s}" for s in range(1, STEPS + 1)]
    for folder, _ in published:
        assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= {
            f.name for f in folder.iterdir()
        }
    assert _late_files(published) == [], "a file of the save was written after its publication"
