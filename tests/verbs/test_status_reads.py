"""publish status on a POSIX root of many publications: what it opens and writes does not grow with each entry
(issue 32: status opened and closed about three files per entry and wrote one line per write call)."""

from __future__ import annotations

import io
import os
import posix
import shutil
from pathlib import Path
from typing import Any

import pytest

from publish.cli import main
from publish.rules import layout, manifest

ODD = "exec/A/-x\nsave é"  # a newline, a leading dash, not ASCII


def make_root(root: Path, count: int) -> list[str]:
    """``count`` publications in one attempt, one of an odd name, one whose save was deleted behind its entry."""
    paths = [f"exec/A/checkpoint-{step}" for step in range(1, count - 1)] + [ODD, "exec/B/gone"]
    for step, path in enumerate(paths, 1):
        if path != "exec/B/gone":
            (root / path).mkdir(parents=True)
        (root / "pub").mkdir(exist_ok=True)
        (root / "man").mkdir(exist_ok=True)
        name = layout.name(0, step, path)
        (root / "pub" / name).touch()
        (root / "man" / name).write_bytes(manifest.encode(name, []))  # what status reads a size from
    return paths


class Writes(io.StringIO):
    calls = 0

    def write(self, s: str) -> int:
        self.calls += 1
        return super().write(s)


def run_status(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, str]:
    """(files opened, writes to stdout, stdout) of one ``status`` in the process."""
    opened = 0
    real = posix.open

    def counting(*args: Any, **kwargs: Any) -> int:
        nonlocal opened
        opened += 1
        return real(*args, **kwargs)

    out, err = Writes(), io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(posix, "open", counting)
        m.setattr(os, "open", counting)
        code = main(["status", "-checkpoint", str(root)], {}, out, err)
    assert code == 0, err.getvalue()
    return opened, out.calls, out.getvalue()


def test_status_opens_and_writes_do_not_grow_with_the_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, status: 10 and 200 publications in one attempt cost status the same opens, and the 200 lines
    of publications are not written one at a time; the answer says of each whether its save exists (the
    one deleted behind its entry MISSING, the one with a newline in its name shown on one line)."""
    small, large = tmp_path / "small", tmp_path / "large"
    make_root(small, 10)
    paths = make_root(large, 200)
    opened_small, _, _ = run_status(small, monkeypatch)
    opened_large, writes, out = run_status(large, monkeypatch)
    # one open a publication, its manifest for its size (issue 34); three more a publication before
    assert opened_large - opened_small <= 190
    assert writes < 20  # one per line before: over 200
    lines = out.splitlines()
    pubs = [line for line in lines if line.startswith("  epoch 0 step ")]
    assert len(pubs) == len(paths)
    assert pubs[0] == f"  epoch 0 step 200 {large}/exec/B/gone (MISSING)"
    assert pubs[1] == f'  epoch 0 step 199 "{large}/exec/A/-x\\nsave é" (exists), 0 B'
    assert all(line.endswith("(exists), 0 B") for line in pubs[1:])


def traced_peak(root: Path, *flags: str) -> int:
    """The most memory one ``status`` of ``root`` held at once (tracemalloc's peak), its modules imported."""
    import tracemalloc

    out, err = io.StringIO(), io.StringIO()
    assert main(["status", "-checkpoint", str(root), *flags], {}, out, err) == 0, err.getvalue()
    tracemalloc.start()
    try:
        code = main(["status", "-checkpoint", str(root), *flags], {}, io.StringIO(), err)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, err.getvalue()
    return peak


def test_the_text_holds_a_few_hundred_bytes_a_publication(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, status's memory: each publication's line is made as it is written, from its name, its save's
    path and a few bytes of what was found (whether it exists, what it holds); the document of ten fields a
    publication is made for -json alone.  4,000 publications more cost the text under 500 bytes each, the
    lines included (about 1,400 each when the whole document was built before a line was written).  What is
    asked, read and written a chunk of publications at a time is bounded by the chunk: a small one here."""
    from publish.verbs import status

    monkeypatch.setattr(status, "CHUNK", 256, raising=False)
    small, large = tmp_path / "small", tmp_path / "large"
    make_root(small, 1000)
    make_root(large, 5000)
    grown = traced_peak(large) - traced_peak(small)
    assert grown < 500 * 4000, grown


def test_sizes_without_manifests_cost_one_open_a_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, status's sizes: publications made before manifests are measured by their files, each save
    opened once in its attempt's folder (six opens and seven closes each before), and each line still says
    what its files hold."""
    small, large = tmp_path / "small", tmp_path / "large"
    make_root(small, 10)
    paths = make_root(large, 200)
    for root in (small, large):
        shutil.rmtree(root / "man")
        (root / "exec/A/checkpoint-1/w").write_bytes(b"w" * 1500)
        (root / "exec/A/checkpoint-1/in/deeper").mkdir(parents=True)
        (root / "exec/A/checkpoint-1/in/deeper/x").write_bytes(b"x" * 20)
    opened_small, _, _ = run_status(small, monkeypatch)
    opened_large, _, out = run_status(large, monkeypatch)
    assert opened_large - opened_small <= 190 + 10
    pubs = [line for line in out.splitlines() if line.startswith("  epoch 0 step ")]
    assert len(pubs) == len(paths)
    assert pubs[-1] == f"  epoch 0 step 1 {large}/exec/A/checkpoint-1 (exists), 1.52 kB by its files"
    assert all(line.endswith("(exists), 0 B by its files") for line in pubs[1:-1])


def test_each_publications_line_is_its_records_text(tmp_path: Path) -> None:
    """The text's publication lines are made without a record each (issue 32): the same lines as the records
    say, for a save gone, one measured by its manifest, by its files, one whose size is not known, and odd
    locations (a newline, a bidirectional control, a leading dash, non-ASCII letters)."""
    from publish.ops.capacity import Size
    from publish.stores.posix import PosixStore
    from publish.verbs.status import Listing

    store = PosixStore(str(tmp_path / "r\u202eot"))
    saves = [ODD, "exec/A/checkpoint-9", "exec/Ω/x", "exec/A/-y", "exec/A/z", "exec/B/k"]
    names = sorted(
        (layout.name(e, s, p) for s, (e, p) in enumerate(zip([0, 7, 10**19, 0, 3, 0], saves))), reverse=True
    )
    paths = [layout.parse(n).path for n in names]
    listing = Listing(store, names, paths, None)
    sizes = [Size(5, "manifest"), None, Size(12_345_678, "files"), Size(None, "", "x: Permission denied"),
             Size(0, "files"), Size(999_500, "manifest")]  # fmt: skip
    for i, size in enumerate(sizes):
        if size is not None:
            listing.exists[i] = 1
            listing.set_size(i, size)
    expected = [p.text() for p in listing]
    assert list(listing.lines()) == expected
    assert any(line.endswith("(MISSING)") for line in expected)
    assert any("size not known: x: Permission denied" in line for line in expected)
    assert any(line.endswith(" by its files") for line in expected)
