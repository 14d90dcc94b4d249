"""The on-disk format of a snapshot (docs/snapshots.md): its manifest and READY, and their rules.  Pure: no
file access, no torch.  The trainer-side library (``publish.snapshots``) writes and checks snapshots by these
rules, and the command's ``snapshot`` framework checks them without importing that library; the directory
name's rule is :mod:`publish.rules.snapshot_name`'s."""

from __future__ import annotations

import json

from publish.rules import snapshot_name
from publish.rules.hashing import sha256_hex

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any

FORMAT = "pear15.cloud_checkpoint.v1"
PAYLOAD = "checkpoint.pt"
MANIFEST = "manifest.json"
READY = "READY"
MANIFEST_LIMIT = 16 * 1024
READY_LIMIT = 256
STEP_LIMIT = 10**12

FIELDS = frozenset({"bytes", "created_ns", "file", "format", "id", "sha256", "step"})
_HEX = frozenset("0123456789abcdef")


def _hex(value: object, digits: int) -> bool:
    """``value`` is a str of exactly ``digits`` lowercase hex digits (``[0-9a-f]{digits}``, without re)."""
    return isinstance(value, str) and len(value) == digits and _HEX.issuperset(value)


class SnapshotError(ValueError):
    """A snapshot, or the path to it, is refused; the message names the path and the reason."""


def is_int(value: object) -> bool:
    """True for an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def valid_step(value: object) -> bool:
    return is_int(value) and 0 <= value < STEP_LIMIT  # type: ignore[operator]


def dir_name(step: int, ident: str) -> str:
    return snapshot_name.make(step, ident)


def manifest_bytes(step: int, ident: str, sha256: str, size: int, created_ns: int) -> bytes:
    """The manifest exactly as the format writes it: seven fields, sorted keys, no NaN, UTF-8."""
    doc = {
        "bytes": size,
        "created_ns": created_ns,
        "file": PAYLOAD,
        "format": FORMAT,
        "id": ident,
        "sha256": sha256,
        "step": step,
    }
    return json.dumps(doc, sort_keys=True, allow_nan=False).encode("utf-8")


def ready_bytes(manifest: bytes) -> bytes:
    """READY for these manifest bytes: the format line, then the manifest's SHA-256 in hex."""
    return (FORMAT + "\n" + sha256_hex(manifest) + "\n").encode("ascii")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise SnapshotError(f"duplicate key {key!r}")
        doc[key] = value
    return doc


def _no_constant(name: str) -> Any:
    raise SnapshotError(f"{name} is not a number")


def parse_manifest(data: bytes, name: str | None = None) -> dict[str, Any]:
    """The manifest's fields, checked against every rule of the format (and the directory ``name`` if given).

    Raises :class:`SnapshotError` with the reason (without the path).
    """
    if len(data) > MANIFEST_LIMIT:
        raise SnapshotError(f"over {MANIFEST_LIMIT} bytes")
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except SnapshotError:
        raise
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise SnapshotError(f"does not parse: {e}") from None
    if not isinstance(doc, dict):
        raise SnapshotError("is not a JSON object")
    missing = sorted(FIELDS - doc.keys())
    extra = sorted(doc.keys() - FIELDS)
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(extra)}"] if extra else []
        )
        raise SnapshotError("fields: " + "; ".join(parts))
    if doc["format"] != FORMAT:
        raise SnapshotError(f"format is {doc['format']!r}, not {FORMAT!r}")
    if doc["file"] != PAYLOAD:
        raise SnapshotError(f"file is {doc['file']!r}, not {PAYLOAD!r}")
    if not valid_step(doc["step"]):
        raise SnapshotError(f"step {doc['step']!r} is not an integer in [0, 10^12)")
    if not is_int(doc["bytes"]) or doc["bytes"] <= 0:
        raise SnapshotError(f"bytes {doc['bytes']!r} is not a positive integer")
    if not is_int(doc["created_ns"]) or doc["created_ns"] < 0:
        raise SnapshotError(f"created_ns {doc['created_ns']!r} is not a non-negative integer")
    if not _hex(doc["sha256"], 64):
        raise SnapshotError(f"sha256 {doc['sha256']!r} is not 64 lowercase hex digits")
    if not _hex(doc["id"], 32):
        raise SnapshotError(f"id {doc['id']!r} is not 32 lowercase hex digits")
    if name is not None:
        parsed = snapshot_name.parse(name)
        if parsed is None:
            raise SnapshotError(f"directory name {name!r} is not step_<12 digits>_<32 hex digits>")
        if doc["step"] != int(parsed[0]):
            raise SnapshotError(f"step {doc['step']} disagrees with the directory name")
        if doc["id"] != parsed[1]:
            raise SnapshotError(f"id {doc['id']} disagrees with the directory name")
    return doc


def ready_matches(manifest: bytes, ready: bytes) -> bool:
    """True when ``ready`` is exactly READY for these manifest bytes and the manifest parses by the rules."""
    if len(ready) > READY_LIMIT or ready != ready_bytes(manifest):
        return False
    try:
        parse_manifest(manifest)
    except SnapshotError:
        return False
    return True
