"""NeMo 2 saves (issue #34, "Megatron-LM and NeMo saves"): a ``<name>--...-step=<N>-...`` folder is whole
once NeMo's ``<folder>-unfinished`` marker beside it is gone, its ``weights/`` is a whole ``torch_dist``
save and its ``context/io.json`` reads.  A folder with its marker is never whole, whatever else is there.
On POSIX and S3 roots, with megatron-core's writer in NeMo's steps (tests/support/megatron_writer.py), with
saves shaped as NeMo writes them (tests/support/megatron_saves.py), and with hostile files."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from publish.frameworks import FRAMEWORKS
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.support import megatron_saves as mg
from tests.support.framework_scans import S3Saves, Scans, posix, tree, writer
from tests.support.servers import S3Server

NEMO = FRAMEWORKS["nemo"]


@pytest.mark.parametrize(
    "name, step",
    [
        ("megatron_gpt--val_loss=2.53-step=100-consumed_samples=800.0", 100),
        ("default--val_loss=0.0000-epoch=0-step=9", 9),  # NeMoLogger's {epoch}-{step}
        ("step=7", 7),
        ("megatron_gpt--val_loss=2.53-step=100-consumed_samples=800.0-last", None),  # save_last's copy
        ("megatron_gpt--val_loss=2.53-step=100-consumed_samples=800.0-EMA", None),
        ("megatron_gpt--val_loss=2.53-step=100-consumed_samples=800.0-unfinished", None),
        ("megatron_gpt--val_loss=2.53-global_step=100", None),  # another metric's name
        ("x-step=1-step=2", None),  # two steps: not ours to choose
        ("x-step=10x", None),
        ("x-step=", None),
        ("x-step=٣", None),
        ("-step=5", 5),
    ],
)
def test_step_rule(name: str, step: int | None) -> None:
    assert NEMO.step(name) == step


def _whole(saves: Path, step: int) -> bool:
    store = PosixStore(str(saves.parent.parent))
    return NEMO.complete(UNBOUNDED, store, f"exec/A/{mg.nemo_name(step)}", step, lambda _: None)


def test_a_folder_with_its_unfinished_marker_is_never_whole_whatever_else_is_there(tmp_path: Path) -> None:
    """NeMo #10228: an unfinished last save was skipped and every requeue restarted from scratch; the
    other way round, a save whose marker is still there must not be what resolve answers."""
    saves, scans = posix(tmp_path, "nemo")
    mg.write(saves, mg.nemo_files(100))
    assert scans.scan() == []
    assert _whole(saves, 100) is False
    (saves / (mg.nemo_name(100) + "-unfinished")).unlink()
    assert scans.scan() == [100]
    assert scans.err == []


@pytest.mark.parametrize("kind", ["folder", "link", "fifo"])
def test_a_marker_of_any_kind_holds_the_save_back_without_stopping_watch(tmp_path: Path, kind: str) -> None:
    saves, scans = posix(tmp_path, "nemo")
    mg.write(saves, mg.nemo_files(100)[1:])
    marker = saves / (mg.nemo_name(100) + "-unfinished")
    {"folder": marker.mkdir, "link": lambda: marker.symlink_to("nowhere"), "fifo": lambda: os.mkfifo(marker)}[
        kind
    ]()
    assert scans.scan() == []
    assert scans.err == []


@pytest.mark.parametrize(
    "drop",
    [
        "weights/common.pt",
        "weights/metadata.json",
        "weights/.metadata",
        "weights/__1_1.distcp",
        "context/io.json",
    ],
)
def test_every_part_is_waited_for_without_a_marker(tmp_path: Path, drop: str) -> None:
    """An uploader copying to S3 never uploads a marker once it is gone, and lands the files in any order."""
    saves, scans = posix(tmp_path, "nemo")
    files = mg.nemo_files(5)[1:]
    missing = next(f for f in files if f[0].endswith("/" + drop))
    mg.write(saves, [f for f in files if f is not missing])
    assert scans.scan() == []
    (saves / missing[0]).write_bytes(missing[1][: len(missing[1]) // 2])
    assert scans.scan() == []
    (saves / missing[0]).write_bytes(missing[1])
    assert scans.scan() == [5]


@pytest.mark.parametrize("io", [b"", b"[]", b"\xff", b"{" * 100_000, b'{"a": 1}' + b" " * (16 << 20)])
def test_a_context_that_does_not_read_is_not_whole(tmp_path: Path, io: bytes) -> None:
    saves, _ = posix(tmp_path, "nemo")
    mg.write(saves, mg.nemo_files(5)[1:])
    (saves / mg.nemo_name(5) / "context" / "io.json").write_bytes(io)
    if len(io) > 16 << 20:
        with pytest.raises(Exception, match="over 16777216 bytes"):
            _whole(saves, 5)
    else:
        assert _whole(saves, 5) is False


def test_the_last_copy_and_saves_written_between_scans(tmp_path: Path) -> None:
    """save_last's ``-last`` copy is not a save of its own; the saves are, in step order."""
    saves, scans = posix(tmp_path, "nemo")
    for step in (1, 2, 3):
        mg.write(saves, mg.nemo_files(step)[1:])
    mg.write(saves, mg.nemo_files(3, "-last")[1:])
    assert scans.scan() == [1, 2, 3]
    assert all("-last" not in line for line in scans.out)


def test_a_weights_folder_of_another_backend_is_named_once(tmp_path: Path) -> None:
    saves, scans = posix(tmp_path, "nemo")
    mg.write(saves, mg.nemo_files(5)[1:])
    (saves / mg.nemo_name(5) / "weights" / "metadata.json").write_bytes(b'{"sharded_backend": "zarr"}')
    assert scans.scan() == [] and scans.scan() == []
    assert len(scans.err) == 1 and "zarr" in scans.err[0] and "weights/metadata.json" in scans.err[0]


# -- S3 ----------------------------------------------------------------------------------------------------


@pytest.fixture
def s3saves(s3_server: S3Server, bucket: str) -> S3Saves:
    return S3Saves(s3_server, bucket)


@pytest.mark.s3
def test_s3_a_save_uploaded_in_any_order_is_published_with_its_last_file(
    s3_server: S3Server, bucket: str
) -> None:
    files = mg.nemo_files(10)[1:]
    for order in (sorted(files, key=lambda f: len(f[1])), list(reversed(files))):
        s3saves = S3Saves(s3_server, bucket)
        scans = Scans(s3saves.store, "nemo")
        for i in range(len(order)):
            s3saves.put(order[i : i + 1])
            assert scans.scan() == ([10] if i == len(order) - 1 else []), order[i][0]


@pytest.mark.s3
def test_s3_a_marker_uploaded_with_the_save_holds_it_back(s3saves: S3Saves) -> None:
    scans = Scans(s3saves.store, "nemo")
    s3saves.put(mg.nemo_files(10))
    assert scans.scan() == []
    s3saves.client.delete_object(
        Bucket=s3saves.bucket, Key=f"{s3saves.prefix}/exec/A/{mg.nemo_name(10)}-unfinished"
    )
    assert scans.scan() == [10]


# -- megatron-core's writer in NeMo's steps ---------------------------------------------------------------


@pytest.fixture(scope="module")
def real_saves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two saves under async save, the job ended before the second finalized: its marker is left."""
    base = tmp_path_factory.mktemp("nemo")
    writer(base / "async", "nemo", 2, "--async", "--stop-before-tracker")
    return base / "async"


@pytest.mark.torch
def test_a_real_save_whose_async_finalize_never_ran_is_not_published(
    real_saves: Path, tmp_path: Path
) -> None:
    assert (real_saves / (mg.nemo_name(2) + "-unfinished")).exists()
    saves, scans = posix(tmp_path, "nemo")
    mg.write(saves, tree(real_saves))
    assert scans.scan() == [1]
    (saves / (mg.nemo_name(2) + "-unfinished")).unlink()
    assert scans.scan() == [1, 2]
    assert scans.err == []


@pytest.mark.torch
def test_a_real_save_copied_in_any_order_is_published_with_its_last_file(
    real_saves: Path, tmp_path: Path
) -> None:
    files = [f for f in tree(real_saves) if f[0].startswith(mg.nemo_name(1) + "/")]
    assert {p.split("/", 1)[1] for p, _ in files} >= {
        "weights/common.pt",
        "weights/metadata.json",
        "weights/.metadata",
        "context/io.json",
    }
    for order in (files, list(reversed(files)), sorted(files, key=lambda f: len(f[1]))):
        saves, scans = posix(tmp_path / uuid.uuid4().hex, "nemo")
        for i, (path, data) in enumerate(order):
            (saves / path).parent.mkdir(parents=True, exist_ok=True)
            (saves / path).write_bytes(data[: len(data) // 2])
            assert scans.scan() == [], path
            (saves / path).write_bytes(data)
            assert scans.scan() == ([1] if i == len(order) - 1 else []), path
