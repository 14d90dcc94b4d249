"""What the POSIX store reads and removes: pub/ and exec/ are real directories, markers are regular files,
pub/ holds only entry files, and a removal never follows a link, however deep the tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.rules.errors import Failure
from publish.stores.base import Removal
from publish.stores.posix import PosixStore
from tests.conftest import REPO, Watch, run_cli
from tests.support.scratch import memory_dir
from tests.support.trainer_saves import real_state

# --- pub/ and exec/ must be real directories, for every verb ------------------------------------------------


def outside_with_entries(tmp_path: Path) -> Path:
    """A directory outside the root laid out like one: an attempt with a save, and pub/ entries naming it."""
    outside = tmp_path / "outside"
    (outside / "A" / "checkpoint-1").mkdir(parents=True)
    (outside / "A" / "checkpoint-1" / "model.bin").write_bytes(b"w")
    for step in (1, 2):
        (outside / layout.name(0, step, "exec/A/checkpoint-1")).write_bytes(b"")
    return outside


def snapshot(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


BAD = {
    "dangling link": lambda target, outside: target.symlink_to(outside / "nowhere"),
    "link outside": lambda target, outside: target.symlink_to(outside),
    "file": lambda target, outside: target.write_bytes(b""),
}
VERBS: dict[str, Callable[[Path], list[str]]] = {
    "resolve": lambda root: ["resolve", "-checkpoint", str(root)],
    "publish": lambda root: ["publish", "-checkpoint", str(root), str(root / "saves" / "checkpoint-1"), "1"],
    "prune": lambda root: ["prune", "-checkpoint", str(root), "-keep", "1"],
    "watch": lambda root: ["watch", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A"],
}


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize("how", list(BAD))
@pytest.mark.parametrize("name", ["pub", "exec"])
def test_pub_or_exec_that_is_not_a_real_directory_fails_every_verb(
    root: Path, tmp_path: Path, name: str, how: str, verb: str
) -> None:
    outside = outside_with_entries(tmp_path)
    (root / "saves" / "checkpoint-1").mkdir(parents=True)
    other = "exec" if name == "pub" else "pub"
    (root / other).mkdir()
    BAD[how](root / name, outside)
    before = snapshot(outside)
    args = VERBS[verb](root)
    if verb == "watch":
        w = Watch(*args[1:], "-interval", "100ms")
        code, err = w.finish(timeout=20)
        out = "\n".join(w.seen)
    else:
        r = run_cli(*args)
        code, out, err = r.code, r.out, r.err
    what = "is not a directory" if how == "file" else "is a symbolic link"
    assert (code, out, err) == (1, "", f"publish: {root}/{name} {what}\n")
    assert snapshot(outside) == before
    if name == "exec":
        assert list((root / "pub").iterdir()) == []


def test_missing_pub_and_exec_are_empty(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out, r.err) == (0, "", "")
    (root / "saves" / "checkpoint-1").mkdir(parents=True)
    r = run_cli("publish", "-checkpoint", str(root), str(root / "saves" / "checkpoint-1"), "1")
    assert r.code == 0 and (root / "pub").is_dir()
    assert run_cli("prune", "-checkpoint", str(root)).code == 0


def test_entries_are_created_and_removed_through_pub_as_it_was_opened(root: Path, tmp_path: Path) -> None:
    """pub/ swapped for a link between the check and the work is refused, not followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    store = PosixStore(str(root))
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    store.create_entry(UNBOUNDED, name)
    store.check_root(UNBOUNDED)
    os.rename(root / "pub", tmp_path / "old-pub")
    (root / "pub").symlink_to(outside)
    (outside / name).write_bytes(b"")
    for call in (
        lambda: store.create_entry(UNBOUNDED, layout.name(0, 2, "exec/A/checkpoint-2")),
        lambda: store.remove_entries(UNBOUNDED, [name]),
        lambda: store.list_entries(UNBOUNDED),
    ):
        with pytest.raises(Failure, match=f"^{root}/pub is a symbolic link$"):
            call()
    assert os.listdir(outside) == [name]


def test_exec_swapped_for_a_link_after_the_check_is_refused_by_every_read(root: Path, tmp_path: Path) -> None:
    outside = outside_with_entries(tmp_path)
    (root / "exec" / "A" / "checkpoint-1").mkdir(parents=True)
    store = PosixStore(str(root))
    store.check_root(UNBOUNDED)
    os.rename(root / "exec", tmp_path / "old-exec")
    (root / "exec").symlink_to(outside)
    for call in (
        lambda: store.list_folders(UNBOUNDED, "exec"),
        lambda: store.list_folders(UNBOUNDED, "exec/A"),
        lambda: store.holds(UNBOUNDED, "exec/A/checkpoint-1"),
        lambda: store.read(UNBOUNDED, "exec/A/checkpoint-1/trainer_state.json", 10),
        lambda: store.exists(UNBOUNDED, "exec/A/checkpoint-1/.metadata"),
    ):
        with pytest.raises(Failure, match=f"^{root}/exec is a symbolic link$"):
            call()
    assert store.remove_folder(UNBOUNDED, "exec/A/checkpoint-1") == Removal(False, link="exec")
    assert (outside / "A" / "checkpoint-1" / "model.bin").exists()


# --- pub/ holds entry files only ----------------------------------------------------------------------------


def make_fifo(p: Path) -> None:
    os.mkfifo(p)


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda p: p.mkdir(), "a directory"),
        (lambda p: p.symlink_to(p.parent / layout.name(0, 1, "exec/A/checkpoint-1")), "a symbolic link"),
        (make_fifo, "a FIFO"),
    ],
)
def test_anything_in_pub_but_an_entry_file_is_refused_even_with_an_entry_name(
    root: Path, make: Callable[[Path], None], what: str
) -> None:
    (root / "exec" / "A" / "checkpoint-1").mkdir(parents=True)
    (root / "exec" / "A" / "checkpoint-9").mkdir(parents=True)
    (root / "pub").mkdir()
    (root / "pub" / layout.name(0, 1, "exec/A/checkpoint-1")).write_bytes(b"")
    odd = layout.name(0, 9, "exec/A/checkpoint-9")
    make(root / "pub" / odd)
    for verb in ("resolve", "prune"):
        r = run_cli(verb, "-checkpoint", str(root), *(["-keep", "1"] if verb == "prune" else []))
        assert (r.code, r.out) == (1, "")
        assert r.err == f"publish: {root}/pub/{odd}: not a publication entry ({what})\n"
    assert (root / "exec" / "A" / "checkpoint-1").is_dir() and (root / "exec" / "A" / "checkpoint-9").is_dir()


# --- Markers: a regular file, or refused; never a wait ------------------------------------------------------


def watch_once(root: Path, framework: str) -> tuple[int, str]:
    """A watch that scans every 100 ms; it must stop by itself (exit 1) within the deadline."""
    w = Watch("-checkpoint", str(root), "-framework", framework, "-interval", "100ms", "-attempt", "A")
    try:
        return w.finish(timeout=20)
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


@pytest.mark.parametrize(
    "framework, folder, marker",
    [
        ("hf", "checkpoint-5", "trainer_state.json"),
        ("dcp", "step-5", ".metadata"),
        ("snapshot", f"step_{5:012d}_{'a' * 32}", "READY"),
    ],
)
@pytest.mark.parametrize("linked", [False, True])
def test_a_fifo_marker_stops_watch_naming_it(
    root: Path, tmp_path: Path, framework: str, folder: str, marker: str, linked: bool
) -> None:
    save = root / "exec" / "A" / folder
    save.mkdir(parents=True)
    if linked:
        os.mkfifo(tmp_path / "fifo")
        (save / marker).symlink_to(tmp_path / "fifo")
    else:
        os.mkfifo(save / marker)
    code, err = watch_once(root, framework)
    what = "a symbolic link" if linked else "a FIFO"
    assert (code, err) == (1, f"publish: {save}/{marker} is {what}, not a regular file\n")
    assert not (root / "pub").exists()


def test_store_refuses_markers_that_are_not_regular_files(root: Path, tmp_path: Path) -> None:
    store = PosixStore(str(root))
    folder = root / "exec" / "A" / "step-1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    (folder / "regular").write_bytes(b"x")
    (folder / "link").symlink_to(folder / "regular")
    for name, what in [("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a symbolic link")]:
        for call in (lambda p: store.exists(UNBOUNDED, p), lambda p: store.read(UNBOUNDED, p, 10)):
            with pytest.raises(Failure, match=f"^{folder}/{name} is {what}, not a regular file$"):
                call(f"exec/A/step-1/{name}")
    assert (
        store.exists(UNBOUNDED, "exec/A/step-1/regular")
        and store.read(UNBOUNDED, "exec/A/step-1/regular", 1) == b"x"
    )
    assert (
        not store.exists(UNBOUNDED, "exec/A/step-1/missing")
        and store.read(UNBOUNDED, "exec/A/step-1/missing", 1) is None
    )
    assert (
        not store.exists(UNBOUNDED, "exec/A/regular/x")
        and store.read(UNBOUNDED, "exec/A/step-1/regular/x", 1) is None
    )


def test_hf_state_through_a_linked_saves_folder_is_still_read(root: Path, tmp_path: Path) -> None:
    """Links below exec/ on the way to a marker are followed, as the framework itself follows them."""
    real = tmp_path / "real" / "checkpoint-3"
    real.mkdir(parents=True)
    (real / "trainer_state.json").write_bytes(real_state(3))
    (root / "exec").mkdir()
    (root / "exec" / "A").symlink_to(tmp_path / "real")
    store = PosixStore(str(root))
    assert store.list_folders(UNBOUNDED, "exec/A") == ["checkpoint-3"]
    assert store.read(UNBOUNDED, "exec/A/checkpoint-3/trainer_state.json", 1 << 20) == real_state(3)


# --- Removal: a file, links inside, a deep tree, few descriptors --------------------------------------------


def test_a_save_that_is_one_file_is_unlinked(root: Path, tmp_path: Path) -> None:
    store = PosixStore(str(root))
    (root / "exec" / "A").mkdir(parents=True)
    (root / "exec" / "A" / "epoch=1-step=10.ckpt").write_bytes(b"w")
    (tmp_path / "target.ckpt").write_bytes(b"keep")
    (root / "exec" / "A" / "linked.ckpt").symlink_to(tmp_path / "target.ckpt")
    assert store.remove_folder(UNBOUNDED, "exec/A/epoch=1-step=10.ckpt") == Removal(True)
    assert not (root / "exec" / "A" / "epoch=1-step=10.ckpt").exists()
    assert store.remove_folder(UNBOUNDED, "exec/A/linked.ckpt") == Removal(False, link="exec/A/linked.ckpt")
    assert (tmp_path / "target.ckpt").read_bytes() == b"keep"
    (root / "exec" / "A" / "plain").write_bytes(b"")
    assert store.remove_folder(UNBOUNDED, "exec/A/plain/x") == Removal(False)


def test_links_and_fifos_inside_a_folder_are_unlinked_never_followed(root: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "sub" / "data").write_bytes(b"keep")
    (precious / "file").write_bytes(b"keep")
    folder = root / "exec" / "A" / "checkpoint-1"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "to-dir").symlink_to(precious)
    (folder / "a" / "b" / "to-file").symlink_to(precious / "file")
    (folder / "a" / "b" / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(folder / "a" / "fifo")
    (folder / "w").write_bytes(b"w")
    assert PosixStore(str(root)).remove_folder(UNBOUNDED, "exec/A/checkpoint-1") == Removal(True)
    assert not folder.exists() and (root / "exec" / "A").is_dir()
    assert snapshot(precious) == ["file", "sub", "sub/data"]


DEEP = 10_000


def test_a_tree_10000_deep_is_removed_with_few_descriptors(tmp_path: Path) -> None:
    """Built and removed through descriptors (its paths are far over PATH_MAX); removed in a process allowed
    only 40 descriptors, so neither Python recursion nor one descriptor per level would do."""
    with memory_dir(tmp_path) as scratch:
        remove_deep_tree(scratch / "ckpt")


def remove_deep_tree(root: Path) -> None:
    folder = root / "exec" / "A" / "checkpoint-1"
    folder.mkdir(parents=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(DEEP):
        os.mkdir("d", dir_fd=fd)
        if i % 1000 == 0:
            os.close(os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.symlink("../..", "up", dir_fd=fd)
    os.close(fd)
    code = (
        "import resource, sys\n"
        "from publish.rules.deadline import UNBOUNDED\n"
        "from publish.stores.posix import PosixStore\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "print(PosixStore(sys.argv[1]).remove_folder(UNBOUNDED, 'exec/A/checkpoint-1'))\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(root)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (
            0,
            "Removal(removed=True, link='')",
            "",
        )
        assert not folder.exists() and (root / "exec" / "A").is_dir()
    finally:
        if folder.exists():  # pytest's own clean-up of old temporary directories recurses, and would fail
            subprocess.run(["rm", "-rf", str(folder)], check=True, timeout=120)


def swap_after_lstat(
    monkeypatch: pytest.MonkeyPatch, target: Path, replace: Callable[[Path], None]
) -> list[Path]:
    """The first lstat of ``target``'s name (anywhere) returns what it saw, then ``replace`` swaps it."""
    import publish.rules.files.fsops as fsops

    real, swapped = fsops.lstat_at, []

    def then_swap(dir_fd: int, name: str) -> os.stat_result | None:
        st = real(dir_fd, name)
        if name == target.name and not swapped:
            swapped.append(target)
            replace(target)
        return st

    monkeypatch.setattr(fsops, "lstat_at", then_swap)
    return swapped


def test_a_folder_replaced_by_another_between_check_and_open_is_an_error_and_both_stay(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = root / "exec" / "A" / "checkpoint-1"
    folder.mkdir(parents=True)
    (folder / "w").write_bytes(b"w")

    def replace(p: Path) -> None:
        p.rename(tmp_path / "first")
        p.mkdir()
        (p / "other").write_bytes(b"o")

    swapped = swap_after_lstat(monkeypatch, folder, replace)
    with pytest.raises(
        Failure, match=f"^{folder}: could not remove: it was replaced while it was being removed$"
    ):
        PosixStore(str(root)).remove_folder(UNBOUNDED, "exec/A/checkpoint-1")
    assert swapped and (tmp_path / "first" / "w").exists() and (folder / "other").exists()


def test_a_folder_inside_swapped_for_a_link_after_its_check_is_unlinked_not_followed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_bytes(b"keep")
    folder = root / "exec" / "A" / "checkpoint-1"
    (folder / "inner" / "sub").mkdir(parents=True)
    (folder / "inner" / "sub" / "w").write_bytes(b"w")

    def replace(p: Path) -> None:
        p.rename(tmp_path / "moved")
        p.symlink_to(precious)

    swapped = swap_after_lstat(monkeypatch, folder / "inner" / "sub", replace)
    assert PosixStore(str(root)).remove_folder(UNBOUNDED, "exec/A/checkpoint-1") == Removal(True)
    assert swapped and not folder.exists()
    assert (precious / "data").read_bytes() == b"keep" and (tmp_path / "moved" / "w").exists()
