"""Retention by policy: ``-keep N`` plus ``-keep-every K`` (milestone steps) and ``-keep-within D`` (recent
entries, by the entry's time: its file's mtime on POSIX, its LastModified on S3), on prune, run and status;
and status's per-publication ``time`` and ``age``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.ops.retention import Policy, split
from publish.rules import layout, timestamps
from tests.conftest import run_cli
from tests.support.s3roots import Root
from tests.support.servers import S3Server

STEPS = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]


def posix_root(tmp_path: Path, old: float = 3 * 3600) -> Path:
    """Ten publications of epoch 1, every one made ``old`` seconds ago but step 300's, made now."""
    root = tmp_path / "root"
    for step in STEPS:
        (root / f"exec/A/checkpoint-{step}").mkdir(parents=True)
        r = run_cli(
            "publish",
            "-checkpoint",
            str(root),
            "-epoch",
            "1",
            str(root / f"exec/A/checkpoint-{step}"),
            str(step),
        )
        assert r.code == 0, r
    then = time.time() - old
    for entry in (root / "pub").iterdir():
        if layout.parse(entry.name).step != 300:
            os.utime(entry, (then, then))
    return root


def removed(out: str) -> list[int]:
    return [int(line.rsplit("-", 1)[1]) for line in out.splitlines()]


@pytest.mark.parametrize(
    ("flags", "gone"),
    [
        ([], [100, 200, 300, 400, 500, 600, 700, 800]),
        (["-keep-every", "500"], [100, 200, 300, 400, 600, 700, 800]),
        (["-keep-within", "1h"], [100, 200, 400, 500, 600, 700, 800]),
        (["-keep-every", "500", "-keep-within", "1h"], [100, 200, 400, 600, 700, 800]),
        (["-keep-within", "4h"], []),
        (["-keep-every", "1"], []),
    ],
)
def test_prune_keeps_by_policy(tmp_path: Path, flags: list[str], gone: list[int]) -> None:
    root = posix_root(tmp_path)
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", "2", *flags, "-dry-run")
    assert dry.code == 0 and removed(dry.out.replace("would remove", "removed")) == gone, dry
    st = run_cli("status", "-checkpoint", str(root), "-keep", "2", *flags, "-json")
    plan = json.loads(st.out)["prune"]
    assert sorted(layout.parse(n).step for n in plan["entries"]) == gone
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "2", *flags)
    assert r.code == 0 and removed(r.out) == gone, r
    left = sorted(layout.parse(n).step for n in os.listdir(root / "pub"))
    assert left == sorted(set(STEPS) - set(gone))
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-1000\n"


def test_status_text_names_the_policy(tmp_path: Path) -> None:
    root = posix_root(tmp_path)
    r = run_cli("status", "-checkpoint", str(root), "-keep", "2", "-keep-every", "500", "-keep-within", "90m")
    assert "prune -keep 2 -keep-every 500 -keep-within 1h30m0s would remove entries: 6, and:" in r.out, r


@pytest.mark.parametrize("verb", ["status", "run"])
def test_the_policy_needs_keep(tmp_path: Path, verb: str) -> None:
    tail = ["--", "true"] if verb == "run" else []
    extra = ["-framework", "hf", "-attempt", "A"] if verb == "run" else []
    r = run_cli(verb, "-checkpoint", str(tmp_path), *extra, "-keep-every", "5", *tail)
    assert r.code == 2 and "give -keep" in r.err, r


def test_status_gives_each_publication_its_time_and_age(tmp_path: Path) -> None:
    root = posix_root(tmp_path, old=7200)
    r = run_cli("status", "-checkpoint", str(root), "-json")
    pubs = {p["step"]: p for p in json.loads(r.out)["publications"]}
    mtime = os.lstat(root / "pub" / pubs[100]["entry"]).st_mtime
    assert timestamps.iso8601(pubs[100]["time"]) == pytest.approx(mtime, abs=1e-6)
    assert 7200 <= pubs[100]["age"] < 7200 + 120
    assert 0 <= pubs[300]["age"] < 120


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(0, 50), min_size=1, max_size=30, unique=True),
    keep=st.integers(1, 5),
    every=st.integers(0, 7),
    within=st.one_of(st.none(), st.integers(0, 100)),
    ages=st.lists(st.integers(0, 100), min_size=30, max_size=30),
)
def test_the_policy_keeps_the_newest_and_exactly_what_it_says(
    steps: list[int], keep: int, every: int, within: int | None, ages: list[int]
) -> None:
    entries = [layout.Entry(1, s, f"exec/A/s{s}") for s in steps]
    now = 1000.0
    times = {e.name: now - ages[i] for i, e in enumerate(entries)}
    gone, kept = split(entries, Policy(keep, every, within, times, now))
    newest = max(entries, key=layout.Entry.key)
    assert newest in kept and len(gone) + len(kept) == len(entries)
    latest = set(sorted(entries, key=layout.Entry.key)[-keep:])
    for e in gone:
        assert e not in latest
        assert not (every and e.step % every == 0)
        assert not (within is not None and now - times[e.name] <= within)
    for e in kept:
        assert (
            e in latest
            or (every and e.step % every == 0)
            or (within is not None and now - times[e.name] <= within)
        )


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-02T06:00:01Z",
        "2026-12-02T06:00:01.5Z",
        "2000-02-29T00:00:00.000Z",
        "1999-12-31T23:59:59.999999Z",
    ],
)
def test_iso8601_agrees_with_datetime(text: str) -> None:
    from datetime import datetime, timezone

    head, _, frac = text[:-1].partition(".")
    expect = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    assert timestamps.iso8601(text) == pytest.approx(expect + (float("0." + frac) if frac else 0.0))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-12-02",
        "2026-12-02T06:00:01+00:00",
        "2100-02-29T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-12-02T24:00:00Z",
        "2026-12-02T06:00:01.Z",
        "２026-12-02T06:00:01Z",
    ],
)
def test_iso8601_refuses_what_s3_never_sends(text: str) -> None:
    with pytest.raises(ValueError):
        timestamps.iso8601(text)


@pytest.mark.s3
def test_prune_keep_within_on_s3_uses_last_modified(s3_server: S3Server, tmp_path: Path) -> None:
    """Every entry was made seconds ago: -keep-within 1h keeps them all, and status gives their times."""
    root = Root(s3_server, tmp_path)
    for step in (1, 2, 3):
        root.put(f"exec/A/checkpoint-{step}/w", b"w")
        assert root.run("publish", "-epoch", "1", f"{root.url}/exec/A/checkpoint-{step}", str(step)).code == 0
    r = root.run("prune", "-keep", "1", "-keep-within", "1h")
    assert (r.code, r.out) == (0, ""), r
    assert len(root.entries()) == 3
    r = root.run("status", "-json")
    for pub in json.loads(r.out)["publications"]:
        assert 0 <= pub["age"] < 600
    r = root.run("prune", "-keep", "1", "-keep-every", "2")
    assert r.code == 0 and r.out == f"removed {root.url}/exec/A/checkpoint-1\n", r
