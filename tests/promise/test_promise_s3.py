"""The promise on S3 roots (SeaweedFS and moto): a prefix holding nothing is a missing root, not a fresh
start; ``init`` makes one; reserved paths are never saves."""

from __future__ import annotations

from pathlib import Path

import pytest

from publish.rules import layout
from tests.support.s3roots import Root
from tests.support.servers import S3Server

pytestmark = pytest.mark.s3


@pytest.fixture
def s3root(s3_server: S3Server, tmp_path: Path) -> Root:
    return Root(s3_server, tmp_path, init=False)


def test_a_prefix_holding_nothing_is_a_missing_root(s3root: Root) -> None:
    for verb in ("resolve", "status", "prune"):
        r = s3root.run(verb)
        assert r.code == 1 and r.out == "", r
        assert r.err.startswith(
            f"publish: checkpoint root {s3root.url} does not exist: it holds no object"
        ), r
        assert f"publish init -checkpoint {s3root.url} -creds ..." in r.err
    assert s3root.keys() == []


def test_init_makes_the_root_object_once(s3root: Root) -> None:
    r = s3root.run("init")
    assert (r.code, r.out, r.err) == (0, f"created {s3root.url}\n", ""), r
    listed = s3root.s3.list_objects_v2(Bucket=s3root.bucket, Prefix=s3root.prefix + "/")["Contents"]
    assert [o["Key"] for o in listed] == [f"{s3root.prefix}/{layout.ROOT_OBJECT}"]
    r = s3root.run("init")
    assert (r.code, r.out, r.err) == (0, "", f"publish: checkpoint root {s3root.url} already exists\n"), r
    r = s3root.run("resolve")
    assert (r.code, r.out, r.err) == (0, "", ""), r
    r = s3root.run("status")
    assert r.code == 0, r


def test_a_root_in_use_needs_no_init(s3root: Root) -> None:
    """Every existing root keeps working: any object under the prefix makes it exist."""
    s3root.put("exec/A/checkpoint-5/trainer_state.json", b'{"global_step": 5}')
    r = s3root.run("resolve")
    assert (r.code, r.out) == (0, ""), r
    r = s3root.run("init")
    assert r.code == 0 and "already exists" in r.err, r
    listed = s3root.s3.list_objects_v2(Bucket=s3root.bucket, Prefix=s3root.prefix + "/")["Contents"]
    assert f"{s3root.prefix}/{layout.ROOT_OBJECT}" not in [o["Key"] for o in listed]


@pytest.mark.parametrize("save", ["pub", "pub/x", "tomb", "man", "man/x", "exec", layout.ROOT_OBJECT])
def test_publish_refuses_a_reserved_save(s3root: Root, save: str) -> None:
    s3root.put(f"{save}/obj" if save != layout.ROOT_OBJECT else save, b"x")
    r = s3root.run("publish", f"{s3root.url}/{save}", "5")
    assert r.code == 1 and r.err.startswith(f"publish: save {s3root.url}/{save}: never a save"), r
    assert s3root.entries() == [] or save.startswith("pub")


def test_a_planted_tombstone_for_pub_removes_nothing(s3root: Root) -> None:
    s3root.put("exec/A/checkpoint-5/w", b"w")
    s3root.put("exec/A/checkpoint-9/w", b"w")
    for step in (5, 9):
        r = s3root.run("publish", "-epoch", "1", f"{s3root.url}/exec/A/checkpoint-{step}", str(step))
        assert r.code == 0, r
    s3root.put(f"tomb/{layout.tomb_name('pub')}")
    before = s3root.keys()
    r = s3root.run("prune", "-keep", "1")
    assert r.code == 1 and "not a tombstone" in r.err and "never a save" in r.err, r
    assert s3root.keys() == before
