"""Time the megatron and nemo rules' check of a save against the dcp rule's check of the same DCP files.

    python bench/megatron_nemo.py [--saves 5] [--tensors 200] [--ranks 8] [--legacy-ranks 8] [--rounds 5]
                                  [--write docs/perf-megatron-nemo.md] [--check]

On a POSIX root, SAVES holds ``--saves`` saves of each kind, every one over the same DCP files (a real
torch-pickled ``.metadata`` of ``--tensors`` parameters of 4096 x 1024 float32 in ``--ranks`` chunks, as
bench/dcp_metadata.py makes it; the storage files sparse, of the sizes it names):

- ``step-<i>/``: a DCP save, checked by ``-framework dcp``;
- ``iter_<i>/``: the same files plus ``common.pt`` and ``metadata.json``, the tracker beside them, checked
  by ``-framework megatron`` (torch_dist);
- ``<name>--...-step=<i>-.../``: ``weights/`` as ``iter_<i>/``, plus ``context/io.json``, checked by
  ``-framework nemo``;
- ``iter_<1000+i>/``: a legacy save of ``--legacy-ranks`` tensor-parallel ranks' ``model_optim_rng.pt``
  (torch.save archives), checked by ``-framework megatron``;
- ``global_step<i>/``: a DeepSpeed MoE save without ZeRO (``--legacy-ranks`` data-parallel ranks, one MoE
  layer of as many experts: their files and rank 0's expert optimizer file), checked by
  ``-framework deepspeed`` with its pipeline and MoE files counted.

What is compared, per round: the time each rule's ``complete`` takes over its saves, the saves interleaved
(dcp, megatron, nemo, legacy for save 1, then for save 2, ...) so that load on the machine falls on all
alike; the figure is the median over the rounds of each rule's total divided by dcp's.  Target: at most 1.1x
for torch_dist and NeMo (their extra reads are a few small files beside the DCP ones), and for legacy no
more than dcp's per save.  ``--write`` puts the table between the bench markers of a markdown file;
``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.frameworks import FRAMEWORKS  # noqa: E402
from publish.rules.deadline import Deadline  # noqa: E402
from publish.stores.posix import PosixStore  # noqa: E402
from tests.support import deepspeed_saves as ds  # noqa: E402
from tests.support import megatron_saves as mg  # noqa: E402

BEGIN, END = "<!-- bench/megatron_nemo.py: begin -->", "<!-- bench/megatron_nemo.py: end -->"
TARGET = 1.1


def _real_metadata(tensors: int, ranks: int) -> bytes:
    spec = importlib.util.spec_from_file_location("bench_dcp_metadata", REPO / "bench" / "dcp_metadata.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.real_metadata(tensors, ranks)  # type: ignore[no-any-return]


def _dcp(folder: Path, metadata: bytes, sizes: dict[str, int]) -> None:
    folder.mkdir(parents=True)
    for name, size in sizes.items():
        with open(folder / name, "wb") as f:
            f.truncate(size)  # sparse: the rules read sizes, never the shards
    (folder / ".metadata").write_bytes(metadata)


def build(saves: Path, count: int, tensors: int, ranks: int, legacy_ranks: int) -> None:
    metadata = _real_metadata(tensors, ranks)
    per_rank = tensors * (4096 // ranks) * 1024 * 4
    sizes = {f"__{r}_0.distcp": per_rank for r in range(ranks)}
    extra = dict(mg.torch_dist_files(1)[:1])  # common.pt
    common = next(iter(extra.values()))
    for i in range(1, count + 1):
        _dcp(saves / f"step-{i}", metadata, sizes)
        _dcp(saves / mg.folder(i), metadata, sizes)
        (saves / mg.folder(i) / "common.pt").write_bytes(common)
        (saves / mg.folder(i) / "metadata.json").write_bytes(mg.CONFIG)
        nemo = saves / mg.nemo_name(i)
        _dcp(nemo / "weights", metadata, sizes)
        (nemo / "weights" / "common.pt").write_bytes(common)
        (nemo / "weights" / "metadata.json").write_bytes(mg.CONFIG)
        (nemo / "context").mkdir()
        (nemo / "context" / "io.json").write_bytes(mg.IO_JSON)
        mg.write(saves, mg.legacy_files(1000 + i, tp=legacy_ranks)[:-1])
        moe = [
            f
            for f in ds.save_files(i, dp=legacy_ranks, stage=0, num_experts=[legacy_ranks])
            if f[0] != "latest"
        ]
        expert = ds.archive("expert", ds.dumps({}))
        moe += [
            (f"global_step{i}/layer_0_expert_{e}_mp_rank_00_model_states.pt", expert)
            for e in range(legacy_ranks)
        ]
        moe += [(f"global_step{i}/expp_rank_0_mp_rank_00_optim_states.pt", expert)]
        mg.write(saves, moe)
    (saves / mg.TRACKER).write_text(str(1000 + count))
    (saves / "latest").write_text(f"global_step{count}")


def one_round(store: PosixStore, count: int) -> dict[str, float]:
    clock = time.perf_counter
    totals = {"dcp": 0.0, "megatron": 0.0, "nemo": 0.0, "legacy": 0.0, "deepspeed": 0.0}
    for i in range(1, count + 1):
        for rule, framework, name, step in (
            ("dcp", "dcp", f"step-{i}", i),
            ("megatron", "megatron", mg.folder(i), i),
            ("nemo", "nemo", mg.nemo_name(i), i),
            ("legacy", "megatron", mg.folder(1000 + i), 1000 + i),
            ("deepspeed", "deepspeed", f"global_step{i}", i),
        ):
            t0 = clock()
            whole = FRAMEWORKS[framework].complete(Deadline(60), store, f"exec/A/{name}", step)
            totals[rule] += clock() - t0
            assert whole, (rule, name)
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--saves", type=int, default=5)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--legacy-ranks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        saves = root / "exec" / "A"
        build(saves, a.saves, a.tensors, a.ranks, a.legacy_ranks)
        metadata_size = (saves / "step-1" / ".metadata").stat().st_size
        store = PosixStore(str(root))
        one_round(store, a.saves)  # warm: imports, the page cache
        rounds = [one_round(store, a.saves) for _ in range(a.rounds)]

    def ratio(rule: str) -> tuple[float, float, float]:
        xs = [r[rule] / r["dcp"] for r in rounds]
        return statistics.median(xs), min(xs), max(xs)

    def per_save(rule: str) -> float:
        return statistics.median(r[rule] for r in rounds) / a.saves * 1000

    lines = [
        f"{a.saves} saves of each kind, `.metadata` of {a.tensors} tensors in {a.ranks} chunks "
        f"({metadata_size:,} bytes), legacy saves of {a.legacy_ranks} ranks; median (range) over {a.rounds} "
        f"interleaved rounds; {platform.python_implementation()} {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}:",
        "",
        "| rule | per save | / dcp's | target | met |",
        "| --- | --- | --- | --- | --- |",
        f"| dcp (`step-<i>/`) | {per_save('dcp'):.1f} ms | 1 | | |",
    ]
    met = True
    for rule, label in (
        ("megatron", "megatron, `torch_dist`"),
        ("nemo", "nemo"),
        ("legacy", f"megatron, legacy ({a.legacy_ranks} ranks)"),
        ("deepspeed", f"deepspeed, MoE ({a.legacy_ranks} experts, {a.legacy_ranks} ranks, no ZeRO)"),
    ):
        mid, low, high = ratio(rule)
        ok = mid <= TARGET
        met &= ok
        lines.append(
            f"| {label} | {per_save(rule):.1f} ms | {mid:.2f}x ({low:.2f}-{high:.2f}) | <= {TARGET}x | "
            f"{'yes' if ok else 'no'} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        text = a.write.read_text() if a.write.exists() else f"# megatron and nemo rules\n\n{BEGIN}\n{END}\n"
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        a.write.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    return 1 if a.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
