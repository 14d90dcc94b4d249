"""prune -dry-run: reads what prune reads, fails where prune fails before removing anything, prints
``would remove <location>`` for every folder prune then removes (tombstoned ones included), writes nothing."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from publish.ops import Say
from publish.ops.retention import prune
from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import run_cli
from tests.support.crash import Cut, Killed, build, tree
from tests.support.s3roots import Root
from tests.support.servers import S3Server


def would(real_out: str, real_err: str) -> tuple[list[str], str]:
    """The lines a dry run prints for what a real prune printed."""
    lines = [line.replace("removed ", "would remove ", 1) for line in real_out.splitlines()]
    return lines, real_err.replace("prune: left ", "prune: would leave ")


def cut_prune(root: Path, keep: int, budget: int) -> None:
    """Leave ``root`` as a prune killed after ``budget`` steps leaves it (tombstones pending)."""
    say = Say(lambda _: None, lambda _: None)
    with contextlib.suppress(Killed):
        prune(UNBOUNDED, Cut(PosixStore(str(root)), budget), say, keep)  # type: ignore[arg-type]


@pytest.mark.parametrize("keep", [1, 2, 4, 40])
@pytest.mark.parametrize("budget", [None, 0, 1, 3, 6, 9, 14])
def test_posix_dry_run_changes_nothing_and_prints_what_prune_removes(
    tmp_path: Path, keep: int, budget: int | None
) -> None:
    twins = []
    for name in ("dry", "real"):
        root, outside = build(tmp_path, name, folders=6, files=2, big=6)
        if budget is not None:
            cut_prune(root, 1, budget)  # tombstones of an earlier prune with another -keep
        twins.append((root, outside))
    (root, outside), (real_root, _) = twins
    before = tree(root, outside)
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", str(keep), "-dry-run")
    assert tree(root, outside) == before
    real = run_cli("prune", "-checkpoint", str(real_root), "-keep", str(keep))
    assert real.code == dry.code == 0, (real.err, dry.err)
    lines, err = would(
        real.out.replace(str(real_root), str(root)), real.err.replace(str(real_root), str(root))
    )
    assert dry.lines == lines
    assert dry.err == err
    if budget is not None and budget > 0:
        assert os.listdir(root / "tomb"), "the cut prune left tombstones for the dry run to report"


def test_dry_run_reports_a_tombstoned_folder_that_no_entry_names(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "exec/A/checkpoint-1").mkdir(parents=True)
    (root / "exec/A/checkpoint-1/w").write_bytes(b"w")
    (root / "tomb").mkdir()
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-1")).touch()
    before = tree(root)
    r = run_cli("prune", "-checkpoint", str(root), "-dry-run")
    assert (r.code, r.lines, r.err) == (0, [f"would remove {root}/exec/A/checkpoint-1"], "")
    assert tree(root) == before


@pytest.mark.parametrize("value", ["-dry-run=false", "-dry-run=0"])
def test_dry_run_false_is_a_real_prune(tmp_path: Path, value: str) -> None:
    root, _ = build(tmp_path, "r", folders=4, files=1, big=1)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", value)
    assert r.code == 0 and r.lines and all(line.startswith("removed ") for line in r.lines)


def _break(root: Path, how: str, outside: Path) -> None:
    if how == "bad-entry":
        (root / "pub" / "stray").touch()
    elif how == "bad-tomb":
        (root / "tomb").mkdir(exist_ok=True)
        (root / "tomb" / "not-base32").touch()
    elif how == "tomb-link":
        (root / "tomb").symlink_to(outside)
    elif how == "pub-link":
        shutil.move(root / "pub", outside / "pub")
        (root / "pub").symlink_to(outside / "pub")


@pytest.mark.parametrize("how", ["bad-entry", "bad-tomb", "tomb-link", "pub-link"])
def test_dry_run_fails_as_prune_does_before_removing_anything(tmp_path: Path, how: str) -> None:
    results = []
    for name in ("dry", "real"):
        root, outside = build(tmp_path, name, folders=3, files=1, big=1)
        _break(root, how, outside)
        before = tree(root, outside)
        flags = ["-dry-run"] if name == "dry" else []
        r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", *flags)
        assert tree(root, outside) == before
        results.append((r.code, r.out, r.err.replace(str(tmp_path / name), "ROOT")))
    assert results[0] == results[1]
    assert results[0][0] == 1 and results[0][2].startswith("publish: ")


# -- S3 -------------------------------------------------------------------------------------------------


def s3_state(root: Root) -> dict[str, Any]:
    """Every object under the root's prefix and its bytes."""
    return {
        k: root.s3.get_object(Bucket=root.bucket, Key=f"{root.prefix}/{k}")["Body"].read()
        for k in root.keys()  # noqa: SIM118 - Root.keys lists the objects
    }


def test_s3_dry_run_changes_nothing_and_prints_what_prune_removes(
    s3_server: S3Server, tmp_path: Path
) -> None:
    roots = [Root(s3_server, tmp_path) for _ in range(2)]
    for root in roots:
        for step in range(1, 6):
            root.put(f"exec/A/checkpoint-{step}/model.bin", f"w{step}".encode())
            root.put(f"exec/A/checkpoint-{step}/optim/0.bin", b"o")
            root.put("pub/" + layout.name(0, step, f"exec/A/checkpoint-{step}"))
        root.put("exec/A/epoch=0-step=9.ckpt", b"ckpt")  # a save that is one object
        root.put("pub/" + layout.name(0, 0, "exec/A/epoch=0-step=9.ckpt"))
        root.put("exec/old/checkpoint-0/w", b"left by an interrupted prune")
        root.put("tomb/" + layout.tomb_name("exec/old/checkpoint-0"))
        root.put("tomb/" + layout.tomb_name("exec/A/checkpoint-5"))  # named again since: only its tomb goes
        # Its save is already gone: it counts for nothing (and stays), so -keep 2 keeps steps 5 and 4.
        root.put("pub/" + layout.name(0, 7, "exec/gone/checkpoint-7"))
        # Folders holding an older entry's folder: exec/c is empty once its inner folder is removed (S3
        # removes no object of it then, and says nothing); exec/d still holds a file.
        for outer, extra in (("exec/c", False), ("exec/d", True)):
            root.put(f"{outer}/checkpoint-0/w")
            if extra:
                root.put(f"{outer}/notes.txt")
            root.put("pub/" + layout.name(0, 0, f"{outer}/checkpoint-0"))
            root.put("pub/" + layout.name(0, 1, outer))
    dry_root, real_root = roots
    before = s3_state(dry_root)
    dry = dry_root.run("prune", "-keep", "2", "-dry-run")
    assert s3_state(dry_root) == before
    real = real_root.run("prune", "-keep", "2")
    assert real.code == dry.code == 0, (real.err, dry.err)
    lines, err = would(real.out.replace(real_root.url, dry_root.url), real.err)
    assert dry.lines == lines
    assert dry.err == err == ""
    assert dry.lines[0] == f"would remove {dry_root.url}/exec/old/checkpoint-0"  # the tombstoned one first
    gone = [*(f"exec/A/checkpoint-{s}" for s in range(1, 4)), "exec/A/epoch=0-step=9.ckpt", "exec/d"]
    gone += ["exec/c/checkpoint-0", "exec/d/checkpoint-0"]  # exec/c: nothing left in it to remove
    assert sorted(dry.lines[1:]) == sorted(f"would remove {dry_root.url}/{p}" for p in gone)


@pytest.mark.parametrize("bad", ["pub/stray", "tomb/not-base32", "pub/sub/x"])
def test_s3_dry_run_fails_as_prune_does(s3_server: S3Server, tmp_path: Path, bad: str) -> None:
    root = Root(s3_server, tmp_path)
    root.put("exec/A/checkpoint-1/w")
    root.put("exec/A/checkpoint-2/w")
    root.put("pub/" + layout.name(0, 1, "exec/A/checkpoint-1"))
    root.put("pub/" + layout.name(0, 2, "exec/A/checkpoint-2"))
    root.put(bad)
    before = s3_state(root)
    dry = root.run("prune", "-keep", "1", "-dry-run")
    assert s3_state(root) == before
    real = root.run("prune", "-keep", "1")
    assert s3_state(root) == before
    assert (dry.code, dry.out, dry.err) == (real.code, real.out, real.err)
    assert dry.code == 1 and bad.split("/")[-1] in dry.err


def test_dry_run_prints_nothing_it_would_not_remove(tmp_path: Path) -> None:
    root = tmp_path / f"r-{uuid.uuid4().hex[:6]}"
    (root / "pub").mkdir(parents=True)
    for step in (1, 2, 3):
        (root / "pub" / layout.name(0, step, f"exec/A/checkpoint-{step}")).touch()
    (root / "exec/A/checkpoint-3").mkdir(parents=True)  # the others' saves were never written
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-dry-run")
    assert (r.code, r.out, r.err) == (0, "", "")
    assert sorted(os.listdir(root / "pub")) == [
        layout.name(0, s, f"exec/A/checkpoint-{s}") for s in (1, 2, 3)
    ]
    assert not (root / "tomb").exists()
