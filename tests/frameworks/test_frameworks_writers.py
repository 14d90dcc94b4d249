"""Each framework's completeness rule against its real writer, on POSIX roots: what watch publishes, and what
it passes over.  DeepSpeed's have a module of their own: tests/frameworks/test_deepspeed.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.ops.scan import Watcher
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import REPO, Watch, need, run_cli
from tests.support import dcp_shapes


def _have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


class Lines:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.say = Say(self.out.append, self.err.append)


def scanner(root: Path, framework: str, saves: str = "exec/A") -> tuple[Watcher, Lines]:
    lines = Lines()
    return Watcher(PosixStore(str(root)), lines.say, FRAMEWORKS[framework], saves, 0), lines


def published_steps(lines: Lines) -> list[int]:
    return [int(line.split("step ")[1].split(",")[0]) for line in lines.out]


# -- naming rules -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "framework, name, step",
    [
        ("lightning", "epoch=0-step=10.ckpt", 10),
        ("lightning", "step=7.ckpt", 7),
        ("lightning", "epoch=3-step=0042-val_loss=0.12.ckpt", 42),
        ("lightning", "epoch=0-step=10-v1.ckpt", 10),  # ModelCheckpoint's version suffix
        ("lightning", "last.ckpt", None),
        ("lightning", "epoch=0.ckpt", None),
        ("lightning", "epoch=0-step=10.ckpt.tmp", None),
        ("lightning", "epoch=0-step=.ckpt", None),
        ("lightning", "epoch=0-global_step=10.ckpt", None),  # another metric's name
        ("lightning", "step=1-step=2.ckpt", None),  # two steps: not ours to choose
        ("lightning", "step=٣.ckpt", None),
        ("deepspeed", "global_step100", 100),
        ("deepspeed", "global_step", None),
        ("deepspeed", "latest", None),
        ("deepspeed", "global_step10x", None),
        ("deepspeed", "Global_step1", None),
        ("megatron", "iter_0000100", 100),
        ("megatron", "iter_12345678", 12345678),  # past 7 digits
        ("megatron", "release", None),
        ("megatron", "latest_checkpointed_iteration.txt", None),
        ("megatron", "iter_", None),
        ("megatron", "iter_-1", None),
        ("megatron", "iter_٣", None),
    ],
)
def test_step_rules(framework: str, name: str, step: int | None) -> None:
    assert FRAMEWORKS[framework].step(name) == step


# -- DCP ---------------------------------------------------------------------------------------------------


def _dcp_save(path: Path, *extra: str) -> None:
    need(_have("torch"), "torch is not installed")
    subprocess.run(
        [sys.executable, "-m", "tests.support.dcp_writer", str(path), *extra],
        cwd=REPO,
        check=True,
        timeout=300,
    )


@pytest.mark.torch
def test_dcp_a_real_two_rank_save_is_published_and_not_before_its_shards(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    real = tmp_path / "real"
    _dcp_save(real)
    saves = root / "exec" / "A"
    saves.mkdir(parents=True)
    # As a parallel uploader lands them: the small .metadata first, then the shards, the last one in parts.
    target = saves / "step-100"
    target.mkdir()
    shutil.copy(real / ".metadata", target / ".metadata")
    w, lines = scanner(root, "dcp")
    w.scan(UNBOUNDED)
    assert lines.out == []
    shards = sorted(p.name for p in real.iterdir() if p.name.endswith(".distcp"))
    assert len(shards) == 2
    shutil.copy(real / shards[0], target / shards[0])
    w.scan(UNBOUNDED)
    assert lines.out == []
    data = (real / shards[1]).read_bytes()
    (target / shards[1]).write_bytes(data[:-1])
    w.scan(UNBOUNDED)
    assert lines.out == []
    (target / shards[1]).write_bytes(data)
    w.scan(UNBOUNDED)
    assert published_steps(lines) == [100]


@pytest.mark.torch
def test_dcp_without_collectives_is_never_published_and_said_once(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _dcp_save(root / "exec" / "A" / "step-5", "--no-collectives")
    assert not (root / "exec" / "A" / "step-5" / ".metadata").exists()
    w, lines = scanner(root, "dcp")
    for _ in range(3):
        w.scan(UNBOUNDED)
    assert lines.out == []
    assert len(lines.err) == 1 and "use_collectives=False" in lines.err[0] and "step-5" in lines.err[0]


def test_dcp_megatron_torch_dist_layout_is_a_dcp_save(tmp_path: Path) -> None:
    """Megatron-LM's torch_dist format: iter_<7 digits>/ holding DCP's files plus common.pt and metadata.json
    (megatron/core/dist_checkpointing/strategies/torch.py saves through torch.distributed.checkpoint)."""
    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "iter_0000100"
    dcp_shapes.write_save(
        folder, {"__0_0.distcp": 100, "__0_1.distcp": 80, "__1_0.distcp": 90, "__1_1.distcp": 70}
    )
    (folder / "common.pt").write_bytes(b"c")
    (folder / "metadata.json").write_bytes(b'{"sharded_backend": "torch_dist"}')
    (root / "exec" / "A" / "latest_checkpointed_iteration.txt").write_text("100")
    w, lines = scanner(root, "dcp")
    w.scan(UNBOUNDED)
    assert published_steps(lines) == [100]


def test_dcp_a_metadata_naming_a_missing_or_short_file_waits(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "step-3"
    dcp_shapes.write_save(folder)
    (folder / "__1_0.distcp").unlink()
    w, lines = scanner(root, "dcp")
    w.scan(UNBOUNDED)
    assert lines.out == []
    (folder / "__1_0.distcp").write_bytes(b"\x01" * 47)
    w.scan(UNBOUNDED)
    assert lines.out == []
    (folder / "__1_0.distcp").write_bytes(b"\x01" * 48)
    w.scan(UNBOUNDED)
    assert published_steps(lines) == [3]


def test_dcp_a_hostile_metadata_stops_watch_naming_it_and_runs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "step-4"
    folder.mkdir(parents=True)
    canary = tmp_path / "ran"
    (folder / ".metadata").write_bytes(b"cos\nsystem\n(S'touch " + str(canary).encode() + b"'\ntR.")
    w = Watch("-checkpoint", str(root), "-framework", "dcp", "-interval", "100ms", "-attempt", "A")
    code, err = w.finish()
    assert code == 1
    assert err.startswith(f"publish: {folder}/.metadata: names os.system")
    assert not canary.exists()


# -- HF shard index --------------------------------------------------------------------------------------


def test_hf_a_sharded_save_waits_for_every_shard_its_index_names(tmp_path: Path) -> None:
    from tests.support.trainer_saves import real_state

    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "checkpoint-8"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_bytes(real_state(8))  # landed first, as a parallel upload may
    index = b'{"metadata": {"total_size": 2}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}'
    (folder / "model.safetensors.index.json").write_bytes(index)
    w, lines = scanner(root, "hf")
    w.scan(UNBOUNDED)
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"1")
    w.scan(UNBOUNDED)
    assert lines.out == []
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"2")
    w.scan(UNBOUNDED)
    assert published_steps(lines) == [8]


@pytest.mark.parametrize(
    "index, why",
    [
        (b'{"weight_map": {}}', "no weight_map"),
        (b'{"weight_map": {"a": "../x"}}', "not a file name inside the save"),
        (b'{"weight_map": {"a": 3}}', "not a file name inside the save"),
        (b'{"weight_map": {"a": "x"}} x', "does not parse"),
    ],
)
def test_hf_a_faulty_shard_index_stops_watch(tmp_path: Path, index: bytes, why: str) -> None:
    from publish.rules.errors import Failure
    from tests.support.trainer_saves import real_state

    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "checkpoint-9"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_bytes(real_state(9))
    (folder / "pytorch_model.bin.index.json").write_bytes(index)
    w, _ = scanner(root, "hf")
    with pytest.raises(Failure, match=why):
        w.scan(UNBOUNDED)


# -- Lightning ---------------------------------------------------------------------------------------------


def _lightning(out: Path, steps: int, every: int, width: int = 8) -> subprocess.Popen[bytes]:
    need(_have("lightning"), "lightning is not installed")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.lightning_writer",
            str(out),
            str(steps),
            str(every),
            str(width),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.torch
def test_lightning_model_checkpoint_saves_are_published_and_pruned_as_files(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    assert _lightning(saves, 6, 2).wait(timeout=300) == 0
    assert sorted(os.listdir(saves)) == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
        "epoch=0-step=6.ckpt",
        "last.ckpt",
    ]
    w = Watch("-checkpoint", str(root), "-framework", "lightning", "-interval", "100ms", "-attempt", "A")
    got = [w.next_line() for _ in range(3)]
    assert w.stop()[0] == 0
    assert [line.split("(")[1] for line in got] == [
        f"epoch 0, step {s}, {saves}/epoch=0-step={s}.ckpt)" for s in (2, 4, 6)
    ]
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{saves}/epoch=0-step=6.ckpt\n"
    pruned = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert pruned.lines == [f"removed {saves}/epoch=0-step=2.ckpt", f"removed {saves}/epoch=0-step=4.ckpt"]
    assert sorted(os.listdir(saves)) == ["epoch=0-step=6.ckpt", "last.ckpt"]


@pytest.mark.torch
def test_lightning_a_checkpoint_cut_anywhere_is_not_whole(tmp_path: Path) -> None:
    """What a writer that writes in place leaves when it is killed: every prefix of a real .ckpt."""
    real = tmp_path / "real"
    assert _lightning(real, 2, 2).wait(timeout=300) == 0
    data = (real / "epoch=0-step=2.ckpt").read_bytes()
    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    saves.mkdir(parents=True)
    store = PosixStore(str(root))
    fw = FRAMEWORKS["lightning"]
    target = saves / "epoch=0-step=2.ckpt"
    for cut in sorted({*range(0, len(data), max(1, len(data) // 300)), *range(len(data) - 200, len(data))}):
        target.write_bytes(data[:cut])
        assert not fw.complete(UNBOUNDED, store, "exec/A/epoch=0-step=2.ckpt", 2), cut
    target.write_bytes(data)
    assert fw.complete(UNBOUNDED, store, "exec/A/epoch=0-step=2.ckpt", 2)


@pytest.mark.torch
def test_lightning_a_trainer_killed_while_saving_leaves_nothing_published_that_is_not_whole(
    tmp_path: Path,
) -> None:
    import zipfile

    root = tmp_path / "ckpt"
    saves = root / "exec" / "A"
    published_whole = 0
    for trial in range(3):
        proc = _lightning(saves, 400, 1, width=256)  # a save every step, 256x256 weights and Adam-free SGD
        deadline = time.monotonic() + 120

        def saved() -> bool:
            return saves.is_dir() and any(n.endswith(".ckpt") for n in os.listdir(saves))

        while time.monotonic() < deadline and not saved():
            time.sleep(0.05)
        time.sleep(0.2 * trial)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        w, lines = scanner(root, "lightning")
        w.scan(UNBOUNDED)
        for line in lines.out:
            path = line.rsplit(", ", 1)[1].rstrip(")")
            with zipfile.ZipFile(path) as z:
                assert z.testzip() is None
            published_whole += 1
    assert published_whole > 0


@pytest.mark.torch
def test_hf_a_real_sharded_save_uploaded_state_first_waits_for_its_last_shard(tmp_path: Path) -> None:
    """transformers' own save_pretrained writes the shards and model.safetensors.index.json; copied as a
    parallel uploader lands them (trainer_state.json and the index first), the save is published only
    once its last shard is there."""
    need(_have("transformers"), "transformers is not installed")
    import transformers

    from tests.support.trainer_saves import real_state

    real = tmp_path / "real"
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    transformers.BertModel(config).save_pretrained(real, max_shard_size="20KB")
    shards = sorted(p.name for p in real.iterdir() if p.name.endswith(".safetensors"))
    assert len(shards) > 2 and (real / "model.safetensors.index.json").exists()
    root = tmp_path / "ckpt"
    folder = root / "exec" / "A" / "checkpoint-8"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_bytes(real_state(8))
    for name in ("model.safetensors.index.json", "config.json"):
        shutil.copy(real / name, folder / name)
    w, lines = scanner(root, "hf")
    for i, name in enumerate(shards):
        w.scan(UNBOUNDED)
        assert lines.out == [], f"published with {i} of {len(shards)} shards"
        shutil.copy(real / name, folder / name)
    w.scan(UNBOUNDED)
    assert published_steps(lines) == [8]
