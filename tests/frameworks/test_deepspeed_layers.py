"""DeepSpeed's pipeline and MoE files (issue #34, "DeepSpeed", DeepSpeed #5776): a pipeline save's
``layer_<n>-model_states.pt`` (one per layer with parameters, the layers read from each stage's model
states) and an MoE save's ``layer_<l>_expert_<e>_mp_rank_<mp>_model_states.pt`` (every expert of every MoE
layer, from ``num_experts``) and ``expp_rank_<r>_mp_rank_<mp>_optim_states.pt`` (without ZeRO) are waited
for as the model states and shards are.  With a real engine (tests/support/deepspeed_writer.py: a
PipelineModule over two stages, one MoE layer of four experts over two expert-parallel ranks), on POSIX and
S3, and with model states built to hurt the reader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from publish.frameworks import FRAMEWORKS
from publish.frameworks.parse import deepspeed_states
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import need
from tests.support import deepspeed_saves as ds
from tests.support.framework_scans import S3Saves, Scans, posix, run_tree, torchrun, tree
from tests.support.servers import S3Server

DS = FRAMEWORKS["deepspeed"]


def _whole(saves: Path, step: int, notes: list[str] | None = None) -> bool:
    store = PosixStore(str(saves.parent.parent))
    return DS.complete(
        UNBOUNDED, store, f"exec/A/global_step{step}", step, (notes if notes is not None else []).append
    )


@pytest.fixture(scope="module")
def real_saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two saves of a pipeline engine (ZeRO stage 1) and of an MoE engine (no ZeRO), each its own torchrun."""
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        need(False, "deepspeed is not installed")
    base = tmp_path_factory.mktemp("deepspeed-layers")
    for kind, options in (("pipe", "pipe:stage=1"), ("moe", "moe:stage=0")):  # one engine's groups each
        log = base / f"{kind}.log"
        code = run_tree(
            torchrun(quiet=True) + ["-m", "tests.support.deepspeed_writer", "2", f"{base / kind}:{options}"],
            log,
            {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"},
        )
        assert code == 0, log.read_text(errors="replace")[-4000:]
    return {"pipe": base / "pipe", "moe": base / "moe"}


def _read(path: Path) -> deepspeed_states.Layout:
    data = path.read_bytes()
    return deepspeed_states.read(len(data), lambda o, n: data[o : o + n], str(path))


@pytest.mark.torch
def test_a_real_pipeline_save_waits_for_each_stages_layers(
    real_saves: dict[str, Path], tmp_path: Path
) -> None:
    """Each stage's model states name its layers' parameters (``<layer>.weight``): layers 0, 2 and 3 have
    parameters; 1 (a ReLU) has none, and its (empty) file is not recorded anywhere.  Fails on the code
    before: it published the save without its layer files."""
    real = real_saves["pipe"]
    step = real / "global_step2"
    assert _read(step / "mp_rank_00_model_states.pt").layers == (0,)
    assert _read(step / "mp_rank_01_model_states.pt").layers == (2, 3)
    files = tree(real)
    for layer in ("layer_00-model_states.pt", "layer_02-model_states.pt", "layer_03-model_states.pt"):
        saves, _ = posix(tmp_path / layer, "deepspeed")
        late = f"global_step2/{layer}"
        ds.write(saves, [f for f in files if f[0] != late])
        assert not _whole(saves, 2), layer
        data = dict(files)[late]
        (saves / late).write_bytes(data[:-1])
        assert not _whole(saves, 2), layer
        (saves / late).write_bytes(data)
        assert _whole(saves, 2), layer


@pytest.mark.torch
@pytest.mark.parametrize(
    "late",
    [
        "layer_0_expert_0_mp_rank_00_model_states.pt",
        "layer_0_expert_3_mp_rank_00_model_states.pt",  # rank 1's: experts 2 and 3
        "expp_rank_0_mp_rank_00_optim_states.pt",
    ],
)
def test_a_real_moe_save_waits_for_every_expert(
    real_saves: dict[str, Path], tmp_path: Path, late: str
) -> None:
    """Fails on the code before: it published the save while an expert's file was missing or cut."""
    real = real_saves["moe"]
    assert _read(real / "global_step2" / "mp_rank_00_model_states.pt").experts == (4,)
    files = tree(real)
    saves, _ = posix(tmp_path, "deepspeed")
    ds.write(saves, [f for f in files if f[0] != f"global_step2/{late}"])
    assert not _whole(saves, 2)
    data = dict(files)[f"global_step2/{late}"]
    (saves / "global_step2" / late).write_bytes(data[: len(data) // 2])
    assert not _whole(saves, 2)
    (saves / "global_step2" / late).write_bytes(data)
    assert _whole(saves, 2)


@pytest.mark.torch
def test_a_present_expert_optimizer_file_of_another_rank_must_be_whole(
    real_saves: dict[str, Path], tmp_path: Path
) -> None:
    """The expert-parallel size is not recorded: rank 0's file is waited for, and every other one there
    must be whole."""
    files = tree(real_saves["moe"])
    saves, _ = posix(tmp_path, "deepspeed")
    ds.write(saves, files)
    other = saves / "global_step2" / "expp_rank_1_mp_rank_00_optim_states.pt"
    other.write_bytes(other.read_bytes()[:-1])
    assert not _whole(saves, 2)


@pytest.mark.torch
@pytest.mark.s3
@pytest.mark.parametrize("kind", ["pipe", "moe"])
def test_s3_a_real_save_uploaded_small_first_is_published_with_its_last_file(
    real_saves: dict[str, Path], s3_server: S3Server, bucket: str, kind: str
) -> None:
    files = [f for f in tree(real_saves[kind]) if not f[0].startswith("global_step1/")]
    upload = sorted(files, key=lambda f: len(f[1]))
    assert upload[0][0] == "latest"
    s3saves = S3Saves(s3_server, bucket)
    scans = Scans(s3saves.store, "deepspeed")
    last = max(i for i, (p, _) in enumerate(upload) if p.startswith("global_step2/"))
    for i in range(len(upload)):
        s3saves.put(upload[i : i + 1])
        assert scans.scan() == ([2] if i >= last else []), upload[i][0]


@pytest.mark.parametrize(
    "experts, why",
    [
        ([1 << 40], "num_experts"),
        (["4"], "num_experts"),
        ([True], "num_experts"),
        ([0], "num_experts"),
    ],
)
def test_a_hostile_num_experts_is_refused_once_naming_the_file(
    tmp_path: Path, experts: object, why: str
) -> None:
    saves, scans = posix(tmp_path, "deepspeed")
    ds.write_save(saves, 1)
    ds.write_save(saves, 2, stage=0, num_experts=experts)
    assert scans.scan() == [1] and scans.scan() == [1]
    assert len(scans.err) == 1 and why in scans.err[0] and "global_step2" in scans.err[0], scans.err


def test_a_million_experts_are_counted_before_any_name_is_made(tmp_path: Path) -> None:
    saves, _ = posix(tmp_path, "deepspeed")
    ds.write_save(saves, 2, stage=0, num_experts=[1 << 20] * 64)
    assert not _whole(saves, 2)


def test_layer_names_past_six_digits_or_not_layers_are_not_counted(tmp_path: Path) -> None:
    """A pipeline save's model states hold no module; parameter names that are not ``<layer>.<name>`` (a
    tied module's ``tied_modules.embed.weight``) or name a layer of seven digits ask for no file."""
    saves, _ = posix(tmp_path, "deepspeed")
    shapes = ds.Ordered(
        {
            "tied_modules.embed.weight": ds.Call(ds.Global("torch", "Size"), [4]),
            "1234567.weight": ds.Call(ds.Global("torch", "Size"), [4]),
            "٣.weight": ds.Call(ds.Global("torch", "Size"), [4]),
            "2.weight": ds.Call(ds.Global("torch", "Size"), [4]),
        }
    )
    ds.write_save(saves, 2, module=None, param_shapes=[shapes])
    assert not _whole(saves, 2)
    ds.write(
        saves, [("global_step2/layer_02-model_states.pt", ds.archive("layer_02-model_states", ds.dumps({})))]
    )
    assert _whole(saves, 2)
