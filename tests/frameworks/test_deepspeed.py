"""DeepSpeed saves: a ``global_step<N>`` folder is whole once ``latest`` names step N or a later one and every
file its model-states file calls for (the model states of each model-parallel rank, one optimizer shard per
data-parallel rank) is a whole torch archive.  On POSIX and S3 roots, with saves written in DeepSpeed's
order (tests/support/deepspeed_saves.py), by a real engine (tests/support/deepspeed_writer.py), and with model-states files
built to hurt the reader."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest

from publish.frameworks import FRAMEWORKS
from publish.frameworks.parse import deepspeed_states
from publish.ops import Say
from publish.ops.scan import Watcher
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import StoreError
from publish.stores.posix import PosixStore
from publish.stores.s3 import S3Store
from tests.conftest import REPO, Watch, need
from tests.support import dcp_bombs
from tests.support import deepspeed_saves as ds
from tests.support.dcp_shapes import Raw
from tests.support.framework_scans import run_tree, torchrun
from tests.support.servers import S3Server

DS = FRAMEWORKS["deepspeed"]


class Scans:
    """A Watcher over SAVES ``exec/A`` of ``store``, and what it said."""

    def __init__(self, store: Any) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.watcher = Watcher(store, Say(self.out.append, self.err.append), DS, "exec/A", 0)

    def scan(self) -> list[int]:
        """One scan; the steps published so far, in the order they were."""
        self.watcher.scan(Deadline(60))
        return [int(line.split("step ")[1].split(",")[0]) for line in self.out]


def _posix(tmp_path: Path) -> tuple[Path, Scans]:
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    saves.mkdir(parents=True, exist_ok=True)
    return saves, Scans(PosixStore(str(root)))


def _whole(saves: Path, step: int, notes: list[str] | None = None) -> bool:
    store = PosixStore(str(saves.parent.parent))
    return DS.complete(UNBOUNDED, store, f"exec/A/global_step{step}", step, (notes or []).append)


# -- POSIX: the order DeepSpeed writes in ------------------------------------------------------------------


def test_a_slow_ranks_shard_still_being_written_when_latest_names_the_save_holds_it_back(
    tmp_path: Path,
) -> None:
    """Rank 0 writes latest without waiting for the other ranks: rank 1's shard may be half-written."""
    saves, scans = _posix(tmp_path)
    files = dict(ds.save_files(10))
    slow = f"global_step10/{ds.optim_states(1)}"
    ds.write(saves, [(p, d) for p, d in files.items() if p != slow])  # latest too: rank 0 is done
    (saves / slow).write_bytes(files[slow][: len(files[slow]) // 2])
    assert scans.scan() == []
    (saves / slow).write_bytes(files[slow])
    assert scans.scan() == [10]
    assert scans.err == []


def test_every_cut_of_a_file_of_the_save_is_not_whole_and_says_nothing(tmp_path: Path) -> None:
    """What a writer still writing, or killed, leaves: prefixes of the model states and of each shard."""
    saves, _ = _posix(tmp_path)
    ds.write_save(saves, 3)
    notes: list[str] = []
    for name in (ds.model_states(0), ds.optim_states(0), ds.optim_states(1)):
        path = saves / "global_step3" / name
        data = path.read_bytes()
        # every 20th cut, and each of the last 200, where the end records and the directory are
        for cut in sorted({*range(0, len(data), 20), *range(len(data) - 200, len(data))}):
            path.write_bytes(data[:cut])
            assert not _whole(saves, 3, notes), (name, cut)
        path.write_bytes(data)
    assert _whole(saves, 3, notes)
    assert notes == []


def test_saves_written_between_two_scans_are_all_published_in_step_order(tmp_path: Path) -> None:
    """latest moved from 2 to 5 between two scans: 3, 4 and 5 are whole too (before, only 5 was published,
    3 and 4 never were)."""
    saves, scans = _posix(tmp_path)
    for step in (1, 2):
        ds.write_save(saves, step)
    assert scans.scan() == [1, 2]
    for step in (3, 4, 5):
        ds.write_save(saves, step)
    assert scans.scan() == [1, 2, 3, 4, 5]
    assert scans.scan() == [1, 2, 3, 4, 5]


#: What ``latest`` may hold when watch reads it, and whether global_step10 is then whole (its files are).
LATEST = [
    (None, False),  # save_latest=False, or rank 0 has not written it yet
    (b"", False),  # open(..., 'w') truncates before it writes
    (b"global_step9", False),  # the previous save
    (b"global_step10", True),
    (b"global_step10\n", True),
    (b"global_step11", True),  # a later save: this one was finished before it began
    (b"global_step12", True),
    (b"global_step", False),
    (b"my_tag", False),  # a tag of the trainer's own names no step
    (b"\xff\xfe", False),
]


def test_latest_must_name_the_step_or_a_later_one(tmp_path: Path) -> None:
    saves, _ = _posix(tmp_path)
    ds.write(saves, [(p, d) for p, d in ds.save_files(10) if p != "latest"])
    got = []
    for latest, _ in LATEST:
        (saves / "latest").unlink(missing_ok=True)
        if latest is not None:
            (saves / "latest").write_bytes(latest)
        got.append((latest, _whole(saves, 10)))
    assert got == LATEST


def test_the_dp_world_size_the_model_states_record_is_how_many_shards_it_waits_for(tmp_path: Path) -> None:
    saves, _ = _posix(tmp_path)
    files = ds.save_files(10, dp=4)
    shards = [(p, d) for p, d in files if p.endswith("_optim_states.pt")]
    assert [p.rsplit("/", 1)[1] for p, _ in shards] == [ds.optim_states(d) for d in range(4)]
    ds.write(saves, [(p, d) for p, d in files if (p, d) not in shards[2:]])
    assert not _whole(saves, 10)  # two of four: the two ranks of a world of 2 would be whole
    ds.write(saves, shards[2:3])
    assert not _whole(saves, 10)
    ds.write(saves, shards[3:])
    assert _whole(saves, 10)
    # a shard of rank 5 left from a run on more ranks, or still in flight: the four of dp 4 decide
    (saves / "global_step10" / ds.optim_states(5)).write_bytes(b"half")
    assert _whole(saves, 10)


def test_each_model_parallel_rank_writes_model_states_and_shards(tmp_path: Path) -> None:
    saves, _ = _posix(tmp_path)
    files = ds.save_files(10, dp=2, mp=2)
    names = [p.rsplit("/", 1)[1] for p, _ in files if p.startswith("global_step10/")]
    assert sorted(names) == sorted(
        [ds.model_states(0), ds.model_states(1)] + [ds.optim_states(d, m) for d in range(2) for m in range(2)]
    )
    for missing in names:
        folder = saves / "global_step10"
        ds.write(saves, files)
        (folder / missing).unlink()
        assert not _whole(saves, 10), missing
    ds.write(saves, files)
    assert _whole(saves, 10)


def test_zero_stage_3_has_every_rank_write_its_model_states(tmp_path: Path) -> None:
    saves, _ = _posix(tmp_path)
    files = ds.save_files(10, dp=2, stage=3)
    names = [p.rsplit("/", 1)[1] for p, _ in files if p.startswith("global_step10/")]
    assert names == [ds.model_states(0, 0), ds.optim_states(0), ds.model_states(0, 1), ds.optim_states(1)]
    ds.write(saves, [(p, d) for p, d in files if not p.endswith(ds.model_states(0, 1))])
    assert not _whole(saves, 10)
    ds.write(saves, files)
    assert _whole(saves, 10)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_under_bf16_the_shards_are_bf16_prefixed(tmp_path: Path, stage: int) -> None:
    saves, _ = _posix(tmp_path)
    files = ds.save_files(10, stage=stage, bf16=True)
    last = f"global_step10/{ds.optim_states(1, bf16=True)}"
    assert last in dict(files)
    ds.write(saves, [(p, d) for p, d in files if p != last])
    (saves / "global_step10" / ds.optim_states(1)).write_bytes(dict(files)[last])  # not the name it wants
    assert not _whole(saves, 10)
    ds.write(saves, files)
    assert _whole(saves, 10)


def test_without_zero_no_shard_is_waited_for_but_the_bf16_optimizers_are(tmp_path: Path) -> None:
    """Without ZeRO the model states hold the optimizer, and no rank writes a shard.  DeepSpeed's
    BF16_Optimizer (bf16 without ZeRO, under pipeline parallelism) has a dp_process_group all the same, so
    each rank writes bf16_zero_pp_rank_*; its state dict, in the model states, holds partition_count."""
    saves, _ = _posix(tmp_path)
    files = ds.save_files(10, stage=0)
    assert [p for p, _ in files] == [f"global_step10/{ds.model_states(0)}", "latest"]
    ds.write(saves, files)
    assert _whole(saves, 10)
    files = ds.save_files(20, stage=0, bf16=True)
    ds.write(saves, files[:1] + files[-1:])  # the model states and latest
    assert not _whole(saves, 20)
    ds.write(saves, files)
    assert _whole(saves, 20)


def test_a_save_whose_model_states_do_not_parse_is_named_once_and_the_others_are_published(
    tmp_path: Path,
) -> None:
    saves, scans = _posix(tmp_path)
    ds.write_save(saves, 1)
    ds.write_save(saves, 2)
    bad = saves / "global_step1" / ds.model_states(0)
    bad.write_bytes(
        ds.archive("mp_rank_00_model_states", ds.dumps({"dp_world_size": 2, "mp_world_size": "2"}))
    )
    assert scans.scan() == [2]
    assert scans.scan() == [2]
    assert scans.err == [
        f"{bad}: its mp_world_size (of type str) is not a world size from 1 to {deepspeed_states.RANKS_LIMIT}: "
        "the save is not published (publish it with `publish publish` once you know it is whole)"
    ]


def test_the_store_failing_while_the_model_states_are_read_is_the_stores_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a fault of the save (said once and passed over): the scan fails, as for every framework."""
    saves, scans = _posix(tmp_path)
    ds.write_save(saves, 1)

    def refuse(*_: object) -> bytes:
        raise StoreError("the store refused a read")

    monkeypatch.setattr(PosixStore, "read_range", refuse)
    with pytest.raises(StoreError, match="^store: the store refused a read$"):
        scans.scan()
    assert scans.err == []


# -- model-states files built to hurt the reader ----------------------------------------------------------

_READ = (
    "import json, resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))\n"
    "from publish.rules.deadline import Deadline\n"
    "from publish.frameworks import FRAMEWORKS\n"
    "from publish.stores.posix import PosixStore\n"
    "notes = []\n"
    "whole = FRAMEWORKS['deepspeed'].complete(\n"
    "    Deadline(120), PosixStore(sys.argv[1]), 'exec/A/global_step1', 1, notes.append)\n"
    "print(json.dumps([whole, notes]))\n"
)


def _judged(tmp_path: Path, model_states: bytes) -> tuple[bool, list[str]]:
    """The save global_step1 with these model states (and two whole shards, and latest), judged in a fresh
    interpreter whose memory is capped: a reader that hangs or swells fails by the timeout, a safety net."""
    saves, _ = _posix(tmp_path)
    ds.write_save(saves, 1)
    (saves / "global_step1" / ds.model_states(0)).write_bytes(model_states)
    out = subprocess.run(
        [sys.executable, "-c", _READ, str(saves.parent.parent)],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, b""), out
    whole, notes = json.loads(out.stdout)
    return whole, notes


def _states(pkl: bytes) -> bytes:
    return ds.archive("mp_rank_00_model_states", pkl, ds.MODEL_STORAGES)


def _with(**fields: object) -> bytes:
    """A model-states file as DeepSpeed writes one, with ``fields`` in its dict."""
    return _states(ds.dumps(ds.model_states_dict(1, 2, **fields)))


def _call(module: str, name: str, *args: object) -> ds.Call:
    return ds.Call(ds.Global(module, name), *args)


_TUPLE_KEY = (
    "does not read as a DeepSpeed model states file: a tuple as a dict key or set item (a DeepSpeed save holds "
    "none; its hash could be made to collide)"
)
_BOMBS = {
    # code a full torch.load would run: refused by name at the global, before anything is built
    "os.system": (_with(client=_call("os", "system", "touch /tmp/x")), "names os.system, which a DeepSpeed"),
    "posix.system": (_with(client=_call("posix", "system", "id")), "names posix.system, which"),
    "builtins.eval": (_with(client=_call("builtins", "eval", "1")), "names builtins.eval, which"),
    "__builtin__.eval": (_with(client=_call("__builtin__", "eval", "1")), "names __builtin__.eval, which"),
    "subprocess.Popen": (_with(args=_call("subprocess", "Popen", ["id"])), "names subprocess.Popen, which"),
    "builtins.getattr of os": (
        _with(client=_call("builtins", "getattr", ds.Global("os", "system"), "x")),
        "names os.system, which",
    ),
    # hash() of a key or set item built of 2^40 shared tuples (552 bytes)
    "tuple key": (_with(client=Raw(b"}" + dcp_bombs.share(40) + b"K\x01s")), _TUPLE_KEY),
    "frozenset": (_with(client=Raw(b"(" + dcp_bombs.share(40) + b"\x91")), _TUPLE_KEY),
    # the world sizes: a repr 2^40 lists long, an int of 96,000 bits, and values that are no world size
    "dp list": (
        _with(dp_world_size=Raw(dcp_bombs.share(40, b"]", b"(", b"l"))),
        "its dp_world_size (of type list) is not a world size",
    ),
    "dp huge": (_with(dp_world_size=Raw(dcp_bombs.huge_int())), "its dp_world_size (of type int) is not"),
    "dp zero": (_with(dp_world_size=0), "its dp_world_size (0) is not a world size from 1 to 1048576"),
    "dp bool": (_with(dp_world_size=True), "its dp_world_size (of type bool) is not"),
    "mp past": (_with(mp_world_size=(1 << 20) + 1), "its mp_world_size (1048577) is not"),
    "no dp": (_states(ds.dumps({"mp_world_size": 1})), "records no dp_world_size"),
    "a list": (_states(ds.dumps([1, 2])), "is not a DeepSpeed model states dict (it holds a list)"),
    # a text number of 10,000 digits (int() is quadratic in them before Python 3.11), a memo of 2^61
    "text int": (
        _with(client=Raw(b"I" + b"9" * 10_000 + b"\n")),
        "does not read as a DeepSpeed model states file: a text number of 10000 bytes",
    ),
    "memo": (
        _with(client=Raw(b"Np%d\n" % (1 << 61))),
        "does not read as a DeepSpeed model states file: a memo index of 2^61-1 or more",
    ),
    # the archive: data.pkl deflated, missing, cut short, with bytes after its pickle
    "deflated": (
        ds.archive("mp_rank_00_model_states", ds.dumps({}), compress=zipfile.ZIP_DEFLATED),
        "its data.pkl is compressed (method 8): not written by torch.save",
    ),
    "no data.pkl": (
        ds.archive("x", b"").replace(b"x/data.pkl", b"x/data.pkq"),
        "holds no <archive>/data.pkl",
    ),
    "cut pickle": (
        _states(ds.dumps(ds.model_states_dict(1, 2))[:-30]),
        "its data.pkl ends before its pickle does",
    ),
    "after": (_states(ds.dumps(ds.model_states_dict(1, 2)) + b"x"), "holds 1 bytes after its pickle ends"),
}


@pytest.mark.parametrize("name", sorted(_BOMBS))
def test_a_hostile_model_states_file_is_refused_at_once_naming_it(tmp_path: Path, name: str) -> None:
    data, message = _BOMBS[name]
    assert len(data) < 200_000
    whole, notes = _judged(tmp_path, data)
    where = f"{tmp_path}/ckpt/exec/A/global_step1/{ds.model_states(0)}: "
    assert whole is False
    assert len(notes) == 1 and notes[0].startswith(where) and message in notes[0], notes


def test_colliding_keys_past_the_in_process_size_are_refused_by_the_guarded_reader(tmp_path: Path) -> None:
    """40,000 int keys of one hash (560 KB): about 20 s inside one C call.  Read in a child, the C reader is
    given 0.5 s + 1 s per MB, then the guarded reader refuses the first such key."""
    whole, notes = _judged(tmp_path, ds.colliding(40_000))
    assert whole is False
    assert len(notes) == 1 and "an int of 2^61-1 or more as a dict key" in notes[0], notes


def test_a_world_of_a_million_ranks_is_counted_before_any_name_is_made(tmp_path: Path) -> None:
    """2^20 x 2^20 files: counted against the folder's listing, never listed one by one (2^40 names)."""
    whole, notes = _judged(tmp_path, _with(dp_world_size=1 << 20, mp_world_size=1 << 20))
    assert (whole, notes) == (False, [])


def test_whatever_the_trainers_client_state_holds_is_read_inert(tmp_path: Path) -> None:
    """client_state is the trainer's own: Megatron-DeepSpeed saves its argparse Namespace and numpy RNG
    states, a trainer its own classes.  Each is an inert record; none is imported or called."""
    canary = tmp_path / "ran"
    client = {
        "args": _call("argparse", "Namespace"),
        "np_rng": _call("numpy.core.multiarray", "_reconstruct", ds.Global("numpy", "ndarray"), (0,), b"b"),
        "mine": _call("my_trainer.state", "RunState", str(canary)),
        "bytes": _call("_codecs", "encode", "\x00\x01", "latin1"),
    }
    assert _judged(tmp_path, _with(**client)) == (True, [])
    assert _judged(tmp_path, _with(dp_world_size=3, **client)) == (False, [])  # read: three shards wanted
    assert not canary.exists()


# -- S3: uploads land in any order ------------------------------------------------------------------------


class S3Saves:
    def __init__(self, server: S3Server, bucket: str) -> None:
        self.bucket, self.prefix = bucket, "run-" + uuid.uuid4().hex[:10]
        self.client = server.client()
        self.store = S3Store(bucket, self.prefix, server.credentials(), proxy=None, env={})

    def put(self, files: list[tuple[str, bytes]]) -> None:
        for path, data in files:
            self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/exec/A/{path}", Body=data)


@pytest.fixture
def s3saves(s3_server: S3Server, bucket: str) -> S3Saves:
    return S3Saves(s3_server, bucket)


def _uploaded_small_first(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The order a parallel uploader lands a save in (``rclone copy --transfers 8``, ``aws s3 cp
    --recursive``): each transfer ends when its file is sent, so the small ones first, the shards last."""
    return sorted(files, key=lambda f: len(f[1]))


def test_s3_a_save_uploaded_latest_first_waits_for_both_shards(s3saves: S3Saves) -> None:
    files = _uploaded_small_first(ds.save_files(10))
    assert files[0][0] == "latest" and files[-1][0].endswith("_optim_states.pt")
    scans = Scans(s3saves.store)
    for i in range(len(files)):
        s3saves.put(files[i : i + 1])
        assert scans.scan() == ([10] if i == len(files) - 1 else []), files[i][0]


def test_s3_saves_uploaded_between_two_scans_are_all_published_in_step_order(s3saves: S3Saves) -> None:
    scans = Scans(s3saves.store)
    s3saves.put(ds.save_files(1))
    assert scans.scan() == [1]
    for step in (2, 3, 4):
        s3saves.put(_uploaded_small_first(ds.save_files(step, stage=3)))
    assert scans.scan() == [1, 2, 3, 4]


# -- a real DeepSpeed engine ------------------------------------------------------------------------------


def _have_deepspeed() -> None:
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        need(False, "deepspeed is not installed (pip install '.[test]')")


def _engine(steps: int, *runs: str, log: Path) -> None:
    """tests/support/deepspeed_writer.py on two ranks under torchrun (gloo, CPU), to its end; none of its
    processes is left, whatever happens."""
    _have_deepspeed()
    code = run_tree(
        torchrun() + ["-m", "tests.support.deepspeed_writer", str(steps), *runs],
        log,
        {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"},
    )
    assert code == 0, log.read_text(errors="replace")[-4000:]


#: The real engine's configurations: ZeRO stage 2 (fp32), stage 3, stage 1 under bf16.
CONFIGS = {"zero2": "", "zero3": ":stage=3", "bf16-zero1": ":stage=1:bf16"}


@pytest.fixture(scope="module")
def real_saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two saves of a real engine in each configuration, one engine after another in one torchrun."""
    base = tmp_path_factory.mktemp("deepspeed")
    log = base / "engine.log"
    _engine(2, *(f"{base / k}{options}" for k, options in CONFIGS.items()), log=log)
    return {k: base / k for k in CONFIGS}


@pytest.mark.torch
@pytest.mark.parametrize(
    "config, first, layout",
    [
        ("zero2", "mp_rank_00_model_states.pt", (2, 1, True)),
        ("zero3", "zero_pp_rank_0_mp_rank_00_model_states.pt", (2, 1, True)),
        ("bf16-zero1", "mp_rank_00_model_states.pt", (2, 1, True)),
    ],
)
def test_a_real_engines_saves_read_as_deepspeed_writes_them(
    real_saves: dict[str, Path], tmp_path: Path, config: str, first: str, layout: tuple[int, int, bool]
) -> None:
    """The files of each save are those tests/support/deepspeed_saves.py writes, the model states read as the
    engine's own dict says, each save is whole, and without any one of its files it is not."""
    import torch

    saves = real_saves[config]
    kw: dict[str, Any] = {"zero3": {"stage": 3}, "bf16-zero1": {"stage": 1, "bf16": True}}.get(config, {})
    fake = ds.save_files(2, **kw)
    assert sorted(p.name for p in (saves / "global_step2").iterdir()) == sorted(
        p.rsplit("/", 1)[1] for p, _ in fake if p.startswith("global_step2/")
    )
    assert sorted(p.name for p in saves.iterdir()) == sorted(["global_step1", "global_step2", "latest"] + [
        p for p, _ in fake if "/" not in p and p != "latest"
    ])  # fmt: skip
    data = (saves / "global_step2" / first).read_bytes()
    got = deepspeed_states.read(len(data), lambda o, n: data[o : o + n], "m")
    assert (got.dp, got.mp, got.sharded) == layout
    real = torch.load(saves / "global_step2" / first, weights_only=False)
    assert (real["dp_world_size"], real["mp_world_size"]) == layout[:2]
    faked = torch.load(io.BytesIO(dict(fake)[f"global_step2/{first}"]), weights_only=False)
    assert set(faked) == set(real)
    root = tmp_path / "ckpt"
    copy = root / "exec" / "A"
    copy.mkdir(parents=True)
    for path in sorted(saves.rglob("*")):
        if path.is_file():
            (copy / path.relative_to(saves)).parent.mkdir(parents=True, exist_ok=True)
            (copy / path.relative_to(saves)).write_bytes(path.read_bytes())
    assert _whole(copy, 1) and _whole(copy, 2)
    for path in sorted((copy / "global_step2").iterdir()):
        kept = path.read_bytes()
        path.unlink()
        assert not _whole(copy, 2), path.name
        path.write_bytes(kept[:-1])
        assert not _whole(copy, 2), path.name
        path.write_bytes(kept)


@pytest.mark.torch
def test_a_real_engine_saving_every_step_with_a_slow_rank_has_every_save_published_whole_in_step_order(
    tmp_path: Path,
) -> None:
    """Before, watch published a save the moment latest named it, while rank 1 was still writing its shard,
    and never published the saves latest named only between two scans."""
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    saves.mkdir(parents=True)
    steps = 8
    w = Watch("-checkpoint", str(root), "-framework", "deepspeed", "-interval", "500ms", "-attempt", "A")
    log = tmp_path / "engine.log"
    try:
        _engine(steps, str(saves), "--slow-rank", "1", "--slow", "0.3", log=log)
        lines = [w.next_line(timeout=30) for _ in range(steps)]
    except BaseException:
        w.proc.kill()
        w.proc.wait()
        raise
    code, err = w.stop()
    assert (code, err) == (0, "")
    assert [int(line.split("step ")[1].split(",")[0]) for line in lines] == list(range(1, steps + 1))
    for line in lines:
        entry, folder = line.split()[1], Path(line.rsplit(", ", 1)[1].rstrip(")"))
        made = (root / "pub" / entry).stat().st_mtime_ns
        for f in folder.iterdir():
            assert f.stat().st_mtime_ns <= made, f"{f} was written after {entry} was published"


@pytest.mark.torch
@pytest.mark.s3
def test_s3_a_real_save_uploaded_in_parallel_is_published_only_once_its_last_shard_lands(
    real_saves: dict[str, Path], s3saves: S3Saves
) -> None:
    saves = real_saves["zero2"]
    files = [(str(p.relative_to(saves)), p.read_bytes()) for p in sorted(saves.rglob("*")) if p.is_file()]
    step2 = _uploaded_small_first([(p, d) for p, d in files if not p.startswith("global_step1/")])
    last = max(i for i, (p, _) in enumerate(step2) if p.startswith("global_step2/"))
    assert step2[0][0] == "latest" and step2[last][0].endswith("_optim_states.pt")
    scans = Scans(s3saves.store)
    for i in range(len(step2)):
        s3saves.put(step2[i : i + 1])
        assert scans.scan() == ([] if i < last else [2]), step2[i][0]
    s3saves.put([(p, d) for p, d in files if p.startswith("global_step1/")])
    assert scans.scan() == [2, 1]  # latest names 2: step 1, uploaded late, is whole too
