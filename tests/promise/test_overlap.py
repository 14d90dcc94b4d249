"""A publication and a prune that overlap end cleanly (issue #31, "A hand publish racing a prune reports a
save that is gone"; addendum section 15, "Overlapping commands end cleanly").

The user's promise: after both have ended, either the save is there, whole, its entry is there and the
publication printed ``published``; or the publication failed (exit 1) naming the prune and no entry names
its save.  Whatever happened, no entry names a save that is missing or not whole, and ``resolve`` answers
a save that is there.

The two commands run in one process (publish.cli.main, a thread each) and take turns at their store calls
(tests/support/turns.py): one is paused before its i-th call while the other makes j calls, then the
first runs to its end, then the second; every i and every j, either one first.  The real-process
versions race the exact reproduction of the issue, with a save large enough that hashing it takes a
while.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from publish.rules import layout
from tests.conftest import Lines, run_cli, spawn
from tests.support.fault_proxy import Action, FaultProxy
from tests.support.s3roots import Root, creds_dir
from tests.support.trainer_saves import hf_save
from tests.support.turns import Ran, Turns

#: The save published by hand, in an attempt of its own (B); the one already published (A, current).
SAVE = "exec/B/checkpoint-7"
KEPT = "exec/A/checkpoint-5"
FILES = {
    "model.safetensors": b"m" * 3000,
    "config.json": b"{}",
    "sub/optimizer.pt": b"o" * 700,
    "-leading dash": b"-",
}
PRUNE = ["-keep", "1", "-orphans", "-orphans-age", "1ms", "-attempt", "A"]
NAME = layout.name(0, 7, SAVE)


class View:
    """What a root holds, read from outside: its entries, the files of a folder."""

    def entries(self) -> list[str]:
        raise NotImplementedError

    def files(self, path: str) -> dict[str, bytes]:
        raise NotImplementedError


class PosixView(View):
    def __init__(self, root: Path) -> None:
        self.root = root

    def entries(self) -> list[str]:
        pub = self.root / "pub"
        return sorted(os.listdir(pub)) if pub.exists() else []

    def files(self, path: str) -> dict[str, bytes]:
        base = self.root / path
        return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


class S3View(View):
    def __init__(self, root: Root) -> None:
        self.root = root

    def entries(self) -> list[str]:
        return sorted(self.root.entries())

    def files(self, path: str) -> dict[str, bytes]:
        r = self.root
        found = {}
        for key in r.keys(path + "/"):
            body = r.s3.get_object(Bucket=r.bucket, Key=f"{r.prefix}/{key}")["Body"].read()
            found[key[len(path) + 1 :]] = body
        return found


def whole(view: View, path: str) -> bool:
    """The save at ``path`` holds every file it was written with, byte for byte."""
    return view.files(path) == FILES


def promise_kept(view: View, publisher: Ran, pruner: Ran, resolve: Callable[[], Any], where: str) -> None:
    """The user's promise after a publication and a prune overlapped (the module's docstring)."""
    assert pruner.code == 0, (where, pruner.err)
    entries = view.entries()
    if publisher.code == 0:
        assert f"published {NAME}" in publisher.out, (where, publisher.out, publisher.err)
        assert NAME in entries and whole(view, SAVE), (where, entries, publisher.out, pruner.out)
    else:
        assert publisher.code == 1, (where, publisher.code, publisher.err)
        assert "prune" in publisher.err or "does not exist" in publisher.err, (where, publisher.err)
        assert "published" not in publisher.out, (where, publisher.out)
        assert NAME not in entries, (where, entries, publisher.err, pruner.out)
    for name in entries:
        assert whole(view, layout.parse(name).path), (where, name, publisher.err, pruner.out)
    answer = resolve()
    assert answer.code == 0, (where, answer.err)
    assert answer.out.strip(), (where, "resolve answered nothing", entries)
    assert answer.out.strip().endswith(SAVE if NAME in entries else KEPT), (where, answer.out, entries)


def write_save(folder_of: Callable[[str, bytes], None], path: str) -> None:
    for rel, body in FILES.items():
        folder_of(f"{path}/{rel}", body)


def interleavings(first: int, second: int) -> Iterator[tuple[int, int]]:
    """(i, j): the first paused before its call i (1..first) while the second makes j calls (0..second, and
    all it makes)."""
    for i in range(1, first + 1):
        for j in [*range(second + 1), math.inf]:
            yield i, j


def race(
    monkeypatch: pytest.MonkeyPatch,
    gated: str,
    publisher: list[str],
    pruner: list[str],
    order: tuple[str, str],
    i: float,
    j: float,
) -> tuple[Ran, Ran]:
    """Run ``publisher`` and ``pruner`` taking turns: ``order[0]`` makes i calls, ``order[1]`` j, then
    the first runs to its end, then the second."""
    with monkeypatch.context() as m:
        turns = Turns(m, gated)
        turns.start("publish", publisher)
        turns.start("prune", pruner)
        turns.let(order[0], 0)
        turns.let(order[1], 0)
        turns.let(order[0], i)
        turns.let(order[1], j)
        turns.let(order[0])
        turns.let(order[1])
        turns.finish()
    return turns.ran["publish"], turns.ran["prune"]


def solo_calls(monkeypatch: pytest.MonkeyPatch, gated: str, argv: list[str], actor: str) -> int:
    """How many store calls ``argv`` makes alone (on a root made for it)."""
    with monkeypatch.context() as m:
        turns = Turns(m, gated)
        turns.start(actor, argv)
        turns.finish()
    ran = turns.ran[actor]
    assert ran.code == 0, ran.err
    return len(ran.calls)


# -- POSIX


def posix_root(base: Path) -> Path:
    root = base / "ckpt"

    def put(rel: str, body: bytes) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)

    write_save(put, KEPT)
    write_save(put, SAVE)
    assert run_cli("publish", "-checkpoint", str(root), str(root / KEPT), "5").code == 0
    time.sleep(0.01)  # older than -orphans-age
    return root


def posix_args(root: Path) -> tuple[list[str], list[str]]:
    return (
        ["publish", "-checkpoint", str(root), str(root / SAVE), "7"],
        ["prune", "-checkpoint", str(root), *PRUNE],
    )


@pytest.mark.parametrize("order", [("publish", "prune"), ("prune", "publish")])
def test_a_hand_publish_and_a_prune_overlapping_anywhere_end_cleanly_posix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, str]
) -> None:
    """Every interleaving of `publish publish exec/B/checkpoint-7 7` and `prune -keep 1 -orphans
    -orphans-age 1ms -attempt A` at their store calls keeps the promise; among them the issue's (prune
    removes exec/B while publish hashes, publish then printed `published` naming it), and the one where
    each sees the other's mark."""
    counts = {}
    for actor in ("publish", "prune"):
        root = posix_root(tmp_path / f"solo-{actor}")
        publisher, pruner = posix_args(root)
        counts[actor] = solo_calls(monkeypatch, str(root), publisher if actor == "publish" else pruner, actor)
    withdrawn = published = 0
    for n, (i, j) in enumerate(interleavings(counts[order[0]] + 2, counts[order[1]] + 2)):
        root = posix_root(tmp_path / f"r{n}")
        publisher, pruner = posix_args(root)
        p, r = race(monkeypatch, str(root), publisher, pruner, order, i, j)
        promise_kept(
            PosixView(root),
            p,
            r,
            lambda root=root: run_cli("resolve", "-checkpoint", str(root)),
            f"{order} {i} {j}",
        )
        withdrawn += "withdrawn" in p.err
        published += p.code == 0
        shutil.rmtree(root.parent)
    assert withdrawn and published  # the entry made and withdrawn again, and both ends, are among them


# -- S3 (SeaweedFS)


def s3_case(weed: Any, tmp: Path) -> Root:
    root = Root(weed, tmp)
    for path in (KEPT, SAVE):
        write_save(root.put, path)
    assert root.run("publish", f"{root.url}/{KEPT}", "5").code == 0
    time.sleep(0.01)
    return root


def s3_args(root: Root) -> tuple[list[str], list[str]]:
    creds = ["-checkpoint", root.url, "-creds", root.creds]
    return (["publish", *creds, f"{root.url}/{SAVE}", "7"], ["prune", *creds, *PRUNE])


@pytest.mark.parametrize("order", [("publish", "prune"), ("prune", "publish")])
def test_a_hand_publish_and_a_prune_overlapping_anywhere_end_cleanly_s3(
    weed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, str]
) -> None:
    """As on POSIX, on SeaweedFS: the first paused before each of its calls while the second runs to its
    end; and the publisher paused just after its entry (its mark) while the pruner makes each number of
    calls (the interleavings where one sees the other, or both)."""
    counts = {}
    for actor in ("publish", "prune"):
        root = s3_case(weed, tmp_path)
        publisher, pruner = s3_args(root)
        counts[actor] = solo_calls(monkeypatch, root.url, publisher if actor == "publish" else pruner, actor)
    cases: list[tuple[float, float]] = [(i, math.inf) for i in range(1, counts[order[0]] + 2)]
    if order[0] == "publish":
        root = s3_case(weed, tmp_path)
        with monkeypatch.context() as m:
            turns = Turns(m, root.url)
            turns.start("publish", s3_args(root)[0])
            turns.finish()
        mark = turns.ran["publish"].calls.index("create_entry") + 1
        cases += [(mark, j) for j in range(counts["prune"] + 2)]
    withdrawn = 0
    for i, j in cases:
        root = s3_case(weed, tmp_path)
        publisher, pruner = s3_args(root)
        p, r = race(monkeypatch, root.url, publisher, pruner, order, i, j)
        promise_kept(S3View(root), p, r, lambda root=root: root.run("resolve"), f"{order} {i} {j}")
        withdrawn += "withdrawn" in p.err
    if order[0] == "publish":
        assert withdrawn


# -- the mirror


class Tiers:
    """A POSIX root whose saves are in exec/a, with an S3 mirror on SeaweedFS.

    Both tiers hold (epoch 0, step 7) and (epoch 0, step 9); the fast root also holds checkpoint-7 published
    again as epoch 1 (to make resolve choose it), which is pending: a mirror upload of it writes
    checkpoint-7's objects while `prune -mirror-keep 1` of the mirror, seeing only epoch 0's entries,
    plans to remove the same folder with (0, 7)."""

    def __init__(self, weed: Any, tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.fast = tmp / "fast"
        self.mirror = Root(weed, tmp, init=False)
        for step in (7, 9):
            folder = hf_save(self.fast / "exec" / "a", step)
            (folder / "shard.bin").write_bytes(os.urandom(2000))
            assert run_cli("publish", "-checkpoint", str(self.fast), str(folder), str(step)).code == 0
        w = once(self.watch())
        assert w.code == 0, w.err
        assert len(self.mirror.entries()) == 2
        folder = self.fast / "exec" / "a" / "checkpoint-7"
        assert run_cli("publish", "-checkpoint", str(self.fast), "-epoch", "1", str(folder), "7").code == 0
        self.name = layout.name(1, 7, "exec/a/checkpoint-7")

    def flags(self) -> list[str]:
        return ["-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds]

    def watch(self, *more: str) -> list[str]:
        """A watch whose last scan and uploads run at once (it is given a stop already set)."""
        return ["watch", *self.flags(), "-framework", "hf", "-attempt", "a", *more]

    def prune(self) -> list[str]:
        return ["prune", *self.flags(), "-keep", "100", "-mirror-keep", "1"]

    def check(self, uploader: Ran, pruner: Ran, where: str) -> None:
        """No mirror entry names a save that is not whole there; a `published` line of the mirror names a
        save that is there and kept; a publication that fails names the prune."""
        assert pruner.code == 0, (where, pruner.err)
        entries = self.mirror.entries()
        for name in entries:
            assert whole_by_manifest(self.mirror, name), (where, name, uploader.err, pruner.out)
        said = f"published {self.name}" in uploader.out + pruner.out
        if said:
            assert self.name in entries, (where, entries, uploader.out, pruner.out)
        if self.name not in entries:
            # it failed naming the prune; or, when the prune had ended before the upload looked, naming
            # what of it is missing
            assert "prune" in uploader.err + pruner.err or "not mirrored" in uploader.err, (
                where,
                uploader.err,
            )
        answer = run_cli("resolve", "-checkpoint", self.mirror.url, "-creds", self.mirror.creds)
        assert answer.code == 0 and answer.out.strip(), (where, answer.err)


def once(argv: list[str]) -> Ran:
    """``publish <argv>`` in this process, its stop set: a watch scans once and finishes its uploads."""
    from publish.cli import main
    from publish.process.threads import Flag

    stop = Flag()
    stop.set()
    out, err = io.StringIO(), io.StringIO()
    ran = Ran()
    ran.code = main(argv, {}, out, err, stop=stop)
    ran.out, ran.err = out.getvalue(), err.getvalue()
    return ran


def whole_by_manifest(root: Root, name: str) -> bool:
    """The mirror holds every object the manifest of its entry ``name`` records, of that size."""
    from publish.rules import manifest

    r = root
    data = r.s3.get_object(Bucket=r.bucket, Key=f"{r.prefix}/man/{name}")["Body"].read()
    path = layout.parse(name).path
    sizes = {}
    for page in r.s3.get_paginator("list_objects_v2").paginate(Bucket=r.bucket, Prefix=f"{r.prefix}/{path}/"):
        for o in page.get("Contents", []):
            sizes[o["Key"][len(r.prefix) + len(path) + 2 :]] = o["Size"]
    rows = manifest.decode(name, data, "man")
    return bool(rows) and all(sizes.get(rel) == size for rel, size, _ in rows)


def mirror_race(
    monkeypatch: pytest.MonkeyPatch, t: Tiers, other: list[str], order: tuple[str, str], i: float, j: float
) -> tuple[Ran, Ran]:
    """A watch's mirror upload (its stop set at once) and ``other`` taking turns at the mirror's calls."""
    from publish.ops import tiers as mirror
    from publish.process.threads import Flag

    stop = Flag()
    stop.set()
    with monkeypatch.context() as m:
        turns = Turns(m, t.mirror.url)
        uploaders: dict[str, Any] = {}
        made = mirror.Uploader.__init__

        def init(self: Any, *a: Any, **kw: Any) -> None:
            made(self, *a, **kw)
            uploaders[turns.actor()] = self

        def halted(actor: str) -> Callable[[], bool]:
            return lambda: actor in uploaders and uploaders[actor].halt.is_set()

        m.setattr(mirror.Uploader, "__init__", init)
        turns.start("upload", t.watch("-mirror-keep", "1"), stop=stop)
        turns.start("other", other, stop=stop)
        # A watch's first pass, begun before its stop is seen, uploads nothing: its calls are the same
        # every time once the stop has been seen.
        turns.let("upload", 0, ready=halted("upload"))
        turns.let("other", 0, ready=halted("other") if other[0] == "watch" else None)
        turns.let(order[0], i)
        turns.let(order[1], j)
        turns.let(order[0])
        turns.let(order[1])
        turns.finish()
    return turns.ran["upload"], turns.ran["other"]


@pytest.mark.parametrize("second", ["prune", "watch"])
@pytest.mark.parametrize("order", [("upload", "other"), ("other", "upload")])
def test_a_mirror_upload_and_a_mirror_prune_overlapping_anywhere_end_cleanly(
    weed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, str], second: str
) -> None:
    """A watch's mirror upload of checkpoint-7 (epoch 1) and `prune -mirror -mirror-keep 1`, or a second
    process mirroring the same root with -mirror-keep 1, taking turns at each of their mirror calls: no
    mirror entry ever names a save whose files are gone (the issue's mirror case), and the upload either
    publishes a save that is kept or fails naming the prune."""
    t = Tiers(weed, tmp_path / "count")
    other = t.prune() if second == "prune" else t.watch("-mirror-keep", "1")
    up, ot = mirror_race(monkeypatch, t, other, order, math.inf, 0)
    t.check(up, ot, "alone")
    counts = {"upload": len(up.calls), "other": len(ot.calls)}
    for n, i in enumerate(range(1, counts[order[0]] + 2)):
        t = Tiers(weed, tmp_path / f"r{n}")
        other = t.prune() if second == "prune" else t.watch("-mirror-keep", "1")
        up, ot = mirror_race(monkeypatch, t, other, order, i, math.inf)
        t.check(up, ot, f"{order} {i}")


# -- real processes


def test_the_issue_reproduced_with_real_processes(tmp_path: Path) -> None:
    """The issue's reproduction: `publish publish ... checkpoint-7 7` of a large save (its hashing takes a
    while) while `prune -keep 1 -orphans -orphans-age 1s -attempt A` runs, eight times: publish never
    prints `published` for a save that is gone."""
    outcomes = []
    for n in range(8):
        root = tmp_path / f"r{n}" / "ckpt"
        (root / KEPT).mkdir(parents=True)
        (root / KEPT / "model.bin").write_bytes(b"k")
        assert run_cli("publish", "-checkpoint", str(root), str(root / KEPT), "5").code == 0
        save = root / SAVE
        save.mkdir(parents=True)
        for k in range(8):
            with open(save / f"shard-{k}.bin", "wb") as f:
                f.write(os.urandom(1 << 20) * 24)  # 192 MiB in all: hashed for a while
        old = time.time() - 10
        for p in [save, *save.iterdir(), save.parent]:
            os.utime(p, (old, old))
        time.sleep(1.1)  # ctime older than -orphans-age
        publisher = Lines("publish", "-checkpoint", str(root), str(save), "7")
        time.sleep(0.3)  # hashing
        pruner = spawn("prune", "-checkpoint", str(root), *PRUNE[:4], "1s", *PRUNE[5:])
        _, prune_err = pruner.communicate(timeout=120)
        assert pruner.returncode == 0, prune_err
        code = publisher.proc.wait(timeout=120)
        assert publisher.proc.stderr is not None
        err = publisher.proc.stderr.read()
        out = [publisher.lines.get(timeout=5) for _ in range(publisher.lines.qsize())]
        view = PosixView(root)
        entries = view.entries()
        if code == 0:
            assert any(line.startswith(f"published {NAME}") for line in out)
            assert NAME in entries and save.is_dir(), (out, err, entries)
            assert (save / "shard-7.bin").stat().st_size == 24 << 20
        else:
            assert code == 1 and "prune" in err, err
            assert NAME not in entries
        for name in entries:
            assert (root / layout.parse(name).path).exists(), (name, err)
        outcomes.append(code)
        shutil.rmtree(root.parent)
    assert outcomes


class Held(Action):
    """Hold the request until ``release`` is set (at most a minute), telling ``seen`` first; then forward it."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.release = threading.Event()

    def handle(self, proxy: FaultProxy, h: Any, req: Any) -> None:
        self.seen.set()
        self.release.wait(60)
        proxy.forward(h, req)


def test_a_mirror_upload_raced_by_a_mirror_prune_with_real_processes(
    weed: Any, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """The mirror's case with real processes: a watch uploads checkpoint-7 (epoch 1); after its upload,
    while its manifest is being written (that request held by a proxy), `prune -mirror -mirror-keep 1`,
    which plans to remove checkpoint-7 with (0, 7), runs to its end.  The mirror never ends with an entry
    whose files are gone: the upload fails naming the prune, and the watch's last pass uploads it again."""
    t = Tiers(weed, tmp_path)
    held = Held()
    fault_proxy.add(held, method="PUT", path=f"/man/{t.name}", times=1)
    entry = Held()
    entry.release.set()
    fault_proxy.add(entry, method="PUT", path=f"/pub/{t.name}", times=1)
    slow = creds_dir(tmp_path, weed, fault_proxy.endpoint)
    flags = ["-checkpoint", str(t.fast), "-mirror", t.mirror.url, "-creds", slow]
    uploader = Lines(
        "watch", *flags, "-framework", "hf", "-attempt", "a", "-interval", "1h", "-mirror-keep", "1"
    )
    try:
        assert held.seen.wait(60), "the upload never came to its manifest"
        pruner = spawn(*t.prune())
        pruned, err = pruner.communicate(timeout=120)
        assert pruner.returncode == 0, err
        assert "exec/a/checkpoint-7" in pruned, pruned  # it removed the save being published
    finally:
        held.release.set()
    assert entry.seen.wait(60), "the upload never came to its entry"
    time.sleep(0.5)  # what follows its entry: the checks (and, now, its withdrawal)
    uploader.proc.send_signal(signal.SIGTERM)
    code = uploader.proc.wait(timeout=120)
    assert uploader.proc.stderr is not None
    err = uploader.proc.stderr.read()
    out = [uploader.lines.get(timeout=5) for _ in range(uploader.lines.qsize())]
    t.check(_ran(code, "\n".join(out), err), _ran(0, "", ""), "real processes")
    assert t.name in t.mirror.entries(), err  # the last pass uploaded it again, whole


def _ran(code: int, out: str, err: str) -> Ran:
    r = Ran()
    r.code, r.out, r.err = code, out, err
    return r


# -- run: one save overlapped, the others published


def run_case(base: Path) -> tuple[Path, dict[int, dict[str, bytes]]]:
    """exec/A/checkpoint-9 published (0, 9); exec/B/checkpoint-7 published (0, 7), which `prune -keep 1`
    removes; exec/B/checkpoint-8 whole and never published.  A `run -attempt B` publishes 7 and 8 again
    (its epoch is newer) in its last scan."""
    root = base / "ckpt"
    written = {}
    for attempt, step in (("A", 9), ("B", 7), ("B", 8)):
        folder = hf_save(root / "exec" / attempt, step)
        (folder / "-shard\n.bin").write_bytes(os.urandom(300))
        written[step] = {p.name: p.read_bytes() for p in folder.iterdir()}
        if step != 8:
            assert run_cli("publish", "-checkpoint", str(root), str(folder), str(step)).code == 0
    return root, written


@pytest.mark.parametrize("order", [("run", "prune"), ("prune", "run")])
def test_a_run_whose_last_scan_overlaps_a_prune_names_that_save_once_and_publishes_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, str]
) -> None:
    """Under `run`, a save a prune overlaps is named once and passed over; the scan goes on and publishes
    the others; run's exit status is non-zero.  No entry ever names a save that is gone (the issue's item,
    for the scans)."""
    root, _ = run_case(tmp_path / "solo")
    with monkeypatch.context() as m:
        turns = Turns(m, str(root))
        turns.start(
            "run", ["run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "B", "--", "true"]
        )
        turns.finish()
    calls = {"run": len(turns.ran["run"].calls), "prune": 25}
    overlapped = 0
    for n, i in enumerate(range(1, calls[order[0]] + 2)):
        root, written = run_case(tmp_path / f"r{n}")
        with monkeypatch.context() as m:
            turns = Turns(m, str(root))
            turns.start(
                "run", ["run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "B", "--", "true"]
            )
            turns.start("prune", ["prune", "-checkpoint", str(root), "-keep", "1"])
            turns.let(order[0], 0)
            turns.let(order[1], 0)
            turns.let(order[0], i)
            turns.let(order[1])
            turns.let(order[0])
            turns.finish()
        ran, pruned = turns.ran["run"], turns.ran["prune"]
        where = f"{order} {i}"
        assert pruned.code == 0, (where, pruned.err)
        view = PosixView(root)
        entries = view.entries()
        by_path = {layout.parse(e).path for e in entries}
        for name in entries:
            path = layout.parse(name).path
            step = int(path.rsplit("-", 1)[1])
            assert view.files(path) == written[step], (where, name, ran.err, pruned.out)
        assert "exec/B/checkpoint-8" in by_path, (where, ran.err)  # published whatever happened to 7
        said = [line for line in ran.err.splitlines() if "checkpoint-7" in line and "prune" in line]
        if said:
            assert len(said) == 1, (where, ran.err)
        if said and "withdrawn" in said[0]:  # its entry made, then seen to overlap: the exit status says it
            overlapped += 1
            assert ran.code == 1 or "exec/B/checkpoint-7" in by_path, (where, ran.code, ran.err)
        elif (root / "exec/B/checkpoint-7").exists() and "exec/B/checkpoint-7" not in by_path:
            raise AssertionError((where, "checkpoint-7 left unpublished, unsaid", ran.err))
    if order[0] == "run":
        assert overlapped  # the entry made and withdrawn again is among them
