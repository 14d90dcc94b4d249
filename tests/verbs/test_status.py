"""publish status: what a root holds, read only, the same on POSIX and S3 roots (SeaweedFS, moto)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from publish.ops.idle import mark_prefix
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.stores.posix import PosixStore
from publish.verbs import status as status_module
from tests.conftest import Result, command, need, run_cli
from tests.support.crash import tree
from tests.support.fault_proxy import FaultProxy, Respond
from tests.support.s3roots import Root
from tests.support.servers import S3Server, Weed


def state(step: int) -> bytes:
    return json.dumps({"global_step": step}).encode()


PUBLISHED = [(0, 1, "exec/A/checkpoint-1"), (0, 2, "exec/A/checkpoint-2"), (0, 6, "exec/C/sub/checkpoint-6")]
PUBLISHED += [(1, 8, "exec/gone/checkpoint-8")]  # its save was deleted by hand


def fill(put: Callable[[str, bytes], None]) -> None:
    """The same root on any store: ``put(path, bytes)`` writes one file."""
    for step in (1, 2, 3):
        put(f"exec/A/checkpoint-{step}/trainer_state.json", state(step))
    put("exec/A/checkpoint-4/model.bin", b"w")  # no trainer_state.json yet
    put("exec/B/checkpoint-9/trainer_state.json", state(7))  # can never be whole
    put("exec/A/junk/x", b"j")  # no framework names it, no entry names it
    put("exec/A/epoch=0-step=5.ckpt", b"not a zip")  # a Lightning file still being written
    put("exec/C/sub/checkpoint-6/trainer_state.json", state(6))
    put("exec/old/checkpoint-0/w", b"o")  # an interrupted prune's
    put("tomb/" + layout.tomb_name("exec/old/checkpoint-0"), b"")
    for epoch, step, path in PUBLISHED:
        put("pub/" + layout.name(epoch, step, path), b"")
    # run -requeue's idle marks: two for the save a dispatch would resume from now, one for no save
    newest = layout.parse(layout.name(0, 6, "exec/C/sub/checkpoint-6"))
    for token in ("01", "02"):
        put(f"exec/{mark_prefix(newest)}{token}", b"")
    put(f"exec/{mark_prefix(None)}03", b"")


def expected(root: str, keep: int | None) -> dict[str, Any]:
    def loc(path: str) -> str:
        return f"{root}/{path}"

    def save(path: str, framework: str, step: int, state: str, message: str = "") -> dict[str, Any]:
        return {
            "path": path,
            "location": loc(path),
            "framework": framework,
            "step": step,
            "step_decimal": str(step),
            "state": state,
            "message": message,
        }

    pubs = [
        {
            "entry": layout.name(e, s, p),
            "epoch": e,
            "step": s,
            "epoch_decimal": str(e),
            "step_decimal": str(s),
            "path": p,
            "location": loc(p),
            "exists": p != "exec/gone/checkpoint-8",
        }
        for e, s, p in sorted(PUBLISHED, reverse=True)
    ]
    faulty = (
        f"{loc('exec/B/checkpoint-9')}/trainer_state.json: global_step 7 disagrees with the folder's step 9"
    )
    return {
        "version": 1,
        "root": root,
        "framework": None,
        "publications": pubs,
        "attempts": {"total": 4, "looked_into": 4},
        "saves": [
            # one verdict per save: hf's and dcp's rules both match checkpoint-N; hf's is the more specific
            save("exec/A/checkpoint-3", "hf", 3, "complete"),
            save("exec/A/checkpoint-4", "hf", 4, "incomplete"),
            save("exec/A/epoch=0-step=5.ckpt", "lightning", 5, "incomplete"),
            save("exec/B/checkpoint-9", "hf", 9, "faulty", faulty),
        ],
        "unnamed": [{"path": "exec/A/junk", "location": loc("exec/A/junk")}],
        "unreadable": [],
        "tombstones": [
            # no publication relates to its folder: the next prune removes it (its time is not read)
            {
                "path": "exec/old/checkpoint-0",
                "location": loc("exec/old/checkpoint-0"),
                "related": False,
                "time": None,
                "age": None,
            }
        ],
        "idle": {
            "save": "exec/C/sub/checkpoint-6",
            "location": loc("exec/C/sub/checkpoint-6"),
            "requeues": 2,
            "marks": 3,
        },
        "prune": None
        if keep is None
        else {
            "keep": keep,
            "keep_every": None,
            "keep_within": None,
            "orphans": None,
            # the newest entry's save is gone: it counts for nothing, so -keep 2 keeps steps 6 and 2
            "entries": [layout.name(0, 1, "exec/A/checkpoint-1")],
            "lines": [
                f"would remove {loc('exec/old/checkpoint-0')}",
                f"would remove {loc('exec/A/checkpoint-1')}",
            ],
            "refused": None,
        },
    }


def posix_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"

    def put(path: str, data: bytes) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    fill(put)
    return root


def doc(r: Result) -> dict[str, Any]:
    """The document, each publication's ``time`` and ``age`` checked for their form and taken out (the
    tests that check their values are in tests/verbs/test_retention.py), and so the sizes and free space
    (tests/verbs/test_capacity.py)."""
    assert (r.code, r.err) == (0, ""), r.err
    assert len(r.lines) == 1  # one JSON document on one line
    parsed: dict[str, Any] = json.loads(r.out)
    capacity(parsed)
    for pub in parsed["publications"]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", pub.pop("time"))
        age = pub.pop("age")
        assert isinstance(age, (int, float)) and age >= 0
    return parsed


def capacity(parsed: dict[str, Any]) -> None:
    """Check the form of the capacity fields of a status document (and its mirror's), and take them out."""
    for d in [parsed] + ([parsed["mirror"]] if "mirror" in parsed else []):
        for pub in d["publications"]:
            size, source, error = pub.pop("bytes"), pub.pop("bytes_from"), pub.pop("bytes_error")
            assert (size is None) == (source is None) and source in (None, "manifest", "files")
            assert size is not None or error is not None or not pub["exists"]
        assert d.pop("bytes") >= 0
        space = d.pop("space")
        assert space is None or 0 <= space["free_bytes"] <= space["total_bytes"]
        if d["prune"] is not None:
            assert (d["prune"].pop("keep_bytes"), d["prune"].pop("notes")) == (None, [])


@pytest.mark.parametrize("keep", [None, 2])
def test_posix_status_json_reports_everything_and_changes_nothing(tmp_path: Path, keep: int | None) -> None:
    root = posix_root(tmp_path)
    before = tree(root)
    flags = [] if keep is None else ["-keep", str(keep)]
    r = run_cli("status", "-checkpoint", str(root), "-json", *flags)
    assert doc(r) == expected(str(root), keep)
    assert tree(root) == before


def test_posix_status_text(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    r = run_cli("status", "-checkpoint", str(root), "-keep", "2")
    assert (r.code, r.err) == (0, ""), r.err
    assert r.lines[:5] == [
        f"publications in {root}/pub: 4, newest first",
        f"  epoch 1 step 8 {root}/exec/gone/checkpoint-8 (MISSING)",
        f"  epoch 0 step 6 {root}/exec/C/sub/checkpoint-6 (exists), 18 B by its files",  # no manifests
        f"  epoch 0 step 2 {root}/exec/A/checkpoint-2 (exists), 18 B by its files",
        f"  epoch 0 step 1 {root}/exec/A/checkpoint-1 (exists), 18 B by its files",
    ]
    assert f"  complete   {root}/exec/A/checkpoint-3 (hf, step 3)" in r.lines
    assert f"  incomplete {root}/exec/A/epoch=0-step=5.ckpt (lightning, step 5)" in r.lines
    faulty = [line for line in r.lines if line.startswith("  faulty ")]
    assert faulty == [
        f"  faulty     {root}/exec/B/checkpoint-9 (hf, step 9): {root}/exec/B/checkpoint-9/trainer_state.json: "
        "global_step 7 disagrees with the folder's step 9"
    ]
    assert f"  {root}/exec/A/junk" in r.lines and f"  {root}/exec/old/checkpoint-0" in r.lines
    assert (
        f"run -requeue: 2 idle requeues in a row from {root}/exec/C/sub/checkpoint-6 "
        "(3 marks exec/.idle-* in all; removing them starts the count again)"
    ) in r.lines
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", "2", "-dry-run")
    at = r.lines.index("prune -keep 2 would remove entries: 1, and:")
    assert r.lines[at + 1 :] == ["  " + line for line in dry.lines]


def test_status_of_an_empty_root(tmp_path: Path) -> None:
    r = run_cli("status", "-checkpoint", str(tmp_path), "-json")
    assert doc(r) == {
        "version": 1,
        "root": str(tmp_path),
        "framework": None,
        "publications": [],
        "attempts": {"total": 0, "looked_into": 0},
        "saves": [],
        "unnamed": [],
        "unreadable": [],
        "tombstones": [],
        "idle": {"save": None, "location": None, "requeues": 0, "marks": 0},
        "prune": None,
    }


def test_status_fails_on_a_bad_entry_as_resolve_does(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    (root / "pub" / "stray").touch()
    s = run_cli("status", "-checkpoint", str(root))
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (s.code, s.out, s.err) == (r.code, "", r.err)
    assert s.code == 1 and f"{root}/pub/stray" in s.err


def test_status_fails_on_a_bad_tombstone_as_prune_does(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    (root / "tomb" / "lower").touch()
    s = run_cli("status", "-checkpoint", str(root))
    p = run_cli("prune", "-checkpoint", str(root), "-dry-run")
    assert (s.code, s.out, s.err) == (p.code, "", p.err)
    assert s.code == 1 and f"{root}/tomb/lower" in s.err


def test_status_of_a_missing_root_fails(tmp_path: Path) -> None:
    r = run_cli("status", "-checkpoint", str(tmp_path / "nope"))
    assert r.code == 1 and r.err.startswith("publish: ")


@pytest.mark.parametrize("bad", ["-keep=0", "-json=maybe"])
def test_status_bad_flags_are_usage_errors(tmp_path: Path, bad: str) -> None:
    r = run_cli("status", "-checkpoint", str(tmp_path), bad)
    assert r.code == 2 and "usage: publish status" in r.err


def test_status_looks_into_the_last_attempts_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need(command() is None, "sets the in-process command's limit")
    monkeypatch.setattr(status_module, "ATTEMPT_LIMIT", 2)
    root = posix_root(tmp_path)
    d = doc(run_cli("status", "-checkpoint", str(root), "-json"))
    assert d["attempts"] == {"total": 4, "looked_into": 2}  # C and old: nothing of A or B
    assert d["saves"] == [] and d["unnamed"] == []
    r = run_cli("status", "-checkpoint", str(root))
    assert f"saves not published under {root}/exec/ (4 attempts, the last 2 by name looked into)" in r.lines


def test_a_tombstone_a_publication_relates_to_is_said_as_the_next_prune_treats_it(tmp_path: Path) -> None:
    """A folder an interrupted (or running) prune recorded that a publication names: a prune keeping that
    publication leaves the folder, and the tombstone until it is an hour old.  status says so, with the
    tombstone's age, and the prune that follows does what it said."""
    import os
    import time

    root = posix_root(tmp_path)
    young, old = "exec/A/checkpoint-2", "exec/C/sub/checkpoint-6"  # both published
    for path in (young, old):
        (root / "tomb" / layout.tomb_name(path)).touch()
    hours_ago = time.time() - 7200
    os.utime(root / "tomb" / layout.tomb_name(old), (hours_ago, hours_ago))
    os.utime(root / "tomb" / layout.tomb_name(young), (time.time() - 600, time.time() - 600))
    before = tree(root)
    r = run_cli("status", "-checkpoint", str(root))
    assert (r.code, r.err) == (0, ""), r.err
    at = r.lines.index(f"tombstones in {root}/tomb (an interrupted prune; the next prune finishes them):")
    assert r.lines[at + 1 : at + 5] == [
        f"  {root}/exec/old/checkpoint-0",
        f"tombstones in {root}/tomb whose folder a publication names, holds or lies in (a prune that keeps "
        "the publication leaves the folder in place, and the tombstone until it is an hour old: it may be a "
        "running prune's, which removes the folder):",
        f"  {root}/{young} (the tombstone is 10 minutes old)",
        f"  {root}/{old} (the tombstone is over an hour old: the next prune drops it)",
    ]
    tombs = {t["path"]: t for t in doc(run_cli("status", "-checkpoint", str(root), "-json"))["tombstones"]}
    assert (tombs[young]["related"], tombs[old]["related"]) == (True, True)
    assert 600 <= tombs[young]["age"] < 700 and 7200 <= tombs[old]["age"] < 7300
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", tombs[old]["time"])
    assert (tombs["exec/old/checkpoint-0"]["related"], tombs["exec/old/checkpoint-0"]["age"]) == (False, None)
    assert tree(root) == before  # status wrote nothing
    p = run_cli("prune", "-checkpoint", str(root), "-keep", "3")  # keeps both publications
    assert p.code == 0, p.err
    assert sorted(os.listdir(root / "tomb")) == [layout.tomb_name(young)]  # the old one dropped
    assert (root / young).is_dir() and (root / old).is_dir() and not (root / "exec/old/checkpoint-0").exists()


def test_status_reads_the_tombstones_times_only_when_a_publication_relates_to_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(command() is None, "counts the in-process command's reads")
    calls: list[int] = []
    real = PosixStore.tomb_times

    def tomb_times(self: PosixStore, dl: Deadline) -> dict[str, float]:
        calls.append(1)
        return real(self, dl)

    monkeypatch.setattr(PosixStore, "tomb_times", tomb_times)
    root = posix_root(tmp_path)  # one tombstone, of a folder no publication relates to
    assert run_cli("status", "-checkpoint", str(root)).code == 0
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-2")).touch()
    assert run_cli("status", "-checkpoint", str(root)).code == 0
    assert calls == [1]  # the second status only, once


# -- S3 -------------------------------------------------------------------------------------------------


def s3_filled(root: Root) -> Root:
    fill(lambda path, data: root.put(path, data))
    return root


def s3_state(root: Root) -> dict[str, bytes]:
    return {
        k: root.s3.get_object(Bucket=root.bucket, Key=f"{root.prefix}/{k}")["Body"].read()
        for k in root.keys()  # noqa: SIM118 - Root.keys lists the objects
    }


@pytest.mark.parametrize("keep", [None, 2])
def test_s3_status_json_reports_everything_and_changes_nothing(
    s3_server: S3Server, tmp_path: Path, keep: int | None
) -> None:
    root = s3_filled(Root(s3_server, tmp_path))
    before = s3_state(root)
    flags = [] if keep is None else ["-keep", str(keep)]
    assert doc(root.run("status", "-json", *flags)) == expected(root.url, keep)
    assert s3_state(root) == before


def test_s3_status_fails_on_a_nested_key_in_pub_as_resolve_does(s3_server: S3Server, tmp_path: Path) -> None:
    root = s3_filled(Root(s3_server, tmp_path))
    root.put("pub/sub/x")
    s, r = root.run("status"), root.run("resolve")
    assert (s.code, s.out, s.err) == (r.code, "", r.err)
    assert s.code == 1 and "pub/sub/x" in s.err


def test_s3_status_sends_one_list_per_attempt(weed: Weed, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    root = s3_filled(Root(weed, tmp_path, endpoint=fault_proxy.endpoint))
    fault_proxy.reset()
    r = root.run("status", "-json")
    assert doc(r) == expected(root.url, None)
    lists = [req.query["prefix"] for req in fault_proxy.seen if req.kind == "LIST"]
    top = f"{root.prefix}/exec/"
    exec_lists = [p for p in lists if p.startswith(top) and p.endswith("/") and p[len(top) :].count("/") <= 1]
    # exec/ itself, then each of its 4 attempts once (folders and files in one LIST); the saves' own checks
    # read inside the saves.
    assert sorted(exec_lists) == sorted(f"{root.prefix}/exec/{a}" for a in ("", "A/", "B/", "C/", "old/"))


def test_a_save_the_store_refuses_to_read_is_faulty_on_posix(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    (root / "exec/A/checkpoint-4/trainer_state.json").symlink_to("../checkpoint-3/trainer_state.json")
    d = doc(run_cli("status", "-checkpoint", str(root), "-json"))
    hf4 = [s for s in d["saves"] if s["path"] == "exec/A/checkpoint-4" and s["framework"] == "hf"]
    assert [s["state"] for s in hf4] == ["faulty"]
    assert hf4[0]["message"].startswith(f"{root}/exec/A/checkpoint-4/trainer_state.json")


def test_s3_a_store_error_in_a_check_fails_the_verb(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    root = s3_filled(Root(weed, tmp_path, endpoint=fault_proxy.endpoint))
    fault_proxy.add(Respond(403, "AccessDenied", "Access Denied."), kind="GET")
    r = root.run("status")
    assert (r.code, r.out) == (1, "")
    assert r.err.startswith("publish: store: ") and "AccessDenied" in r.err


def test_an_attempt_that_cannot_be_read_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need(command() is None, "makes one attempt unreadable in the in-process command")
    root = posix_root(tmp_path)
    real = PosixStore.list_folders

    def list_folders(self: PosixStore, dl: Deadline, path: str) -> list[str]:
        if path == "exec/B":
            raise Failure(f"{self.location(path)}: Permission denied")
        return real(self, dl, path)

    monkeypatch.setattr(PosixStore, "list_folders", list_folders)
    d = doc(run_cli("status", "-checkpoint", str(root), "-json"))
    message = f"{root}/exec/B: Permission denied"
    assert d["unreadable"] == [{"path": "exec/B", "location": f"{root}/exec/B", "message": message}]
    assert [s for s in d["saves"] if s["path"].startswith("exec/B/")] == []
    assert len(d["saves"]) == 3  # the other attempts' saves are all there, each once
    r = run_cli("status", "-checkpoint", str(root))
    assert r.code == 0
    at = r.lines.index("attempts under exec/ that could not be read:")
    assert r.lines[at + 1] == f"  {message}"


def test_an_incomplete_save_that_watch_never_publishes_says_why(tmp_path: Path) -> None:
    """A DeepSpeed save whose model states the reader refuses, and a DCP save with per-rank metadata only:
    incomplete, with the message watch prints for them (an unfinished save's message stays empty)."""
    from tests.support import deepspeed_saves as ds

    root = tmp_path / "root"
    saves = root / "exec" / "A"
    ds.write_save(saves, 1)
    ds.write_save(saves, 2)
    bad = saves / "global_step1" / ds.model_states(0)
    bad.write_bytes(
        ds.archive("mp_rank_00_model_states", ds.dumps({"dp_world_size": 2, "mp_world_size": "2"}))
    )
    (saves / "step-5").mkdir()
    (saves / "step-5" / "__0.metadata").write_bytes(b"x")
    (saves / "step-5" / "__0_0.distcp").write_bytes(b"x")
    (saves / "step-6").mkdir()  # being written
    (saves / "step-6" / "__0_0.distcp").write_bytes(b"x")
    d = doc(run_cli("status", "-checkpoint", str(root), "-json"))
    verdicts = {s["path"]: (s["framework"], s["state"], s["message"]) for s in d["saves"]}
    assert verdicts["exec/A/global_step2"] == ("deepspeed", "complete", "")
    framework, state, message = verdicts["exec/A/global_step1"]
    assert (framework, state) == ("deepspeed", "incomplete")
    assert message.startswith(f"{bad}: its mp_world_size (of type str) is not a world size"), message
    assert message.endswith(
        "the save is not published (publish it with `publish publish` once you know it is whole)"
    )
    framework, state, message = verdicts["exec/A/step-5"]
    assert (framework, state) == ("dcp", "incomplete") and "use_collectives=False" in message, message
    assert verdicts["exec/A/step-6"] == ("dcp", "incomplete", "")
    text = run_cli("status", "-checkpoint", str(root)).lines
    assert any(
        line.startswith(f"  incomplete {saves}/global_step1 (deepspeed, step 1): {bad}: ") for line in text
    ), text
