"""publish.snapshots with torch: the format on disk, every refusal, retention, failures while saving."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import publish.snapshots as snapshots

pytestmark = pytest.mark.torch

FORMAT = "pear15.cloud_checkpoint.v1"


class Opaque:
    """Not something weights-only loading accepts."""

    def __init__(self) -> None:
        self.value = 1


def payload_for(step: int) -> dict[str, Any]:
    return {"step": step, "w": torch.arange(16, dtype=torch.float32) + step, "rng": torch.get_rng_state()}


def write_independently(
    root: Path, step: int, obj: Any = None, *, created_ns: int | None = None, ident: str | None = None
) -> Path:
    """A snapshot written from the documented format alone, without the library."""
    ident = ident or uuid.uuid4().hex
    directory = root / f"step_{step:012d}_{ident}"
    directory.mkdir(parents=True)
    buf = io.BytesIO()
    torch.save(payload_for(step) if obj is None else obj, buf)
    data = buf.getvalue()
    (directory / "checkpoint.pt").write_bytes(data)
    manifest = {
        "bytes": len(data),
        "created_ns": 1_700_000_000_000_000_000 + step if created_ns is None else created_ns,
        "file": "checkpoint.pt",
        "format": FORMAT,
        "id": ident,
        "sha256": hashlib.sha256(data).hexdigest(),
        "step": step,
    }
    reseal(directory, json.dumps(manifest, sort_keys=True, allow_nan=False).encode("utf-8"))
    return directory


def reseal(directory: Path, manifest: bytes) -> None:
    """Replace manifest.json and write the READY that matches it."""
    (directory / "manifest.json").write_bytes(manifest)
    ready = f"{FORMAT}\n{hashlib.sha256(manifest).hexdigest()}\n".encode("ascii")
    (directory / "READY").write_bytes(ready)


def edit_manifest(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads((directory / "manifest.json").read_bytes())
    change(doc)
    reseal(directory, json.dumps(doc, sort_keys=True).encode())


def assert_follows_the_format(directory: Path) -> None:
    """The documented rules, checked without the library."""
    m = snapshots.SNAPSHOT_DIR.fullmatch(directory.name)
    assert m is not None
    assert sorted(os.listdir(directory)) == ["READY", "checkpoint.pt", "manifest.json"]
    raw = (directory / "manifest.json").read_bytes()
    doc = json.loads(raw)
    assert raw == json.dumps(doc, sort_keys=True, allow_nan=False).encode("utf-8")
    assert sorted(doc) == ["bytes", "created_ns", "file", "format", "id", "sha256", "step"]
    assert doc["format"] == FORMAT and doc["file"] == "checkpoint.pt"
    assert doc["step"] == int(m.group(1)) and doc["id"] == m.group(2)
    assert type(doc["created_ns"]) is int and type(doc["bytes"]) is int
    data = (directory / "checkpoint.pt").read_bytes()
    assert doc["bytes"] == len(data) > 0
    assert doc["sha256"] == hashlib.sha256(data).hexdigest()
    assert (directory / "READY").read_bytes() == f"{FORMAT}\n{hashlib.sha256(raw).hexdigest()}\n".encode()
    loaded = torch.load(directory / "checkpoint.pt", weights_only=True, map_location="cpu")
    assert loaded["step"] == doc["step"]


def steps(paths: list[Path]) -> list[int]:
    return [int(p.name[5:17]) for p in paths]


# --- Compatibility ---------------------------------------------------------------------------------------


def test_a_snapshot_written_by_the_library_follows_the_format(tmp_path: Path) -> None:
    path = snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert path.parent == tmp_path
    assert_follows_the_format(path)
    assert not list(tmp_path.glob("**/*.partial"))


def test_a_snapshot_written_by_an_independent_writer_loads(tmp_path: Path) -> None:
    directory = write_independently(tmp_path, 4)
    payload, info = snapshots.load_latest(tmp_path) or ({}, {})
    assert torch.equal(payload["w"], payload_for(4)["w"])
    assert info["path"] == str(directory) and info["step"] == 4 and info["skipped"] == []
    assert info["manifest"] == json.loads((directory / "manifest.json").read_bytes())
    json.dumps(info)
    assert snapshots.list_valid(tmp_path) == [directory]
    assert snapshots.load(directory)[1]["path"] == str(directory)


def test_the_root_is_created_and_a_relative_root_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = snapshots.save_checkpoint("exec/a", payload_for(1))
    assert path == tmp_path / "exec" / "a" / path.name
    assert snapshots.list_valid("exec/a") == [path]


# --- Ordering -----------------------------------------------------------------------------------------------


def test_order_is_step_then_created_ns_then_name(tmp_path: Path) -> None:
    low = "0" * 32
    high = "f" * 32
    write_independently(tmp_path, 5, created_ns=10, ident=high)
    newer = write_independently(tmp_path, 5, created_ns=20, ident=low)
    write_independently(tmp_path, 3, created_ns=99)
    assert steps(snapshots.list_valid(tmp_path)) == [5, 5, 3]
    assert snapshots.list_valid(tmp_path)[0] == newer
    tie = write_independently(tmp_path, 5, created_ns=20, ident="1" + "0" * 31)
    assert snapshots.list_valid(tmp_path)[0] == tie


# --- Refusals: each falls back to the next older snapshot and is listed in skipped ---------------------------


def _flip(d: Path) -> None:
    data = bytearray((d / "checkpoint.pt").read_bytes())
    data[len(data) // 2] ^= 0x01
    (d / "checkpoint.pt").write_bytes(bytes(data))


def _truncate(d: Path) -> None:
    data = (d / "checkpoint.pt").read_bytes()
    (d / "checkpoint.pt").write_bytes(data[: len(data) // 2])


def _wrong_ready(d: Path) -> None:
    (d / "READY").write_bytes(f"{FORMAT}\n{'0' * 64}\n".encode())


def _oversized_ready(d: Path) -> None:
    (d / "READY").write_bytes((d / "READY").read_bytes() + b"\n" * 200)


def _oversized_manifest(d: Path) -> None:
    reseal(d, (d / "manifest.json").read_bytes() + b" " * (16 * 1024))


def _duplicate_key(d: Path) -> None:
    raw = (d / "manifest.json").read_bytes()
    reseal(d, raw[:-1] + b', "step": 1}')


def _replace_with_independent(obj: Callable[[], Any]) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        ident = d.name[-32:]
        shutil.rmtree(d)
        write_independently(d.parent, 1, obj(), ident=ident)

    return change


def _link_directory(d: Path) -> None:
    elsewhere = d.parent.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.move(str(d), str(elsewhere / d.name))
    d.symlink_to(elsewhere / d.name)


def _link_file(name: str) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        elsewhere = d.parent.parent / "elsewhere"
        elsewhere.mkdir()
        shutil.move(str(d / name), str(elsewhere / name))
        (d / name).symlink_to(elsewhere / name)

    return change


CORRUPTIONS: dict[str, tuple[Callable[[Path], None], str]] = {
    "flipped byte": (_flip, "SHA-256 differs"),
    "truncated payload": (_truncate, "holds .* bytes, the manifest says"),
    "missing payload": (lambda d: (d / "checkpoint.pt").unlink(), "No such file"),
    "wrong READY": (_wrong_ready, "READY does not match"),
    "oversized READY": (_oversized_ready, "over 256 bytes"),
    "missing READY": (lambda d: (d / "READY").unlink(), "incomplete: no READY"),
    "missing manifest": (lambda d: (d / "manifest.json").unlink(), "no manifest.json"),
    "oversized manifest": (_oversized_manifest, "over 16384 bytes"),
    "extra field": (lambda d: edit_manifest(d, lambda m: m.update(note="x")), "unknown note"),
    "missing field": (lambda d: edit_manifest(d, lambda m: m.pop("created_ns")), "missing created_ns"),
    "duplicate key": (_duplicate_key, "duplicate key 'step'"),
    "bool step": (lambda d: edit_manifest(d, lambda m: m.update(step=True)), "step True is not"),
    "string bytes": (lambda d: edit_manifest(d, lambda m: m.update(bytes=str(m["bytes"]))), "bytes '"),
    "id disagrees": (lambda d: edit_manifest(d, lambda m: m.update(id="e" * 32)), "id e+ disagrees"),
    "step disagrees": (lambda d: edit_manifest(d, lambda m: m.update(step=2)), "step 2 disagrees"),
    "weights-only refusal": (
        _replace_with_independent(lambda: {"step": 1, "object": Opaque()}),
        "weights-only loading refused",
    ),
    "payload not a dict": (_replace_with_independent(lambda: [1, 2]), "holds a list, not a dict"),
    "payload step differs": (_replace_with_independent(lambda: payload_for(0)), "step 0 differs"),
    "linked directory": (_link_directory, "symbolic link"),
    "linked payload": (_link_file("checkpoint.pt"), "symbolic link"),
    "linked manifest": (_link_file("manifest.json"), "symbolic link"),
    "linked READY": (_link_file("READY"), "symbolic link"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_refused_snapshot_falls_back_to_the_next_older(
    tmp_path: Path, corruption: str, caplog: pytest.LogCaptureFixture
) -> None:
    change, why = CORRUPTIONS[corruption]
    root = tmp_path / "root"
    older = snapshots.save_checkpoint(root, payload_for(0))
    newer = snapshots.save_checkpoint(root, payload_for(1))
    change(newer)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        found = snapshots.load_latest(root)
    assert found is not None
    payload, info = found
    assert info["path"] == str(older) and info["step"] == 0 and payload["step"] == 0
    assert len(info["skipped"]) == 1
    assert info["skipped"][0]["path"] == str(newer)
    assert_matches(why, info["skipped"][0]["reason"])
    json.dumps(info)
    assert any(str(newer) in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert snapshots.list_valid(root) == [older]
    with pytest.raises(ValueError) as refused:
        snapshots.load(newer)
    assert_matches(why, str(refused.value))


def assert_matches(pattern: str, text: str) -> None:
    import re

    assert re.search(pattern, text), f"{pattern!r} not in {text!r}"


def test_nothing_recovered_is_a_warning_and_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    only = snapshots.save_checkpoint(tmp_path, payload_for(1))
    _flip(only)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        assert snapshots.load_latest(tmp_path) is None
    assert any("could be recovered" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("where", ["root", "ancestor"])
def test_a_linked_root_or_ancestor_is_refused_everywhere(tmp_path: Path, where: str) -> None:
    real = tmp_path / "real"
    snapshot = snapshots.save_checkpoint(real / "root", payload_for(1))
    if where == "root":
        (tmp_path / "link").symlink_to(real / "root")
        root = tmp_path / "link"
    else:
        (tmp_path / "link").symlink_to(real)
        root = tmp_path / "link" / "root"
    for call in (
        snapshots.list_valid,
        snapshots.load_latest,
        lambda r: snapshots.save_checkpoint(r, payload_for(2)),
    ):
        with pytest.raises(ValueError, match="symbolic link"):
            call(root)
    with pytest.raises(ValueError, match="symbolic link"):
        snapshots.load(root / snapshot.name)
    assert snapshots.list_valid(real / "root") == [snapshot]


def test_load_refuses_a_directory_not_named_like_a_snapshot(tmp_path: Path) -> None:
    directory = write_independently(tmp_path, 1)
    renamed = directory.rename(tmp_path / "checkpoint-1")
    with pytest.raises(ValueError, match="name is not"):
        snapshots.load(renamed)
    with pytest.raises(ValueError, match="does not exist"):
        snapshots.load(tmp_path / directory.name)


def test_a_payload_that_weights_only_refuses_fails_the_save(tmp_path: Path) -> None:
    older = snapshots.save_checkpoint(tmp_path, payload_for(1))
    with pytest.raises(ValueError, match="weights-only loading refused"):
        snapshots.save_checkpoint(tmp_path, {"step": 2, "object": Opaque()})
    (failed,) = [p for p in tmp_path.iterdir() if p.name.startswith("step_000000000002_")]
    assert not (failed / "READY").exists()
    assert (failed / "checkpoint.pt").exists() and (failed / "manifest.json").exists()  # kept for diagnosis
    assert snapshots.list_valid(tmp_path) == [older]


# --- Retention ----------------------------------------------------------------------------------------------


def test_keep_last(tmp_path: Path) -> None:
    for step in range(1, 6):
        snapshots.save_checkpoint(tmp_path, payload_for(step))
    assert steps(snapshots.list_valid(tmp_path)) == [5, 4]
    assert len(list(tmp_path.iterdir())) == 2
    for step in range(6, 9):
        snapshots.save_checkpoint(tmp_path, payload_for(step), keep_last=3)
    assert steps(snapshots.list_valid(tmp_path)) == [8, 7, 6]


def test_keep_last_none_removes_nothing(tmp_path: Path) -> None:
    """For a root that watch publishes and publish prune rotates: the library deletes no snapshot."""
    for step in range(1, 6):
        snapshots.save_checkpoint(tmp_path, payload_for(step), keep_last=None)
    assert steps(snapshots.list_valid(tmp_path)) == [5, 4, 3, 2, 1]
    snapshots.save_checkpoint(tmp_path, payload_for(6))  # the default rotates again
    assert steps(snapshots.list_valid(tmp_path)) == [6, 5]


def test_an_out_of_order_save_is_kept_beside_the_newest(tmp_path: Path) -> None:
    for step in (10, 20):
        snapshots.save_checkpoint(tmp_path, payload_for(step))
    snapshots.save_checkpoint(tmp_path, payload_for(5))
    assert steps(snapshots.list_valid(tmp_path)) == [20, 10, 5]
    snapshots.save_checkpoint(tmp_path, payload_for(30))
    assert steps(snapshots.list_valid(tmp_path)) == [30, 20]
    snapshots.save_checkpoint(tmp_path, payload_for(25))  # the newest two are 30 and 25: 20 goes
    assert steps(snapshots.list_valid(tmp_path)) == [30, 25]


def test_retention_leaves_unknown_files_and_directories(tmp_path: Path) -> None:
    first = snapshots.save_checkpoint(tmp_path, payload_for(1))
    (first / "notes.txt").write_text("mine")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "step_1_other").mkdir()
    for step in (2, 3):
        snapshots.save_checkpoint(tmp_path, payload_for(step))
    assert sorted(os.listdir(first)) == ["notes.txt"]
    assert (tmp_path / "notes.txt").exists() and (tmp_path / "step_1_other").is_dir()
    assert steps(snapshots.list_valid(tmp_path)) == [3, 2]


def test_retention_leaves_corrupt_and_incomplete_snapshots(tmp_path: Path) -> None:
    corrupt = snapshots.save_checkpoint(tmp_path, payload_for(1), keep_last=3)
    incomplete = snapshots.save_checkpoint(tmp_path, payload_for(2), keep_last=3)
    valid = snapshots.save_checkpoint(tmp_path, payload_for(3), keep_last=3)
    # Written after this process verified it: retention must notice and not trust what it remembers.
    _flip(corrupt)
    (incomplete / "READY").unlink()
    for step in (4, 5, 6):
        snapshots.save_checkpoint(tmp_path, payload_for(step))
    assert sorted(os.listdir(corrupt)) == ["READY", "checkpoint.pt", "manifest.json"]
    assert sorted(os.listdir(incomplete)) == ["checkpoint.pt", "manifest.json"]
    assert not valid.exists()
    assert steps(snapshots.list_valid(tmp_path)) == [6, 5]


def test_a_corrupt_snapshot_is_not_counted_among_the_kept(tmp_path: Path) -> None:
    snapshots.save_checkpoint(tmp_path, payload_for(1))
    two = snapshots.save_checkpoint(tmp_path, payload_for(2))
    _flip(two)
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    # 2 is corrupt, so the two newest valid ones are 3 and 1: nothing valid is removed.
    assert steps(snapshots.list_valid(tmp_path)) == [3, 1]
    assert two.exists()


def test_a_snapshot_changed_before_removal_is_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = snapshots.save_checkpoint(tmp_path, payload_for(1))
    snapshots.save_checkpoint(tmp_path, payload_for(2))
    real_read_meta = snapshots._read_meta

    def read_meta_then_change(path: str, name: str) -> Any:
        meta = real_read_meta(path, name)
        if path == str(old) and snapshots._verified.get(path):
            with open(os.path.join(path, "checkpoint.pt"), "r+b") as f:  # changed between check and removal
                f.write(f.read(1))
        return meta

    monkeypatch.setattr(snapshots, "_read_meta", read_meta_then_change)
    snapshots.save_checkpoint(tmp_path, payload_for(3))
    assert (old / "READY").exists()


def test_a_failure_in_the_middle_of_retention_leaves_nothing_that_looks_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    old = snapshots.save_checkpoint(tmp_path, payload_for(1))
    snapshots.save_checkpoint(tmp_path, payload_for(2))
    real_unlink = os.unlink

    def failing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith("manifest.json"):
            raise OSError(errno.EIO, "Input/output error", str(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with caplog.at_level(logging.WARNING, logger="publish.snapshots"):
        new = snapshots.save_checkpoint(tmp_path, payload_for(3))  # no exception: the save succeeded
    monkeypatch.undo()
    assert any("could not remove" in r.getMessage() and str(old) in r.getMessage() for r in caplog.records)
    assert sorted(os.listdir(old)) == ["checkpoint.pt", "manifest.json"]
    assert steps(snapshots.list_valid(tmp_path)) == [3, 2]
    assert snapshots.load_latest(tmp_path)[1]["path"] == str(new)  # type: ignore[index]


# --- Failures while saving ----------------------------------------------------------------------------------


class Interrupting:
    def __reduce_ex__(self, protocol: Any) -> Any:
        raise KeyboardInterrupt


def test_keyboard_interrupt_inside_torch_save(tmp_path: Path) -> None:
    older = snapshots.save_checkpoint(tmp_path, payload_for(1))
    with pytest.raises(KeyboardInterrupt):
        snapshots.save_checkpoint(tmp_path, {"step": 2, "w": torch.ones(4), "x": Interrupting()})
    (failed,) = [p for p in tmp_path.iterdir() if p.name.startswith("step_000000000002_")]
    assert os.listdir(failed) == ["checkpoint.pt.partial"]
    assert snapshots.list_valid(tmp_path) == [older]
    assert snapshots.load_latest(tmp_path)[1]["path"] == str(older)  # type: ignore[index]


@pytest.mark.parametrize("failing", ["READY", "verification"])
def test_keyboard_interrupt_after_ready_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    older = snapshots.save_checkpoint(tmp_path, payload_for(1))
    if failing == "READY":
        real_fsync_dir = snapshots._fs.fsync_dir

        def interrupted(path: str) -> None:
            if os.path.exists(os.path.join(path, "READY")):
                raise KeyboardInterrupt
            real_fsync_dir(path)

        monkeypatch.setattr(snapshots._fs, "fsync_dir", interrupted)
    else:

        def interrupted_load(*args: Any, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(torch, "load", interrupted_load)
    with pytest.raises(KeyboardInterrupt):
        snapshots.save_checkpoint(tmp_path, payload_for(2))
    monkeypatch.undo()
    (failed,) = [p for p in tmp_path.iterdir() if p.name.startswith("step_000000000002_")]
    assert sorted(os.listdir(failed)) == ["checkpoint.pt", "manifest.json"]
    assert snapshots.list_valid(tmp_path) == [older]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Any:
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        message = f"cannot mount a tmpfs: {done.stderr.decode(errors='replace').strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk(small_tmpfs: Path) -> None:
    root = small_tmpfs / "root"
    older = snapshots.save_checkpoint(root, payload_for(1))
    with pytest.raises(OSError) as full:
        snapshots.save_checkpoint(root, {"step": 2, "big": torch.zeros(512 * 1024)})  # 2 MiB
    assert full.value.errno == errno.ENOSPC
    (failed,) = [p for p in root.iterdir() if p.name.startswith("step_000000000002_")]
    assert not (failed / "READY").exists()
    assert snapshots.list_valid(root) == [older]
    assert snapshots.load_latest(root)[1]["path"] == str(older)  # type: ignore[index]
    # Once space is back, saving works again and the failed directory is left for diagnosis.
    shutil.rmtree(failed)
    assert snapshots.save_checkpoint(root, payload_for(3)).exists()


def test_a_full_disk_while_writing_the_manifest(small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = small_tmpfs / "root"
    older = snapshots.save_checkpoint(root, payload_for(1))
    real_write_file = snapshots._fs.write_file

    def fill_then_write(directory: str, name: str, data: bytes) -> None:
        with open(small_tmpfs / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        real_write_file(directory, name, data)

    monkeypatch.setattr(snapshots._fs, "write_file", fill_then_write)
    with pytest.raises(OSError) as full:
        snapshots.save_checkpoint(root, payload_for(2))
    assert full.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert snapshots.list_valid(root) == [older]
