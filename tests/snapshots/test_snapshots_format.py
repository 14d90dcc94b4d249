"""The snapshot format's pure parts, argument checks and the import discipline: none of these need torch."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import publish.snapshots as snapshots
from publish.rules import snapshot_format

REPO = Path(__file__).resolve().parents[2]
IDENT = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32


def _manifest(**change: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "bytes": 10,
        "created_ns": 5,
        "file": "checkpoint.pt",
        "format": "pear15.cloud_checkpoint.v1",
        "id": IDENT,
        "sha256": SHA,
        "step": 7,
    }
    doc.update(change)
    return doc


def _ready(data: bytes) -> bytes:
    return b"pear15.cloud_checkpoint.v1\n" + hashlib.sha256(data).hexdigest().encode() + b"\n"


def test_manifest_bytes_are_the_documented_serialisation() -> None:
    data = snapshot_format.manifest_bytes(7, IDENT, SHA, 10, 5)
    assert data == json.dumps(_manifest(), sort_keys=True, allow_nan=False).encode("utf-8")
    assert snapshot_format.ready_bytes(data) == _ready(data)


def test_snapshot_dir_pattern() -> None:
    assert snapshots.SNAPSHOT_DIR.fullmatch("step_000000000007_" + IDENT)
    for bad in ["step_7_" + IDENT, "step_000000000007_" + IDENT.upper(), "step_000000000007_" + IDENT + "x"]:
        assert snapshots.SNAPSHOT_DIR.fullmatch(bad) is None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (json.dumps(_manifest(extra=1)), "unknown extra"),
        (json.dumps({k: v for k, v in _manifest().items() if k != "step"}), "missing step"),
        (json.dumps(_manifest())[:-1] + ', "step": 7}', "duplicate key 'step'"),
        (json.dumps(_manifest(step=True)), "step True"),
        (json.dumps(_manifest(step=10**12)), "step"),
        (json.dumps(_manifest(step=7.0)), "step 7.0"),
        (json.dumps(_manifest(bytes=0)), "bytes 0"),
        (json.dumps(_manifest(bytes="10")), "bytes '10'"),
        (json.dumps(_manifest(created_ns=False)), "created_ns False"),
        (json.dumps(_manifest(file="other.pt")), "file is 'other.pt'"),
        (json.dumps(_manifest(format="pear15.cloud_checkpoint.v2")), "format"),
        (json.dumps(_manifest(sha256=SHA.upper())), "sha256"),
        (json.dumps(_manifest(id=IDENT[:-1])), "id"),
        (json.dumps(_manifest(bytes=float("nan"))), "NaN is not a number"),
        ("[1, 2]", "not a JSON object"),
        ("{", "does not parse"),
        ("\ufeff" + json.dumps(_manifest()), "does not parse"),
        (json.dumps(_manifest()) + " " * (16 * 1024), "over 16384 bytes"),
    ],
)
def test_manifest_refusals(data: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        snapshot_format.parse_manifest(data.encode("utf-8"))
    assert not snapshots.ready_matches(data.encode("utf-8"), _ready(data.encode("utf-8")))


def test_manifest_against_the_directory_name() -> None:
    data = json.dumps(_manifest()).encode()
    assert snapshot_format.parse_manifest(data, "step_000000000007_" + IDENT)["step"] == 7
    with pytest.raises(ValueError, match="step 7 disagrees"):
        snapshot_format.parse_manifest(data, "step_000000000008_" + IDENT)
    with pytest.raises(ValueError, match="id .* disagrees"):
        snapshot_format.parse_manifest(data, "step_000000000007_" + "f" * 32)


def test_ready_matches() -> None:
    data = snapshot_format.manifest_bytes(7, IDENT, SHA, 10, 5)
    assert snapshots.ready_matches(data, _ready(data))
    assert not snapshots.ready_matches(data, _ready(data)[:-1])
    assert not snapshots.ready_matches(data, _ready(data) + b"\n")
    assert not snapshots.ready_matches(data, _ready(data + b" "))
    assert not snapshots.ready_matches(data, _ready(data).replace(b"v1", b"v2"))
    padded = data + b" " * 300
    assert snapshots.ready_matches(padded, _ready(padded))  # whitespace is still JSON
    assert not snapshots.ready_matches(padded, _ready(padded) + b"x" * 256)


@pytest.mark.parametrize(
    "payload",
    [{}, {"step": True}, {"step": -1}, {"step": 10**12}, {"step": 1.0}, {"step": "1"}, {"step": None}, [1]],
)
def test_a_bad_payload_is_a_value_error_before_anything_is_written(tmp_path: Path, payload: object) -> None:
    with pytest.raises(ValueError):
        snapshots.save_checkpoint(tmp_path / "root", payload)  # type: ignore[arg-type]
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("keep_last", [True, 2.0, "2", 1, 0, -3])
def test_a_bad_keep_last_is_a_value_error_before_anything_is_written(
    tmp_path: Path, keep_last: object
) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        snapshots.save_checkpoint(tmp_path / "root", {"step": 1}, keep_last=keep_last)  # type: ignore[arg-type]
    assert not (tmp_path / "root").exists()


def test_list_valid_on_a_missing_or_empty_root_does_not_import_torch(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not a snapshot")
    code = (
        "import sys, publish.snapshots as s\n"
        "assert 'torch' not in sys.modules, 'import'\n"
        "for root in sys.argv[1:]:\n"
        "    assert s.list_valid(root) == [], root\n"
        "    assert s.load_latest(root) is None, root\n"
        "assert 'torch' not in sys.modules, 'list_valid'\n"
        "print('ok')\n"
    )
    roots = [str(tmp_path / "missing"), str(tmp_path / "missing" / "deeper"), str(tmp_path / "empty")]
    roots.append(str(tmp_path / "other"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", code, *roots], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n"


def test_a_linked_root_ancestor_is_refused_without_torch(tmp_path: Path) -> None:
    (tmp_path / "real" / "root").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for root in [tmp_path / "link" / "root", tmp_path / "link" / "root" / "missing", tmp_path / "link"]:
        with pytest.raises(ValueError, match="symbolic link"):
            snapshots.list_valid(root)
        with pytest.raises(ValueError, match="symbolic link"):
            snapshots.load_latest(root)


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        snapshots.list_valid(tmp_path / "file")


def _snapshot(root: Path, step: int, ready: bytes | None = None) -> str:
    """A snapshot folder under root/exec/1 by the format's rules (its payload is not what is checked)."""
    name = snapshot_format.dir_name(step, IDENT)
    folder = root / "exec" / "1" / name
    folder.mkdir(parents=True)
    manifest = snapshot_format.manifest_bytes(step, IDENT, SHA, 10, 5)
    (folder / "manifest.json").write_bytes(manifest)
    (folder / "READY").write_bytes(snapshot_format.ready_bytes(manifest) if ready is None else ready)
    return f"exec/1/{name}"


def test_the_snapshot_framework_checks_by_the_format_without_the_library(tmp_path: Path) -> None:
    """The format's rules live outside publish.snapshots: watch -framework snapshot imports neither the
    library nor what its __init__ brings (threading, uuid, dataclasses, logging, pathlib)."""
    path = _snapshot(tmp_path, 7)
    code = (
        "import sys\n"
        "from publish.rules.deadline import UNBOUNDED\n"
        "from publish.frameworks import FRAMEWORKS\n"
        "from publish.stores.posix import PosixStore\n"
        f"whole = FRAMEWORKS['snapshot'].complete(UNBOUNDED, PosixStore({str(tmp_path)!r}), {path!r}, 7)\n"
        "heavy = ('publish.snapshots', 'threading', 'uuid', 'dataclasses', 'logging', 'pathlib', 'typing')\n"
        "print(whole, sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    r = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (r.stdout, r.stderr) == ("True []\n", "")


def test_the_snapshot_frameworks_read_caps_follow_the_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from publish.frameworks import FRAMEWORKS
    from publish.frameworks.snapshot import READ_FACTOR
    from publish.rules.deadline import UNBOUNDED
    from publish.rules.errors import Failure
    from publish.stores.posix import PosixStore

    framework, store = FRAMEWORKS["snapshot"], PosixStore(str(tmp_path))
    monkeypatch.setattr(snapshot_format, "READY_LIMIT", 100)
    assert (
        framework.complete(UNBOUNDED, store, _snapshot(tmp_path, 1, b"x" * (READ_FACTOR * 100)), 1) is False
    )
    with pytest.raises(Failure, match=f"READY is over {READ_FACTOR * 100} bytes"):
        framework.complete(UNBOUNDED, store, _snapshot(tmp_path, 2, b"x" * (READ_FACTOR * 100 + 1)), 2)
    assert framework.complete(UNBOUNDED, store, _snapshot(tmp_path, 3), 3) is True


def test_the_docs_give_the_formats_caps() -> None:
    text = (REPO / "docs" / "snapshots.md").read_text().replace("\n", " ")
    assert f"READY (at most {snapshot_format.READY_LIMIT} bytes)" in text
    assert f"manifest.json (at most {snapshot_format.MANIFEST_LIMIT // 1024} KiB)" in text
