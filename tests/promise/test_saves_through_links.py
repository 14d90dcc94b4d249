"""A save published through a symbolic link inside the root (an attempt's folder that is a link to another
attempt's, a `checkpoint-last` link beside the saves): no prune, with or without -orphans, removes the
folder `resolve` answers with, and `resolve -verify` still answers it whole afterwards.  POSIX."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from publish.ops import Say
from publish.ops.orphans import Orphans
from publish.ops.publishing import Overlapped, publish_entry
from publish.ops.retention import Policy, prune
from publish.rules import layout
from publish.rules.deadline import UNBOUNDED
from publish.stores.posix import PosixStore
from tests.conftest import Result, run_cli, spawn
from tests.support.trainer_saves import hf_save

WAIT = 0.25  # the leftovers are older than -orphans-age 100ms once this has passed


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    r = run_cli("init", "-checkpoint", str(root))
    assert r.code == 0, r
    return root


def _save(root: Path, path: str) -> None:
    (root / path).mkdir(parents=True)
    (root / path / "model.bin").write_bytes(path.encode() * 100)


def _publish(root: Path, path: str, step: int, epoch: int = 0) -> None:
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", str(epoch), str(root / path), str(step))
    assert r.code == 0 and r.out.startswith("published "), r


def _resolve(root: Path) -> tuple[str, str]:
    plain = run_cli("resolve", "-checkpoint", str(root))
    verified = run_cli("resolve", "-checkpoint", str(root), "-verify")
    return plain.out, verified.out


def test_prune_orphans_keeps_the_attempt_folder_a_published_save_lies_in_through_a_link(
    tmp_path: Path,
) -> None:
    """exec/current is a link to exec/1234 (a job script's `ln -s`), and the save was published as
    exec/current/checkpoint-5: a prune -orphans from cron must not take exec/1234 for a leftover."""
    root = _root(tmp_path)
    _save(root, "exec/1234/checkpoint-5")
    os.symlink("1234", root / "exec/current")
    _publish(root, "exec/current/checkpoint-5", 5)
    before = _resolve(root)
    assert before == (f"{root}/exec/current/checkpoint-5\n",) * 2
    time.sleep(WAIT)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-orphans", "-orphans-age", "100ms")
    assert r.code == 0, r
    assert _resolve(root) == before
    assert (root / "exec/1234/checkpoint-5/model.bin").is_file()


def test_prune_orphans_keeps_the_save_a_published_link_leads_to_and_removes_the_true_leftovers(
    tmp_path: Path,
) -> None:
    """checkpoint-last is a link to checkpoint-500 (as Lightning's save_last="link" makes), published;
    checkpoint-400 beside it was never published and is a leftover."""
    root = _root(tmp_path)
    _save(root, "exec/A/checkpoint-400")
    _save(root, "exec/A/checkpoint-500")
    os.symlink("checkpoint-500", root / "exec/A/checkpoint-last")
    _publish(root, "exec/A/checkpoint-last", 500)
    before = _resolve(root)
    assert before == (f"{root}/exec/A/checkpoint-last\n",) * 2
    time.sleep(WAIT)
    r = run_cli("prune", "-checkpoint", str(root), "-orphans", "-orphans-age", "100ms", "-attempt", "B")
    assert r.code == 0, r
    assert r.lines == [f"removed {root}/exec/A/checkpoint-400"]
    assert _resolve(root) == before
    assert (root / "exec/A/checkpoint-500/model.bin").is_file()


def test_prune_keep_keeps_the_folder_the_newest_entry_names_through_a_link(tmp_path: Path) -> None:
    """A requeued dispatch (epoch 1) whose attempt folder is a link to the first one's published the same
    save again through the link: prune -keep 1 removes the older entry, never the save the newer names."""
    root = _root(tmp_path)
    _save(root, "exec/A/checkpoint-5")
    _publish(root, "exec/A/checkpoint-5", 5)
    os.symlink("A", root / "exec/B")
    _publish(root, "exec/B/checkpoint-5", 5, epoch=1)
    before = _resolve(root)
    assert before == (f"{root}/exec/B/checkpoint-5\n",) * 2
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 0, r
    assert r.lines == []
    assert os.listdir(root / "pub") == [layout.name(1, 5, "exec/B/checkpoint-5")]
    assert _resolve(root) == before
    dry = run_cli("prune", "-checkpoint", str(root), "-keep", "1", "-dry-run")
    assert (dry.code, dry.out) == (0, ""), dry


class _PublishingAt:
    """The store of a prune -orphans that runs a `publish` of a save through exec/current (a link to
    exec/1234, the leftover the prune planned) just before its call ``at``: the two commands overlap."""

    def __init__(self, root: Path, at: str) -> None:
        self.store = PosixStore(str(root))
        self.root, self.at = root, at
        self.result: Result | None = None

    def __getattr__(self, name: str) -> Any:
        got = getattr(self.store, name)
        if name != self.at or self.result is not None:
            return got

        def call(*args: Any) -> Any:
            save = str(self.root / "exec/current/checkpoint-6")
            self.result = run_cli("publish", "-checkpoint", str(self.root), save, "6")
            return got(*args)

        return call


@pytest.mark.parametrize("at", ["create_tombs", "list_entries", "remove_folder"])
def test_a_publication_through_a_link_and_a_prune_orphans_that_overlap_end_published_and_kept_or_failed(
    tmp_path: Path, at: str
) -> None:
    """The publication runs before the prune's tombstones, between them and its second read of pub/, or
    after that read: the save ends published and kept, or not published with the publication failing
    naming the prune; never a `published` line for a save the prune then removes."""
    root = _root(tmp_path)
    _save(root, "exec/1234/checkpoint-6")
    _save(root, "exec/2/checkpoint-4")
    _publish(root, "exec/2/checkpoint-4", 4)
    os.symlink("1234", root / "exec/current")
    time.sleep(WAIT)
    store = _PublishingAt(root, at)
    if at == "list_entries":
        store.at = "create_tombs"  # the read of pub/ after the tombstones: armed once they are written

        real = store.store.create_tombs

        def create_tombs(dl: Any, names: list[str]) -> None:
            real(dl, names)
            store.at = "list_entries"

        store.__dict__["create_tombs"] = create_tombs
    policy = Policy(3)
    policy.orphans = Orphans(0.1, "2")
    out: list[str] = []
    prune(UNBOUNDED, store, Say(out.append, lambda _: None), policy)  # type: ignore[arg-type]
    published = store.result
    assert published is not None
    there = (root / "exec/1234/checkpoint-6/model.bin").is_file()
    if published.code == 0:
        assert published.out.startswith("published "), published
        assert there, (published, out)
        assert run_cli("resolve", "-checkpoint", str(root), "-verify").out == (
            f"{root}/exec/current/checkpoint-6\n"
        )
    else:
        assert "a prune was removing it" in published.err, published
        assert layout.name(0, 6, "exec/current/checkpoint-6") not in os.listdir(root / "pub")
        assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/2/checkpoint-4\n"


def test_a_save_a_cut_prune_was_removing_is_never_published_again_through_a_link(tmp_path: Path) -> None:
    """A prune killed halfway through exec/A/checkpoint-5 left its tombstone and what is left of the folder,
    which still looks whole; exec/current is a link to exec/A.  Neither watch (of exec/current) nor publish
    publishes it through the link, and the next prune finishes removing it."""
    root = _root(tmp_path)
    saves = root / "exec/A"
    hf_save(saves, 5)
    hf_save(saves, 9)
    (saves / "checkpoint-5" / "model.safetensors").unlink()  # removed before the kill
    (root / "tomb").mkdir(exist_ok=True)
    (root / "tomb" / layout.tomb_name("exec/A/checkpoint-5")).touch()
    os.symlink("A", root / "exec/current")
    current = root / "exec/current"
    proc = spawn("watch", "-checkpoint", str(root), "-framework", "hf", "-attempt", "current")
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the scan publishes checkpoint-9 (lines come in step order)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "checkpoint-5" not in first + out, (first, out, err)
    assert f"{current}/checkpoint-9)" in first, (first, err)
    said = f"publish: {current}/checkpoint-5: a prune was removing it (tomb/ names it, or a folder around or inside it): not published\n"
    assert err.count(said) == 1, err
    p = run_cli("publish", "-checkpoint", str(root), str(current / "checkpoint-5"), "5")
    assert p.code == 1 and "a prune was removing it" in p.err and "publish prune" in p.err, p
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert (r.code, r.out) == (0, f"removed {saves}/checkpoint-5\n"), r
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{current}/checkpoint-9\n"


def test_a_publication_through_a_link_whose_folder_a_prune_recorded_meanwhile_fails_naming_it(
    tmp_path: Path,
) -> None:
    """The prune recorded exec/1234 (a leftover) and read pub/ again after this publication looked at tomb/
    and before it made its entry: the publication sees the tombstone through the link, withdraws its entry
    and fails naming the prune (the prune goes on to remove the folder)."""
    root = _root(tmp_path)
    _save(root, "exec/1234/checkpoint-6")
    os.symlink("1234", root / "exec/current")
    store = PosixStore(str(root))

    class RecordedMeanwhile:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def create_entry(self, dl: Any, name: str) -> bool:
            store.create_tombs(dl, [layout.tomb_name("exec/1234")])
            return store.create_entry(dl, name)

    out: list[str] = []
    with pytest.raises(Overlapped, match="a prune was removing it"):
        publish_entry(
            UNBOUNDED, RecordedMeanwhile(), Say(out.append, out.append), 0, 6, "exec/current/checkpoint-6"
        )  # type: ignore[arg-type]
    assert out == [] and os.listdir(root / "pub") == [] and os.listdir(root / "man") == []
