"""watch on POSIX roots, as a real process: hf, dcp and snapshot saves, signals, faults, defaults."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.ops.scan import Watcher
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.stores.posix import PosixStore
from publish.verbs.watch import watch
from tests.conftest import Watch, run_cli
from tests.support import dcp_shapes
from tests.support.trainer_saves import hf_save, real_state


def published(root: Path, step: int, folder: str, epoch: int = 0) -> str:
    return f"published {layout.name(epoch, step, folder)} (epoch {epoch}, step {step}, {root}/{folder})"


def started(w: Watch) -> None:
    """Give the watcher time to start and make its first scan."""
    time.sleep(0.6)


def test_hf_publishes_complete_saves_in_step_order_and_each_once(root: Path) -> None:
    saves = root / "exec" / "A"
    hf_save(saves, 20)
    hf_save(saves, 10)
    w = Watch(
        "-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", env={"DISPATCH_ATTEMPT": "A"}
    )
    assert w.next_line() == published(root, 10, "exec/A/checkpoint-10")
    assert w.next_line() == published(root, 20, "exec/A/checkpoint-20")
    assert w.quiet_for(0.5)  # several scans later, nothing again
    code, err = w.stop()
    assert (code, err) == (0, "")
    assert len(os.listdir(root / "pub")) == 2


def test_hf_incomplete_save_is_passed_over_until_complete(root: Path) -> None:
    saves = root / "exec" / "A"
    folder = saves / "checkpoint-30"
    folder.mkdir(parents=True)
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", "-attempt", "A")
    started(w)
    data = real_state(30)
    (folder / "trainer_state.json").write_bytes(b"")  # created, nothing written yet
    assert w.quiet_for(0.4)
    (folder / "trainer_state.json").write_bytes(data[: len(data) // 2])  # cut inside
    assert w.quiet_for(0.4)
    (folder / "trainer_state.json").write_bytes(data)
    assert w.next_line() == published(root, 30, "exec/A/checkpoint-30")
    assert w.stop()[0] == 0


@pytest.mark.parametrize(
    "state, why",
    [
        (b'{"global_step": 40,}', "does not parse"),
        (b'{"global_step": 40} {}', "does not parse"),
        (b'{"best_metric": null}', "no global_step"),
        (b"[40]", "no global_step"),
        (b'{"global_step": 41}', "disagrees"),
        (b'{"global_step": "40"}', "not an integer"),
        (b'{"global_step": true}', "not an integer"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested too deeply", id="nested-100000-deep"),
        pytest.param(b'{"global_step": ' + b"9" * 5000 + b"}", "more than 4300 digits", id="5000-digits"),
    ],
)
def test_hf_faulty_trainer_state_stops_watch(root: Path, state: bytes, why: str) -> None:
    hf_save(root / "exec" / "A", 40, state)
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", "-attempt", "A")
    code, err = w.finish()
    assert code == 1
    assert err.startswith(f"publish: {root}/exec/A/checkpoint-40/trainer_state.json: ")
    assert why in err
    assert not (root / "pub").exists()


def test_dcp_publishes_when_metadata_appears(root: Path) -> None:
    saves = root / "exec" / "7"
    for name in ("step-100", "iter_0000200", "300", "logs", "latest", "step-x"):
        (saves / name).mkdir(parents=True)
    dcp_shapes.write_save(saves / "step-100")
    w = Watch(
        "-checkpoint", str(root), "-framework", "dcp", "-interval", "100ms", env={"DISPATCH_ATTEMPT": "7"}
    )
    assert w.next_line() == published(root, 100, "exec/7/step-100")
    assert w.quiet_for(0.4)
    dcp_shapes.write_save(saves / "iter_0000200")
    dcp_shapes.write_save(saves / "300")
    assert w.next_line() == published(root, 200, "exec/7/iter_0000200")
    assert w.next_line() == published(root, 300, "exec/7/300")
    assert w.stop()[0] == 0


def test_dcp_metadata_whose_keys_collide_stops_watch(root: Path) -> None:
    """Before, its dict of colliding keys was built inside one C call that held the interpreter for about
    20 s whatever -timeout said, and the save was then published as whole."""
    folder = root / "exec" / "A" / "step-1"
    folder.mkdir(parents=True)
    (folder / "f").write_bytes(b"\x01")
    (folder / ".metadata").write_bytes(dcp_shapes.colliding(40_000))
    w = Watch("-checkpoint", str(root), "-framework", "dcp", "-interval", "100ms", "-attempt", "A")
    try:
        code, err = w.finish(timeout=15)
    except subprocess.TimeoutExpired:
        w.proc.kill()
        w.finish()
        pytest.fail("watch did not stop")
    assert (code, err) == (
        1,
        f"publish: {folder}/.metadata: does not read as a DCP .metadata: an int of 2^61-1 or more as a dict key "
        "or set item (a DCP save holds none; its hash could be made to collide)\n",
    )
    assert not (root / "pub").exists()


def snapshot_dir(saves: Path, step: int, good: bool = True) -> Path:
    """A snapshot directory in the library's documented format, written here by hand."""
    ident = uuid.uuid4().hex
    folder = saves / f"step_{step:012d}_{ident}"
    folder.mkdir(parents=True)
    payload = b"payload"
    (folder / "checkpoint.pt").write_bytes(payload)
    manifest = json.dumps(
        {
            "bytes": len(payload),
            "created_ns": time.time_ns(),
            "file": "checkpoint.pt",
            "format": "pear15.cloud_checkpoint.v1",
            "id": ident,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "step": step,
        },
        sort_keys=True,
        allow_nan=False,
    ).encode()
    (folder / "manifest.json").write_bytes(manifest)
    digest = hashlib.sha256(manifest if good else manifest + b" ").hexdigest()
    (folder / "READY").write_bytes(f"pear15.cloud_checkpoint.v1\n{digest}\n".encode())
    return folder


def test_snapshot_publishes_directories_whose_ready_matches(root: Path) -> None:
    saves = root / "exec" / "A"
    good = snapshot_dir(saves, 5)
    snapshot_dir(saves, 9, good=False)
    (saves / f"step_{3:012d}_{uuid.uuid4().hex}").mkdir()  # no READY yet
    w = Watch("-checkpoint", str(root), "-framework", "snapshot", "-interval", "100ms", "-attempt", "A")
    assert w.next_line() == published(root, 5, f"exec/A/{good.name}")
    assert w.quiet_for(0.4)
    assert w.stop()[0] == 0
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{good}\n"


def test_sigterm_runs_a_last_scan(root: Path) -> None:
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "1h", "-attempt", "A")
    started(w)
    hf_save(root / "exec" / "A", 50)
    code, err = w.stop(signal.SIGTERM)
    assert (code, err) == (0, "")
    assert w.seen == [published(root, 50, "exec/A/checkpoint-50")]


def test_sigint_runs_a_last_scan(root: Path) -> None:
    w = Watch("-checkpoint", str(root), "-framework", "dcp", "-interval", "1h", "-attempt", "A")
    started(w)
    dcp_shapes.write_save(root / "exec" / "A" / "step-1")
    code, err = w.stop(signal.SIGINT)
    assert (code, err) == (0, "")
    assert w.seen == [published(root, 1, "exec/A/step-1")]


class HangingReads:
    """A POSIX store whose file reads never return until released: a hung filesystem.

    Nothing on a local disk hangs a read any more (a FIFO marker is refused, not opened to wait), so the
    hang is made here."""

    def __init__(self, root: Path, release: threading.Event) -> None:
        self.inner = PosixStore(str(root))
        self.release = release

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, dl: Deadline, path: str, limit: int) -> bytes | None:
        self.release.wait(60)
        return self.inner.read(dl, path, limit)


def test_timeout_bounds_the_last_scan(root: Path) -> None:
    hf_save(root / "exec" / "A", 60)
    release, stop = threading.Event(), threading.Event()
    stop.set()  # as after SIGTERM: only the last scan runs
    say = Say(lambda line: None, lambda line: None)
    store: Any = HangingReads(root, release)
    try:
        with pytest.raises(Failure, match="did not finish within -timeout"):
            watch(Watcher(store, say, FRAMEWORKS["hf"], "exec/A", 0), 3600.0, 0.5, stop, None, None)
        assert not (root / "pub").exists()  # before the release: the abandoned scan may publish after it
    finally:
        release.set()


def test_saves_folder_may_not_exist_yet(root: Path) -> None:
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", "-attempt", "B")
    assert w.quiet_for(0.5)
    hf_save(root / "exec" / "B", 1)
    assert w.next_line() == published(root, 1, "exec/B/checkpoint-1")
    assert w.stop() == (0, "")


def test_saves_argument_relative_and_epoch_from_environment(root: Path) -> None:
    hf_save(root / "runs" / "x", 2)
    w = Watch(
        "-checkpoint",
        str(root),
        "-framework",
        "hf",
        "-interval",
        "100ms",
        "runs/x",
        env={"DISPATCH_EPOCH": "3"},
        cwd=root,
    )
    assert w.next_line() == published(root, 2, "runs/x/checkpoint-2", epoch=3)
    assert w.stop()[0] == 0


def test_restarted_watch_does_not_publish_again(root: Path) -> None:
    hf_save(root / "exec" / "A", 1)
    name = layout.name(0, 1, "exec/A/checkpoint-1")
    assert run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/checkpoint-1"), "1").code == 0
    before = os.stat(root / "pub" / name).st_mtime_ns
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", "-attempt", "A")
    assert w.quiet_for(0.6)
    code, err = w.stop()
    assert code == 0 and err.count("already published") == 1
    assert os.stat(root / "pub" / name).st_mtime_ns == before


def test_saves_outside_root_exits_1(root: Path, tmp_path: Path) -> None:
    r = run_cli("watch", "-checkpoint", str(root), "-framework", "hf", str(tmp_path))
    assert r.code == 1 and "not under the root" in r.err


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["-attempt", "A"], {}, "-framework is required"),
        (["-framework", "tf", "-attempt", "A"], {}, 'invalid value "tf" for flag -framework'),
        (["-framework", "hf"], {}, "no SAVES argument and no attempt"),
        (["-framework", "hf"], {"DISPATCH_ATTEMPT": ""}, "no SAVES argument and no attempt"),
        (["-framework", "hf", "-attempt="], {"DISPATCH_ATTEMPT": "A"}, "-attempt is empty"),
        (["-framework", "hf", "-attempt", "a/b"], {}, "not one path element"),
        (["-framework", "hf", "-attempt", ".."], {}, "not one path element"),
        (["-framework", "hf"], {"DISPATCH_ATTEMPT": "."}, "not one path element"),
        (["-framework", "hf", "-attempt", "A", "-interval", "0s"], {}, "must be positive"),
        (["-framework", "hf", "-attempt", "A", "x", "y"], {}, "unexpected argument 'y'"),
    ],
)
def test_watch_usage_errors(root: Path, args: list[str], env: dict[str, str], message: str) -> None:
    r = run_cli("watch", "-checkpoint", str(root), *args, env=env)
    assert r.code == 2 and message in r.err and "usage: publish watch" in r.err


def test_attempt_flag_wins_over_environment(root: Path) -> None:
    hf_save(root / "exec" / "F", 4)
    w = Watch(
        "-checkpoint",
        str(root),
        "-framework",
        "hf",
        "-interval",
        "100ms",
        "-attempt",
        "F",
        env={"DISPATCH_ATTEMPT": "E"},
    )
    assert w.next_line() == published(root, 4, "exec/F/checkpoint-4")
    assert w.stop()[0] == 0


def test_snapshot_whose_manifest_disagrees_with_its_name_is_not_published(root: Path) -> None:
    saves = root / "exec" / "A"
    good = snapshot_dir(saves, 5)
    wrong = saves / f"step_{6:012d}_{uuid.uuid4().hex}"
    os.rename(snapshot_dir(saves, 7), wrong)  # a whole snapshot of step 7 under a step-6 name
    w = Watch("-checkpoint", str(root), "-framework", "snapshot", "-interval", "100ms", "-attempt", "A")
    assert w.next_line() == published(root, 5, f"exec/A/{good.name}")
    assert w.quiet_for(0.4)
    assert w.stop()[0] == 0
