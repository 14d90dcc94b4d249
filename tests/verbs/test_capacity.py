"""Capacity (issue #34, "Capacity"; addendum 15, "Retention agrees with resolve"): a fast tier that fills is
seen and retention can prevent it.

- ``status`` shows what each publication's save holds and the free space of a POSIX root's filesystem, in
  text and ``-json``; ``-metrics`` exports them.
- ``-keep-bytes SIZE`` caps what the other policies keep: the newest saves whose sizes add up to at most SIZE
  stay; never fewer than one save, never a save not yet mirrored; a save deleted by hand counts for nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from publish.ops.retention import Policy, Saves
from publish.rules import layout
from publish.rules.redact import shown
from publish.rules.sizes import human
from tests.conftest import REPO, base_env, command, need, run_cli
from tests.support.as_nobody import open_command, open_root  # noqa: F401  (fixtures)
from tests.support.s3roots import Root
from tests.support.servers import S3Server, Weed
from tests.support.trainer_saves import hf_save

#: A hostile attempt folder: a leading dash, a newline, a non-ASCII letter.
ODD = "-a\nä"


def save(saves: Path, step: int, size: int) -> tuple[Path, int]:
    """An HF save whose weights hold ``size`` bytes; the folder and what all its files hold."""
    folder = hf_save(saves, step)
    (folder / "model.safetensors").write_bytes(b"w" * size)
    return folder, sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def publish(root: Path, folder: Path, step: int) -> str:
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "0", str(folder), str(step))
    assert r.code == 0, r
    return layout.name(0, step, folder.relative_to(root).as_posix())


def published(root: Path, sizes: dict[int, int], attempt: str = "a") -> dict[int, tuple[Path, int, str]]:
    """Saves of the given sizes by step, published in step order."""
    made = {}
    for step, size in sorted(sizes.items()):
        folder, total = save(root / "exec" / attempt, step, size)
        made[step] = (folder, total, publish(root, folder, step))
    return made


def status_json(*args: str) -> dict[str, Any]:
    r = run_cli("status", *args, "-json")
    assert r.code == 0, r
    doc: dict[str, Any] = json.loads(r.out)
    return doc


def steps_left(root: Path) -> list[int]:
    return sorted(layout.parse(n).step for n in os.listdir(root / "pub"))


# ------------------------------------------------------------------------------------------ status (POSIX)


def test_status_shows_each_publications_size_and_the_free_space(root: Path) -> None:
    """Each publication's bytes are what its files hold (from its manifest; without one, from the files
    themselves, said); a save that is gone holds nothing; the free space is the filesystem's."""
    made = published(root, {1: 10_000, 2: 20_000, 3: 30_000}, attempt=ODD)
    os.unlink(root / "man" / made[2][2])  # a publication made before manifests
    shutil.rmtree(made[1][0])
    doc = status_json("-checkpoint", str(root))
    pubs = {p["step"]: p for p in doc["publications"]}
    assert (pubs[3]["bytes"], pubs[3]["bytes_from"]) == (made[3][1], "manifest")
    assert (pubs[2]["bytes"], pubs[2]["bytes_from"]) == (made[2][1], "files")
    assert (pubs[1]["bytes"], pubs[1]["bytes_from"]) == (None, None)
    assert doc["bytes"] == made[3][1] + made[2][1]
    fs = os.statvfs(root)
    assert doc["space"]["total_bytes"] == fs.f_blocks * fs.f_frsize
    assert 0 < doc["space"]["free_bytes"] <= doc["space"]["total_bytes"]
    r = run_cli("status", "-checkpoint", str(root))
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert f"  epoch 0 step 3 {shown(str(made[3][0]))} (exists), {human(made[3][1])}" in lines, r.out
    assert f"  epoch 0 step 2 {shown(str(made[2][0]))} (exists), {human(made[2][1])} by its files" in lines, (
        r.out
    )
    assert f"  epoch 0 step 1 {shown(str(made[1][0]))} (MISSING)" in lines, r.out
    space = [line for line in lines if line.startswith("space: ")]
    assert len(space) == 1 and f"the filesystem of {root} has " in space[0], r.out


def test_a_save_that_cannot_be_measured_is_said_not_a_failure(root: Path) -> None:
    """A save without a manifest holding a link: its size is not known (said), and status still succeeds."""
    made = published(root, {1: 100})
    os.unlink(root / "man" / made[1][2])
    os.symlink("/etc/passwd", made[1][0] / "link")
    doc = status_json("-checkpoint", str(root))
    p = doc["publications"][0]
    assert (p["bytes"], p["bytes_from"]) == (None, None)
    assert "link" in p["bytes_error"], p
    r = run_cli("status", "-checkpoint", str(root))
    assert r.code == 0 and "size not known: " in r.out, r


def test_a_damaged_manifest_falls_back_to_the_files(root: Path) -> None:
    made = published(root, {1: 500})
    (root / "man" / made[1][2]).write_bytes(b'{"entry": 1e999}')
    p = status_json("-checkpoint", str(root))["publications"][0]
    assert (p["bytes"], p["bytes_from"]) == (made[1][1], "files")


def as_nobody(cmd: tuple[list[str], Path], *args: str) -> subprocess.CompletedProcess[str]:
    """``publish ARGS`` run as the unprivileged user ``nobody`` (setpriv), from the command's open folder."""
    need(shutil.which("setpriv") is not None and os.geteuid() == 0, "setpriv, run as root")
    words, folder = cmd
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "PYTHONPATH": str(folder)}
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*nobody, *words, *args], env=env, cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_a_save_the_user_cannot_read_is_shown_with_its_size_not_known(
    open_root: Path,  # noqa: F811
    open_command: tuple[list[str], Path],  # noqa: F811
) -> None:
    """status as a user who may not read some saves resolve still answers: a save folder it cannot open
    and one with a folder inside it cannot read are shown with their sizes not known and why; a manifest
    it cannot read is passed over for the files; the other saves' sizes are told and status succeeds.
    prune -keep-bytes counts such a save as 0 bytes, said, and removes nothing for it."""
    root = open_root
    made = published(root, {1: 100, 2: 200, 3: 300, 4: 400})
    for step in (1, 2):
        os.unlink(root / "man" / made[step][2])  # measured by their files
    (made[1][0]).chmod(0o000)  # the save folder: nobody may not list it
    (made[2][0] / "in").mkdir()
    (made[2][0] / "in").chmod(0o000)  # a folder inside the save
    (root / "man" / made[3][2]).chmod(0o000)  # the manifest
    for folder in (root, root / "exec", root / "exec" / "a", root / "pub", root / "man"):
        folder.chmod(0o755)
    for step in (2, 3, 4):
        made[step][0].chmod(0o755)
        for f in made[step][0].iterdir():
            if f.is_file():
                f.chmod(0o644)
    for f in (root / "pub").iterdir():
        f.chmod(0o644)
    (root / "man" / made[4][2]).chmod(0o644)
    r = as_nobody(open_command, "status", "-checkpoint", str(root), "-json")
    assert (r.returncode, r.stderr) == (0, ""), r
    pubs = {p["step"]: p for p in json.loads(r.stdout)["publications"]}
    assert (pubs[1]["exists"], pubs[1]["bytes"], pubs[1]["bytes_from"]) == (True, None, None)
    assert pubs[1]["bytes_error"] == f"{made[1][0]}: Permission denied"
    assert (pubs[2]["bytes"], pubs[2]["bytes_error"]) == (None, f"{made[2][0]}: Permission denied")
    assert (pubs[3]["bytes"], pubs[3]["bytes_from"]) == (made[3][1], "files")
    assert (pubs[4]["bytes"], pubs[4]["bytes_from"]) == (made[4][1], "manifest")
    r = as_nobody(open_command, "status", "-checkpoint", str(root))
    assert (r.returncode, r.stderr) == (0, ""), r
    lines = r.stdout.splitlines()
    assert f"  epoch 0 step 1 {made[1][0]} (exists), size not known: {made[1][0]}: Permission denied" in lines
    assert f"  epoch 0 step 2 {made[2][0]} (exists), size not known: {made[2][0]}: Permission denied" in lines
    assert f"  epoch 0 step 3 {made[3][0]} (exists), {human(made[3][1])} by its files" in lines
    assert f"  epoch 0 step 4 {made[4][0]} (exists), {human(made[4][1])}" in lines
    r = as_nobody(
        open_command, "prune", "-checkpoint", str(root), "-keep", "4", "-keep-bytes", "1MB", "-dry-run"
    )
    assert (r.returncode, r.stdout) == (0, ""), r
    assert (
        f"prune: the size of {made[1][0]} cannot be told ({made[1][0]}: Permission denied): counted"
        in r.stderr
    )


# ---------------------------------------------------------------------------------------- -keep-bytes


def test_keep_bytes_keeps_the_newest_saves_that_fit(root: Path) -> None:
    """Sizes newest first 5, 4, 3, 2, 1 kB-ish; a cap of 9.5 kB keeps the two newest.  The oldest would fit
    in what is left but is older than the first save that did not: the newest that add up, never a
    packing.  status -keep-bytes shows the same plan as prune -dry-run, and resolve answers the same."""
    made = published(root, {s: s * 1000 for s in (1, 2, 3, 4, 5)})
    cap = made[5][1] + made[4][1] + 500
    before = run_cli("resolve", "-checkpoint", str(root)).out
    plan = status_json("-checkpoint", str(root), "-keep", "5", "-keep-bytes", str(cap))["prune"]
    assert plan["keep_bytes"] == cap and plan["notes"] == []
    assert plan["entries"] == [made[s][2] for s in (1, 2, 3)]
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", "5", "-keep-bytes", str(cap), "-dry-run")
    assert dry.code == 0 and dry.out.splitlines() == plan["lines"], dry
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "5", "-keep-bytes", str(cap))
    assert r.code == 0, r
    assert steps_left(root) == [4, 5]
    assert [line for line in r.out.splitlines()] == [f"removed {made[s][0]}" for s in (1, 2, 3)]
    assert run_cli("resolve", "-checkpoint", str(root)).out == before


def test_keep_bytes_caps_only_what_the_others_keep(root: Path) -> None:
    """-keep 2 with a cap larger than everything keeps 2, as -keep 2 alone; -keep-every keeps its milestone
    only while it fits under the cap too."""
    made = published(root, {s: 1000 for s in (10, 11, 12, 13)})
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2", "-keep-bytes", "1PB", "-dry-run")
    assert r.out.splitlines() == [f"would remove {made[s][0]}" for s in (10, 11)], r
    cap = made[13][1] + made[12][1] + made[10][1]
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2", "-keep-every", "10", "-keep-bytes", str(cap))
    assert r.code == 0, r
    assert steps_left(root) == [10, 12, 13]
    r = run_cli(
        "prune", "-checkpoint", str(root), "-keep", "2", "-keep-every", "10", "-keep-bytes", str(cap - 1)
    )
    assert r.code == 0, r
    assert steps_left(root) == [12, 13]


def test_the_newest_save_stays_whatever_it_holds(root: Path) -> None:
    """Never fewer than one save: the newest alone over the cap stays, said on stderr; the others go."""
    made = published(root, {1: 100, 2: 5000})
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "3", "-keep-bytes", "1kB")
    assert r.code == 0, r
    assert steps_left(root) == [2]
    assert (made[2][0] / "model.safetensors").is_file()
    assert r.err == (
        f"publish: prune: the newest save {made[2][0]} alone holds {human(made[2][1])} ({made[2][1]} bytes), over "
        "-keep-bytes 1kB: kept, as a prune keeps at least one save\n"
    ), r.err


def test_a_save_deleted_by_hand_counts_for_nothing(root: Path) -> None:
    """The newest save deleted by hand: it holds nothing, so the cap counts the saves that exist, and the
    save resolve answers stays; its entry stays too (as for -keep), naming nothing a prune could remove."""
    made = published(root, {1: 3000, 2: 3000, 3: 3000, 4: 3000})
    shutil.rmtree(made[4][0])
    before = run_cli("resolve", "-checkpoint", str(root)).out
    assert before == f"{made[3][0]}\n"
    cap = made[3][1] + made[2][1]
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "4", "-keep-bytes", str(cap))
    assert r.code == 0, r
    assert steps_left(root) == [2, 3, 4]
    assert made[2][0].is_dir() and made[3][0].is_dir() and not made[1][0].exists()
    assert run_cli("resolve", "-checkpoint", str(root)).out == before


def test_run_keep_bytes_prunes_after_command(root: Path) -> None:
    for s, size in ((1, 4000), (2, 4000), (3, 4000)):
        save(root / "exec/A", s, size)
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-keep", "3",
        "-keep-bytes", "10kB", "--", "true", env=base_env(),
    )  # fmt: skip
    assert r.code == 0, r
    assert steps_left(root) == [2, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["prune", "-keep-bytes", "5gb"], 'invalid value "5gb" for flag -keep-bytes: unknown unit "gb"'),
        (["prune", "-keep-bytes", "8192PiB"], 'invalid value "8192PiB" for flag -keep-bytes: value out of range'),
        (["prune", "-keep-bytes", "-1"], 'invalid value "-1" for flag -keep-bytes: parse error'),
        (["prune", "-keep-bytes", ""], 'invalid value "" for flag -keep-bytes: parse error'),
        (["prune", "-keep-bytes", "1e3GB"], 'invalid value "1e3GB" for flag -keep-bytes: parse error'),
        (["prune", "-keep-bytes", "0"], 'invalid value "0" for flag -keep-bytes: must be at least 1'),
        (["prune", "-keep-bytes"], "flag needs an argument: -keep-bytes"),
        (["status", "-keep-bytes", "1GB"], "-keep-bytes applies to the prune -keep N shows: give -keep"),
        (["run", "-framework", "hf", "-keep-bytes", "1GB", "--", "true"], "-keep-bytes applies to the prune -keep N asks for: give -keep"),
        (["prune", "-mirror-keep-bytes", "1GB"], "-mirror-keep-bytes applies to -mirror-keep: give -mirror-keep"),
        (["watch", "-framework", "hf", "-attempt", "A", "-mirror-keep-bytes", "1GB"], "-mirror-keep-bytes applies to -mirror-keep: give -mirror-keep"),
    ],
)  # fmt: skip
def test_usage_errors(root: Path, args: list[str], message: str) -> None:
    r = run_cli(args[0], "-checkpoint", str(root), *args[1:], env=base_env())
    assert r.code == 2, r
    assert r.err.startswith(f"publish: {message}"), r.err


class _Saves(Saves):
    """Saves of known existence and size, for the rule alone."""

    def __init__(self, there: dict[str, int]) -> None:
        from publish.stores.posix import PosixStore

        self.there = there
        super().__init__(None, PosixStore("/nonexistent"))  # type: ignore[arg-type]

    def __call__(self, path: str) -> bool:
        return path in self.there

    def size(self, entry: layout.Entry) -> Any:
        from publish.ops.capacity import Size

        return Size(self.there[entry.path], "manifest")


@given(
    saves=st.lists(st.tuples(st.integers(0, 50), st.booleans(), st.booleans()), min_size=1, max_size=10),
    keep=st.integers(1, 12),
    every=st.integers(0, 4),
    cap=st.integers(1, 200),
)
def test_the_rule_for_any_saves(saves: list[tuple[int, bool, bool]], keep: int, every: int, cap: int) -> None:
    """For any sizes, saves deleted by hand and saves not yet mirrored: the newest save that exists stays;
    every save not yet mirrored stays; what stays of the saves that exist and are mirrored, with the saves
    not yet mirrored newer than them, adds up to at most the cap unless only the newest is kept; and what
    stays is never more than -keep alone would keep; no save stays while a newer one goes."""
    from publish.ops.retention import Schedule, split

    entries = [layout.Entry(0, i, f"exec/a/checkpoint-{i}") for i in range(len(saves))]
    there = {e.path: size for e, (size, exists, _) in zip(entries, saves) if exists}
    held = {e.name for e, (_, _, pending) in zip(entries, saves) if pending}
    if not there:
        return
    policy = Policy(keep, every)
    policy.bytes, policy.held = cap, held
    sched = Schedule(entries, [], policy, _Saves(there))
    alone = Policy(keep, every)
    alone.held = held
    _, kept_alone = split(entries, alone, _Saves(there))
    staying = [e for e in entries if e.name in sched.staying]
    assert set(sched.staying) <= {e.name for e in kept_alone}
    newest = max((e for e in entries if e.path in there), key=layout.Entry.key)
    assert newest.name in sched.staying
    assert held & {e.name for e in kept_alone} <= set(sched.staying)
    counted = [e for e in staying if e.path in there]
    if len(counted) > 1:
        assert sum(there[e.path] for e in counted) <= cap or any(e.name in held for e in counted)
    assert {e.name for e in sched.gone} | set(sched.staying) == {e.name for e in entries}
    # the newest that add up: no save that exists stays while a newer one that -keep alone keeps goes
    capped = [e for e in kept_alone if e.path in there and e.name not in held]
    went = [e for e in capped if e.name not in sched.staying]
    stayed = [e for e in capped if e.name in sched.staying]
    assert (
        not went
        or not stayed
        or max(stayed, key=layout.Entry.key).key() > max(went, key=layout.Entry.key).key()
    )
    assert all(e.key() > w.key() for e in stayed for w in went)


# ------------------------------------------------------------------------------------------------ metrics


def _samples(path: Path) -> dict[tuple[str, str], float]:
    found = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            found[(s.name, s.labels.get("entry", ""))] = s.value
            assert s.labels["root"]
    return found


def test_run_metrics_export_sizes_and_free_space(root: Path, tmp_path: Path) -> None:
    """-metrics: each publication's bytes by entry, their sum, and the root filesystem's free and total
    bytes, as the root holds them after the prune; prometheus_client reads the file."""
    saves = root / "exec/A"
    sizes = {s: save(saves, s, s * 1000)[1] for s in (1, 2, 3)}
    prom = tmp_path / "publish.prom"
    cmd = command() or [sys.executable, "-m", "publish"]
    r = subprocess.run(
        [*cmd, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-epoch", "0", "-keep", "2",
         "-metrics", str(prom), "--", "true"],
        env={**base_env(), "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r
    got = _samples(prom)
    entries = {layout.name(0, s, f"exec/A/checkpoint-{s}"): sizes[s] for s in (2, 3)}
    assert {e: v for (n, e), v in got.items() if n == "publish_save_bytes"} == entries
    assert got[("publish_publications_bytes", "")] == sum(entries.values())
    fs = os.statvfs(root)
    assert got[("publish_root_size_bytes", "")] == fs.f_blocks * fs.f_frsize
    assert 0 < got[("publish_root_free_bytes", "")] <= got[("publish_root_size_bytes", "")]


# ----------------------------------------------------------------------------------------------------- S3


def s3_save(root: Root, step: int, size: int, attempt: str = "a") -> tuple[str, int, str]:
    """A save of two objects put on the S3 root, published by the command (its manifest written); the path,
    its bytes and the entry's name."""
    path = f"exec/{attempt}/checkpoint-{step}"
    root.put(f"{path}/model.safetensors", b"w" * size)
    root.put(f"{path}/trainer_state.json", b"{}")
    r = root.run("publish", "-epoch", "0", f"{root.url}/{path}", str(step))
    assert r.code == 0, r
    return path, size + 2, layout.name(0, step, path)


@pytest.mark.s3
def test_s3_status_sizes_and_keep_bytes(s3_server: S3Server, tmp_path: Path) -> None:
    """On S3: sizes from the manifests (or one LIST when there is none), no free space (null), and
    -keep-bytes keeps the newest saves that fit, never fewer than one."""
    root = Root(s3_server, tmp_path)
    made = {s: s3_save(root, s, s * 1000) for s in (1, 2, 3, 4)}
    root.s3.delete_object(Bucket=root.bucket, Key=f"{root.prefix}/man/{made[3][2]}")
    doc = json.loads(root.run("status", "-json").out)
    pubs = {p["step"]: p for p in doc["publications"]}
    assert {s: (p["bytes"], p["bytes_from"]) for s, p in pubs.items()} == {
        4: (4002, "manifest"),
        3: (3002, "files"),
        2: (2002, "manifest"),
        1: (1002, "manifest"),
    }
    assert doc["space"] is None and doc["bytes"] == 10008
    r = root.run("status")
    assert r.code == 0 and "space: the saves of 4 publications hold 10.0 kB\n" in r.out, r
    r = root.run("prune", "-keep", "4", "-keep-bytes", "7004")
    assert r.code == 0, r
    assert sorted(layout.parse(e).step for e in root.entries()) == [3, 4]
    assert not root.keys("exec/a/checkpoint-2/") and root.keys("exec/a/checkpoint-3/")
    r = root.run("prune", "-keep", "4", "-keep-bytes", "1")
    assert r.code == 0, r
    assert [layout.parse(e).step for e in root.entries()] == [4]
    assert "over -keep-bytes 1: kept, as a prune keeps at least one save" in r.err, r.err


@pytest.mark.s3
def test_s3_run_metrics_export_sizes_and_no_free_space(s3_server: S3Server, tmp_path: Path) -> None:
    """-metrics on an S3 root: each publication's bytes (from its manifest) and their sum; an S3 root has no
    filesystem, so neither free nor total bytes is written (no gauge rather than a made-up value)."""
    root = Root(s3_server, tmp_path)
    made = {s: s3_save(root, s, s * 1000) for s in (1, 2)}
    prom = tmp_path / "publish.prom"
    r = root.run(
        "run", "-framework", "dcp", "-attempt", "a", "-epoch", "0", "-metrics", str(prom), "--", "true"
    )
    assert r.code == 0, r
    got = _samples(prom)
    entries = {name: size for _, size, name in made.values()}
    assert {e: v for (n, e), v in got.items() if n == "publish_save_bytes"} == entries
    assert got[("publish_publications_bytes", "")] == sum(entries.values())
    assert not {n for n, _ in got if n in ("publish_root_free_bytes", "publish_root_size_bytes")}


@pytest.mark.s3
def test_run_mirror_keep_bytes_caps_the_mirror_after_its_uploads(weed: Weed, tmp_path: Path) -> None:
    """run -mirror URL -mirror-keep M -mirror-keep-bytes SIZE, end to end: the mirror keeps the newest saves
    that fit in SIZE, the fast root its own -keep, and the save the cap leaves off the mirror is not pending:
    run exits 0, and the next run uploads nothing again.  On the code before, pending did not know the cap:
    that save was uploaded, pruned from the mirror at once, counted "not mirrored" (exit 1, so a job FAILED
    each time) and uploaded again by every run."""
    fast = tmp_path / "fast"
    assert run_cli("init", "-checkpoint", str(fast)).code == 0
    sizes = {s: save(fast / "exec" / "A", s, 1000)[1] for s in (1, 2, 3)}
    mirror = Root(weed, tmp_path, init=False)
    cap = sizes[2] + sizes[3]
    r = run_cli(
        "run", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework", "hf",
        "-attempt", "A", "-epoch", "0", "-keep", "3", "-mirror-keep", "3", "-mirror-keep-bytes", str(cap),
        "--", "true",
    )  # fmt: skip
    assert r.code == 0, (r.out, r.err)
    assert sorted(layout.parse(e).step for e in mirror.entries()) == [2, 3]
    assert not mirror.keys("exec/A/checkpoint-1/") and mirror.keys("exec/A/checkpoint-2/")
    assert sorted(layout.parse(n).step for n in os.listdir(fast / "pub")) == [1, 2, 3]
    again = run_cli(
        "run", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework", "hf",
        "-attempt", "B", "-epoch", "1", "-keep", "3", "-mirror-keep", "3", "-mirror-keep-bytes", str(cap),
        "--", "true",
    )  # fmt: skip
    assert (again.code, again.out) == (0, ""), (again.out, again.err)
    assert not mirror.keys("exec/A/checkpoint-1/")


@pytest.mark.s3
def test_keep_bytes_never_removes_a_save_not_yet_mirrored(weed: Weed, tmp_path: Path) -> None:
    """prune -mirror -keep-bytes: the saves the mirror has no entry for stay, however little the cap
    allows; the mirrored one goes.  Their bytes count: the older mirrored save is over the cap."""
    fast = tmp_path / "fast"
    fast.mkdir()
    mirror = Root(weed, tmp_path, init=False)
    made = published(fast, {1: 1000, 2: 1000, 3: 1000})
    mirror.put("exec/a/checkpoint-1/model.safetensors", b"w")
    mirror.put(f"pub/{made[1][2]}")
    mirror.put("exec/a/checkpoint-2/model.safetensors", b"w")
    mirror.put(f"pub/{made[2][2]}")
    shutil.rmtree(made[3][0])  # the newest gone: step 2 is the save resolve answers
    flags = ["-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds]
    r = run_cli("prune", *flags, "-keep", "3", "-keep-bytes", "1")
    assert r.code == 0, r
    assert steps_left(fast) == [2, 3]
    mirror.s3.delete_object(Bucket=mirror.bucket, Key=f"{mirror.prefix}/pub/{made[2][2]}")
    made.update(published(fast, {4: 1000, 5: 1000}))
    r = run_cli("prune", *flags, "-keep", "5", "-keep-bytes", "1")  # 2, 4 and 5 pending: all stay
    assert r.code == 0, r
    assert steps_left(fast) == [2, 3, 4, 5]
    assert all(made[s][0].is_dir() for s in (2, 4, 5))


@pytest.mark.s3
def test_mirror_keep_bytes_caps_the_mirror(weed: Weed, tmp_path: Path) -> None:
    """prune -mirror URL -mirror-keep M -mirror-keep-bytes SIZE: the mirror keeps the newest of its saves
    that fit; the fast root is pruned by its own flags."""
    fast = tmp_path / "fast"
    fast.mkdir()
    mirror = Root(weed, tmp_path)
    for s in (1, 2, 3):
        s3_save(mirror, s, 1000)
    flags = ["-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds]
    r = run_cli("prune", *flags, "-keep", "3", "-mirror-keep", "3", "-mirror-keep-bytes", "2004")
    assert r.code == 0, r
    assert sorted(layout.parse(e).step for e in mirror.entries()) == [2, 3]
    r = run_cli("prune", *flags, "-keep", "3", "-mirror-keep", "3", "-mirror-keep-bytes", "1")
    assert r.code == 0, r
    assert "over -mirror-keep-bytes 1: kept" in r.err, r.err
    assert [layout.parse(e).step for e in mirror.entries()] == [3]


def test_sizes_measured_at_once_fail_as_one_at_a_time_would() -> None:
    """Status measures the saves of many publications at once (POSIX): of two faults, the one of the newer
    publication is said, as when each was measured in turn; a save the store cannot measure (a FIFO in it,
    a folder of it this user may not read) is said as not known, not a failure; a manifest this user may
    not read is passed over for the files."""
    import errno

    from publish.ops.capacity import sizes_of
    from publish.rules.deadline import UNBOUNDED
    from publish.rules.errors import Failure, FileError, StoreError

    unreadable = FileError("/r/exec/A/s1", OSError(errno.EIO, "Input/output error"), op="list")
    denied = FileError("/r/exec/A/s4", PermissionError(errno.EACCES, "Permission denied"), op="open")
    man_denied = FileError("/r/man/n5", PermissionError(errno.EACCES, "Permission denied"))

    class Store:
        def location(self, path: str) -> str:
            return f"/r/{path}"

        def save_sizes(self, dl: object, paths: list[str]) -> list[object]:
            faults = {
                "exec/A/s1": unreadable,
                "exec/A/s3": Failure("/r/exec/A/s3/x is a FIFO, not a regular file"),
                "exec/A/s4": denied,
            }
            return [faults.get(p, 7) for p in paths]

    down = StoreError("man/ went away", op="read")
    names, paths = ["n1", "n2", "n3"], ["exec/A/s1", "exec/A/s2", "exec/A/s3"]
    with pytest.raises(FileError) as raised:
        sizes_of(UNBOUNDED, Store(), names, paths, {"n1": None, "n2": down, "n3": None})  # type: ignore[arg-type]
    assert raised.value is unreadable
    with pytest.raises(StoreError) as failed:
        sizes_of(UNBOUNDED, Store(), names[1:], paths[1:], {"n2": down, "n3": None})  # type: ignore[arg-type]
    assert failed.value is down
    names, paths = [*names[1:], "n4", "n5"], [*paths[1:], "exec/A/s4", "exec/A/s5"]
    read = {"n2": None, "n3": None, "n4": None, "n5": man_denied}
    sizes = sizes_of(UNBOUNDED, Store(), names, paths, read)  # type: ignore[arg-type]
    assert [(s.bytes, s.source, s.why) for s in sizes] == [
        (7, "files", ""),
        (None, "", "/r/exec/A/s3/x is a FIFO, not a regular file"),
        (None, "", "/r/exec/A/s4: Permission denied"),
        (7, "files", ""),
    ]
