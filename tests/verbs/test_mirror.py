"""Two tiers: a POSIX root mirrored to S3 (run and watch -mirror, -mirror-keep, resolve and status -mirror).

The fast root is a temporary directory; the mirror an s3:// root on SeaweedFS or moto.  The watch and run
processes are real ones (the binary when PUBLISH_BIN names it)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout
from tests.conftest import REPO, Lines, Watch, run_cli
from tests.support.binaries import catches_sigterm
from tests.support.s3roots import Root
from tests.support.trainer_saves import hf_save

pytestmark = pytest.mark.s3


class Tiers:
    """A POSIX root with its saves under exec/<attempt>/, and an S3 mirror."""

    def __init__(self, server: Any, tmp: Path, endpoint: str | None = None, attempt: str = "a") -> None:
        self.fast = tmp / "fast"
        self.attempt = attempt
        self.saves = self.fast / "exec" / attempt
        self.saves.mkdir(parents=True)
        self.mirror = Root(server, tmp, endpoint=endpoint, init=False)

    def flags(self, *more: str) -> list[str]:
        return ["-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds, *more]

    def save(self, step: int, files: int = 2, size: int = 1000) -> Path:
        folder = hf_save(self.saves, step)
        for i in range(files):
            (folder / f"shard-{i}.bin").write_bytes(os.urandom(size))
        return folder

    def watch_once(self, *more: str, timeout: float = 60) -> tuple[int, str, list[str]]:
        """A watch stopped at once: its last scan publishes what is whole, then the uploads finish."""
        w = Watch(*self.flags("-framework", "hf", "-interval", "100ms", "-attempt", "a", *more))
        _started(w)
        time.sleep(0.2)  # its first scan
        code, err = w.stop(timeout=timeout)
        return code, err, list(w.seen) + _drain(w)

    def fast_entries(self) -> list[str]:
        pub = self.fast / "pub"
        return sorted(os.listdir(pub)) if pub.exists() else []

    def whole_on_mirror(self, entry: str) -> bool:
        """Every file of the fast root's save of ``entry`` is on the mirror, with its bytes."""
        path = layout.parse(entry).path
        keys = set(self.mirror.keys(path + "/"))
        for f in (self.fast / path).rglob("*"):
            if f.is_file():
                key = f"{path}/{f.relative_to(self.fast / path).as_posix()}"
                if key not in keys:
                    return False
                body = self.mirror.s3.get_object(Bucket=self.mirror.bucket, Key=f"{self.mirror.prefix}/{key}")
                if body["Body"].read() != f.read_bytes():
                    return False
        return True


def _started(w: Watch) -> None:
    """Wait until the process catches SIGTERM (a signal before that would end it unhandled)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and w.proc.poll() is None:
        if catches_sigterm(w.proc.pid):
            return
        time.sleep(0.02)
    raise AssertionError("the watch never came to catch SIGTERM")


def _drain(w: Watch) -> list[str]:
    lines = []
    while not w.lines.empty():
        lines.append(w.lines.get())
    return lines


def test_usage_errors_name_the_flag(tmp_path: Path) -> None:
    fast = str(tmp_path)
    cases = [
        (["run", "-checkpoint", fast, "-framework", "hf", "-mirror-keep", "2", "--", "true"], "-mirror-keep"),
        (["prune", "-checkpoint", fast, "-mirror-keep", "2"], "-mirror-keep"),
        (["prune", "-checkpoint", fast, "-mirror", fast + "/m"], "-mirror"),
        (["prune", "-checkpoint", fast, "-mirror", "s3://bucket/p"], "-creds"),
        (
            ["watch", "-checkpoint", fast, "-framework", "hf", "-attempt", "a", "-mirror-keep", "2"],
            "-mirror-keep",
        ),
        (["resolve", "-checkpoint", fast, "-mirror", fast + "/m"], "-mirror"),
        (["resolve", "-checkpoint", fast, "-mirror", fast], "-mirror"),
        (["status", "-checkpoint", fast, "-mirror", "/elsewhere"], "-mirror"),
        (["resolve", "-checkpoint", fast, "-mirror", "s3://bucket/p"], "-creds"),
        (["resolve", "-checkpoint", fast, "-mirror", ""], "-mirror"),
        (["resolve", "-checkpoint", fast, "-mirror", "s3://b/p", "-creds", "file:/x"], "-mirror"),
        (
            ["resolve", "-checkpoint", "s3://bucket/p", "-mirror", "s3://bucket/p/m", "-creds", "file:/x"],
            "-mirror",
        ),
        (
            ["resolve", "-checkpoint", "s3://bucket/p", "-mirror", "s3://bucket/p", "-creds", "file:/x"],
            "-mirror",
        ),
        (
            ["resolve", "-checkpoint", "s3://bucket/p", "-mirror", "s3://other/q", "-creds", "file:/x"],
            "-mirror",
        ),
    ]
    for argv, flag in cases:
        r = run_cli(*argv)
        assert r.code == 2, (argv, r.err)
        first = r.err.splitlines()[0]
        assert flag in first, (argv, first)
    # without -mirror, -creds is still refused for a POSIX root
    r = run_cli("resolve", "-checkpoint", fast, "-creds", "file:/x")
    assert r.code == 2 and "-creds applies only to s3://" in r.err


def test_flags_are_in_synopses_help_and_completion() -> None:
    for verb, flags in (
        ("run", ["-mirror", "-mirror-keep"]),
        ("watch", ["-mirror", "-mirror-keep"]),
        ("resolve", ["-mirror"]),
        ("status", ["-mirror"]),
        ("prune", ["-mirror", "-mirror-keep"]),
    ):
        r = run_cli("help", verb)
        assert r.code == 0
        synopsis = r.out.splitlines()[0]
        for flag in flags:
            assert f"[{flag} " in synopsis, (verb, synopsis)
            assert f"\n  {flag} " in r.out, (verb, flag)
    bash = run_cli("completion", "bash").out
    assert "-mirror-keep" in bash and "-mirror " in bash


def test_watch_mirrors_each_save_entry_last(s3_server: Any, tmp_path: Path) -> None:
    t = Tiers(s3_server, tmp_path)
    for step in (10, 20):
        t.save(step, files=3)
    code, err, out = t.watch_once()
    assert code == 0, err
    entries = t.fast_entries()
    assert len(entries) == 2
    assert sorted(t.mirror.entries()) == entries
    for entry in entries:
        assert t.whole_on_mirror(entry)
        assert any(line.startswith(f"published {entry} ") and t.mirror.url in line for line in out), out
    # the next watch finds nothing pending and uploads nothing
    code, err, out = t.watch_once()
    assert code == 0 and not [line for line in out if t.mirror.url in line], out


@pytest.mark.parametrize("attempt", ["pub", "man", "a +%~b"])
def test_hostile_names_are_mirrored_as_they_are(s3_server: Any, tmp_path: Path, attempt: str) -> None:
    """An attempt named like the root's own folders, or holding + % ~ and a space: the same keys (a control
    character, which an attempt may not hold, is in the names of files: tests/verbs/test_bytes_names.py)."""
    t = Tiers(s3_server, tmp_path, attempt=attempt)
    t.save(3)
    w = Watch(*t.flags("-framework", "hf", "-interval", "100ms", "-attempt", attempt))
    _started(w)
    time.sleep(0.2)
    code, err = w.stop(timeout=60)
    assert code == 0, err
    entries = t.fast_entries()
    assert len(entries) == 1 and t.mirror.entries() == entries
    assert t.whole_on_mirror(entries[0])
    r = run_cli("resolve", *t.flags())
    assert r.code == 0, r.err


def test_the_mirror_entry_is_created_after_every_object(weed: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """In-process: at the moment the mirror's entry is created, every object of the save is there."""
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    from publish.ops import Say
    from publish.ops.tiers import Tiers as Pair
    from publish.rules.deadline import Deadline
    from publish.rules.roots import S3Root
    from publish.stores import open as open_store
    from publish.stores.posix import PosixStore

    t = Tiers(weed, tmp_path)
    folder = t.save(5, files=4, size=50_000)
    path = folder.relative_to(t.fast).as_posix()
    (t.fast / "pub").mkdir()
    name = layout.name(1, 5, path)
    (t.fast / "pub" / name).touch()
    mirror = open_store(
        S3Root(t.mirror.bucket, t.mirror.prefix), env={}, deadline=time.monotonic() + 30, creds=t.mirror.creds
    ).store
    seen: list[list[str]] = []
    create = mirror.create_entry

    def watched(dl: Deadline, entry: str) -> bool:
        seen.append(t.mirror.keys(path + "/") + t.mirror.keys("man/"))
        return create(dl, entry)

    monkeypatch.setattr(mirror, "create_entry", watched)
    out: list[str] = []
    pair = Pair(PosixStore(str(t.fast)), mirror, Say(out.append, out.append), 30.0)
    assert pair.sync() == 1
    files = sorted(f"{path}/{f.name}" for f in folder.iterdir())
    assert seen == [[*files, f"man/{name}"]]
    assert t.mirror.entries() == [name]
    from publish.rules import manifest

    got = t.mirror.s3.get_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/man/{name}")["Body"].read()
    rows = manifest.decode(name, got)
    assert [(r[0], r[1]) for r in rows] == sorted((f.name, f.stat().st_size) for f in folder.iterdir())


def test_a_failed_upload_leaves_no_mirror_entry_and_the_fast_prune_keeps_it(
    weed: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """run -keep 1 -mirror: while the uploads fail the fast root keeps every pending save; once they work,
    every save is mirrored and the fast root is pruned to one."""
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    import publish.stores.transfer as transfer
    from publish.rules.errors import Failure

    t = Tiers(weed, tmp_path)
    for step in (1, 2, 3):
        t.save(step)

    def broken(*args: Any, **kw: Any) -> Any:
        raise Failure("the store is down")

    monkeypatch.setattr(transfer, "upload_save", broken)
    argv = [
        "run",
        *t.flags("-framework", "hf", "-interval", "100ms", "-attempt", "a", "-keep", "1"),
        "--",
        "true",
    ]
    r = run_cli(*argv)
    assert r.code == 1, r.err  # a fault of publish: the uploads failed
    assert "the store is down" in r.err
    assert len(t.fast_entries()) == 3  # pending: none pruned
    assert all((t.saves / f"checkpoint-{s}").is_dir() for s in (1, 2, 3))
    assert t.mirror.entries() == []
    monkeypatch.undo()
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    r = run_cli(*[a if a != "a" else "b" for a in argv])  # the next dispatch: another attempt
    assert r.code == 0, r.err
    assert len(t.mirror.entries()) == 3
    assert all(t.whole_on_mirror(e) for e in t.mirror.entries())
    assert len(t.fast_entries()) == 1
    assert not (t.saves / "checkpoint-1").exists()


def test_a_save_changed_since_its_publication_is_not_mirrored(s3_server: Any, tmp_path: Path) -> None:
    """The root's manifest is the upload's expectation: a byte flipped after publication stops the upload,
    names the file, and leaves no mirror entry; the watch exits 1."""
    t = Tiers(s3_server, tmp_path)
    folder = t.save(1, files=2, size=5000)
    r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "0", str(folder), "1")  # as watch would
    assert r.code == 0, r.err
    data = bytearray((folder / "shard-1.bin").read_bytes())
    data[100] ^= 1
    (folder / "shard-1.bin").write_bytes(bytes(data))
    code, err, _ = t.watch_once()
    assert code == 1
    assert "shard-1.bin" in err and "not mirrored" in err, err
    assert t.mirror.entries() == []


@pytest.mark.parametrize("kind", ["link to a file outside", "link to a file inside", "fifo"])
def test_a_save_holding_a_link_is_published_not_mirrored(s3_server: Any, tmp_path: Path, kind: str) -> None:
    """The root's manifest leaves a link or a FIFO inside a save out; the upload refuses the save, naming the
    thing, never reads a link's target, and leaves no mirror entry; the save stays pending (kept by -keep)."""
    t = Tiers(s3_server, tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the save's")
    folder = t.save(1)
    odd = folder / "odd"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to(outside if kind.endswith("outside") else folder / "shard-0.bin")
    t.save(2)
    r = run_cli("run", *t.flags("-framework", "hf", "-keep", "1", "-attempt", "a", "--", "true"))
    code, err = r.code, r.err
    assert code == 1, err
    entries = t.fast_entries()
    assert [layout.parse(e).step for e in entries] == [1, 2]  # the pending save 1 is kept
    assert "odd" in err and "not mirrored" in err, err
    assert err.count("odd") <= 2, err  # said once, not on every pass
    mirrored = t.mirror.entries()
    assert [layout.parse(e).step for e in mirrored] == [2]
    assert not [k for k in t.mirror.keys("") if k.endswith("/odd")]


def test_without_mirror_the_same_prune_removes_them(weed: Any, tmp_path: Path) -> None:
    """The counterpart: the fast root's prune keeps pending saves only because of -mirror."""
    t = Tiers(weed, tmp_path)
    for step in (1, 2, 3):
        t.save(step)
    r = run_cli(
        "run", "-checkpoint", str(t.fast), "-framework", "hf", "-interval", "100ms", "-attempt", "a",
        "-keep", "1", "--", "true",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert len(t.fast_entries()) == 1


def test_prune_mirror_keeps_what_is_not_mirrored(weed: Any, tmp_path: Path) -> None:
    """publish prune -mirror: the fast root's prune keeps every save the mirror has no entry for (as run -keep
    does), -dry-run says so and removes nothing, and the same prune without -mirror removes them."""
    t = Tiers(weed, tmp_path)
    for step in (1, 2):
        t.save(step)
    code, err, _ = t.watch_once()  # 1 and 2 mirrored
    assert code == 0, err
    for step in (3, 4, 5):  # published on the fast root only, as a run cut off before its uploads leaves them
        r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "0", str(t.save(step)), str(step))
        assert r.code == 0, r.err
    r = run_cli("prune", *t.flags("-keep", "1", "-dry-run"))
    assert r.code == 0, r.err
    assert [line.split("/")[-1] for line in r.out.splitlines()] == ["checkpoint-1", "checkpoint-2"], r.out
    assert len(t.fast_entries()) == 5
    r = run_cli("prune", *t.flags("-keep", "1"))
    assert r.code == 0, r.err
    assert [layout.parse(e).step for e in t.fast_entries()] == [3, 4, 5]  # pending: kept
    assert not (t.saves / "checkpoint-1").exists() and (t.saves / "checkpoint-3").is_dir()
    assert [layout.parse(e).step for e in t.mirror.entries()] == [1, 2]  # the mirror untouched
    r = run_cli("prune", "-checkpoint", str(t.fast), "-keep", "1")
    assert r.code == 0, r.err
    assert [layout.parse(e).step for e in t.fast_entries()] == [5]  # the counterpart


def test_prune_mirror_keep_prunes_the_mirror_too(s3_server: Any, tmp_path: Path) -> None:
    """publish prune -mirror -mirror-keep M: the mirror pruned to its latest M, through its tombstones; a
    save older than the mirror's latest M is no longer pending, so -keep removes it from the root."""
    t = Tiers(s3_server, tmp_path)
    for step in (1, 2, 3):
        t.save(step)
    code, err, _ = t.watch_once()
    assert code == 0, err
    r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "0", str(t.save(4)), "4")
    assert r.code == 0, r.err
    r = run_cli("prune", *t.flags("-keep", "1", "-mirror-keep", "2", "-dry-run"))
    assert r.code == 0, r.err
    assert len(t.mirror.entries()) == 3 and len(t.fast_entries()) == 4
    assert sum(f"{t.mirror.url}/exec/a/checkpoint-" in line for line in r.out.splitlines()) == 1, r.out
    r = run_cli("prune", *t.flags("-keep", "1", "-mirror-keep", "2"))
    assert r.code == 0, r.err
    assert [layout.parse(e).step for e in t.mirror.entries()] == [2, 3]
    assert not t.mirror.keys("exec/a/checkpoint-1/") and not t.mirror.keys("tomb/")
    assert [layout.parse(e).step for e in t.fast_entries()] == [4]  # 4 is pending, yet the newest: kept


def test_prune_mirror_to_a_mirror_never_written_keeps_every_save(weed: Any, tmp_path: Path) -> None:
    """Nothing is mirrored yet: every save is pending and stays; with -mirror-keep the mirror is pruned
    first, so its failure (it was never made) leaves the root as it is."""
    t = Tiers(weed, tmp_path)
    for step in (1, 2, 3):
        r = run_cli("publish", "-checkpoint", str(t.fast), "-epoch", "0", str(t.save(step)), str(step))
        assert r.code == 0, r.err
    r = run_cli("prune", *t.flags("-keep", "1"))
    assert (r.code, r.out, r.err) == (0, "", ""), r
    assert len(t.fast_entries()) == 3
    r = run_cli("prune", *t.flags("-keep", "1", "-mirror-keep", "1"))
    assert (r.code, r.out) == (1, ""), r
    assert r.err.startswith("publish: ") and t.mirror.url in r.err, r
    assert len(t.fast_entries()) == 3


def test_mirror_keep_prunes_the_mirror_only(s3_server: Any, tmp_path: Path) -> None:
    t = Tiers(s3_server, tmp_path)
    for step in (1, 2, 3):
        t.save(step)
    code, err, out = t.watch_once("-mirror-keep", "1")
    assert code == 0, err
    assert len(t.fast_entries()) == 3  # the root's prune is -keep's, not -mirror-keep's
    assert [layout.parse(e).step for e in t.mirror.entries()] == [3]
    assert not t.mirror.keys("exec/a/checkpoint-1/") and not t.mirror.keys("exec/a/checkpoint-2/")
    assert t.mirror.keys("exec/a/checkpoint-3/")
    assert not t.mirror.keys("tomb/")
    # the saves the mirror pruned are not pending: a second watch uploads nothing again
    code, err, out = t.watch_once("-mirror-keep", "1")
    assert code == 0, err
    assert not t.mirror.keys("exec/a/checkpoint-1/")
    assert not [line for line in out if line.startswith("published")], out


def test_resolve_mirror(s3_server: Any, tmp_path: Path) -> None:
    t = Tiers(s3_server, tmp_path)
    t.save(1)
    code, err, _ = t.watch_once()
    assert code == 0, err
    flags = t.flags()
    # both hold it: the fast root answers, nothing said
    r = run_cli("resolve", *flags)
    assert r.code == 0 and r.out == f"{t.saves}/checkpoint-1\n" and "mirror" not in r.err, r.err
    # the mirror holds a newer one (the fast root pruned it, or lost it): the mirror answers, and says so
    t.save(2)
    code, err, _ = t.watch_once()
    shutil.rmtree(t.saves / "checkpoint-2")
    r = run_cli("resolve", *flags)
    assert r.code == 0, r.err
    assert r.out == f"{t.mirror.url}/exec/a/checkpoint-2\n"
    assert "answered from the mirror" in r.err
    # the fast root is gone altogether (another node): the mirror answers
    shutil.rmtree(t.fast)
    r = run_cli("resolve", *flags)
    assert r.code == 0, r.err
    assert r.out == f"{t.mirror.url}/exec/a/checkpoint-2\n"
    assert "answering from the mirror" in r.err and "answered from the mirror" in r.err
    # without -mirror the same resolve fails
    r = run_cli("resolve", "-checkpoint", str(t.fast))
    assert r.code == 1


def test_resolve_mirror_verify_passes_over_a_flipped_byte_on_the_mirror(weed: Any, tmp_path: Path) -> None:
    t = Tiers(weed, tmp_path)
    t.save(1)
    t.save(2, files=1, size=3000)
    assert t.watch_once()[0] == 0
    shutil.rmtree(t.saves / "checkpoint-2")  # the newest is on the mirror only
    key = "exec/a/checkpoint-2/shard-0.bin"
    body = bytearray(
        t.mirror.s3.get_object(Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/{key}")["Body"].read()
    )
    body[7] ^= 0x20
    t.mirror.put(key, bytes(body))
    r = run_cli("resolve", *t.flags())
    assert r.code == 0 and r.out == f"{t.mirror.url}/exec/a/checkpoint-2\n", r.err
    r = run_cli("resolve", *t.flags("-verify=deep"))
    assert r.code == 0, r.err
    assert r.out == f"{t.saves}/checkpoint-1\n"
    assert "shard-0.bin" in r.err and "answered from the mirror" not in r.err


def test_resolve_mirror_prefers_the_fast_root_at_the_same_step(weed: Any, tmp_path: Path) -> None:
    t = Tiers(weed, tmp_path)
    t.save(4)
    assert t.watch_once()[0] == 0
    # a save at the same (epoch, step) under another name on the mirror only
    entry = layout.parse(t.fast_entries()[0])
    other = layout.name(entry.epoch, entry.step, "exec/b/checkpoint-4")
    t.mirror.put("exec/b/checkpoint-4/trainer_state.json", b"{}")
    t.mirror.put(f"pub/{other}")
    r = run_cli("resolve", *t.flags())
    assert r.code == 0 and r.out == f"{t.saves}/checkpoint-4\n", r.err


def test_status_shows_both_tiers(weed: Any, tmp_path: Path, monkeypatch: Any) -> None:
    t = Tiers(weed, tmp_path)
    t.save(1)
    t.save(2)
    assert t.watch_once("-mirror-keep", "1")[0] == 0
    t.save(3)
    # publish 3 on the fast root only
    r = run_cli(
        "publish", "-checkpoint", str(t.fast), "-epoch", str(10**18), str(t.saves / "checkpoint-3"), "3"
    )
    assert r.code == 0, r.err
    r = run_cli("status", *t.flags("-json", "-keep", "1", "-mirror-keep", "1"))
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    tiers = [(x["step_decimal"], x["root"], x["mirror"]) for x in doc["tiers"]]
    assert tiers == [("3", "exists", "pending"), ("2", "exists", "exists"), ("1", "exists", "none")]
    assert [layout.parse(n).step for n in doc["pending"]] == [3]
    assert [p["mirrored"] for p in doc["publications"]] == [False, True, False]
    assert doc["mirror"]["root"] == t.mirror.url
    # prune -keep 1 keeps 3 and removes 2 (mirrored) and 1 (-mirror-keep 1 would never take it)
    assert [layout.parse(n).step for n in doc["prune"]["entries"]] == [1, 2]
    # without -mirror-keep, 1 is pending too (a mirror kept whole would take it), and prune keeps all
    doc = json.loads(run_cli("status", *t.flags("-json", "-keep", "1")).out)
    assert [layout.parse(n).step for n in doc["pending"]] == [3, 1]
    assert [layout.parse(n).step for n in doc["prune"]["entries"]] == [2]
    r = run_cli("status", *t.flags("-mirror-keep", "1"))
    assert r.code == 0, r.err
    assert "root: exists  mirror: pending" in r.out and f"the mirror {t.mirror.url}:" in r.out


def test_stale_multipart_uploads_of_the_mirror_are_aborted(weed: Any, tmp_path: Path) -> None:
    t = Tiers(weed, tmp_path)
    t.save(1)
    key = f"{t.mirror.prefix}/exec/old/checkpoint-9/model.bin"
    upload = t.mirror.s3.create_multipart_upload(Bucket=t.mirror.bucket, Key=key)["UploadId"]
    time.sleep(2.1)  # S3's times are whole seconds
    r = run_cli(
        "run", *t.flags("-framework", "hf", "-attempt", "a", "-keep", "5", "-orphans", "-orphans-age", "1s"),
        "--", "true",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert f"aborted {t.mirror.url}/exec/old/checkpoint-9/model.bin (multipart upload {upload})" in r.out
    left = t.mirror.s3.list_multipart_uploads(Bucket=t.mirror.bucket, Prefix=key).get("Uploads", [])
    assert not left


def _children(pid: int) -> list[int]:
    """The child processes of every thread of pid; a thread that ends while we look (an upload worker) is
    passed over."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            continue
    return found


def _check_mirror(t: Tiers) -> None:
    """No mirror entry names a save that is not wholly there."""
    for entry in t.mirror.entries():
        assert t.whole_on_mirror(entry), entry


def test_kill_9_during_uploads_never_publishes_half_a_save(weed: Any, tmp_path: Path) -> None:
    """A campaign: publish watch and publish run (in turn) killed with SIGKILL at 20 random points after
    they published a save on the root (during its upload, mostly); after each kill no mirror entry names an
    incomplete save, and the next watch (stopped at once) finishes every upload."""
    t = Tiers(weed, tmp_path)
    rng = random.Random(27)
    cut = half = 0  # kills that left the save pending; of those, with some of its objects uploaded
    for step in range(1, 21):
        attempt = f"k{step}"  # each dispatch its own attempt, as run derives them
        folder = hf_save(t.fast / "exec" / attempt, step)
        for i in range(8):
            (folder / f"shard-{i}.bin").write_bytes(os.urandom(1 << 20))
        flags = t.flags("-framework", "hf", "-interval", "50ms", "-attempt", attempt)
        w = Watch(*flags) if step % 2 else Watch.__new__(Watch)
        if not step % 2:  # publish run, COMMAND a sleep in a process group of its own
            Lines.__init__(w, "run", *flags, "--", "sleep", "60")
        line = w.next_line(timeout=30)
        assert line.startswith("published ") and str(t.fast) in line and attempt in line, line
        time.sleep(rng.uniform(0, 0.1))
        children = _children(w.proc.pid)
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait(timeout=30)
        for pid in children:
            os.killpg(pid, signal.SIGKILL)
        assert w.proc.stderr is not None
        w.proc.stderr.close()
        _check_mirror(t)
        name = line.split()[1]
        path = layout.parse(name).path
        if name not in t.mirror.entries():
            cut += 1
            half += bool(t.mirror.keys(path + "/"))
        code, err, _ = t.watch_once(timeout=120)
        assert code == 0, err
        _check_mirror(t)
        assert set(t.mirror.entries()) == set(t.fast_entries())
    assert cut >= 6 and half >= 4, (
        cut,
        half,
    )  # the kills did cut uploads off, half way too (10-14 of 20 seen)


def test_run_mirrors_a_two_rank_dcp_save_that_loads_back(weed: Any, tmp_path: Path) -> None:
    """A real torch.distributed.checkpoint save by 2 gloo ranks, made by COMMAND under publish run -mirror:
    mirrored whole, and dcp.load reads it back from the mirror's objects."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    t = Tiers(weed, tmp_path)
    script = (
        "import os, subprocess, sys; "
        "subprocess.run([sys.executable, '-m', 'tests.support.dcp_writer', os.environ['PUBLISH_SAVES'] + '/step-7'], "
        "check=True, cwd=os.environ['REPO'])"
    )
    r = run_cli(
        "run", *t.flags("-framework", "dcp", "-interval", "200ms", "-attempt", "a"), "--",
        sys.executable, "-c", script, env={"REPO": str(REPO), "PYTHONPATH": str(REPO)}, timeout=600,
    )  # fmt: skip
    assert r.code == 0, r.err
    entries = t.mirror.entries()
    assert len(entries) == 1 and t.whole_on_mirror(entries[0])
    path = layout.parse(entries[0]).path
    local = tmp_path / "down"
    for key in t.mirror.keys(path + "/"):
        target = local / key[len(path) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        t.mirror.s3.download_file(t.mirror.bucket, f"{t.mirror.prefix}/{key}", str(target))
    state = {"model": {"w": torch.zeros(64, 64), "only0": torch.zeros(100, dtype=torch.long)}, "step": 0}
    dcp.load(state, checkpoint_id=str(local), no_dist=True)
    assert state["model"]["only0"].tolist() == list(range(100))
    assert state["step"] == 7


def test_run_finishes_the_uploads_before_it_exits(weed: Any, tmp_path: Path) -> None:
    """The saves COMMAND made are on the mirror when run exits (no scan met them while it ran)."""
    t = Tiers(weed, tmp_path)
    make = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.support.trainer_saves import hf_save; "
        "from pathlib import Path; import os; [hf_save(Path(os.environ['PUBLISH_SAVES']), s) for s in (1, 2)]"
    )
    r = run_cli(
        "run", *t.flags("-framework", "hf", "-interval", "1h", "-attempt", "a"), "--", sys.executable, "-c", make,
    )  # fmt: skip
    assert r.code == 0, r.err
    assert len(t.mirror.entries()) == 2 and all(t.whole_on_mirror(e) for e in t.mirror.entries())


def test_a_stalled_upload_never_holds_up_a_publication_or_a_stop(weed: Any, tmp_path: Path) -> None:
    """The mirror's PUTs hang (a proxy holds them): watch still publishes each new save on the root at once,
    and SIGTERM ends it within -timeout of its last scan, saying what is left; the next watch mirrors it."""
    from tests.support.fault_proxy import FaultProxy, Stall

    proxy = FaultProxy(weed.endpoint)
    try:
        t = Tiers(weed, tmp_path, endpoint=proxy.endpoint)
        t.save(1)
        stall = proxy.add(Stall(120), method="PUT", path="shard")
        w = Watch(*t.flags("-framework", "hf", "-interval", "100ms", "-timeout", "6s", "-attempt", "a"))
        assert w.next_line().startswith("published ")
        deadline = time.monotonic() + 5
        while stall.used == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stall.used, "no upload reached the store"
        t.save(2)
        started = time.monotonic()
        line = w.next_line(timeout=10)
        assert line.startswith("published ") and "checkpoint-2" in line and str(t.fast) in line, line
        assert time.monotonic() - started < 3  # an upload in the scan loop would hold it 6 s
        started = time.monotonic()
        code, err = w.stop(timeout=30)
        assert time.monotonic() - started < 20
        assert code == 1, err
        assert "not mirrored" in err or "did not finish within -timeout" in err, err
        assert t.mirror.entries() == []
        proxy.reset()
        code, err, _ = t.watch_once()
        assert code == 0, err
        assert sorted(t.mirror.entries()) == t.fast_entries()
        _check_mirror(t)
    finally:
        proxy.stop()


def test_the_save_being_uploaded_is_protected_even_once_mirrored(weed: Any, tmp_path: Path) -> None:
    """Tiers.protected, which the root's prune keeps: the pending entries, and the one being uploaded."""
    from publish.ops import Say
    from publish.ops.tiers import Tiers as Pair
    from publish.rules.deadline import Deadline
    from publish.rules.roots import S3Root
    from publish.stores import open as open_store
    from publish.stores.posix import PosixStore

    t = Tiers(weed, tmp_path)
    names = [layout.name(1, s, f"exec/a/checkpoint-{s}") for s in (1, 2, 3)]
    entries = [layout.parse(n) for n in names]
    t.mirror.put(f"pub/{names[0]}")
    t.mirror.put(f"pub/{names[1]}")
    mirror = open_store(
        S3Root(t.mirror.bucket, t.mirror.prefix), env={}, deadline=time.monotonic() + 30, creds=t.mirror.creds
    ).store
    pair = Pair(PosixStore(str(t.fast)), mirror, Say(print, print), 30.0)
    dl = Deadline(30)
    assert pair.protected(dl, entries) == {names[2]}
    pair.busy.add(names[0])
    assert pair.protected(dl, entries) == {names[0], names[2]}
    # -mirror-keep 1: an entry older than the mirror's newest kept one is not worth uploading
    pair.keep = 1
    pair.busy.clear()
    assert pair.protected(dl, entries) == {names[2]}
    assert pair.protected(dl, entries[:1]) == set()


def test_run_on_a_node_without_the_root_resumes_from_the_mirror(s3_server: Any, tmp_path: Path) -> None:
    """Node-local storage lost (the root's directory gone): run -mirror resumes from the mirror's save, says
    so, and the saves of this dispatch are published on a new root and mirrored."""
    t = Tiers(s3_server, tmp_path)
    t.save(5)
    assert t.watch_once()[0] == 0
    shutil.rmtree(t.fast)
    make = (
        f"import os, sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
        "from tests.support.trainer_saves import hf_save; print('RESUME', os.environ.get('PUBLISH_RESUME')); "
        "hf_save(Path(os.environ['PUBLISH_SAVES']), 6)"
    )
    r = run_cli(
        "run", *t.flags("-framework", "hf", "-interval", "1h", "-attempt", "b"), "--", sys.executable, "-c", make,
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "answering from the mirror" in r.err and "answered from the mirror" in r.err
    assert f"run: resuming from {t.mirror.url}/exec/a/checkpoint-5" in r.err
    assert f"run: created {t.fast}" in r.err
    assert [layout.parse(e).step for e in t.fast_entries()] == [6]
    assert sorted(layout.parse(e).step for e in t.mirror.entries()) == [5, 6]


@pytest.mark.parametrize(("verb", "fraction"), [("run", 0.25), ("watch", 0.6)])
def test_mirroring_through_a_store_that_throttles(
    weed: Any, tmp_path: Path, verb: str, fraction: float
) -> None:
    """Issue #31, "One 503 SlowDown throws a finished upload away": a front answers 503 SlowDown to the
    mirror's manifest PUT and to a share of every other request (drawn from a fixed seed, at most 40 of
    them).  run -mirror and watch -mirror wait each one out: they exit 0 with the 10 MiB save published on
    the mirror, whole, no upload failed (on the code before: exit 1, the save not mirrored, uploaded again by
    the next pass)."""
    from tests.support.fault_proxy import FaultProxy, Respond, Throttle

    proxy = FaultProxy(weed.endpoint)
    try:
        t = Tiers(weed, tmp_path, endpoint=proxy.endpoint)
        t.save(1, files=1, size=10 * 1024 * 1024)
        manifest = proxy.add(
            Respond(503, "SlowDown", "Please reduce your request rate."),
            match=lambda r: r.kind == "PUT" and "/man/" in r.path,
            times=1,
        )
        throttle = Throttle(fraction, seed=31, limit=40)
        proxy.add(throttle)
        if verb == "run":
            r = run_cli("run", *t.flags("-framework", "hf", "-interval", "1h", "-attempt", "a"), "--", "true")
            code, err = r.code, r.err
        else:
            code, err, _ = t.watch_once()
        assert code == 0, err
        assert manifest.used == 1 and throttle.refused > 0
        assert t.mirror.entries() == t.fast_entries() != []
        assert all(t.whole_on_mirror(e) for e in t.mirror.entries())
        assert "not mirrored" not in err and "SlowDown" not in err  # no upload failed, none was redone
    finally:
        proxy.stop()
