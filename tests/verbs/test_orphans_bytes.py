"""prune -orphans with leftovers whose names are bytes that are not UTF-8 (legal on every POSIX filesystem).

A tombstone records the bytes of its folder's name, so such a leftover is removed like any other, and a prune
cut after its tombstone is finished by the next one.  On the code before, the prune ended in
``publish: internal error: UnicodeEncodeError`` and removed nothing (the interleaved promise model's item (f))."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from publish.ops import Say
from publish.ops.orphans import Orphans
from publish.ops.retention import Policy, prune
from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import run_cli
from tests.support.crash import Cut, Killed

#: Leftover attempts no job is given: a byte that is not UTF-8, a lone continuation byte, a newline, a name
#: that spells a surrogate's UTF-8 form.
NAMES = [b"bad\xff", b"\x80", b"nl\nx", b"\xed\xb3\xbf", b"-\xc3"]


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    assert run_cli("init", "-checkpoint", str(root)).code == 0
    save = root / "exec" / "A" / "checkpoint-10"
    save.mkdir(parents=True)
    (save / "trainer_state.json").write_text('{"global_step": 10}')
    published = run_cli("publish", "-checkpoint", str(root), str(save), "10")
    assert published.code == 0, published.err
    for name in NAMES:
        left = os.path.join(os.fsencode(root), b"exec", name, b"checkpoint-40")
        os.makedirs(left)
        with open(os.path.join(left, b"model.bin"), "wb") as f:
            f.write(b"x" * 64)
    time.sleep(0.05)
    return root


def _exec(root: Path) -> set[bytes]:
    return set(os.listdir(os.path.join(os.fsencode(root), b"exec")))


def test_leftovers_named_with_any_bytes_are_removed(tmp_path: Path) -> None:
    root = _root(tmp_path)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-orphans", "-orphans-age", "10ms")
    assert r.code == 0, r.err
    assert "internal error" not in r.err
    assert _exec(root) == {b"A"}  # the published save stays, every leftover is gone
    assert os.listdir(root / "tomb") == []
    removed = [line for line in r.out.splitlines() if line.startswith("removed ")]
    assert len(removed) == len(NAMES)
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-10\n"


@pytest.mark.parametrize("budget", range(1, 2 * len(NAMES) + 2))
def test_a_prune_cut_among_such_leftovers_is_finished_by_the_next(tmp_path: Path, budget: int) -> None:
    """Cut after ``budget`` steps (each tombstone, each half of a folder's removal), then a whole prune: no
    leftover remains, no tombstone either, and the published save is resolve's answer throughout."""
    root = _root(tmp_path)
    store = PosixStore(str(root))
    quiet = Say(lambda _: None, lambda _: None)
    policy = Policy(1)
    policy.orphans = Orphans(0.01, "")
    with contextlib.suppress(Killed):
        prune(UNBOUNDED, Cut(store, budget), quiet, policy)  # type: ignore[arg-type]
    # a tombstone of a name that is not UTF-8 is one a prune reads back
    tombs = os.listdir(root / "tomb")
    assert all(layout.tomb_name(layout.parse_tomb(t)) == t for t in tombs)
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-10\n"
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-orphans", "-orphans-age", "10ms")
    assert r.code == 0, r.err
    assert _exec(root) == {b"A"}
    assert os.listdir(root / "tomb") == []
