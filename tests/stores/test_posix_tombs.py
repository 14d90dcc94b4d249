"""Tombstones on a POSIX root: many recorded at once without a new file for each (issue 32: prune -orphans
spent most of its CPU creating one inode per leftover), every one durable and listed, whatever refuses a
link."""

from __future__ import annotations

import errno
import os
import posix
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore

#: Leftovers of hostile names: a newline, a leading dash, not ASCII, a tombstone name of 232 bytes.
PATHS = [f"exec/a{i}/-x\ny é" for i in range(40)] + ["exec/" + "z" * 140]


def test_many_tombstones_are_names_not_new_files_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, prune -orphans: 41 tombstones (one there before) are all listed and all empty regular
    files, made with one file created for the lot (41 created on the code before) and one fsync of tomb/."""
    store = PosixStore(str(tmp_path))
    (tmp_path / "tomb").mkdir()
    names = [layout.tomb_name(p) for p in PATHS]
    (tmp_path / "tomb" / names[5]).write_bytes(b"")  # an interrupted prune's
    created, synced = 0, 0
    real_open, real_fsync = posix.open, posix.fsync

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        nonlocal created
        created += bool(flags & os.O_CREAT)
        return real_open(path, flags, *args, **kwargs)

    def counting_fsync(fd: int) -> None:
        nonlocal synced
        synced += 1
        real_fsync(fd)

    monkeypatch.setattr(posix, "open", counting_open)
    monkeypatch.setattr(posix, "fsync", counting_fsync)
    store.create_tombs(UNBOUNDED, names)
    monkeypatch.undo()
    assert created == 1
    assert synced == 1
    assert sorted(layout.parse_tombs(store.list_tombs(UNBOUNDED), "tomb")) == sorted(PATHS)
    for name in names:
        st = os.lstat(tmp_path / "tomb" / name)
        assert st.st_size == 0 and (st.st_mode & 0o170000) == 0o100000
    store.remove_tombs(UNBOUNDED, names[:20])  # one dropped leaves the others
    assert sorted(layout.parse_tombs(store.list_tombs(UNBOUNDED), "tomb")) == sorted(PATHS[20:])


@pytest.mark.parametrize("code", [errno.EMLINK, errno.EPERM, errno.ENOENT])
def test_tombstones_are_files_where_a_link_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Issue 32: where the filesystem refuses a link (too many links, none at all, the first tombstone dropped
    by another prune meanwhile), each tombstone is still made, as a file."""
    store = PosixStore(str(tmp_path))
    names = [layout.tomb_name(p) for p in PATHS]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(posix, "link", refuse)
    store.create_tombs(UNBOUNDED, names)
    monkeypatch.undo()
    assert sorted(layout.parse_tombs(store.list_tombs(UNBOUNDED), "tomb")) == sorted(PATHS)
