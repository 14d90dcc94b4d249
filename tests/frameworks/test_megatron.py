"""Megatron-LM saves (issue #34, "Megatron-LM and NeMo saves"): an ``iter_<N>/`` folder is whole once
``latest_checkpointed_iteration.txt`` names N or a later iteration and every file its format calls for is
whole (``torch_dist``: ``metadata.json``, ``common.pt`` and DCP's files; legacy: every rank's
``model_optim_rng.pt``, counted from the args it records).  On POSIX and S3 roots, with megatron-core's own
writer on two CPU ranks (tests/support/megatron_writer.py), with saves shaped as Megatron-LM writes them
(tests/support/megatron_saves.py), and with files built to hurt the reader."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from publish.frameworks import FRAMEWORKS
from publish.frameworks.parse import megatron_args
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure
from publish.stores.posix import PosixStore
from tests.support import deepspeed_saves as ds
from tests.support import megatron_saves as mg
from tests.support.dcp_shapes import Raw
from tests.support.framework_scans import S3Saves, Scans, posix, tree, writer
from tests.support.servers import S3Server

MG = FRAMEWORKS["megatron"]


def _whole(saves: Path, step: int, notes: list[str] | None = None) -> bool:
    store = PosixStore(str(saves.parent.parent))
    return MG.complete(
        UNBOUNDED, store, f"exec/A/{mg.folder(step)}", step, (notes if notes is not None else []).append
    )


# -- the tracker ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("files", [mg.torch_dist_files, mg.legacy_files], ids=["torch_dist", "legacy"])
def test_a_save_the_tracker_never_reached_is_not_whole_however_whole_its_files(
    tmp_path: Path, files: Any
) -> None:
    """verl #7952, Megatron-LM #5964: an async save whose tracker was never written, or a folder of a higher
    iteration than the tracker's, is not what Megatron resumes from: resolve must not answer it."""
    saves, scans = posix(tmp_path)
    mg.write(saves, files(1))
    mg.write(saves, files(2)[:-1])  # every file of iteration 2; the tracker still names 1
    assert scans.scan() == [1]
    (saves / mg.TRACKER).write_bytes(b"")  # rank 0 reopened it for writing: empty for a moment
    assert scans.scan() == [1]
    (saves / mg.TRACKER).write_bytes(b"2\n")
    assert scans.scan() == [1, 2]


@pytest.mark.parametrize(
    "tracker",
    [b"release", b"+3", b"3.0", b"\xd9\xa3", b"0x3", b"-3", b"3" * 30, b"3\x00", b""],
)
def test_a_tracker_that_names_no_iteration_publishes_nothing(tmp_path: Path, tracker: bytes) -> None:
    """Hostile trackers: another script's digit (U+0663), a sign, a float, a NUL, 4 KiB and a byte."""
    saves, scans = posix(tmp_path)
    mg.write(saves, mg.torch_dist_files(3)[:-1])
    (saves / mg.TRACKER).write_bytes(tracker)
    assert scans.scan() == []
    assert scans.err == []


def test_a_tracker_over_4_kib_stops_watch_naming_it(tmp_path: Path) -> None:
    """As DeepSpeed's ``latest``: no Megatron tracker is that long, and every save of SAVES hangs on it."""
    saves, scans = posix(tmp_path)
    mg.write(saves, mg.torch_dist_files(3)[:-1])
    (saves / mg.TRACKER).write_bytes(b"3" + b" " * 4096)
    with pytest.raises(Failure, match=f"{mg.TRACKER} is over 4096 bytes"):
        scans.scan()
    assert scans.out == []


def test_saves_written_between_two_scans_are_all_published_in_step_order(tmp_path: Path) -> None:
    """The tracker naming a later iteration vouches for the earlier ones, whose own files are whole."""
    saves, scans = posix(tmp_path)
    for step in (10, 20, 30):
        mg.write(saves, mg.torch_dist_files(step))
    mg.write(saves, mg.legacy_files(40, tp=2))
    assert scans.scan() == [10, 20, 30, 40]


# -- torch_dist ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("drop", ["common.pt", "metadata.json", ".metadata", "__1_1.distcp"])
def test_torch_dist_every_file_of_the_format_is_waited_for(tmp_path: Path, drop: str) -> None:
    """An uploader can land the tracker before any file of the folder (S3 uploads in any order)."""
    saves, scans = posix(tmp_path)
    files = mg.torch_dist_files(5)
    missing = next(f for f in files if f[0].endswith("/" + drop))
    mg.write(saves, [f for f in files if f is not missing])
    assert scans.scan() == []
    mg.write(saves, [missing])
    assert scans.scan() == [5]


@pytest.mark.parametrize("name", ["common.pt", "metadata.json", "__0_0.distcp", ".metadata"])
def test_torch_dist_a_file_cut_anywhere_is_not_whole_and_says_nothing(tmp_path: Path, name: str) -> None:
    saves, _ = posix(tmp_path)
    files = dict(mg.torch_dist_files(5))
    mg.write(saves, list(files.items()))
    path = f"{mg.folder(5)}/{name}"
    data = files[path]
    for cut in sorted({0, 1, len(data) // 2, len(data) - 1}):
        (saves / path).write_bytes(data[:cut])
        notes: list[str] = []
        assert not _whole(saves, 5, notes), cut
        assert notes == []
    (saves / path).write_bytes(data)
    assert _whole(saves, 5)


def test_torch_dist_another_sharded_backend_is_named_once_and_never_published(tmp_path: Path) -> None:
    saves, scans = posix(tmp_path)
    mg.write(saves, mg.torch_dist_files(5))
    (saves / mg.folder(5) / "metadata.json").write_bytes(b'{"sharded_backend": "zarr\\n-x"}')
    assert scans.scan() == [] and scans.scan() == []
    assert len(scans.err) == 1 and "zarr\\n-x" in scans.err[0] and "iter_0000005" in scans.err[0], scans.err


def test_torch_dcp_format_is_not_a_megatron_torch_dist_save(tmp_path: Path) -> None:
    """--ckpt-format torch_dcp writes DCP's files alone: no metadata.json; -framework dcp is its rule."""
    saves, scans = posix(tmp_path)
    mg.write(saves, [f for f in mg.torch_dist_files(5) if not f[0].endswith(("common.pt", "metadata.json"))])
    assert scans.scan() == []


# -- legacy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tp, pp, ep, optim",
    [(2, 1, 1, False), (1, 2, 1, False), (2, 2, 1, True), (1, 1, 2, False), (2, 2, 2, False)],
)
def test_legacy_every_ranks_file_the_args_call_for_is_waited_for(
    tmp_path: Path, tp: int, pp: int, ep: int, optim: bool
) -> None:
    """mp_rank_<tp>[_<pp>][_<ep>]/model_optim_rng.pt for every rank, distrib_optim.pt beside each under the
    distributed optimizer: the counts from the args the first rank's file records."""
    saves, _ = posix(tmp_path)
    files = mg.legacy_files(7, tp, pp, ep, optim)
    assert len(files) - 1 == tp * pp * ep * (2 if optim else 1)
    for i in range(len(files) - 1):
        if files[i][0].endswith(("mp_rank_00/model_optim_rng.pt", "_000/model_optim_rng.pt")) and i == 0:
            continue
        shutil.rmtree(saves, ignore_errors=True)
        saves.mkdir(parents=True)
        mg.write(saves, files[:i] + files[i + 1 :])
        assert not _whole(saves, 7), files[i][0]
        (saves / files[i][0]).parent.mkdir(parents=True, exist_ok=True)
        (saves / files[i][0]).write_bytes(files[i][1][:-1])
        assert not _whole(saves, 7), files[i][0]
    mg.write(saves, files)
    assert _whole(saves, 7)


def test_legacy_args_before_expert_parallelism_count_one_expert_rank(tmp_path: Path) -> None:
    saves, _ = posix(tmp_path)
    file = mg.legacy_file(7, mg.args(tp=2, ep=None))
    mg.write(saves, [(f"{mg.folder(7)}/mp_rank_0{t}/model_optim_rng.pt", file) for t in (0, 1)])
    mg.write(saves, [(mg.TRACKER, b"7")])
    assert _whole(saves, 7)


@pytest.mark.parametrize(
    "fields, why",
    [
        (mg.hostile_args("os\nsystem"), "os.system"),
        (mg.hostile_args("builtins\neval"), "builtins.eval"),
        (mg.hostile_args("subprocess\ncheck_call"), "subprocess.check_call"),
        (Raw(ds.dumps({"tensor_model_parallel_size": 1})[2:-1]), "records no args"),
        (mg.args(tp=1 << 40), "not a parallel size"),
        (mg.args(pp=True), "of type bool"),
        (mg.args(tp=0), "(0) is not a parallel size"),
        (mg.args(pp="2"), "of type str"),
        ({"pipeline_model_parallel_size": 1}, "no tensor_model_parallel_size"),
        (mg.args(tp=2), "whose folders it does not lie in"),
    ],
)
def test_a_hostile_legacy_file_is_refused_once_naming_it_and_runs_nothing(
    tmp_path: Path, fields: Any, why: str
) -> None:
    saves, scans = posix(tmp_path)
    mg.write(saves, mg.legacy_files(1))
    bad = [
        (
            f"{mg.folder(2)}/mp_rank_00_000/model_optim_rng.pt"
            if why.startswith("whose")
            else f"{mg.folder(2)}/mp_rank_00/model_optim_rng.pt",
            mg.legacy_file(2, fields),
        )
    ]
    mg.write(saves, [*bad, (mg.TRACKER, b"2")])
    assert scans.scan() == [1] and scans.scan() == [1]
    assert len(scans.err) == 1 and why in scans.err[0] and "iter_0000002" in scans.err[0], scans.err
    assert not (Path.cwd() / "pwned").exists()


def test_colliding_keys_past_the_in_process_size_are_refused_by_the_guarded_reader(tmp_path: Path) -> None:
    """560 KB of int keys of one hash: the C reader would hold the interpreter for 20 s in one call."""
    saves, scans = posix(tmp_path)
    body = b"".join(ds.dumps(k * ((1 << 61) - 1))[2:-1] + b"N" for k in range(1, 40_001))
    data = mg.legacy_file(3, mg.args(), client=Raw(b"}(" + body + b"u"))
    mg.write(saves, [(f"{mg.folder(3)}/mp_rank_00/model_optim_rng.pt", data), (mg.TRACKER, b"3")])
    scans.watcher.scan(Deadline(30))
    assert scans.out == [] and len(scans.err) == 1 and "model_optim_rng.pt" in scans.err[0], scans.err


def test_the_args_reader_reads_what_pickle_writes_for_a_namespace() -> None:
    """The args of tests/support/megatron_saves.py are what pickle itself writes for argparse.Namespace."""
    import argparse
    import pickle

    real = pickle.dumps({"args": argparse.Namespace(**mg.args(tp=2, pp=4, ep=1, optim=True))}, protocol=2)
    assert megatron_args._fields(real, "x") == (2, 4, 1, True)
    ours = ds.dumps({"args": mg.namespace(mg.args(tp=2, pp=4, ep=1, optim=True))})
    assert pickle.loads(ours) == pickle.loads(real)


# -- S3: uploads land in any order ------------------------------------------------------------------------


@pytest.fixture
def s3saves(s3_server: S3Server, bucket: str) -> S3Saves:
    return S3Saves(s3_server, bucket)


@pytest.mark.s3
@pytest.mark.parametrize(
    "files",
    [mg.torch_dist_files, lambda s: mg.legacy_files(s, tp=2, optim=True)],
    ids=["torch_dist", "legacy"],
)
def test_s3_a_save_uploaded_tracker_first_waits_for_its_last_file(s3saves: S3Saves, files: Any) -> None:
    """A parallel uploader lands the small files first: the tracker before the shards."""
    upload = sorted(files(10), key=lambda f: len(f[1]))
    assert upload[0][0] == mg.TRACKER
    scans = Scans(s3saves.store)
    for i in range(len(upload)):
        s3saves.put(upload[i : i + 1])
        assert scans.scan() == ([10] if i == len(upload) - 1 else []), upload[i][0]


@pytest.mark.s3
def test_s3_saves_uploaded_between_two_scans_are_all_published_in_step_order(s3saves: S3Saves) -> None:
    scans = Scans(s3saves.store)
    s3saves.put(mg.torch_dist_files(1))
    assert scans.scan() == [1]
    for step in (2, 3):
        s3saves.put(list(reversed(mg.torch_dist_files(step))))
    s3saves.put(mg.legacy_files(4, pp=2)[:-1])  # the tracker never names 4
    assert scans.scan() == [1, 2, 3]


# -- megatron-core's own writer ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """megatron-core's writer: torch_dist saves under --async-save, the job ended before the last one's
    tracker (iteration 2's files whole, the tracker naming 1); a legacy save on two pipeline ranks."""
    base = tmp_path_factory.mktemp("megatron")
    writer(base / "async", "torch_dist", 2, "--async", "--stop-before-tracker")
    writer(base / "legacy", "legacy-pp", 2)
    return {"async": base / "async", "legacy": base / "legacy"}


@pytest.mark.torch
def test_a_real_async_save_whose_tracker_was_never_written_is_not_published(
    real_saves: dict[str, Path], tmp_path: Path
) -> None:
    """verl #7952: the job ended before its async save's finalize wrote the tracker; Megatron resumes
    from iteration 1, and so must resolve.  -framework dcp (the rule before) publishes iteration 2."""
    real = real_saves["async"]
    assert (real / mg.TRACKER).read_bytes() == b"1"
    names = {p.name for p in (real / mg.folder(2)).iterdir()}
    assert {"common.pt", "metadata.json", ".metadata", "__0_0.distcp", "__1_0.distcp"} <= names
    for framework, published in (("megatron", [1]), ("dcp", [1, 2])):
        saves, scans = posix(tmp_path / framework, framework)
        mg.write(saves, tree(real))
        assert scans.scan() == published, framework


@pytest.mark.torch
def test_a_real_torch_dist_save_copied_in_any_order_is_published_with_its_last_file(
    real_saves: dict[str, Path], tmp_path: Path
) -> None:
    files = [f for f in tree(real_saves["async"]) if f[0].startswith(mg.folder(1))]
    for order in (files, list(reversed(files)), sorted(files, key=lambda f: len(f[1]))):
        saves, scans = posix(tmp_path / uuid.uuid4().hex)
        mg.write(saves, [(mg.TRACKER, b"1")])
        for i, (path, data) in enumerate(order):
            (saves / path).parent.mkdir(parents=True, exist_ok=True)
            (saves / path).write_bytes(data[: len(data) // 2])
            assert scans.scan() == [], path
            (saves / path).write_bytes(data)
            assert scans.scan() == ([1] if i == len(order) - 1 else []), path


@pytest.mark.torch
def test_a_real_legacy_save_reads_as_megatron_writes_it(real_saves: dict[str, Path], tmp_path: Path) -> None:
    real = real_saves["legacy"]
    first = real / mg.folder(2) / "mp_rank_00_000" / "model_optim_rng.pt"
    data = first.read_bytes()
    layout = megatron_args.read(len(data), lambda o, n: data[o : o + n], "x")
    assert layout == megatron_args.Layout(1, 2, 1, False)
    saves, scans = posix(tmp_path)
    files = tree(real)
    late = f"{mg.folder(2)}/mp_rank_00_001/model_optim_rng.pt"
    mg.write(saves, [f for f in files if f[0] != late])
    assert scans.scan() == [1]
    mg.write(saves, [f for f in files if f[0] == late])
    assert scans.scan() == [1, 2]
    assert scans.err == []


@pytest.mark.torch
@pytest.mark.s3
def test_s3_a_real_save_uploaded_in_parallel_is_published_only_once_its_last_file_lands(
    real_saves: dict[str, Path], s3saves: S3Saves
) -> None:
    files = tree(real_saves["legacy"])
    upload = sorted(files, key=lambda f: len(f[1]))
    assert upload[0][0] == mg.TRACKER
    scans = Scans(s3saves.store)
    landed: set[str] = set()
    published: list[int] = []
    for path, data in upload:
        s3saves.put([(path, data)])
        landed.add(path)
        published += [
            step
            for step in (1, 2)
            if step not in published and all(p in landed for p, _ in files if p.startswith(mg.folder(step)))
        ]
        assert scans.scan() == published, path
    assert published == [1, 2]
