"""The POSIX store: the conformance suite, and what only a directory has (links, fsync, name length)."""

from __future__ import annotations

import errno
import os
import posix  # the POSIX store calls os's functions from posix, where a spy replaces them
from pathlib import Path
from typing import Callable

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.rules.errors import Failure, FileError
from publish.stores.posix import PosixStore
from tests.support.store_contract import SaveSourceContract, StoreContract


@pytest.fixture
def store(root: Path) -> PosixStore:
    return PosixStore(str(root))


@pytest.fixture
def make_file(root: Path) -> Callable[..., None]:
    def make(path: str, data: bytes = b"") -> None:
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    return make


@pytest.fixture
def peer(root: Path) -> Callable[[], PosixStore]:
    return lambda: PosixStore(str(root))


@pytest.fixture
def unreadable(root: Path) -> Callable[[str], tuple[PosixStore, str]]:
    """A real I/O error: the folder is a link to /proc/self (links below exec/ are followed, as frameworks
    do), and its ``mem`` is a regular file whose every read at offset 0 the kernel answers with EIO."""

    def make(folder: str) -> tuple[PosixStore, str]:
        (root / folder).parent.mkdir(parents=True, exist_ok=True)
        (root / folder).symlink_to("/proc/self")
        return PosixStore(str(root)), f"{folder}/mem"

    return make


class TestPosixStore(StoreContract, SaveSourceContract):
    pass


def test_an_io_error_is_a_file_error_with_its_errno_and_not_unexaminable(
    root: Path, unreadable: Callable[[str], tuple[PosixStore, str]]
) -> None:
    store, path = unreadable("exec/A/checkpoint-1")
    with pytest.raises(FileError) as e:
        store.read(UNBOUNDED, path, 100)
    assert (e.value.op, e.value.thing, e.value.errno) == ("read", store.location(path), errno.EIO)
    assert str(e.value) == f"{root}/{path}: Input/output error"
    assert not e.value.unexaminable  # the disk failing: every verb fails, as on a store's refusal


def test_missing_root_fails(tmp_path: Path) -> None:
    with pytest.raises(Failure, match="does not exist"):
        PosixStore(str(tmp_path / "nope")).check_root(UNBOUNDED)


def test_file_root_fails(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(Failure, match="is not a directory"):
        PosixStore(str(tmp_path / "f")).check_root(UNBOUNDED)


def test_root_may_be_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    PosixStore(str(tmp_path / "link")).check_root(UNBOUNDED)


def test_entry_name_over_255_bytes_is_refused_and_nothing_is_created(store: PosixStore, root: Path) -> None:
    name = layout.name(0, 1, "exec/A/" + "x" * 200)
    assert len(name) > 255
    with pytest.raises(Failure, match="too long"):
        store.create_entry(UNBOUNDED, name)
    assert not (root / "pub").exists() or list((root / "pub").iterdir()) == []


def test_entry_is_an_empty_file(store: PosixStore, root: Path) -> None:
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    store.create_entry(UNBOUNDED, name)
    assert (root / "pub" / name).stat().st_size == 0


def test_create_entry_fsyncs_file_and_pub(
    store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(posix, "fsync", spy)
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    store.create_entry(UNBOUNDED, name)
    assert str(root / "pub" / name) in synced
    assert str(root / "pub") in synced


def test_a_mark_is_made_durably_and_never_through_a_link(
    store: PosixStore, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        posix, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    assert store.create_mark(UNBOUNDED, ".idle-x-1") is True
    assert str(root / "exec" / ".idle-x-1") in synced and str(root / "exec") in synced
    assert str(root) in synced  # exec/ was made: the root is synced too
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "exec").rename(root / "exec-old")
    (root / "exec").symlink_to(elsewhere)
    with pytest.raises(Failure, match="exec is a symbolic link"):
        store.create_mark(UNBOUNDED, ".idle-x-2")
    assert list(elsewhere.iterdir()) == []


def test_remove_entries_fsyncs_pub(store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    store.create_entry(UNBOUNDED, name)
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        posix, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    store.remove_entries(UNBOUNDED, [name])
    assert synced == [str(root / "pub")]


def test_remove_folder_with_link_on_its_path_is_left(store: PosixStore, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "checkpoint-1").mkdir(parents=True)
    (outside / "checkpoint-1" / "w").write_text("keep")
    (root / "exec").mkdir()
    (root / "exec" / "A").symlink_to(outside)
    result = store.remove_folder(UNBOUNDED, "exec/A/checkpoint-1")
    assert result == type(result)(False, link="exec/A")
    assert (outside / "checkpoint-1" / "w").read_text() == "keep"


def test_remove_folder_that_is_a_link_is_left(store: PosixStore, root: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (root / "exec" / "A").mkdir(parents=True)
    (root / "exec" / "A" / "checkpoint-1").symlink_to(target)
    assert store.remove_folder(UNBOUNDED, "exec/A/checkpoint-1").link == "exec/A/checkpoint-1"
    assert target.is_dir()


def test_link_inside_a_folder_is_removed_not_followed(store: PosixStore, root: Path, tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "data").write_text("keep")
    folder = root / "exec" / "A" / "checkpoint-1"
    folder.mkdir(parents=True)
    (folder / "link").symlink_to(target)
    assert store.remove_folder(UNBOUNDED, "exec/A/checkpoint-1").removed
    assert not folder.exists()
    assert (target / "data").read_text() == "keep"


def test_pub_that_is_a_file_is_an_error(store: PosixStore, root: Path) -> None:
    (root / "pub").write_text("")
    with pytest.raises(Failure, match="pub is not a directory"):
        store.list_entries(UNBOUNDED)


def test_read_at_most_reads_whole_files_up_to_the_limit(tmp_path: Path) -> None:
    from publish.rules.files.fileio import read_at_most

    for size, limit, expected in [
        (0, 0, b""),
        (5, 5, b"x" * 5),
        (6, 5, None),
        (3 << 20, 3 << 20, b"x" * (3 << 20)),
    ]:
        p = tmp_path / f"f{size}-{limit}"
        p.write_bytes(b"x" * size)
        fd = os.open(p, os.O_RDONLY)
        try:
            assert read_at_most(fd, limit) == expected
        finally:
            os.close(fd)


def test_a_failed_fsync_of_a_new_entry_is_a_file_error(
    store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync is where a disk reports a write it lost (EIO): a store error naming the file, not a bare OSError."""

    def lost(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    name = layout.name(0, 1, "exec/A/checkpoint-1")
    (root / "pub").mkdir()
    monkeypatch.setattr(posix, "fsync", lost)
    with pytest.raises(FileError) as e:
        store.create_entry(UNBOUNDED, name)
    assert (e.value.op, e.value.thing, e.value.errno) == ("sync", f"{root}/pub/{name}", errno.EIO)
    assert str(e.value) == f"{root}/pub/{name}: Input/output error"


# -- manifests: man/ a real directory, a temporary file renamed into place


def test_a_linked_man_is_refused_for_every_manifest_call(
    store: PosixStore, root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    (elsewhere / name).write_bytes(b"planted")
    (root / "man").symlink_to(elsewhere)
    for call in (
        lambda: store.write_manifest(UNBOUNDED, name, b"m"),
        lambda: store.read_manifest(UNBOUNDED, name, 100),
        lambda: store.list_manifests(UNBOUNDED),
        lambda: store.remove_manifests(UNBOUNDED, [name]),
    ):
        with pytest.raises(Failure, match=f"{root}/man is a symbolic link"):
            call()
    assert os.listdir(elsewhere) == [name] and (elsewhere / name).read_bytes() == b"planted"


def test_a_manifest_that_is_a_link_or_a_fifo_is_refused_never_followed(store: PosixStore, root: Path) -> None:
    (root / "man").mkdir()
    secret = root / "secret"
    secret.write_bytes(b"not yours")
    link, fifo = layout.name(0, 1, "exec/A/checkpoint-1"), layout.name(0, 2, "exec/A/checkpoint-2")
    (root / "man" / link).symlink_to(secret)
    os.mkfifo(root / "man" / fifo)
    with pytest.raises(Failure, match=f"man/{link} is a symbolic link, not a regular file"):
        store.read_manifest(UNBOUNDED, link, 100)
    with pytest.raises(Failure, match=f"man/{fifo} is a FIFO, not a regular file"):
        store.read_manifest(UNBOUNDED, fifo, 100)
    store.write_manifest(UNBOUNDED, link, b"mine")  # replaces the link itself
    assert secret.read_bytes() == b"not yours"
    assert not (root / "man" / link).is_symlink() and (root / "man" / link).read_bytes() == b"mine"


def test_write_manifest_fsyncs_the_file_and_man_and_leaves_no_temporary_file(
    store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(posix, "fsync", spy)
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    store.write_manifest(UNBOUNDED, name, b"m" * 3_000_000)
    assert os.listdir(root / "man") == [name]
    assert (root / "man" / name).read_bytes() == b"m" * 3_000_000
    assert synced[-1] == str(root / "man")
    assert any(p.startswith(str(root / "man" / ".tmp-")) for p in synced[:-1])  # the file, before its rename


def test_a_write_cut_off_leaves_its_temporary_file_which_a_later_removal_cleans(
    store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from publish.stores import posix_writes

    (root / "man").mkdir()
    old = root / "man" / ".tmp-0123456789abcdef"
    young = root / "man" / ".tmp-fedcba9876543210"
    old.write_bytes(b"half")
    young.write_bytes(b"being written")
    import time

    now = (
        time.time() + posix_writes.TEMP_AGE + 120
    )  # a ctime cannot be set back: the clock is moved on instead
    os.utime(young, (now - 20, now - 20))
    monkeypatch.setattr(time, "time", lambda: now)
    assert store.list_manifests(UNBOUNDED) == []  # temporary files are no manifests
    store.remove_manifests(UNBOUNDED, [])
    assert sorted(os.listdir(root / "man")) == [young.name]


def test_a_failed_write_removes_its_temporary_file(
    store: PosixStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    (root / "man").mkdir()
    (root / "man" / name).mkdir()  # a directory in the way: the rename fails
    with pytest.raises(Failure, match=f"man/{name}"):
        store.write_manifest(UNBOUNDED, name, b"m")
    assert os.listdir(root / "man") == [name]


def test_a_posix_root_is_not_a_destination_of_uploads(root: Path) -> None:
    store = PosixStore(str(root))
    with pytest.raises(Failure) as e:
        store.sender(fork=True)
    assert str(e.value) == f"{root}: a POSIX root is not a mirror: nothing is uploaded into it"


# -- what saves hold, many at once (status): the same figures and the same errors as one at a time


def alone(store: PosixStore, path: str) -> int | str:
    """What one save holds as status measured it before: ``sizes``, then ``size``; an error as its class
    and message."""
    try:
        found = store.sizes(UNBOUNDED, path)
        return sum(found.values()) if found else store.size(UNBOUNDED, path) or 0
    except (Failure, OSError) as e:
        return f"{type(e).__name__}: {e}"


def at_once(store: PosixStore, paths: list[str]) -> list[int | str]:
    return [
        n if isinstance(n, int) else f"{type(n).__name__}: {n}" for n in store.save_sizes(UNBOUNDED, paths)
    ]


def every_kind_of_save(root: Path, tmp_path: Path) -> list[str]:
    """Saves of every kind a root may hold, and their paths."""

    def files(folder: str, sizes: dict[str, int]) -> None:
        for rel, size in sizes.items():
            (root / folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / rel).write_bytes(b"w" * size)

    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "a").write_bytes(b"a" * 123)
    (outside / "sub" / "b").write_bytes(b"b" * 45)
    files("exec/A/nested", {"a": 10, "d1/b": 20, "d1/d2/c": 30, "d1/d2/d3/d4/e": 40, "z/.keep": 0})
    (root / "exec/A/nested/emptydir/deeper").mkdir(parents=True)
    files("exec/A/deep" + "/d" * 40, {"f": 5})
    (root / "exec/A/empty").mkdir(parents=True)
    (root / "exec/A/only-folders/x/y").mkdir(parents=True)
    files("exec/A", {"one.pt": 2048, "zero.pt": 0})
    (root / "exec/A/link-dir").symlink_to(outside)
    (root / "exec/A/link-file").symlink_to(outside / "a")
    (root / "exec/A/dangling").symlink_to(outside / "nothing")
    os.mkfifo(root / "exec/A/fifo")
    files("exec/A/has-link", {"ok": 3})
    (root / "exec/A/has-link/in").symlink_to("/etc/passwd")
    files("exec/A/has-fifo/in", {"ok": 3})
    os.mkfifo(root / "exec/A/has-fifo/in/fifo")
    files("exec/B/real", {"r": 11})
    (root / "exec/Blink").symlink_to("B")
    files("exec", {"not-a-folder": 1})
    files("top", {"t": 12})
    files("saves/x/y", {"t": 13})
    files("exec/-a\nä/-x\nsave é", {"f\nn": 14})
    return [
        "exec/A/nested", "exec/A/deep", "exec/A/empty", "exec/A/only-folders", "exec/A/one.pt",
        "exec/A/zero.pt", "exec/A/link-dir", "exec/A/link-file", "exec/A/dangling", "exec/A/fifo",
        "exec/A/has-link", "exec/A/has-fifo", "exec/A/gone", "exec/GONE/gone", "exec/not-a-folder/save",
        "exec/B/real", "exec/Blink/real", "top", "saves/x/y", "exec/-a\nä/-x\nsave é",
    ]  # fmt: skip


def test_saves_measured_at_once_hold_what_each_holds_alone(
    store: PosixStore, root: Path, tmp_path: Path
) -> None:
    """A folder's files however nested, a save that is one file, a link to a folder (followed, as the
    frameworks follow it) or to a file, a save gone, one holding a link or a FIFO (the error naming it):
    measured at once, each in its place, exactly as one at a time."""
    paths = every_kind_of_save(root, tmp_path)
    expected = [alone(store, p) for p in paths]
    assert at_once(store, paths) == expected
    assert at_once(store, paths[::-1]) == expected[::-1]
    assert expected[:6] == [100, 5, 0, 0, 2048, 0]
    assert expected[6:10] == [168, 0, 0, 0]
    assert "has-link/in is a symbolic link, not a regular file" in str(expected[10])
    assert "has-fifo/in/fifo is a FIFO, not a regular file" in str(expected[11])
    assert expected[12:] == [0, 0, 0, 11, 11, 12, 13, 14]


def test_a_save_that_cannot_be_opened_is_its_error_in_its_place(
    store: PosixStore, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save folder (or a folder inside it) the process may not open: the same FileError as alone, for it
    only; the saves beside it measured."""
    paths = every_kind_of_save(root, tmp_path)
    (root / "exec/A/locked/in").mkdir(parents=True)
    (root / "exec/A/inner-locked/in").mkdir(parents=True)
    real = posix.open

    def refusing(path: str, *args: object, **kwargs: object) -> int:
        last, dir_fd = path.rpartition("/")[2], kwargs.get("dir_fd")
        inside = isinstance(dir_fd, int) and os.readlink(f"/proc/self/fd/{dir_fd}").endswith("/inner-locked")
        if last == "locked" or (last == "in" and inside):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(posix, "open", refusing)
    monkeypatch.setattr(os, "open", refusing)
    paths = ["exec/A/locked", "exec/A/inner-locked", *paths]
    expected = [alone(store, p) for p in paths]
    assert expected[0] == f"FileError: {root}/exec/A/locked: Permission denied"
    assert expected[1] == f"FileError: {root}/exec/A/inner-locked: Permission denied"
    assert at_once(store, paths) == expected


def test_the_root_gone_is_each_saves_error(tmp_path: Path) -> None:
    store = PosixStore(str(tmp_path / "gone"))
    assert at_once(store, ["exec/A/x", "exec/A/y"]) == [alone(store, "exec/A/x")] * 2


def held_and_measured(store: PosixStore, paths: list[str], measure: list[bool]) -> list[int | str | None]:
    """What held_sizes says of each of ``paths``, an error as its class and message."""
    return [
        n if n is None or isinstance(n, int) else f"{type(n).__name__}: {n}"
        for n in store.held_sizes(UNBOUNDED, paths, measure)
    ]


def asked_apart(store: PosixStore, paths: list[str], measure: list[bool]) -> list[int | str | None]:
    """Whether each save is there (holds_all), then what each there holds (save_sizes), as status asked."""
    held = store.holds_all(UNBOUNDED, paths)
    sizes = iter(at_once(store, [p for p, h, m in zip(paths, held, measure) if h and m]))
    return [(next(sizes) if m else 0) if h else None for h, m in zip(held, measure)]


def test_saves_there_and_measured_at_once_as_asked_apart(
    store: PosixStore, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: status asks whether each save is there and what it holds at once, a save opened once: the
    same answers as asking holds_all then save_sizes, for every kind of save (a file, links, dangling
    links, a FIFO, gone, a save folder and a folder in it that cannot be opened), measured or not."""
    paths = every_kind_of_save(root, tmp_path)
    (root / "exec/A/locked/in").mkdir(parents=True)
    (root / "exec/A/inner-locked/in").mkdir(parents=True)
    real = posix.open

    def refusing(path: str, *args: object, **kwargs: object) -> int:
        last, dir_fd = path.rpartition("/")[2], kwargs.get("dir_fd")
        inside = isinstance(dir_fd, int) and os.readlink(f"/proc/self/fd/{dir_fd}").endswith("/inner-locked")
        if last == "locked" or (last == "in" and inside):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(posix, "open", refusing)
    monkeypatch.setattr(os, "open", refusing)
    paths = ["exec/A/locked", "exec/A/inner-locked", *paths]
    for measure in ([True] * len(paths), [False] * len(paths), [i % 2 == 0 for i in range(len(paths))]):
        expected = asked_apart(store, paths, measure)
        assert held_and_measured(store, paths, measure) == expected
        assert held_and_measured(store, paths[::-1], measure[::-1]) == expected[::-1]
    everything = asked_apart(store, paths, [True] * len(paths))
    assert everything[:2] == [
        f"FileError: {root}/exec/A/{n}: Permission denied" for n in ("locked", "inner-locked")
    ]
    assert everything[14:17] == [None, None, None]  # gone, in an attempt gone, below a file


def test_a_parent_that_cannot_be_searched_fails_as_holds_all_fails(store: PosixStore, root: Path) -> None:
    """An attempt's folder the process may open but not search: whether a save is there cannot be told,
    the same FileError as holds_all raises."""
    (root / "exec/A/s").mkdir(parents=True)
    real = posix.stat

    def refusing(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if path == "s":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    real_open = posix.open

    def refusing_open(path: str, *args: object, **kwargs: object) -> int:
        if path == "s":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as m:
        for mod in (posix, os):
            m.setattr(mod, "stat", refusing)
            m.setattr(mod, "open", refusing_open)
        with pytest.raises(FileError) as apart:
            store.holds_all(UNBOUNDED, ["exec/A/s"])
        with pytest.raises(FileError) as together:
            store.held_sizes(UNBOUNDED, ["exec/A/s"], [True])
    assert str(together.value) == str(apart.value) == f"{root}/exec/A/s: Permission denied"
