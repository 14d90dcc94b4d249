"""The frameworks' completeness rules on S3 roots (SeaweedFS and moto): saves uploaded the way parallel
uploaders land them, marker first."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from publish.frameworks import FRAMEWORKS
from publish.ops import Say
from publish.ops.scan import Watcher
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.stores.s3 import S3Store
from tests.conftest import REPO, need
from tests.support import dcp_shapes
from tests.support.servers import S3Server

pytestmark = pytest.mark.s3


class Root:
    def __init__(self, server: S3Server, bucket: str) -> None:
        self.bucket, self.prefix = bucket, "run-" + uuid.uuid4().hex[:10]
        self.client = server.client()
        self.store = S3Store(bucket, self.prefix, server.credentials(), proxy=None, env={})
        self.out: list[str] = []
        self.err: list[str] = []

    def put(self, path: str, data: bytes = b"") -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{path}", Body=data)

    def watcher(self, framework: str) -> Watcher:
        return Watcher(self.store, Say(self.out.append, self.err.append), FRAMEWORKS[framework], "exec/A", 0)

    def steps(self) -> list[int]:
        return [int(line.split("step ")[1].split(",")[0]) for line in self.out]


@pytest.fixture
def s3root(s3_server: S3Server, bucket: str) -> Root:
    return Root(s3_server, bucket)


def test_dcp_upload_with_the_metadata_first_is_published_only_once_every_shard_is_whole(s3root: Root) -> None:
    files = {"__0_0.distcp": 300, "__1_0.distcp": 200}
    s3root.put("exec/A/step-100/.metadata", dcp_shapes.metadata_for(files))  # .metadata sorts first
    w = s3root.watcher("dcp")
    w.scan(Deadline(30))
    assert s3root.out == []
    s3root.put("exec/A/step-100/__0_0.distcp", b"x" * 300)
    s3root.put("exec/A/step-100/__1_0.distcp", b"x" * 199)  # a short copy
    w.scan(Deadline(30))
    assert s3root.out == []
    s3root.put("exec/A/step-100/__1_0.distcp", b"x" * 200)
    w.scan(Deadline(30))
    assert s3root.steps() == [100]


@pytest.mark.torch
def test_dcp_a_real_two_rank_save_uploaded_marker_first(s3root: Root, tmp_path: Path) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "torch is not installed")
    real = tmp_path / "step-7"
    subprocess.run(
        [sys.executable, "-m", "tests.support.dcp_writer", str(real)], cwd=REPO, check=True, timeout=300
    )
    names = sorted(p.name for p in real.iterdir())
    assert names[0] == ".metadata"
    w = s3root.watcher("dcp")
    for i, name in enumerate(names):  # in the order an uploader's listing gives them
        s3root.put(f"exec/A/step-7/{name}", (real / name).read_bytes())
        w.scan(Deadline(30))
        assert s3root.steps() == ([7] if i == len(names) - 1 else [])


@pytest.mark.torch
def test_dcp_a_real_save_written_by_fsspec_writer_to_s3(s3_server: S3Server, s3root: Root) -> None:
    """torch's FsspecWriter (through s3fs) writes each rank's shards, then .metadata by a copy of
    .metadata.tmp: watch publishes the save once, whole."""
    try:
        import s3fs  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        need(False, "torch and s3fs are needed for FsspecWriter on S3")
    url = f"s3://{s3root.bucket}/{s3root.prefix}/exec/A/step-11"
    env = {
        **os.environ,
        "DCP_S3_ENDPOINT": s3_server.endpoint,
        "DCP_S3_KEY": s3_server.access_key,
        "DCP_S3_SECRET": s3_server.secret_key,
    }
    writer = subprocess.Popen([sys.executable, "-m", "tests.support.dcp_writer", url], cwd=REPO, env=env)
    w = s3root.watcher("dcp")
    try:
        while writer.poll() is None:  # scans while the ranks write: nothing half-written is published
            w.scan(Deadline(30))
            for line in s3root.out:
                assert s3root.store.read(UNBOUNDED, "exec/A/step-11/.metadata", 1 << 20) is not None, line
    finally:
        assert writer.wait(timeout=300) == 0
    w.scan(Deadline(30))
    assert s3root.steps() == [11]
    names = sorted(s3root.store.sizes(UNBOUNDED, "exec/A/step-11"))
    assert ".metadata" in names and sum(n.endswith(".distcp") for n in names) == 2


def test_dcp_per_rank_metadata_is_said_once_and_never_published(s3root: Root) -> None:
    for rank in (0, 1):
        s3root.put(f"exec/A/step-3/__{rank}.metadata", b"m")
        s3root.put(f"exec/A/step-3/__{rank}_0.distcp", b"d")
    w = s3root.watcher("dcp")
    w.scan(Deadline(30))
    w.scan(Deadline(30))
    assert s3root.out == [] and len(s3root.err) == 1 and "use_collectives=False" in s3root.err[0]


def test_lightning_checkpoint_objects_are_judged_by_their_archive(s3root: Root) -> None:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", b"p" * 1000)
        z.writestr("archive/data/0", b"t" * 5000)
    data = buf.getvalue()
    s3root.put("exec/A/epoch=0-step=4.ckpt", data[:-10])  # an upload cut short
    s3root.put("exec/A/last.ckpt", data)
    w = s3root.watcher("lightning")
    w.scan(Deadline(30))
    assert s3root.out == []
    s3root.put("exec/A/epoch=0-step=4.ckpt", data)
    w.scan(Deadline(30))
    assert s3root.steps() == [4]
    assert s3root.store.remove_folder(UNBOUNDED, "exec/A/epoch=0-step=4.ckpt").removed
    assert s3root.store.list_files(UNBOUNDED, "exec/A") == ["last.ckpt"]


def test_hf_shard_index_on_s3(s3root: Root) -> None:
    from tests.support.trainer_saves import real_state

    s3root.put("exec/A/checkpoint-5/trainer_state.json", real_state(5))
    s3root.put(
        "exec/A/checkpoint-5/model.safetensors.index.json", b'{"weight_map": {"a": "m-1.safetensors"}}'
    )
    w = s3root.watcher("hf")
    w.scan(Deadline(30))
    assert s3root.out == []
    s3root.put("exec/A/checkpoint-5/m-1.safetensors", b"w")
    w.scan(Deadline(30))
    assert s3root.steps() == [5]
