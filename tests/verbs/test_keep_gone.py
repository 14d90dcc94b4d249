"""Retention agrees with resolve (issue #31, "-keep counts entries whose saves are gone"; addendum 15).

``-keep N`` (and ``-keep-every``, ``-keep-within``, ``-mirror-keep``, ``run -keep``) keep the N newest
publications whose saves exist; an entry whose save was deleted by hand counts for nothing, so no prune
removes the save ``resolve`` answered with just before it.  When every save looks gone (an unmounted
filesystem, an exec/ that is not there, a store that cannot tell) a prune removes nothing and says why.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import FileError
from publish.rules.redact import shown
from publish.stores.posix import PosixStore
from tests.conftest import base_env, command, need, run_cli
from tests.support.fault_proxy import FaultProxy, Respond
from tests.support.s3roots import Root
from tests.support.servers import S3Server, Weed

#: A hostile attempt folder: a leading dash, a newline, a non-ASCII letter.
ODD = "-a\nä"


def publish(root: Path, save: Path, step: int, epoch: int = 0) -> str:
    """Publish ``save`` (made here as an HF save) with the command; its entry name."""
    save.mkdir(parents=True, exist_ok=True)
    (save / "model.safetensors").write_bytes(b"w" * step)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", str(epoch), str(save), str(step))
    assert r.code == 0, r
    return layout.name(epoch, step, save.relative_to(root).as_posix())


def resolved(root: Path | Root) -> str:
    r = root.run("resolve") if isinstance(root, Root) else run_cli("resolve", "-checkpoint", str(root))
    assert r.code == 0, r
    return r.out


def pub(root: Path) -> set[str]:
    return set(os.listdir(root / "pub"))


# ------------------------------------------------------------------------------------------------- POSIX


def test_run_keep_1_keeps_the_save_it_resumed_from(root: Path) -> None:
    """The issue's reproduction: two saves published, the newer deleted by hand; ``run -keep 1`` resumes
    from the older one and its prune keeps it, so the next resolve still answers it."""
    older = root / "exec/a/checkpoint-1"
    publish(root, older, 1)
    publish(root, root / "exec/a/checkpoint-2", 2)
    shutil.rmtree(root / "exec/a/checkpoint-2")
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "b", "-keep", "1",
        "--", "true", env=base_env(),
    )  # fmt: skip
    assert r.code == 0, r
    assert f"run: resuming from {older}" in r.err, r.err
    assert f"removed {older}" not in r.out, r.out
    assert (older / "model.safetensors").is_file()
    assert resolved(root) == f"{older}\n"


def test_prune_keep_2_when_the_two_newest_saves_are_gone(root: Path) -> None:
    """The issue's second reproduction, in a hostile attempt folder: the two newest saves deleted by hand;
    ``prune -keep 2`` keeps the two newest that exist.  The entries naming the gone saves are left (they
    count for nothing), and go with the oldest once two newer saves exist."""
    saves = root / "exec" / ODD
    names = [publish(root, saves / f"checkpoint-{s}", s) for s in (1, 2, 3, 4)]
    for s in (3, 4):
        shutil.rmtree(saves / f"checkpoint-{s}")
    before = resolved(root)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2")
    assert (r.code, r.out) == (0, ""), r
    assert (saves / "checkpoint-1").is_dir() and (saves / "checkpoint-2").is_dir()
    assert resolved(root) == before
    assert pub(root) == set(names)  # nothing removed: the gone ones are left, the others kept
    later = [publish(root, saves / f"checkpoint-{s}", s) for s in (5, 6)]
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2")
    assert r.code == 0, r
    assert pub(root) == set(later)
    assert not (saves / "checkpoint-1").exists() and not (saves / "checkpoint-2").exists()
    assert resolved(root) == shown(f"{saves}/checkpoint-6") + "\n"


def test_prune_keeps_the_save_resolve_verify_answers_when_a_newer_one_is_damaged(root: Path) -> None:
    """-keep meets -verify: the newest save was damaged after its publication (a file truncated, as a
    trainer rewriting its last save in place and killed leaves it), so ``resolve -verify`` passes it over
    and answers the one before.  ``prune -keep 1`` (and ``run -keep 1``) must keep that one: the damaged
    save counts for nothing and stays in place, said on stderr; ``status -keep 1`` shows the same.  (On the
    code before, the damaged save counted: -keep 1 removed the only save -verify would answer, and the next
    job's ``resolve -verify`` answered nothing.)"""
    older = root / "exec/a/checkpoint-1"
    newer = root / "exec/a/checkpoint-2"
    publish(root, older, 1)
    name = publish(root, newer, 2)
    (newer / "model.safetensors").write_bytes(b"w")  # truncated: 1 byte where the manifest says 2
    r = run_cli("resolve", "-checkpoint", str(root), "-verify")
    assert (r.code, r.out) == (0, f"{older}\n"), r
    plan = json.loads(run_cli("status", "-checkpoint", str(root), "-keep", "1", "-json").out)["prune"]
    assert (plan["entries"], plan["lines"]) == ([], []), plan
    assert any("counted for nothing" in note for note in plan["notes"]), plan
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert (r.code, r.out) == (0, ""), r
    assert f"{root}/pub/{name}: {newer}/model.safetensors: " in r.err, r.err
    assert "counted for nothing (resolve -verify passes it over), left in place" in r.err, r.err
    assert (older / "model.safetensors").is_file() and newer.is_dir()
    r = run_cli("resolve", "-checkpoint", str(root), "-verify")
    assert (r.code, r.out) == (0, f"{older}\n"), r
    publish(root, root / "exec/a/checkpoint-3", 3)  # a whole newer save: now both older ones may go
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 0, r
    assert not older.exists() and not newer.exists()
    assert resolved(root) == f"{root}/exec/a/checkpoint-3\n"


def test_keep_every_counts_only_saves_that_exist(root: Path) -> None:
    """``-keep 1 -keep-every 10``: the newest save (step 2) deleted by hand, step 1 is no milestone; it is
    the newest save that exists, and stays."""
    publish(root, root / "exec/a/checkpoint-1", 1)
    publish(root, root / "exec/a/checkpoint-2", 2)
    shutil.rmtree(root / "exec/a/checkpoint-2")
    before = resolved(root)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-keep-every", "10")
    assert (r.code, r.out) == (0, ""), r
    assert resolved(root) == before == f"{root}/exec/a/checkpoint-1\n"


def test_keep_within_counts_only_saves_that_exist(root: Path) -> None:
    """``-keep 1 -keep-within 1h``: the newest entry, made now, names a save deleted by hand; the older save,
    published three hours ago, is the one resolve answers, and stays."""
    first = publish(root, root / "exec/a/checkpoint-1", 1)
    publish(root, root / "exec/a/checkpoint-2", 2)
    then = time.time() - 3 * 3600
    os.utime(root / "pub" / first, (then, then))
    shutil.rmtree(root / "exec/a/checkpoint-2")
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-keep-within", "1h")
    assert (r.code, r.out) == (0, ""), r
    assert resolved(root) == f"{root}/exec/a/checkpoint-1\n"


def test_status_shows_what_prune_would_keep(root: Path) -> None:
    """``status -keep 1``'s plan is prune's: the newest save that exists is not among what it would remove."""
    old = publish(root, root / "exec/a/checkpoint-1", 1)
    keep = publish(root, root / "exec/a/checkpoint-2", 2)
    publish(root, root / "exec/a/checkpoint-3", 3)
    shutil.rmtree(root / "exec/a/checkpoint-3")
    r = run_cli("status", "-checkpoint", str(root), "-keep", "1", "-json")
    assert r.code == 0, r
    plan = json.loads(r.out)["prune"]
    assert (plan["entries"], plan["lines"], plan["refused"]) == (
        [old],
        [f"would remove {root}/exec/a/checkpoint-1"],
        None,
    )
    assert keep in pub(root)
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-dry-run")
    assert dry.out.splitlines() == plan["lines"]


def gone_exec(root: Path, how: str) -> None:
    """Make every save look gone as an unmounted filesystem does."""
    if how == "missing":
        os.rename(root / "exec", root / "elsewhere")
    else:  # an empty mount point where the filesystem was
        os.rename(root / "exec", root / "elsewhere")
        (root / "exec").mkdir()


@pytest.mark.parametrize("how", ["missing", "empty mount point"])
def test_every_save_gone_removes_nothing_and_says_why(root: Path, how: str) -> None:
    """exec/ unmounted: every save looks gone, so prune (and -dry-run) removes nothing, not
    even what an interrupted prune left in tomb/, and exits 1 naming why; status says the same."""
    names = [publish(root, root / "exec/a" / f"checkpoint-{s}", s) for s in (1, 2, 3)]
    tomb = layout.tomb_name("exec/a/checkpoint-0")
    (root / "tomb").mkdir()
    (root / "tomb" / tomb).touch()
    gone_exec(root, how)
    want = (
        f"publish: prune: {root}/pub: every one of its 3 entries names a save that does not exist (the "
        f"newest {root}/exec/a/checkpoint-3): removed nothing"
    )
    for args in (["-keep", "1"], ["-keep", "1", "-dry-run"], ["-keep", "2", "-keep-every", "1"]):
        r = run_cli("prune", "-checkpoint", str(root), *args)
        assert (r.code, r.out) == (1, ""), r
        assert r.err.startswith(want) and "unmounted" in r.err, r.err
        assert pub(root) == set(names) and os.listdir(root / "tomb") == [tomb]
    r = run_cli("status", "-checkpoint", str(root), "-keep", "1", "-json")
    assert r.code == 0, r
    plan = json.loads(r.out)["prune"]
    assert (plan["entries"], plan["lines"]) == ([], [])
    assert ("publish: " + plan["refused"]).startswith(want)


def test_a_store_that_cannot_tell_makes_prune_remove_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error asking whether a save exists is "I cannot tell", never "gone": prune fails naming it and
    removes nothing."""
    need(command() is None, "makes the store fail in the in-process command")
    names = [publish(root, root / "exec/a" / f"checkpoint-{s}", s) for s in (1, 2, 3)]
    holds = PosixStore.holds

    def failing(self: PosixStore, dl: Deadline, path: str) -> bool:
        if path.startswith("exec/"):
            raise FileError(self.location(path), OSError(errno.EIO, os.strerror(errno.EIO)), op="stat")
        return holds(self, dl, path)

    monkeypatch.setattr(PosixStore, "holds", failing)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert (r.code, r.out) == (1, ""), r
    assert r.err.startswith("publish: ") and f"{root}/exec/a/checkpoint-3" in r.err, r.err
    assert pub(root) == set(names) and all((root / f"exec/a/checkpoint-{s}").is_dir() for s in (1, 2, 3))


def test_the_checks_stop_at_the_last_kept_save(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune of 2000 entries asks only about the newest ones down to the last it keeps (and once about
    the folder holding the gone ones); with exec/ unmounted, three questions settle all 2000."""
    need(command() is None, "counts the checks of the in-process command")
    n = 2000
    for s in range(n):
        name = layout.name(0, s, f"exec/A/checkpoint-{s}")
        (root / "pub").mkdir(exist_ok=True)
        (root / "pub" / name).touch()
    for s in (n - 4, n - 5):
        (root / f"exec/A/checkpoint-{s}").mkdir(parents=True)
    checked: list[str] = []
    holds = PosixStore.holds

    def counting(self: PosixStore, dl: Deadline, path: str) -> bool:
        checked.append(path)
        return holds(self, dl, path)

    monkeypatch.setattr(PosixStore, "holds", counting)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2", "-dry-run")
    assert r.code == 0, r
    assert checked[:6] == [
        f"exec/A/checkpoint-{n - 1}",
        "exec/A",
        f"exec/A/checkpoint-{n - 2}",
        f"exec/A/checkpoint-{n - 3}",
        f"exec/A/checkpoint-{n - 4}",
        f"exec/A/checkpoint-{n - 5}",
    ]
    shutil.rmtree(root / "exec")
    checked.clear()
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2")
    assert r.code == 1 and "removed nothing" in r.err, r
    assert checked == [f"exec/A/checkpoint-{n - 1}", "exec/A", "exec"]
    assert len(pub(root)) == n


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    saves=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 6), st.sampled_from(["a", ODD]), st.booleans()),
        min_size=1,
        max_size=8,
        unique_by=lambda t: (t[0], t[1], t[2]),
    ),
    keep=st.integers(1, 4),
)
def test_prune_never_removes_what_resolve_answers(saves: list[tuple[int, int, str, bool]], keep: int) -> None:
    """The user's promise, for any publications with any of their saves deleted by hand: after
    ``prune -keep N``, the save resolve answered before is still there and resolve answers it again, and
    the N newest saves that existed are all still there; when none existed, prune removed nothing."""
    base = Path(tempfile.mkdtemp(prefix="publish-keep-"))
    try:
        root = base / "root"
        made: list[tuple[tuple[int, int, str], Path]] = []
        for epoch, step, attempt, _ in saves:
            save = root / "exec" / attempt / f"e{epoch}" / f"checkpoint-{step}"
            made.append(((epoch, step, layout.name(epoch, step, save.relative_to(root).as_posix())), save))
            publish(root, save, step, epoch)
        for (_, _, _, deleted), (_, save) in zip(saves, made):
            if deleted:
                shutil.rmtree(save)
        existing = sorted(((k, s) for k, s in made if s.is_dir()), reverse=True)
        entries = pub(root)
        r0 = run_cli("resolve", "-checkpoint", str(root))
        r = run_cli("prune", "-checkpoint", str(root), "-keep", str(keep))
        if not existing:
            assert r0.code == 1
            assert (r.code, r.out) == (1, "") and "removed nothing" in r.err, r
            assert pub(root) == entries
            return
        assert r.code == 0, r
        assert r0.out == shown(str(existing[0][1])) + "\n"
        assert resolved(root) == r0.out
        for _, save in existing[:keep]:
            assert (save / "model.safetensors").is_file(), save
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- S3


@pytest.fixture
def s3root(s3_server: S3Server, tmp_path: Path) -> Root:
    return Root(s3_server, tmp_path)


def s3_publish(root: Root, step: int, attempt: str = "a") -> str:
    """A save of two objects and its entry, put by hand; the entry's name."""
    path = f"exec/{attempt}/checkpoint-{step}"
    root.put(f"{path}/model.safetensors", b"w")
    root.put(f"{path}/trainer_state.json", b"{}")
    name = layout.name(0, step, path)
    root.put(f"pub/{name}")
    return name


def s3_delete(root: Root, step: int, attempt: str = "a") -> None:
    for key in root.keys(f"exec/{attempt}/checkpoint-{step}/"):
        root.s3.delete_object(Bucket=root.bucket, Key=f"{root.prefix}/{key}")


@pytest.mark.s3
def test_s3_prune_keep_2_when_the_two_newest_saves_are_gone(s3root: Root) -> None:
    names = [s3_publish(s3root, s) for s in (1, 2, 3, 4)]
    s3root.put("exec/a/checkpoint-30/x")  # shares the prefix of a gone save
    for s in (3, 4):
        s3_delete(s3root, s)
    before = resolved(s3root)
    r = s3root.run("prune", "-keep", "2")
    assert (r.code, r.out) == (0, ""), r
    assert s3root.keys("exec/a/checkpoint-1/") and s3root.keys("exec/a/checkpoint-2/")
    assert set(s3root.entries()) == set(names)
    assert resolved(s3root) == before == f"{s3root.url}/exec/a/checkpoint-2\n"


@pytest.mark.s3
def test_s3_every_save_gone_removes_nothing(s3root: Root) -> None:
    names = [s3_publish(s3root, s) for s in (1, 2)]
    for s in (1, 2):
        s3_delete(s3root, s)
    r = s3root.run("prune", "-keep", "1")
    assert (r.code, r.out) == (1, ""), r
    assert r.err.startswith(f"publish: prune: {s3root.url}/pub: every one of its 2 entries names a save")
    assert set(s3root.entries()) == set(names)


@pytest.mark.s3
def test_s3_a_failing_list_of_exec_makes_prune_remove_nothing(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    """A LIST of exec/ answered 500 (every try): "I cannot tell", so prune removes nothing and fails."""
    root = Root(weed, tmp_path, endpoint=fault_proxy.endpoint)
    names = [s3_publish(root, s) for s in (1, 2, 3)]
    fault_proxy.add(
        Respond(500, "InternalError"),
        kind="LIST",
        match=lambda req: req.query.get("prefix", "").startswith(f"{root.prefix}/exec/"),
    )
    r = root.run("prune", "-keep", "1", "-timeout", "5s")
    assert (r.code, r.out) == (1, ""), r
    assert r.err.startswith("publish: ") and "InternalError" in r.err, r.err
    assert set(root.entries()) == set(names)
    assert all(root.keys(f"exec/a/checkpoint-{s}/") for s in (1, 2, 3))


@pytest.mark.s3
def test_s3_mirror_keep_counts_only_saves_that_exist(s3_server: S3Server, tmp_path: Path) -> None:
    """``prune -mirror URL -mirror-keep 1``: the mirror's newest save deleted by hand; the mirror keeps the
    one resolve answers there."""
    fast = tmp_path / "fast"
    fast.mkdir()
    mirror = Root(s3_server, tmp_path, init=False)
    for s in (1, 2):
        s3_publish(mirror, s)
    s3_delete(mirror, 2)
    before = resolved(mirror)
    r = run_cli(
        "prune", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds,
        "-keep", "1", "-mirror-keep", "1",
    )  # fmt: skip
    assert (r.code, r.out) == (0, ""), r
    assert resolved(mirror) == before == f"{mirror.url}/exec/a/checkpoint-1\n"
    assert mirror.keys("exec/a/checkpoint-1/")
