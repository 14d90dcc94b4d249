"""Removal under a racer that swaps a directory for a link to one outside the root, hundreds of times.

The racer is a separate process that calls ``renameat2(RENAME_EXCHANGE)`` in a tight loop on two names
(a real directory inside the root, and a link to a canary directory outside it) while prune or the snapshot
library's retention removes something below the first name.  Whatever the interleaving, nothing in the
canary directory may go.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.rules.errors import Failure
from publish.stores.base import Removal
from publish.stores.posix import PosixStore
from tests.conftest import need, run_cli
from tests.support.racer import Racer, exchange_function
from tests.support.scratch import memory_dir


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    with memory_dir(tmp_path) as path:
        yield path


@pytest.fixture
def racer(tmp_path: Path) -> Any:
    need(sys.platform.startswith("linux") and exchange_function() is not None, "renameat2 (Linux)")
    r = Racer(tmp_path / "racer-flag")
    yield r
    r.close()


def canaries(outside: Path) -> int:
    """Files and folders outside the root."""
    return sum(1 for p in outside.rglob("*"))


def intact(base: Path, t: int) -> bool:
    """What :func:`canary` made for trial ``t`` is there."""
    folder = base / f"checkpoint-{t}"
    if t % 2:
        return folder.is_dir()
    return (folder / "sub" / "w").is_file() and (folder / "model.bin").is_file()


def canary(outside: Path, t: int) -> None:
    """The canary of trial ``t`` outside the root: as the tree inside, or (odd trials) an empty folder."""
    if t % 2:
        (outside / f"checkpoint-{t}").mkdir()
    else:
        tree(outside, t)


def tree(base: Path, t: int) -> None:
    """``checkpoint-<t>``, holding a file and a folder with a file, in ``base``."""
    (base / f"checkpoint-{t}" / "sub").mkdir(parents=True)
    (base / f"checkpoint-{t}" / "sub" / "w").write_bytes(b"w")
    (base / f"checkpoint-{t}" / "model.bin").write_bytes(b"m")


def test_remove_folder_never_follows_a_parent_swapped_for_a_link(racer: Racer, scratch: Path) -> None:
    root, outside = scratch / "ckpt", scratch / "outside"
    outside.mkdir()
    attempt = root / "exec" / "A"
    attempt.mkdir(parents=True)
    (root / "L").symlink_to(outside)
    store = PosixStore(str(root))
    trials, results, failures = 800, [], []
    for t in range(trials):
        tree(attempt, t)
        canary(outside, t)
        racer.start(attempt, root / "L")
        try:
            result = store.remove_folder(UNBOUNDED, f"exec/A/checkpoint-{t}")
        except Failure as e:
            failures.append(e)
            continue
        finally:
            assert racer.stop() == 0
            assert intact(outside, t), f"trial {t}: something outside the root was removed"
        assert result.removed != (attempt / f"checkpoint-{t}").exists()
        results.append(result)
    assert canaries(outside) == sum(1 if t % 2 else 4 for t in range(trials))
    assert failures == []
    assert set(results) <= {Removal(True), Removal(False, link="exec/A")}
    assert Removal(True) in results and racer.swaps > trials


def test_remove_folder_never_follows_the_folder_swapped_for_a_link(racer: Racer, scratch: Path) -> None:
    root, outside = scratch / "ckpt", scratch / "outside"
    outside.mkdir()
    attempt = root / "exec" / "A"
    attempt.mkdir(parents=True)
    link = root / "L"
    link.symlink_to(outside / "checkpoint-0")
    store = PosixStore(str(root))
    trials, results, failures = 300, [], []
    for t in range(trials):
        tree(attempt, t)
        canary(outside, t)
        (root / "L.new").symlink_to(outside / f"checkpoint-{t}")
        os.replace(root / "L.new", link)
        folder = attempt / f"checkpoint-{t}"
        racer.start(folder, link)
        try:
            results.append(store.remove_folder(UNBOUNDED, f"exec/A/checkpoint-{t}"))
        except Failure as e:
            failures.append(e)
        finally:
            gone = racer.stop()
        assert intact(outside, t), f"trial {t}: something outside the root was removed"
        # The racer stops when the folder went from under it; the link is then where it was.
        assert gone in (0, errno.ENOENT) and link.is_symlink()
        if folder.exists():  # left in place (perhaps emptied): cleared here, out of the race
            shutil.rmtree(folder)
    assert canaries(outside) == sum(1 if t % 2 else 4 for t in range(trials))
    assert failures == []
    assert set(results) <= {
        Removal(True),
        *(Removal(False, link=f"exec/A/checkpoint-{t}") for t in range(trials)),
    }
    assert Removal(True) in results


def test_prune_never_empties_a_directory_outside_the_root(racer: Racer, scratch: Path) -> None:
    root, outside = scratch / "ckpt", scratch / "outside"
    outside.mkdir()
    attempt = root / "exec" / "A"
    (root / "exec" / "B").mkdir(parents=True)
    attempt.mkdir()
    (root / "L").symlink_to(outside)
    pub = root / "pub"
    pub.mkdir()
    trials, errors = 300, []
    for t in range(trials):
        tree(attempt, t)
        canary(outside, t)
        (root / "exec" / "B" / f"checkpoint-{t}").mkdir()
        (pub / layout.name(0, 2 * t, f"exec/A/checkpoint-{t}")).write_bytes(b"")
        (pub / layout.name(0, 2 * t + 1, f"exec/B/checkpoint-{t}")).write_bytes(b"")
        racer.start(attempt, root / "L")
        try:
            r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
        finally:
            assert racer.stop() == 0
        assert intact(outside, t), f"trial {t}: something outside the root was removed"
        left = f"publish: prune: left {attempt}/checkpoint-{t} in place: {attempt} is a symbolic link\n"
        if r.code or r.err not in ("", left):
            errors.append(r)
    assert canaries(outside) == sum(1 if t % 2 else 4 for t in range(trials))
    assert errors == []


@pytest.mark.torch
def test_retention_never_removes_files_outside_the_root(racer: Racer, scratch: Path) -> None:
    """The snapshot directory retention removes is swapped for a link to a canary directory holding files of
    the same names, while the save that triggers retention runs."""
    need(importlib.util.find_spec("torch") is not None, "torch")
    import publish.snapshots as snapshots

    root, canary, link = scratch / "snapshots", scratch / "canary", scratch / "L"
    files = ["READY", "checkpoint.pt", "manifest.json"]
    canary.mkdir()
    for name in files:
        (canary / name).write_bytes(b"canary")
    link.symlink_to(canary)
    logging.getLogger("publish.snapshots").setLevel(logging.ERROR)  # retention warns at every refusal
    try:
        snapshots.save_checkpoint(root, {"step": 0})
        snapshots.save_checkpoint(root, {"step": 1})
        trials, removed = 400, 0
        for step in range(2, trials + 2):
            oldest = min(n for n in os.listdir(root) if (root / n / "READY").exists())
            racer.start(root / oldest, link, dwell_us=(300, 0))  # checks pass, then a swap
            try:
                snapshots.save_checkpoint(root, {"step": step}, keep_last=2)
            finally:
                gone = racer.stop()
            assert sorted(os.listdir(canary)) == files, (
                f"trial {step}: something outside the root was removed"
            )
            assert gone in (0, errno.ENOENT) and link.is_symlink()
            removed += not (root / oldest / "READY").exists()
    finally:
        logging.getLogger("publish.snapshots").setLevel(logging.NOTSET)
    assert removed > 0
    assert all((canary / name).read_bytes() == b"canary" for name in files)


@pytest.mark.torch
def test_retention_leaves_a_snapshot_swapped_for_a_link_after_its_last_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The swap made at the worst moment, once: after the last check of the old code, before any unlink."""
    need(importlib.util.find_spec("torch") is not None, "torch")
    import publish.snapshots as snapshots

    root, canary = tmp_path / "snapshots", tmp_path / "canary"
    old = snapshots.save_checkpoint(root, {"step": 1})
    snapshots.save_checkpoint(root, {"step": 2})
    shutil.copytree(old, canary)
    real = snapshots._still_verified
    calls: list[str] = []

    def then_swap(meta: Any) -> bool:
        verdict = real(meta)
        calls.append(meta.path)
        if meta.path == str(old) and calls.count(meta.path) == 2:  # _remove's own check
            os.rename(old, tmp_path / "moved")
            old.symlink_to(canary)
        return verdict

    monkeypatch.setattr(snapshots, "_still_verified", then_swap)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        snapshots.save_checkpoint(root, {"step": 3})
    assert sorted(os.listdir(canary)) == ["READY", "checkpoint.pt", "manifest.json"]
    assert sorted(os.listdir(tmp_path / "moved")) == ["READY", "checkpoint.pt", "manifest.json"]
    assert any(f"{old} is a symbolic link" in r.getMessage() for r in caplog.records)


@pytest.mark.torch
def test_retention_without_descriptor_calls_removes_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the system has no descriptor-relative calls (Windows), retention removes as it always did."""
    need(importlib.util.find_spec("torch") is not None, "torch")
    import publish.snapshots as snapshots

    monkeypatch.setattr(snapshots._fs, "_AT_CALLS", False)
    old = snapshots.save_checkpoint(tmp_path, {"step": 1})
    snapshots.save_checkpoint(tmp_path, {"step": 2})
    snapshots.save_checkpoint(tmp_path, {"step": 3})
    assert not old.exists() and len(os.listdir(tmp_path)) == 2
