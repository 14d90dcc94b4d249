"""Time reading a DCP ``.metadata`` in a forked child (what watch, status and publish do above 16 KiB) against
reading it in the process, on the same bytes, and show what a hostile one costs.

    python bench/dcp_metadata.py [--tensors 4000] [--ranks 8] [--rounds 15] [--write docs/perf-dcp-metadata.md]
                                 [--check]

The document is a real ``Metadata`` that torch pickles as ``FileSystemWriter`` does (torch must be installed):
``--tensors`` parameters, each sharded into one chunk per rank (``__<rank>_0.distcp``), with its
``TensorStorageMetadata`` and one ``_StorageInfo`` per chunk.  Per round, interleaved and in alternating
order: ``dcp_metadata._ends`` (the reader, in the process) and ``dcp_metadata.storage_ends`` with a deadline
(the same reader in a forked child, its answer sent back through a pipe), and, for reference,
``pickle.loads`` of the same bytes with torch's own classes (what torch itself does).  The figure is the median of the rounds' ratios
(child / in the process).  Target: at most 1.1x.  Then one hostile ``.metadata`` (int keys of one hash) is
read in the process, and in the child under a 1 s deadline and under 5 minutes.  ``--write`` puts the tables between the bench
markers of a markdown file; ``--check`` exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from publish.frameworks.parse import dcp_metadata  # noqa: E402
from publish.rules.deadline import Deadline  # noqa: E402
from publish.rules.errors import Failure  # noqa: E402

BEGIN, END = "<!-- bench/dcp_metadata.py: begin -->", "<!-- bench/dcp_metadata.py: end -->"
TARGET = 1.1


def real_metadata(tensors: int, ranks: int) -> bytes:
    """A .metadata as torch pickles it for ``tensors`` parameters of 4096 x 1024 float32, each in ``ranks`` chunks."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    rows, cols = 4096, 1024
    part = rows // ranks
    sdm: dict[str, object] = {}
    storage: dict[object, object] = {}
    offsets = [0] * ranks
    for t in range(tensors):
        fqn = f"model.layers.{t // 8}.block.{t % 8}.weight"
        chunks = [
            ChunkStorageMetadata(torch.Size([r * part, 0]), torch.Size([part, cols])) for r in range(ranks)
        ]
        sdm[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=torch.float32), torch.Size([rows, cols]), chunks
        )
        for r in range(ranks):
            length = part * cols * 4
            index = MetadataIndex(fqn, torch.Size([r * part, 0]), r)
            storage[index] = _StorageInfo(f"__{r}_0.distcp", offsets[r], length)
            offsets[r] += length
    return pickle.dumps(
        Metadata(state_dict_metadata=sdm, storage_data=storage), protocol=pickle.DEFAULT_PROTOCOL
    )


def colliding(keys: int) -> bytes:
    from tests.support.dcp_shapes import colliding as make

    return make(keys)


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def run(tensors: int, ranks: int, rounds: int) -> tuple[str, bool]:
    data = real_metadata(tensors, ranks)
    expect = dcp_metadata._ends(data, "m")
    assert dcp_metadata.storage_ends(data, "m", Deadline(300)) == expect
    inproc: list[float] = []
    child: list[float] = []
    floor: list[float] = []
    guarded: list[float] = []
    ratios: list[float] = []
    for r in range(rounds):
        order = ("in", "child") if r % 2 == 0 else ("child", "in")
        got = {}
        for side in order:
            if side == "in":
                got[side] = timed(lambda: dcp_metadata._ends(data, "m"))
            else:
                got[side] = timed(lambda: dcp_metadata.storage_ends(data, "m", Deadline(300)))
        floor.append(timed(lambda: pickle.loads(data)))
        guarded.append(timed(lambda: dcp_metadata._in_child(data, "m", Deadline(300), guarded=True)))
        inproc.append(got["in"])
        child.append(got["child"])
        ratios.append(got["child"] / got["in"])

    def cell(xs: list[float], scale: float = 1000.0, unit: str = " ms") -> str:
        return f"{statistics.median(xs) * scale:.0f}{unit} ({min(xs) * scale:.0f}-{max(xs) * scale:.0f})"

    ratio = statistics.median(ratios)
    met = ratio <= TARGET
    hostile = colliding(40_000)
    hostile_in = timed(lambda: dcp_metadata._ends(hostile, "m"))

    def refused(seconds: float) -> None:
        try:
            dcp_metadata.storage_ends(hostile, "m", Deadline(seconds))
        except Failure:
            return
        raise AssertionError("the hostile .metadata was not refused")

    hostile_child = timed(lambda: refused(1))
    hostile_guarded = timed(lambda: refused(300))
    load = os.getloadavg()
    lines = [
        BEGIN,
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load average "
        f"{load[0]:.1f} at the end. `python bench/dcp_metadata.py --tensors {tensors} --ranks {ranks} "
        f"--rounds {rounds}`.",
        "",
        f"A real `.metadata` of {tensors} tensors in {ranks} chunks each ({len(data) / 1e6:.1f} MB, "
        f"{len(expect)} storage files), median (range) over {rounds} interleaved rounds:",
        "",
        "| read | time | ratio to the reader in the process (paired) | target | met |",
        "| --- | --- | --- | --- | --- |",
        f"| `pickle.loads` with torch's own classes (what torch does; it runs the file's code) | {cell(floor)} | - | - | - |",
        f"| the reader, in the process | {cell(inproc)} | 1.00x | - | - |",
        f"| the reader, in a forked child (what the command does) | {cell(child)} | {ratio:.3f}x "
        f"({min(ratios):.3f}-{max(ratios):.3f}) | <= {TARGET}x | {'yes' if met else 'no'} |",
        f"| the guarded reader, in a forked child (read again when the C reader is not done in "
        f"{dcp_metadata.FAST_BASE:g} s + 1 s per {dcp_metadata.FAST_RATE / 1e6:g} MB) | {cell(guarded)} | "
        f"{statistics.median(guarded) / statistics.median(inproc):.2f}x (medians) | - | - |",
        "",
        f"A hostile `.metadata` ({len(hostile) / 1e3:.0f} KB, 40,000 int keys of one hash): in the process "
        f"{hostile_in:.1f} s, inside one C call; in the child with a deadline of 1 s, refused at it after "
        f"{hostile_child:.2f} s; with 5 minutes, refused by the guarded reader after {hostile_guarded:.2f} s "
        f"(the C reader's allowance for it is {dcp_metadata.FAST_BASE + len(hostile) / dcp_metadata.FAST_RATE:.2f} s).",
        END,
    ]
    return "\n".join(lines), met


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=4000)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--write", type=Path)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    table, met = run(a.tensors, a.ranks, a.rounds)
    print(table)
    if a.write:
        text = (
            a.write.read_text()
            if a.write.exists()
            else f"# DCP .metadata in a forked child\n\n{BEGIN}\n{END}\n"
        )
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        a.write.write_text(head + table + tail)
    return 1 if a.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
