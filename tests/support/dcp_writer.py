"""Write a real DCP save with two gloo ranks on the CPU: ``python -m tests.support.dcp_writer PATH [--no-collectives]``.

A PATH ``s3://BUCKET/KEY`` is written by torch's ``FsspecWriter`` through s3fs, to the endpoint and with the
key in ``DCP_S3_ENDPOINT``, ``DCP_S3_KEY`` and ``DCP_S3_SECRET``.

Run as a script (torch.multiprocessing spawns the ranks); the tests call it in a subprocess so no process
group leaks into the test process.
"""

from __future__ import annotations

import os
import sys

from tests.support.ports import free_port


def _rank(rank: int, path: str, port: int, collectives: bool) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        state = {
            "model": {"w": torch.full((64, 64), float(rank)), f"only{rank}": torch.arange(100)},
            "step": 7,
        }
        if path.startswith("s3://"):
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

            options = {
                "client_kwargs": {"endpoint_url": os.environ["DCP_S3_ENDPOINT"]},
                "key": os.environ["DCP_S3_KEY"],
                "secret": os.environ["DCP_S3_SECRET"],
            }
            writer = FsspecWriter(path, **options)
        else:
            writer = FileSystemWriter(path)
        dcp.save(state, storage_writer=writer, use_collectives=collectives)
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp

    path = argv[0]
    collectives = "--no-collectives" not in argv
    mp.spawn(_rank, args=(path, free_port(), collectives), nprocs=2)


if __name__ == "__main__":
    main(sys.argv[1:])
