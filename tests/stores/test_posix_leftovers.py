"""Leftovers on a POSIX root: their ages told with one walk down to exec/, and each removed as the dating walk
saw it, without being listed again (issue 32:
each leftover was walked twice), and removed all the same, never through a link, when it changed between the
two."""

from __future__ import annotations

import os
import posix
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from publish.rules.deadline import UNBOUNDED
from publish.rules.files import walks
from publish.stores.base import Removal
from publish.stores.posix import PosixStore


def leftover(root: Path, name: str) -> Path:
    """exec/<name>: a save's folder, a file beside it, an empty folder and a link out of the root."""
    top = root / "exec" / name
    (top / "checkpoint-1" / "shard").mkdir(parents=True)
    (top / "checkpoint-1" / "model.bin").write_bytes(b"m" * 100)
    (top / "checkpoint-1" / "shard" / "0.bin").write_bytes(b"s")
    (top / "log.txt").write_bytes(b"l")
    (top / "empty").mkdir()
    (top / "out").symlink_to(root.parent / "outside")
    return top


def outside(tmp_path: Path) -> dict[str, bytes]:
    (tmp_path / "outside" / "deep").mkdir(parents=True)
    (tmp_path / "outside" / "deep" / "keep").write_bytes(b"keep me")
    (tmp_path / "outside" / "empty").mkdir()
    return snapshot(tmp_path / "outside")


def snapshot(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() if p.is_file() else b"/" for p in sorted(top.rglob("*"))}


def descriptors(top: Path) -> list[str]:
    """What this process's open descriptors below ``top`` name: a count of all of them would also see
    another test's socket that the collector closes meanwhile."""
    named = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue
        if target == str(top) or target.startswith(f"{top}/"):
            named.append(target)
    return sorted(named)


def test_a_dated_leftover_is_removed_without_listing_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: prune -orphans dates each leftover (a walk through all of it), then removes it: the removal
    lists none of its folders again (it listed each of them once more on the code before)."""
    root = tmp_path / "root"
    before = outside(tmp_path)
    store = PosixStore(str(root))
    for i in range(5):
        leftover(root, f"a{i}")
    for i in range(5):
        assert store.newest(UNBOUNDED, f"exec/a{i}").at is not None
    listed = []
    real = posix.scandir

    def counting(fd: Any) -> Any:
        listed.append(fd)
        return real(fd)

    open_before = descriptors(tmp_path)
    monkeypatch.setattr(posix, "scandir", counting)
    results = [store.remove_folder(UNBOUNDED, f"exec/a{i}") for i in range(5)]
    monkeypatch.undo()
    assert results == [Removal(True)] * 5
    assert listed == []
    assert os.listdir(root / "exec") == []
    assert snapshot(tmp_path / "outside") == before
    assert descriptors(tmp_path) == open_before


def added_in_an_empty_folder(top: Path) -> None:
    (top / "empty" / "new").write_bytes(b"n")


def a_new_folder(top: Path) -> None:
    (top / "checkpoint-2" / "x").mkdir(parents=True)


def a_file_swapped_for_a_folder(top: Path) -> None:
    (top / "log.txt").unlink()
    (top / "log.txt" / "in").mkdir(parents=True)


def a_folder_swapped_for_a_link(top: Path) -> None:
    shutil.rmtree(top / "checkpoint-1")
    (top / "checkpoint-1").symlink_to(top.parent.parent.parent / "outside" / "deep")


def an_empty_folder_swapped_for_a_link(top: Path) -> None:
    (top / "empty").rmdir()
    (top / "empty").symlink_to(top.parent.parent.parent / "outside" / "empty")


def a_folder_swapped_for_another(top: Path) -> None:
    shutil.rmtree(top / "checkpoint-1")
    (top / "checkpoint-1" / "other").mkdir(parents=True)
    (top / "checkpoint-1" / "model.bin").write_bytes(b"o")


def removed_meanwhile(top: Path) -> None:
    (top / "log.txt").unlink()
    shutil.rmtree(top / "checkpoint-1" / "shard")


def the_top_swapped_for_another(top: Path) -> None:
    shutil.rmtree(top)
    (top / "other").mkdir(parents=True)


@pytest.mark.parametrize(
    "change",
    [
        added_in_an_empty_folder,
        a_new_folder,
        a_file_swapped_for_a_folder,
        a_folder_swapped_for_a_link,
        an_empty_folder_swapped_for_a_link,
        a_folder_swapped_for_another,
        removed_meanwhile,
        the_top_swapped_for_another,
    ],
)
def test_a_leftover_changed_after_it_was_dated_is_removed_whole_never_through_a_link(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    root = tmp_path / "root"
    before = outside(tmp_path)
    store = PosixStore(str(root))
    top = leftover(root, "a")
    assert store.newest(UNBOUNDED, "exec/a").at is not None
    change(top)
    open_before = descriptors(tmp_path)
    assert store.remove_folder(UNBOUNDED, "exec/a") == Removal(True)
    assert os.listdir(root / "exec") == []
    assert snapshot(tmp_path / "outside") == before
    assert descriptors(tmp_path) == open_before


def test_a_dated_leftover_swapped_for_a_link_or_gone_is_reported_as_before(tmp_path: Path) -> None:
    root = tmp_path / "root"
    before = outside(tmp_path)
    store = PosixStore(str(root))
    for name in ("link", "gone"):
        leftover(root, name)
        assert store.newest(UNBOUNDED, f"exec/{name}").at is not None
    shutil.rmtree(root / "exec" / "link")
    (root / "exec" / "link").symlink_to(tmp_path / "outside")
    shutil.rmtree(root / "exec" / "gone")
    assert store.remove_folder(UNBOUNDED, "exec/link") == Removal(False, link="exec/link")
    assert store.remove_folder(UNBOUNDED, "exec/gone") == Removal(False)
    assert snapshot(tmp_path / "outside") == before


def test_a_large_leftover_is_not_recorded_and_is_listed_as_it_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the dating walk records is bounded: a leftover of more than walks.SEEN_ENTRIES entries is listed
    again by its removal."""
    root = tmp_path / "root"
    store = PosixStore(str(root))
    top = root / "exec" / "big"
    top.mkdir(parents=True)
    for i in range(walks.SEEN_ENTRIES + 1):
        (top / f"f{i}").write_bytes(b"")
    assert store.newest(UNBOUNDED, "exec/big").at is not None
    listed = []
    real = posix.scandir

    def counting(fd: Any) -> Any:
        listed.append(fd)
        return real(fd)

    monkeypatch.setattr(posix, "scandir", counting)
    assert store.remove_folder(UNBOUNDED, "exec/big") == Removal(True)
    monkeypatch.undo()
    assert len(listed) == 1 and not top.exists()


def test_the_ages_of_many_leftovers_told_at_once_are_those_told_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: -orphans tells the ages of the leftovers of a folder with the root opened once, and the walk
    down to exec/ made once, not once per leftover; each answer is the one newest gives alone: a folder, a
    file, one missing, a link on the path or at the end, an attempt that is a file."""
    root = tmp_path / "root"
    outside(tmp_path)
    for name in ("a", "b"):
        leftover(root, name)
    (root / "exec" / "file").write_bytes(b"f")
    (root / "exec" / "L").symlink_to(tmp_path / "outside")
    (root / "exec" / "a" / "inner").mkdir()
    paths = [
        "exec/a",
        "exec/b",
        "exec/file",
        "exec/missing",
        "exec/L",
        "exec/L/deep",
        "exec/L/empty",
        "exec/file/x",
        "exec/a/inner",
        "exec/a/out",
        "exec/b/checkpoint-1",
    ]
    alone = [PosixStore(str(root)).newest(UNBOUNDED, p) for p in paths]
    opened = []
    real = posix.open

    def counting(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(path)
        return real(path, *args, **kwargs)

    store = PosixStore(str(root))
    monkeypatch.setattr(posix, "open", counting)
    together = store.newest_all(UNBOUNDED, paths)
    monkeypatch.undo()
    assert together == alone
    assert [c.link for c in together[4:7]] == ["exec/L"] * 3 and together[9].link == "exec/a/out"
    assert together[3].at is None and together[7].at is None and together[0].at is not None
    assert opened.count(str(root)) == 1 and opened.count("exec") == 1
