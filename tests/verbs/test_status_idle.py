"""``status -mirror`` shows run -requeue -mirror's idle count: the count run would use (publish/ops/idle.py),
the union of both tiers' marks of the save resolve -mirror answers, also once the fast root is lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from publish.ops.idle import mark_prefix
from publish.rules import layout
from tests.conftest import run_cli
from tests.support.s3roots import Root
from tests.support.servers import Weed
from tests.support.trainer_saves import hf_save

pytestmark = pytest.mark.s3


class TwoTiers:
    """A fast root (a directory) and its S3 mirror."""

    def __init__(self, server: Weed, tmp: Path) -> None:
        self.fast = tmp / "fast"
        self.mirror = Root(server, tmp, init=False)

    def flags(self, *more: str) -> list[str]:
        return ["-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds, *more]


def _status(t: TwoTiers, *more: str) -> tuple[int, str, str]:
    r = run_cli("status", *t.flags(*more))
    return r.code, r.out, r.err


def test_status_mirror_shows_the_count_run_uses_after_a_lost_fast_root(weed: Weed, tmp_path: Path) -> None:
    """Issue #31, the idle count belongs to the job: a dispatch saved (mirrored), its node was lost, and two
    dispatches since resumed from the mirror's save and were idle, each on a new node: each left its mark
    on both tiers (as run -requeue -mirror makes them), and the fast root, made again, holds the last one's
    only.  run would count 2 (the union of both tiers' marks of the save resolve -mirror answers), so
    status -mirror says 2, in text and in -json, from that save on the mirror; and so again once the fast
    root is lost too (the root's failure said, exit 0, as resolve -mirror answers).  (On the code before:
    the fast root's marks only, of its own newest save, none: 0 requeues from no save; and with the root
    gone, status failed.)"""
    t = TwoTiers(weed, tmp_path)
    hf_save(t.fast / "exec" / "5.0", 7)
    r = run_cli("run", *t.flags("-framework", "hf", "-attempt", "5.0", "--", "true"))
    assert r.code == 0, r.err
    [entry] = t.mirror.entries()
    saved = layout.parse(entry).path
    shutil.rmtree(t.fast)  # its node is lost
    prefix = mark_prefix(layout.parse(entry))
    made = [f"{prefix}{token:016x}" for token in (0xA, 0xB)]
    for name in made:  # each idle dispatch: its mark on both tiers; each on a new fast root
        shutil.rmtree(t.fast, ignore_errors=True)
        assert run_cli("init", "-checkpoint", str(t.fast)).code == 0
        (t.fast / "exec").mkdir()
        (t.fast / "exec" / name).touch()
        t.mirror.put(f"exec/{name}")
    (t.fast / "exec" / f"{mark_prefix(None)}{0xC:016x}").touch()  # a mark of another save: not counted
    where = f"{t.mirror.url}/{saved}"
    want = {"save": saved, "location": where, "requeues": 2, "marks": 3}

    code, out, err = _status(t, "-json")
    assert code == 0, err
    assert json.loads(out)["idle"] == want
    code, out, err = _status(t)
    assert code == 0, err
    line = f"run -requeue: 2 idle requeues in a row from {where} (3 marks exec/.idle-* in all on both tiers; "
    assert line in out, out

    shutil.rmtree(t.fast)  # this node's too: the mirror's marks are all there is
    want["marks"] = 2
    line = line.replace("(3 marks", "(2 marks")
    code, out, err = _status(t, "-json")
    assert code == 0, err
    assert err.startswith("publish: ") and str(t.fast) in err and "showing the mirror alone" in err, err
    doc = json.loads(out)
    assert doc["idle"] == want and doc["failed"] and doc["publications"] == []
    assert [(r["root"], r["mirror"]) for r in doc["tiers"]] == [("none", "exists")]
    code, out, err = _status(t)
    assert code == 0, err
    assert line in out and f"the root {t.fast} could not be read: " in out, out
