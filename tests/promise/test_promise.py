"""The promise, case by case, on a POSIX root: reserved paths are never saves, a save that cannot be examined
or published is said and passed over, a faulty save under ``run`` does not stop the others, a hand
publication that resolve will not choose is said, ``init`` makes a root, and ``run``'s exit status is
COMMAND's however many signals arrive.  (The S3 side is tests/promise/test_promise_s3.py; the property as a whole,
tests/promise/test_model.py.)"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import REPO, base_env, command, run_cli
from tests.support.trainer_saves import hf_save

RESERVED = ["pub", "pub/x", "tomb", "tomb/x", "man", "man/x", "exec"]


def entry_for(root: Path, path: str, epoch: int = 1, step: int = 5) -> Path:
    (root / "pub").mkdir(exist_ok=True)
    entry = root / "pub" / layout.name(epoch, step, path)
    entry.touch()
    return entry


@pytest.mark.parametrize("save", RESERVED)
def test_publish_refuses_a_reserved_save(root: Path, save: str) -> None:
    (root / save).mkdir(parents=True, exist_ok=True)
    r = run_cli("publish", "-checkpoint", str(root), str(root / save), "5")
    assert r.code == 1, r
    assert r.err == f"publish: save {root}/{save}: never a save: {layout.reserved(save)}\n"
    assert not list((root / "pub").glob("0*")) if (root / "pub").is_dir() else True


def test_publish_refuses_the_root_itself(root: Path) -> None:
    r = run_cli("publish", "-checkpoint", str(root), str(root), "5")
    assert r.code == 1 and "not under the root" in r.err, r


@pytest.mark.parametrize("save", RESERVED)
def test_an_entry_naming_a_reserved_path_is_refused_and_nothing_is_removed(root: Path, save: str) -> None:
    hf_save(root / "exec/A", 7)
    good = entry_for(root, "exec/A/checkpoint-7", epoch=2, step=7)
    bad = entry_for(root, save, epoch=1, step=1)
    for verb in ("resolve", "status"):
        r = run_cli(verb, "-checkpoint", str(root))
        assert r.code == 1 and f"{bad}: not a publication entry" in r.err, r
        assert "never a save" in r.err
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 1 and f"{bad}: not a publication entry" in r.err, r
    assert good.exists() and bad.exists() and (root / "exec/A/checkpoint-7").is_dir()


@pytest.mark.parametrize("folder", RESERVED)
def test_a_tombstone_naming_a_reserved_path_removes_nothing(root: Path, folder: str) -> None:
    hf_save(root / "exec/A", 7)
    hf_save(root / "exec/A", 9)
    entry_for(root, "exec/A/checkpoint-7", epoch=2, step=7)
    newest = entry_for(root, "exec/A/checkpoint-9", epoch=2, step=9)
    (root / "tomb").mkdir()
    tomb = root / "tomb" / layout.tomb_name(folder)
    tomb.touch()
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 1 and r.err.startswith(f"publish: {tomb}: not a tombstone"), r
    assert "never a save" in r.err
    assert newest.exists() and len(list((root / "pub").iterdir())) == 2
    assert (root / "exec/A/checkpoint-9").is_dir()
    r = run_cli("resolve", "-checkpoint", str(root))
    assert r.code == 0 and r.out == f"{root}/exec/A/checkpoint-9\n", r


@pytest.mark.parametrize("top", ["pub", "tomb", "man"])
def test_watch_refuses_saves_inside_pub_tomb_or_man(root: Path, top: str) -> None:
    (root / top / "x").mkdir(parents=True)
    r = run_cli("watch", "-checkpoint", str(root), "-framework", "hf", str(root / top / "x"))
    assert r.code == 1 and f"lies in the root's {top}/, which holds no saves" in r.err, r


def _watch_once(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A watch that makes its first scan, then its last on SIGTERM; its output."""
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [*cmd, "watch", "-checkpoint", str(root), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("kind", ["loop", "too-long"])
def test_watch_passes_over_a_child_it_cannot_examine(root: Path, kind: str) -> None:
    saves = root / "exec/A"
    hf_save(saves, 5)
    hf_save(saves, 9)
    if kind == "loop":
        os.symlink("loop", saves / "loop")
        os.symlink("checkpoint-6", saves / "checkpoint-6")  # a save's name, looping
        odd = ["loop", "checkpoint-6"]
    else:
        os.symlink("x" * 300, saves / "checkpoint-6")  # lstat fine; stat says ENAMETOOLONG
        odd = ["checkpoint-6"]
    r = _watch_once(root, "-framework", "hf", "-attempt", "A", "-interval", "1h")
    assert r.returncode == 0, r
    published = [line.split()[-1].rstrip(")") for line in r.stdout.splitlines()]
    assert published == [f"{saves}/checkpoint-5", f"{saves}/checkpoint-9"], r
    why = os.strerror(errno.ELOOP if kind == "loop" else errno.ENAMETOOLONG)
    for name in odd:  # said once, though watch scanned twice
        assert r.stderr.count(f"publish: {saves}/{name}: cannot be examined ({why}): passed over\n") == 1, r
    r = run_cli("resolve", "-checkpoint", str(root))
    assert r.out == f"{saves}/checkpoint-9\n"


def test_run_passes_over_a_faulty_save_and_exits_non_zero(root: Path) -> None:
    saves = root / "exec/A"
    hf_save(saves, 5)
    (saves / "checkpoint-7").mkdir()
    (saves / "checkpoint-7/trainer_state.json").write_text("junk")
    hf_save(saves, 9)
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [*cmd, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc
    assert (
        "checkpoint-5" in proc.stdout and "checkpoint-9" in proc.stdout and "checkpoint-7" not in proc.stdout
    )
    fault = f"{saves}/checkpoint-7/trainer_state.json: does not parse"
    assert proc.stderr.count(fault) == 1, proc.stderr
    assert "passed over" in proc.stderr
    # watch keeps the spec's rule: the fault stops it, naming the file, before any later save
    for entry in (root / "pub").iterdir():
        entry.unlink()
    r = _watch_once(root, "-framework", "hf", "-attempt", "A", "-interval", "1h")
    assert r.returncode == 1 and fault in r.stderr and "checkpoint-9" not in r.stdout, r


def test_a_lightning_checkpoint_without_a_step_is_said_once(root: Path) -> None:
    saves = root / "exec/A"
    saves.mkdir(parents=True)
    (saves / "epoch=3.ckpt").write_bytes(b"PK")
    (saves / "last.ckpt").write_bytes(b"PK")
    r = _watch_once(root, "-framework", "lightning", "-attempt", "A", "-interval", "1h")
    assert r.returncode == 0, r
    assert (
        r.stderr.count(f"{saves}/epoch=3.ckpt: a Lightning checkpoint whose name holds no single step=") == 1
    )
    assert "put {step} in ModelCheckpoint's filename" in r.stderr
    assert "last.ckpt" not in r.stderr


def test_a_hand_publication_below_a_greater_epoch_is_said(root: Path) -> None:
    hf_save(root / "exec/A", 5)
    hf_save(root / "exec/B", 3)
    big = 1796190455327917416
    r = run_cli(
        "publish", "-checkpoint", str(root), "-epoch", str(big), str(root / "exec/A/checkpoint-5"), "5"
    )
    assert r.code == 0 and r.err == "", r
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/B/checkpoint-3"), "3")
    assert r.code == 0 and r.out.startswith("published "), r
    assert f"an entry of epoch {big} is already published" in r.err
    assert f"give -epoch {big + 1} or more" in r.err
    r = run_cli(
        "publish", "-checkpoint", str(root), "-epoch", str(big + 1), str(root / "exec/B/checkpoint-3"), "3"
    )
    assert r.code == 0 and r.err == "", r


def test_init_makes_a_posix_root_and_says_an_existing_one(tmp_path: Path) -> None:
    new = tmp_path / "a" / "run-7"
    r = run_cli("resolve", "-checkpoint", str(new))
    assert r.code == 1 and f"publish init -checkpoint {new}" in r.err, r
    r = run_cli("init", "-checkpoint", str(new))
    assert (r.code, r.out, r.err) == (0, f"created {new}\n", ""), r
    assert new.is_dir()
    r = run_cli("init", "-checkpoint", str(new))
    assert (r.code, r.out, r.err) == (0, "", f"publish: checkpoint root {new} already exists\n"), r
    r = run_cli("resolve", "-checkpoint", str(new))
    assert (r.code, r.out) == (0, ""), r
    (tmp_path / "file").write_text("")
    r = run_cli("init", "-checkpoint", str(tmp_path / "file"))
    assert r.code == 1 and "is not a directory" in r.err, r


def test_status_json_gives_exact_epochs(root: Path) -> None:
    hf_save(root / "exec/A", 5)
    big = 18446744073709551615 + 7  # past every double's exact integers
    entry_for(root, "exec/A/checkpoint-5", epoch=big, step=5)
    r = run_cli("status", "-checkpoint", str(root), "-json")
    pub = json.loads(r.out)["publications"][0]
    assert pub["epoch_decimal"] == str(big) and pub["step_decimal"] == "5"
    assert pub["epoch"] == big  # the number stays exact in the text


def test_status_fails_on_a_disk_error_while_checking_a_save(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error is the store failing, as on S3: exit 1, not a "faulty" save."""
    hf_save(root / "exec/A", 5)
    from publish.rules.files import fileio

    def failing(fd: int, limit: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fileio, "read_at_most", failing)  # the POSIX store's bounded reader
    r = run_cli("status", "-checkpoint", str(root))
    assert (
        r.code == 1
        and r.err == f"publish: {root}/exec/A/checkpoint-5/trainer_state.json: Input/output error\n"
    ), r


def test_prune_drops_finished_tombstones_in_batches(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from publish.ops import retention as prune
    from publish.rules.files import fsops

    n = 2 * prune.TOMB_BATCH + 5
    for i in range(n):
        (root / f"exec/A/s{i}").mkdir(parents=True)
        entry_for(root, f"exec/A/s{i}", epoch=1, step=i)
    calls: list[int] = []
    real = fsops.fsync_fd
    monkeypatch.setattr(fsops, "fsync_fd", lambda fd: (calls.append(fd), real(fd))[1])
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 0 and len(r.lines) == n - 1, r
    assert not list((root / "tomb").iterdir())
    assert len(calls) <= 10, len(calls)  # pub/ once, tomb/ once to record, once per batch to drop


# Ends with os._exit: an interpreter that ends normally puts back SIGTERM's default action as it finishes,
# and would itself be killed by the storm (its status then 143, rightly passed on by run).
STORM_TRAINER = r"""
import os, signal, time
signal.signal(signal.SIGTERM, lambda *a: None)
print("ready", flush=True)
time.sleep(0.5)
os._exit(7)
"""


def test_run_exit_status_is_commands_under_a_signal_storm(root: Path) -> None:
    """A SIGTERM every 2 ms, before, during and after COMMAND's exit: the status is COMMAND's, every time."""
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    codes = []
    for _ in range(8):
        proc = subprocess.Popen(
            [*cmd, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "S", "-keep", "2", "--",
             sys.executable, "-c", STORM_TRAINER],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        while proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
            time.sleep(0.002)
        proc.stdout.read()
        codes.append(proc.wait(timeout=60))
    assert codes == [7] * 8


def test_a_save_a_cut_prune_was_removing_is_never_published_again(root: Path) -> None:
    """A prune killed after its entries went and halfway through the folder leaves its tombstone and what is
    left of the folder, which may still look whole (trainer_state.json left, the weights gone).  Neither
    watch nor publish may publish it again: resolve would answer a half-removed save.  The next prune
    finishes removing it."""
    saves = root / "exec/A"
    hf_save(saves, 5)
    hf_save(saves, 9)
    (saves / "checkpoint-5" / "model.safetensors").unlink()  # removed before the kill
    (root / "tomb").mkdir()
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-5")).touch()
    r = _watch_once(root, "-framework", "hf", "-attempt", "A", "-interval", "1h")
    assert r.returncode == 0, r
    assert "checkpoint-5" not in r.stdout and "checkpoint-9" in r.stdout, r
    said = f"publish: {saves}/checkpoint-5: a prune was removing it (tomb/ names it, or a folder around or inside it): not published\n"
    assert r.stderr.count(said) == 1, r
    p = run_cli("publish", "-checkpoint", str(root), str(saves / "checkpoint-5"), "5")
    assert p.code == 1 and "a prune was removing it" in p.err and "publish prune" in p.err, p
    r2 = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r2.code == 0 and r2.out == f"removed {saves}/checkpoint-5\n", r2
    assert not (saves / "checkpoint-5").exists() and not list((root / "tomb").iterdir())
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{saves}/checkpoint-9\n"
