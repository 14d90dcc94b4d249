"""resolve never names a save that is not there: it passes over entries whose save is gone (POSIX, and S3 on
SeaweedFS and moto), fails when none is left, and its hint about unpublished saves never fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.stores.posix import PosixStore
from publish.stores.s3 import S3Store
from tests.conftest import command, need, run_cli
from tests.support.as_nobody import open_command, open_root  # noqa: F401  (fixtures)
from tests.support.fault_proxy import FaultProxy
from tests.support.s3roots import Root
from tests.support.servers import S3Server, Weed


def publish_entry(root: Path, step: int, path: str, epoch: int = 0) -> str:
    """Create the entry for ``path`` by hand (the save itself is the test's business); its name."""
    name = layout.name(epoch, step, path)
    (root / "pub").mkdir(exist_ok=True)
    (root / "pub" / name).touch()
    return name


def passed_over(where: str, name: str, save: str) -> str:
    return f"publish: {where}/pub/{name} names {where}/{save}, which does not exist: passed over\n"


# ------------------------------------------------------------------------------------------------- POSIX


def test_an_entry_whose_save_was_deleted_is_passed_over(root: Path) -> None:
    (root / "exec/A/checkpoint-10").mkdir(parents=True)
    publish_entry(root, 10, "exec/A/checkpoint-10")
    gone = publish_entry(root, 20, "exec/A/checkpoint-20")  # rotated away by the framework
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, f"{root}/exec/A/checkpoint-10\n")
    assert r.err == passed_over(str(root), gone, "exec/A/checkpoint-20")


def test_every_missing_save_is_passed_over_newest_first(root: Path) -> None:
    (root / "exec/A/checkpoint-1").mkdir(parents=True)
    publish_entry(root, 1, "exec/A/checkpoint-1")
    gone = [publish_entry(root, s, f"exec/A/checkpoint-{s}") for s in (2, 3)]
    gone.append(publish_entry(root, 3, "exec/B/checkpoint-3", epoch=1))  # a later epoch is newer
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, f"{root}/exec/A/checkpoint-1\n")
    assert r.err == (
        passed_over(str(root), gone[2], "exec/B/checkpoint-3")
        + passed_over(str(root), gone[1], "exec/A/checkpoint-3")
        + passed_over(str(root), gone[0], "exec/A/checkpoint-2")
    )


def test_entries_but_no_existing_save_is_exit_1(root: Path) -> None:
    publish_entry(root, 1, "exec/A/checkpoint-1")
    publish_entry(root, 2, "exec/A/checkpoint-2")
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (1, "")
    assert r.err.endswith(f"publish: {root}/pub: none of its 2 entries names a save that exists\n")


def test_a_save_that_is_a_file_or_a_link_exists(root: Path) -> None:
    (root / "exec/A").mkdir(parents=True)
    (root / "exec/A/model-5.ckpt").write_bytes(b"weights")
    publish_entry(root, 5, "exec/A/model-5.ckpt")
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/model-5.ckpt\n"
    os.symlink("elsewhere", root / "exec/A/checkpoint-6")  # lstat: the link itself is there
    publish_entry(root, 6, "exec/A/checkpoint-6")
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-6\n"


def test_the_newest_existing_save_costs_one_check(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need(command() is None, "counts the checks of the in-process command")
    n = 2000
    (root / f"exec/A/checkpoint-{n - 1}").mkdir(parents=True)
    for s in range(n):
        publish_entry(root, s, f"exec/A/checkpoint-{s}")
    checked: list[str] = []
    holds = PosixStore.holds

    def counting(self: PosixStore, dl: Deadline, path: str) -> bool:
        checked.append(path)
        return holds(self, dl, path)

    monkeypatch.setattr(PosixStore, "holds", counting)
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out, r.err) == (0, f"{root}/exec/A/checkpoint-{n - 1}\n", "")
    assert checked == [f"exec/A/checkpoint-{n - 1}"]


def test_a_bad_entry_name_is_still_an_error_before_any_check(root: Path) -> None:
    (root / "exec/A/checkpoint-1").mkdir(parents=True)
    publish_entry(root, 1, "exec/A/checkpoint-1")
    (root / "pub" / "stray").touch()
    r = run_cli("resolve", "-checkpoint", str(root))
    assert r.code == 1 and f"{root}/pub/stray: not a publication entry" in r.err


# ---------------------------------------------------------------------------------- the hint is advice


def test_a_failing_hint_changes_neither_answer_nor_exit_code(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(command() is None, "makes exec/ unreadable in the in-process command")
    (root / "exec/A/checkpoint-1").mkdir(parents=True)

    def unreadable(self: PosixStore, dl: Deadline, path: str, *unexamined: object) -> list[str]:
        raise Failure(f"{self.location(path)}: Permission denied")

    monkeypatch.setattr(PosixStore, "list_folders", unreadable)
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, "")
    assert r.err == (
        f"publish: no publication; could not look for unpublished saves: {root}/exec: Permission denied\n"
    )


def test_an_unreadable_attempt_as_an_unprivileged_user(
    open_root: Path,  # noqa: F811
    open_command: tuple[list[str], Path],  # noqa: F811
) -> None:
    """A save folder the user cannot list only makes the hint say so, for an unprivileged user too; and that
    user runs the command from wherever the checkout is (issue #32: a clone in a 0700 folder failed with
    "No module named publish")."""
    need(shutil.which("setpriv") is not None and os.geteuid() == 0, "setpriv, run as root")
    (open_root / "pub").mkdir(mode=0o755)
    (open_root / "exec/A/checkpoint-1").mkdir(parents=True)
    (open_root / "exec").chmod(0o755)
    (open_root / "exec/A").chmod(0o000)  # nobody cannot list it
    cmd, folder = open_command
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "PYTHONPATH": str(folder)}
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            *cmd,
            "resolve",
            "-checkpoint",
            str(open_root),
        ],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert proc.stderr.startswith("publish: no publication; could not look for unpublished saves: ")
    assert f"{open_root}/exec/A" in proc.stderr


# ---------------------------------------------------------------------------------------------------- S3


@pytest.fixture
def s3root(s3_server: S3Server, tmp_path: Path) -> Root:
    return Root(s3_server, tmp_path)


def entry_on(root: Root, step: int, path: str) -> str:
    name = layout.name(0, step, path)
    root.put(f"pub/{name}")
    return name


@pytest.mark.s3
def test_s3_an_entry_whose_save_was_deleted_is_passed_over(s3root: Root) -> None:
    s3root.put("exec/A/checkpoint-10/model.bin")
    entry_on(s3root, 10, "exec/A/checkpoint-10")
    s3root.put("exec/A/checkpoint-100/model.bin")  # a sibling sharing the missing save's prefix
    gone = entry_on(s3root, 20, "exec/A/checkpoint-20")
    r = s3root.run("resolve")
    assert (r.code, r.out) == (0, f"{s3root.url}/exec/A/checkpoint-10\n")
    assert r.err == passed_over(s3root.url, gone, "exec/A/checkpoint-20")


@pytest.mark.s3
def test_s3_entries_but_no_existing_save_is_exit_1(s3root: Root) -> None:
    entry_on(s3root, 1, "exec/A/checkpoint-1")
    r = s3root.run("resolve")
    assert (r.code, r.out) == (1, "")
    assert r.err.endswith(f"publish: {s3root.url}/pub: none of its 1 entries names a save that exists\n")


# What is at the root, and whether the save exec/A/c is there.
LAYOUTS = [
    (["exec/A/c/model.bin"], True),
    (["exec/A/c"], True),  # a save that is one object
    (["exec/A/c", "exec/A/c-old/x"], True),  # c-old/x sorts before c/ (and after c)
    (["exec/A/c-old/x", "exec/A/c/model.bin"], True),
    (["exec/A/c.tmp"], False),  # sorts before c/
    (["exec/A/c0/x", "exec/A/cc"], False),  # sort after c/
    (["exec/A/b/x", "exec/A/d/x"], False),
    ([], False),
]


@pytest.mark.s3
@pytest.mark.parametrize(("objects", "there"), LAYOUTS)
def test_s3_holds_whatever_else_shares_the_prefix(s3root: Root, objects: list[str], there: bool) -> None:
    for key in objects:
        s3root.put(key, b"x")
    store = S3Store(s3root.bucket, s3root.prefix, s3root.server.credentials(), proxy=None, env={})
    assert store.holds(Deadline(30), "exec/A/c") is there


def proxied_store(weed: Weed, fault_proxy: FaultProxy, prefix: str) -> S3Store:
    store = S3Store(
        weed.shared_bucket(), prefix, weed.credentials(endpoint=fault_proxy.endpoint), proxy=None, env={}
    )
    return store


@pytest.mark.s3
@pytest.mark.s3
@pytest.mark.parametrize(
    ("objects", "lists", "heads"),
    [
        (["exec/A/c/model.bin"], 1, 0),  # a folder save: one LIST
        (["exec/A/c"], 1, 0),  # an object save: the same LIST
        ([], 1, 0),  # nothing at all: the same LIST
        (["exec/A/c0/x"], 2, 1),  # only a sibling: the folder and the object are asked for
    ],
)
def test_s3_the_existence_check_costs_one_list_in_the_usual_cases(
    weed: Weed, fault_proxy: FaultProxy, objects: list[str], lists: int, heads: int
) -> None:
    prefix = "run-" + uuid.uuid4().hex[:10]
    s3 = weed.client()
    for key in objects:
        s3.put_object(Bucket=weed.shared_bucket(), Key=f"{prefix}/{key}", Body=b"x")
    store = proxied_store(weed, fault_proxy, prefix)
    fault_proxy.reset()
    store.holds(Deadline(30), "exec/A/c")
    assert (fault_proxy.count("LIST"), fault_proxy.count("HEAD")) == (lists, heads)
    assert fault_proxy.count() == lists + heads
    first = fault_proxy.seen[0]
    assert (first.query["prefix"], first.query["max-keys"]) == (f"{prefix}/exec/A/c", "1")


@pytest.mark.s3
def test_s3_resolve_of_a_passed_over_entry_costs_its_check(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    root = Root(weed, tmp_path, endpoint=fault_proxy.endpoint)
    root.put("exec/A/checkpoint-1/model.bin")
    entry_on(root, 1, "exec/A/checkpoint-1")
    entry_on(root, 2, "exec/A/checkpoint-2")
    fault_proxy.reset()
    r = root.run("resolve")
    assert (r.code, r.out) == (0, f"{root.url}/exec/A/checkpoint-1\n")
    # pub/, then checkpoint-2 (nothing has even its prefix), then checkpoint-1.
    assert [s.query.get("prefix") for s in fault_proxy.seen] == [
        f"{root.prefix}/pub/",
        f"{root.prefix}/exec/A/checkpoint-2",
        f"{root.prefix}/exec/A/checkpoint-1",
    ]
