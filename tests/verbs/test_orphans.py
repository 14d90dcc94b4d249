"""prune -orphans (and run -keep N -orphans, status -keep N -orphans): what in other attempts' folders no kept
entry names, holds or lies in goes once nothing in it changed for -orphans-age, through prune's tombstones;
on S3 old multipart uploads under exec/ are aborted.  POSIX, then SeaweedFS and moto."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from publish.ops import Say
from publish.ops.orphans import Orphans
from publish.ops.retention import Policy, prune
from publish.rules import layout, timestamps
from publish.rules.deadline import UNBOUNDED
from publish.rules.files import fsops, walks
from publish.rules.redact import shown
from publish.stores.posix import PosixStore
from tests.conftest import base_env, run_cli
from tests.support.crash import Cut, Killed, tree
from tests.support.s3roots import Root
from tests.support.servers import S3Server

AGE = "100ms"  # -orphans-age in the tests that want leftovers old: they wait WAIT first
WAIT = 0.25

# The scenario: the entries (epoch, step, path) and the files of a root, attempt C being the current one.
ENTRIES = [
    (1, 4, "exec/A/checkpoint-4"),  # kept: the newest
    (0, 7, "exec/D/global_step7/mp_rank_00"),  # kept: exec/D/global_step7 holds it
    (0, 5, "exec/E"),  # kept: a whole attempt's folder, everything in exec/E lies in it
    (0, 1, "exec/F/checkpoint-1"),  # gone with -keep 3: prune removes it as it always has
]
FILES = [
    "exec/A/checkpoint-4/model.bin",
    "exec/A/checkpoint-3/model.bin",  # a whole save nobody published
    "exec/A/tmp-checkpoint-5/model.bin",  # a partial save
    "exec/A/stray.bin",
    "exec/B/checkpoint-1/model.bin",  # an attempt no entry names at all
    "exec/B/tmp/x/y",
    "exec/C/tmp-checkpoint-9/model.bin",  # the current attempt's
    "exec/D/global_step7/mp_rank_00/model_states.pt",
    "exec/D/global_step7/zero_pp_rank_0_optim_states.pt",
    "exec/D/other/x",
    "exec/E/checkpoint-2/w",
    "exec/F/checkpoint-1/w",
]
# What -orphans removes besides exec/F/checkpoint-1, in the order it prints them.
ORPHANS = [
    "exec/A/checkpoint-3",
    "exec/A/stray.bin",
    "exec/A/tmp-checkpoint-5",
    "exec/B",
    "exec/D/other",
    "exec/F",
]
KEPT = [
    "exec/A/checkpoint-4/model.bin",
    "exec/C/tmp-checkpoint-9/model.bin",
    "exec/D/global_step7/mp_rank_00/model_states.pt",
    "exec/D/global_step7/zero_pp_rank_0_optim_states.pt",
    "exec/E/checkpoint-2/w",
]


def posix_root(base: Path, name: str = "root") -> Path:
    root = base / name
    (root / "pub").mkdir(parents=True)
    for path in FILES:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(path.encode())
    for epoch, step, path in ENTRIES:
        (root / "pub" / layout.name(epoch, step, path)).touch()
    return root


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "exec").rglob("*") if not p.is_dir())


def prune_args(root: Path | str, *more: str) -> list[str]:
    return ["prune", "-checkpoint", str(root), "-keep", "3", *more]


def removed(root: str, paths: list[str], verb: str = "removed") -> list[str]:
    return [f"{verb} {root}/{p}" for p in paths]


# -- POSIX ---------------------------------------------------------------------------------------------------


def test_old_leftovers_of_other_attempts_go_and_what_kept_entries_relate_to_stays(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    time.sleep(WAIT)
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
    assert (r.code, r.err) == (0, ""), r
    assert r.lines == removed(str(root), ["exec/F/checkpoint-1", *ORPHANS])
    assert files(root) == KEPT
    assert os.listdir(root / "tomb") == []
    assert sorted(os.listdir(root / "pub")) == sorted(layout.name(*e) for e in ENTRIES[:3])
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-4\n"


def test_without_orphans_prune_removes_only_what_entries_named(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    time.sleep(WAIT)
    r = run_cli(*prune_args(root))
    assert r.code == 0 and r.lines == removed(str(root), ["exec/F/checkpoint-1"]), r
    assert files(root) == sorted(p for p in FILES if p != "exec/F/checkpoint-1/w")


def test_young_leftovers_stay_with_the_default_age(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    r = run_cli(*prune_args(root, "-orphans", "-attempt", "C"))
    assert r.code == 0 and r.lines == removed(str(root), ["exec/F/checkpoint-1"]), r
    assert files(root) == sorted(p for p in FILES if p != "exec/F/checkpoint-1/w")


def test_a_tree_whose_times_were_set_back_is_as_young_as_its_last_change(tmp_path: Path) -> None:
    """A save copied in with its old mtimes (cp -p, rsync -a) has just changed all the same: its ctime."""
    root = posix_root(tmp_path)
    then = time.time() - 10 * 3600
    for where, dirs, names in os.walk(root / "exec"):
        for name in dirs + names:
            os.utime(os.path.join(where, name), (then, then))
    os.utime(root / "exec", (then, then))
    r = run_cli(*prune_args(root, "-orphans", "-attempt", "C"))
    assert r.code == 0 and r.lines == removed(str(root), ["exec/F/checkpoint-1"]), r


def test_the_current_attempt_from_dispatch_attempt_is_never_touched(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    time.sleep(WAIT)
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE), env={"DISPATCH_ATTEMPT": "C"})
    assert r.code == 0 and r.lines == removed(str(root), ["exec/F/checkpoint-1", *ORPHANS]), r
    assert (root / "exec/C/tmp-checkpoint-9/model.bin").exists()


def test_without_an_attempt_every_attempt_is_looked_at_and_the_age_still_applies(tmp_path: Path) -> None:
    # an age of seconds, not AGE: the fresh file must still be younger than it when a one file, started
    # beside busy test workers, looks (it took over 100 ms once)
    root = posix_root(tmp_path)
    time.sleep(2.2)
    (root / "exec" / "B" / "tmp" / "fresh").write_bytes(b"a live dispatch writes here")
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", "2s"))
    assert r.code == 0, r
    gone = [
        "exec/F/checkpoint-1",
        *ORPHANS[:3],
        "exec/C",
        *ORPHANS[4:],
    ]  # exec/C too; exec/B changed just now
    assert r.lines == removed(str(root), gone)
    assert (root / "exec" / "B" / "tmp" / "fresh").exists()


def test_a_folder_named_like_a_reserved_path_is_an_ordinary_leftover(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    made = ["exec/pub/x", "exec/tomb/x", "exec/exec/x", "exec/.publish-root/x", "exec/A/pub/x", "exec/A/tomb"]
    for path in made:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x")
    (root / "tomb").mkdir()
    time.sleep(WAIT)
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
    assert r.code == 0, r
    for path in ["exec/.publish-root", "exec/A/pub", "exec/A/tomb", "exec/exec", "exec/pub", "exec/tomb"]:
        assert f"removed {root}/{path}" in r.lines, r
        assert not (root / path).exists()
    # The root's own folders stay, and what is in them.
    assert sorted(os.listdir(root / "pub")) == sorted(layout.name(*e) for e in ENTRIES[:3])
    assert (root / "tomb").is_dir() and os.listdir(root / "tomb") == []
    assert files(root) == KEPT


def test_a_link_inside_a_leftover_is_removed_never_followed(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret").write_bytes(b"keep me")
    (root / "exec" / "B" / "evil").symlink_to(outside)
    (root / "exec" / "B" / "tmp" / "evil-file").symlink_to(outside / "deep" / "secret")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "w").write_bytes(b"behind an attempt that is a link")
    (root / "exec" / "L").symlink_to(linked)
    time.sleep(WAIT)
    # Written now: a walk that followed the link would find exec/B young and keep it.
    (outside / "deep" / "secret").write_bytes(b"keep me")
    before = tree(outside, linked)
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
    assert r.code == 0, r
    assert f"removed {root}/exec/B" in r.lines
    assert r.err == f"publish: prune: left {root}/exec/L in place: {root}/exec/L is a symbolic link\n"
    assert tree(outside, linked) == before
    assert not (root / "exec" / "B").exists() and (root / "exec" / "L").is_symlink()


def test_a_leftover_too_deep_to_tell_its_age_is_left_in_place_with_why(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    deep = root / "exec" / "Z" / "/".join(["d"] * (walks.NEWEST_DEPTH + 1))
    deep.mkdir(parents=True)
    time.sleep(WAIT)
    args = prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C")
    why = f"its age cannot be told: more than {walks.NEWEST_DEPTH} levels of folders below it"
    dry = run_cli(*args, "-dry-run")
    assert dry.err == f"publish: prune: would leave {root}/exec/Z in place: {why}\n", dry
    r = run_cli(*args)
    assert r.code == 0 and r.err == f"publish: prune: left {root}/exec/Z in place: {why}\n", r
    assert deep.is_dir() and f"removed {root}/exec/B" in r.lines


def test_a_leftover_that_cannot_be_examined_or_read_is_left_in_place_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = posix_root(tmp_path)
    (root / "exec" / "X").symlink_to("X")  # a link loop: list_folders cannot tell what it is
    time.sleep(WAIT)
    real = walks.newest_tree

    def refused(fd: int, *a: Any) -> float:  # the tests run as root, whom no mode stops
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/exec/B"):
            raise PermissionError(13, "Permission denied", "tmp/x")
        return real(fd, *a)

    monkeypatch.setattr(walks, "newest_tree", refused)
    monkeypatch.delenv("PUBLISH_BIN", raising=False)  # the refusal is planted in this process: run it here
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
    assert r.code == 0, r
    assert r.err == (
        f"publish: prune: left {root}/exec/B in place: its age cannot be told: {root}/exec/B/tmp/x: "
        "Permission denied\n"
        f"publish: prune: left {root}/exec/X in place: it cannot be examined: Too many levels of symbolic links\n"
    )
    assert r.lines == removed(str(root), ["exec/F/checkpoint-1", *[o for o in ORPHANS if o != "exec/B"]])
    assert (root / "exec" / "B" / "tmp" / "x" / "y").exists() and (root / "exec" / "X").is_symlink()


def test_newest_tree_counts_every_entry_never_follows_a_link_and_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path / "t"
    (top / "a" / "b").mkdir(parents=True)
    for name in ("f1", "a/f2", "a/b/f3"):
        (top / name).write_bytes(b"x")
    (top / "a" / "link").symlink_to("/")
    fd = os.open(top, fsops.DIR_FLAGS)
    try:
        newest = max(walks.changed_at(os.lstat(p)) for p in [top, *top.rglob("*")])
        assert walks.newest_tree(fd) == newest
        with pytest.raises(walks.Untold, match="more than 4 files and folders below it"):
            walks.newest_tree(fd, entries=4)
        assert walks.newest_tree(fd, entries=6) == newest
        with pytest.raises(walks.Untold, match="more than 2 levels"):
            walks.newest_tree(fd, depth=2)
        # A folder that vanishes or is swapped while the walk runs: the tree is changing now.
        monkeypatch.setattr(walks, "enter", lambda *a: walks.GONE)
        assert walks.newest_tree(fd) == walks.CHANGING
    finally:
        os.close(fd)


def test_hostile_names_are_quoted_in_every_line(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    hostile = "B\x1b[31m\nremoved .."
    (root / "exec" / hostile / "tmp").mkdir(parents=True)
    (root / "exec" / "A" / "tmp\r\x07").mkdir()
    time.sleep(WAIT)
    args = prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C")
    dry = run_cli(*args, "-dry-run")
    st = run_cli(
        "status", "-checkpoint", str(root), "-keep", "3", "-orphans", "-orphans-age", AGE, "-attempt", "C"
    )
    r = run_cli(*args)
    assert r.code == 0, r
    for path in ("exec/A/tmp\r\x07", f"exec/{hostile}"):
        line = f"removed {shown(f'{root}/{path}')}"
        assert '"' in line and line in r.lines
        assert "would " + line.replace("removed", "remove", 1) in dry.lines
        assert "  would " + line.replace("removed", "remove", 1) in st.lines
    for out in (r.out, dry.out, st.out):
        assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert not (root / "exec" / hostile).exists()


def test_dry_run_and_status_show_first_what_prune_does(tmp_path: Path) -> None:
    dry_root, real_root = posix_root(tmp_path, "dry"), posix_root(tmp_path, "real")
    time.sleep(WAIT)
    flags = ["-orphans", "-orphans-age", AGE, "-attempt", "C"]
    before = tree(dry_root)
    dry = run_cli(*prune_args(dry_root, *flags, "-dry-run"))
    text = run_cli("status", "-checkpoint", str(dry_root), "-keep", "3", *flags)
    doc = run_cli("status", "-checkpoint", str(dry_root), "-keep", "3", *flags, "-json")
    assert tree(dry_root) == before
    real = run_cli(*prune_args(real_root, *flags))
    assert real.code == dry.code == text.code == doc.code == 0
    assert dry.lines == [
        line.replace("removed ", "would remove ", 1)
        for line in real.out.replace(str(real_root), str(dry_root)).splitlines()
    ]
    head = "prune -keep 3 -orphans -orphans-age 100ms -attempt C would remove entries: 1, and:"
    assert text.lines[text.lines.index(head) + 1 :] == [f"  {line}" for line in dry.lines]
    plan = json.loads(doc.out)["prune"]
    assert plan["orphans"] == {"age": 0.1, "attempt": "C", "folders": ORPHANS, "uploads": [], "left": []}
    assert plan["lines"] == dry.lines


def test_an_orphan_published_while_prune_runs_stays(tmp_path: Path) -> None:
    """A save published in a leftover after prune planned it (a hand publish of a save that sat unpublished
    for hours): prune reads pub/ again once its tombstones are durable, and keeps it."""
    root = posix_root(tmp_path)
    time.sleep(WAIT)
    store = PosixStore(str(root))

    class PublishedMeanwhile:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def create_tombs(self, dl: Any, names: list[str]) -> None:
            store.create_tombs(dl, names)
            (root / "pub" / layout.name(2, 3, "exec/A/checkpoint-3")).touch()

    policy = Policy(3)
    policy.orphans = Orphans(0.1, "C")
    out: list[str] = []
    err: list[str] = []
    prune(UNBOUNDED, PublishedMeanwhile(), Say(out.append, err.append), policy)  # type: ignore[arg-type]
    assert out == removed(
        str(root), ["exec/F/checkpoint-1", *[o for o in ORPHANS if o != "exec/A/checkpoint-3"]]
    )
    assert len(err) == 1 and "exec/A/checkpoint-3 in place: an entry published meanwhile" in err[0]
    assert (root / "exec/A/checkpoint-3/model.bin").exists() and os.listdir(root / "tomb") == []


def test_a_prune_cut_anywhere_in_an_orphan_is_finished_by_the_next(tmp_path: Path) -> None:
    say = Say(lambda _: None, lambda _: None)

    def policy() -> Policy:
        p = Policy(3)
        p.orphans = Orphans(0.1, "C")
        return p

    count = posix_root(tmp_path, "count")
    ref = posix_root(tmp_path, "ref")
    time.sleep(WAIT)
    full = Cut(PosixStore(str(count)), 10**9)
    prune(UNBOUNDED, full, say, policy())  # type: ignore[arg-type]
    steps = full.steps
    assert steps >= 2 * (1 + len(ORPHANS))
    roots = [posix_root(tmp_path, f"cut-{budget}") for budget in range(steps)]
    r = run_cli(*prune_args(ref, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
    assert r.code == 0, r
    want = tree(ref)
    time.sleep(WAIT)
    half_removed_seen = 0
    for budget, root in enumerate(roots):
        with contextlib.suppress(Killed):
            prune(UNBOUNDED, Cut(PosixStore(str(root)), budget), say, policy())  # type: ignore[arg-type]
        pending = (
            [layout.parse_tomb(n) for n in os.listdir(root / "tomb")] if (root / "tomb").exists() else []
        )
        for folder in pending:
            if folder in ORPHANS and (root / folder).is_dir():
                # What is left of it may look like a whole save: never published again.
                saves = [p for p in (root / folder).rglob("*") if p.is_dir()] or [root / folder]
                half_removed_seen += 1
                r = run_cli("publish", "-checkpoint", str(root), str(saves[0]), "99")
                assert r.code == 1 and "a prune was removing it" in r.err, r
        r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, "-attempt", "C"))
        assert r.code == 0, r
        assert tree(root) == want, f"cut after {budget} of {steps} steps"
        shutil.rmtree(root)
    assert half_removed_seen > 0


def test_run_removes_other_attempts_leftovers_after_command_exits(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    script = 'mkdir -p "$PUBLISH_SAVES/tmp-checkpoint-1"; sleep 0.3'
    r = run_cli(
        "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "G", "-keep", "3",
        "-orphans", "-orphans-age", AGE, "--", "sh", "-c", script, env=base_env(),
    )  # fmt: skip
    assert r.code == 0, r
    assert [line for line in r.lines if line.startswith("removed ")] == removed(
        str(root), ["exec/F/checkpoint-1", *ORPHANS[:4], "exec/C", *ORPHANS[4:]]
    )
    assert (root / "exec" / "G" / "tmp-checkpoint-1").is_dir()  # the current attempt's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["prune", "-orphans-age", "0", "-orphans"],
            'invalid value "0" for flag -orphans-age: must be positive',
        ),
        (["prune", "-orphans-age", "1h"], "-orphans-age applies to -orphans: give -orphans"),
        (["prune", "-attempt", "C"], "-attempt applies to -orphans: give -orphans"),
        (["prune", "-orphans", "-attempt", "a/b"], "attempt 'a/b' is not one path element"),
        (["status", "-orphans"], "-orphans applies to the prune -keep N shows: give -keep"),
        (
            ["run", "-framework", "hf", "-orphans", "--", "true"],
            "-orphans applies to the prune -keep N asks for",
        ),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    root = posix_root(tmp_path)
    before = tree(root)
    r = run_cli(args[0], "-checkpoint", str(root), *args[1:], env=base_env())
    assert r.code == 2 and r.err.startswith(f"publish: {message}"), r
    assert tree(root) == before


CONTROL = ["C\n", "C\t", "C\x7f"]  # a stray newline, a tab, DEL (Go's %q escapes each: \n, \t, \x7f)


@pytest.mark.parametrize("attempt", CONTROL)
@pytest.mark.parametrize("source", ["flag", "env"])
def test_an_attempt_holding_a_control_character_is_refused_and_the_attempt_it_meant_is_kept(
    tmp_path: Path, attempt: str, source: str
) -> None:
    """Issue #31 (-attempt $'A\\n'): the attempt ``C<LF>`` is not the current attempt ``C`` with a stray
    newline taken as one: prune -orphans refuses it as a usage error, as it refuses one holding ``/``, from
    the flag and from DISPATCH_ATTEMPT, and the current attempt's folder stays with nothing removed (it was
    taken for another attempt, and exec/C went as a leftover)."""
    from publish.rules.go.gocompat import go_quote

    root = posix_root(tmp_path)
    time.sleep(WAIT)  # every leftover old enough for -orphans-age
    before = tree(root)
    flag, env = (["-attempt", attempt], {}) if source == "flag" else ([], {"DISPATCH_ATTEMPT": attempt})
    r = run_cli(*prune_args(root, "-orphans", "-orphans-age", AGE, *flag), env={**base_env(), **env})
    assert r.code == 2, r
    assert r.err.startswith(f"publish: attempt {go_quote(attempt)} holds a control character\n"), r.err
    assert "usage: publish prune" in r.err
    assert tree(root) == before
    assert (root / "exec/C/tmp-checkpoint-9/model.bin").is_file()


@pytest.mark.parametrize("attempt", CONTROL)
@pytest.mark.parametrize("source", ["flag", "env"])
@pytest.mark.parametrize(
    "verb",
    [
        ["watch", "-framework", "hf"],
        ["run", "-framework", "hf", "--", "true"],
        ["status", "-keep", "1", "-orphans"],
    ],
)
def test_every_verb_refuses_an_attempt_holding_a_control_character(
    tmp_path: Path, verb: list[str], source: str, attempt: str
) -> None:
    """Issue #31: watch, run and status refuse such an attempt as prune does, from the flag and from
    DISPATCH_ATTEMPT, before anything is touched: the root (missing here) is not made by run, nor watched."""
    from publish.rules.go.gocompat import go_quote

    root = tmp_path / "new-root"
    flag, env = (["-attempt", attempt], {}) if source == "flag" else ([], {"DISPATCH_ATTEMPT": attempt})
    r = run_cli(verb[0], "-checkpoint", str(root), *flag, *verb[1:], env={**base_env(), **env})
    assert r.code == 2, r
    assert r.err.startswith(f"publish: attempt {go_quote(attempt)} holds a control character\n"), r.err
    assert not root.exists()


def test_http_date_reads_what_s3_sends_in_last_modified() -> None:
    from email.utils import parsedate_to_datetime

    for text in (
        "Wed, 02 Dec 2026 09:27:57 GMT",
        "Sun, 29 Feb 2004 00:00:00 GMT",
        "Thu, 01 Jan 1970 00:00:00 GMT",
    ):
        assert timestamps.http_date(text) == parsedate_to_datetime(text).timestamp()
    for bad in ("", "Wed, 02 Dec 2026 09:27:57 UTC", "2026-12-02T09:27:57Z", "Wed, 02 Dez 2026 09:27:57 GMT"):
        with pytest.raises(ValueError):
            timestamps.http_date(bad)


# -- S3 ----------------------------------------------------------------------------------------------------


def s3_root(server: S3Server, tmp: Path) -> Root:
    root = Root(server, tmp)
    root.put_many([*FILES, *[f"pub/{layout.name(*e)}" for e in ENTRIES]], b"w")
    return root


def start_upload(root: Root, path: str, part: bool = True) -> str:
    key = f"{root.prefix}/{path}"
    upload_id: str = root.s3.create_multipart_upload(Bucket=root.bucket, Key=key)["UploadId"]
    if part:  # moto's Initiated is a fixed date in 2010: a part's LastModified says when it changed
        root.s3.upload_part(Bucket=root.bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p")
    return upload_id


def uploads(root: Root) -> list[str]:
    listed = root.s3.list_multipart_uploads(Bucket=root.bucket, Prefix=f"{root.prefix}/")
    return sorted(u["Key"][len(root.prefix) + 1 :] for u in listed.get("Uploads", []))


UPLOADS = ["exec/A/checkpoint-4/late.bin", "exec/A/upload.bin", "exec/B/big.bin", "exec/C/live.bin"]


@pytest.mark.s3
def test_s3_old_leftovers_and_uploads_go_young_ones_stay(s3_server: S3Server, tmp_path: Path) -> None:
    root = s3_root(s3_server, tmp_path)
    for path in UPLOADS:
        start_upload(root, path)
    r = root.run("prune", "-keep", "3", "-orphans", "-attempt", "C")
    assert r.code == 0 and r.lines == removed(root.url, ["exec/F/checkpoint-1"]), r
    assert uploads(root) == UPLOADS
    time.sleep(WAIT)
    flags = ["-orphans", "-orphans-age", AGE, "-attempt", "C"]
    dry = root.run("prune", "-keep", "3", *flags, "-dry-run")
    doc = json.loads(root.run("status", "-keep", "3", *flags, "-json").out)["prune"]
    r = root.run("prune", "-keep", "3", *flags)
    assert (r.code, r.err) == (0, ""), r
    aborted = sorted(line.split(" (multipart upload ")[0] for line in r.lines if line.startswith("aborted "))
    assert aborted == [f"aborted {root.url}/{p}" for p in ["exec/A/upload.bin", "exec/B/big.bin"]]
    # exec/F held nothing but the folder the first prune removed: on S3 it is gone with it.
    assert [line for line in r.lines if not line.startswith("aborted ")] == removed(root.url, ORPHANS[:-1])
    assert dry.lines == [
        line.replace("removed ", "would remove ", 1).replace("aborted ", "would abort ", 1)
        for line in r.lines
    ]
    assert doc["lines"] == dry.lines and doc["orphans"]["folders"] == ORPHANS[:-1]
    assert sorted(u["path"] for u in doc["orphans"]["uploads"]) == ["exec/A/upload.bin", "exec/B/big.bin"]
    assert root.keys("exec/") == KEPT
    assert uploads(root) == ["exec/A/checkpoint-4/late.bin", "exec/C/live.bin"]
    assert root.keys("tomb/") == []


@pytest.mark.s3
def test_s3_a_leftover_with_an_upload_still_running_stays(s3_server: S3Server, tmp_path: Path) -> None:
    # S3's times are whole seconds (moto's and SeaweedFS's too): a part sent now may look up to 1 s old, and
    # the prune looks a moment later; 3 s leaves it 2 s for that on a loaded machine.
    age, wait = "3s", 3.1
    root = Root(s3_server, tmp_path)
    root.put("exec/G/checkpoint-1/w", b"w")
    upload_id = start_upload(root, "exec/G/checkpoint-2/w", part=False)
    time.sleep(wait)
    key = f"{root.prefix}/exec/G/checkpoint-2/w"
    # Initiated long ago (by -orphans-age), but a part arrived just now: the upload, and its folder, are young.
    root.s3.upload_part(Bucket=root.bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p")
    flags = ["-keep", "1", "-orphans", "-orphans-age", age]
    r = root.run("prune", *flags)
    assert (r.code, r.out) == (0, ""), r
    assert root.keys("exec/") == ["exec/G/checkpoint-1/w"] and uploads(root) == ["exec/G/checkpoint-2/w"]
    time.sleep(wait)
    r = root.run("prune", *flags)
    assert r.lines == [
        f"aborted {root.url}/exec/G/checkpoint-2/w (multipart upload {upload_id})",
        f"removed {root.url}/exec/G",
    ], r
    assert root.keys("exec/") == [] and uploads(root) == []


@pytest.mark.s3
def test_s3_hostile_names_are_quoted(s3_server: S3Server, tmp_path: Path) -> None:
    root = s3_root(s3_server, tmp_path)
    hostile = (
        "B\t\x7fremoved s3:"  # \x1b cannot travel in a DeleteObjects body (XML 1.0), \n in a path to moto
    )
    root.put(f"exec/{hostile}/w", b"w")
    time.sleep(WAIT)
    r = root.run("prune", "-keep", "3", "-orphans", "-orphans-age", AGE, "-attempt", "C")
    assert r.code == 0, r
    line = f"removed {shown(f'{root.url}/exec/{hostile}')}"
    assert '"' in line and line in r.lines and "\t" not in r.out
    assert not [k for k in root.keys("exec/") if hostile in k]


@pytest.mark.s3
def test_s3_uploads_are_listed_page_by_page(weed: Any, tmp_path: Path) -> None:
    """SeaweedFS pages ListMultipartUploads by upload id alone, with no NextKeyMarker; moto sends one page."""
    root = Root(weed, tmp_path)
    made = sorted(start_upload(root, f"exec/A/{i}", part=i == 0) for i in range(5))
    store_client = root_store(root).client
    listed = store_client.list_uploads(f"{root.prefix}/exec/", max_uploads=2)
    assert sorted(u[1] for u in listed) == made
    assert store_client.sent["list-uploads"] == 3
    parts = store_client.list_parts(
        f"{root.prefix}/exec/A/0", [u[1] for u in listed if u[0].endswith("/0")][0]
    )
    assert parts is not None and len(parts) == 1
    assert store_client.list_parts(f"{root.prefix}/exec/A/0", "no-such-upload") is None
    assert store_client.abort_upload(f"{root.prefix}/exec/A/1", "no-such-upload") is False


def root_store(root: Root) -> Any:
    from publish.stores.s3 import S3Store

    return S3Store(root.bucket, root.prefix, root.server.credentials(), proxy=None, env={})


@pytest.mark.s3
def test_s3_a_prune_cut_at_every_request_is_finished_by_the_next(weed: Any, tmp_path: Path) -> None:
    from tests.support.fault_proxy import Action, FaultProxy, Respond

    proxy = FaultProxy(weed.endpoint)

    class LandThenRefuse(Action):
        def handle(self, p: FaultProxy, h: Any, req: Any) -> None:
            p.upstream_call(req)
            Respond(403, "AccessDenied").handle(p, h, req)

    flags = ["-keep", "1", "-orphans", "-orphans-age", AGE, "-attempt", "C"]

    def fill() -> Root:
        root = Root(weed, tmp_path, endpoint=proxy.endpoint)
        keys = ["exec/A/checkpoint-4/w", "exec/A/tmp/w", "exec/B/checkpoint-1/w", "exec/B/checkpoint-1/x/y"]
        root.put_many([*keys, "exec/C/tmp/w", f"pub/{layout.name(1, 4, 'exec/A/checkpoint-4')}"], b"w")
        start_upload(root, "exec/B/big.bin")
        return root

    try:
        ref = fill()
        time.sleep(WAIT)
        proxy.reset()
        r = ref.run("prune", *flags)
        assert r.code == 0, r.err
        requests = proxy.count()
        want = ref.keys()
        assert want == [
            "exec/A/checkpoint-4/w",
            "exec/C/tmp/w",
            f"pub/{layout.name(1, 4, 'exec/A/checkpoint-4')}",
        ]
        roots = [fill() for _ in range(requests)]
        time.sleep(WAIT)
        for n, root in enumerate(roots):
            action = [Respond(403, "AccessDenied"), LandThenRefuse()][n % 2]
            proxy.reset()
            seen = [0]

            def from_nth(req: Any, n: int = n, seen: list[int] = seen) -> bool:
                seen[0] += 1
                return seen[0] > n

            proxy.add(action, match=from_nth)
            assert root.run("prune", *flags).code == 1
            proxy.reset()
            r = root.run("prune", *flags)
            assert r.code == 0, r.err
            assert root.keys() == want, f"cut at request {n + 1} of {requests} ({type(action).__name__})"
            assert uploads(root) == []
    finally:
        proxy.stop()
