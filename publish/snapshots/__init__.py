"""Recoverable checkpoints written by the training process itself, on a local disk or a FUSE mount.

``save_checkpoint`` writes one snapshot directory, ``load_latest`` finds the newest one that verifies,
``list_valid`` lists them all, ``load`` loads one given directory.  torch is imported on first use only.
The format and the rules are in docs/snapshots.md.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from publish.rules import snapshot_name
from publish.rules.snapshot_format import (
    FORMAT,
    MANIFEST,
    MANIFEST_LIMIT,
    PAYLOAD,
    READY,
    READY_LIMIT,
    SnapshotError,
    dir_name,
    is_int,
    manifest_bytes,
    parse_manifest,
    ready_bytes,
    ready_matches,
    valid_step,
)

from . import _fs, _payload, _save

#: A snapshot directory's name (use ``fullmatch``): the step as 12 ASCII digits, then a uuid4 as 32 hex
#: digits; the same rule as :func:`publish.rules.snapshot_name.parse`, which the manifest check uses.
SNAPSHOT_DIR = re.compile(
    rf"{snapshot_name.PREFIX}([0-9]{{{snapshot_name.STEP_DIGITS}}})_([0-9a-f]{{{snapshot_name.ID_HEX}}})"
)

__all__ = [
    "FORMAT",
    "SNAPSHOT_DIR",
    "SnapshotError",
    "list_valid",
    "load",
    "load_latest",
    "ready_matches",
    "save_checkpoint",
]

log = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class _Meta:
    """A snapshot whose READY matches its manifest, and the manifest its directory name."""

    path: str
    name: str
    manifest: dict[str, Any]
    manifest_bytes: bytes
    ready: bytes

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.manifest["step"], self.manifest["created_ns"], self.name)


@dataclass(frozen=True)
class _Refused:
    """A directory named like a snapshot that is not one (incomplete, corrupt, a link...)."""

    path: str
    name: str
    reason: str

    @property
    def key(self) -> tuple[int, int, str]:
        return (int(self.name[5:17]), -1, self.name)


# Snapshots this process verified completely or whose payload digest it checked: path -> (READY, manifest
# bytes, payload fingerprint).  Retention trusts an entry only while all three are unchanged; anything else
# is checked again.
_verified: dict[str, tuple[bytes, bytes, _payload.Fingerprint]] = {}


def _read_meta(path: str, name: str) -> _Meta:
    """READY and manifest.json of the snapshot at ``path``, checked; raises SnapshotError or OSError."""
    if SNAPSHOT_DIR.fullmatch(name) is None:
        raise SnapshotError(f"{path}: the name is not step_<12 digits>_<32 hex digits>")
    try:
        _fs.lstat_dir(path)
    except FileNotFoundError:
        raise SnapshotError(f"{path} does not exist") from None
    ready_path = os.path.join(path, READY)
    manifest_path = os.path.join(path, MANIFEST)
    try:
        ready = _fs.read_limited(ready_path, READY_LIMIT)
    except FileNotFoundError:
        raise SnapshotError(f"{path} is incomplete: no {READY}") from None
    try:
        data = _fs.read_limited(manifest_path, MANIFEST_LIMIT)
    except FileNotFoundError:
        raise SnapshotError(f"{path} has a {READY} but no {MANIFEST}") from None
    if ready != ready_bytes(data):
        raise SnapshotError(f"{ready_path} does not match {MANIFEST}")
    try:
        manifest = parse_manifest(data, name)
    except SnapshotError as e:
        raise SnapshotError(f"{manifest_path}: {e}") from None
    return _Meta(path, name, manifest, data, ready)


def _verify(meta: _Meta) -> dict[str, Any]:
    """The payload of a snapshot whose metadata checked, verified completely; remembered as verified."""
    payload, fp = _payload.load(os.path.join(meta.path, PAYLOAD), meta.manifest)
    _verified[meta.path] = (meta.ready, meta.manifest_bytes, fp)
    return payload


def _verify_written(meta: _Meta, marks: list[_save.Mark]) -> None:
    """:func:`_verify` for a snapshot this process has just written (see ``_save.verify_written``)."""
    fp = _save.verify_written(os.path.join(meta.path, PAYLOAD), meta.manifest, marks)
    _verified[meta.path] = (meta.ready, meta.manifest_bytes, fp)


def _scan(root: str) -> list[_Meta | _Refused]:
    """Every entry of ``root`` named like a snapshot, newest first by (step, created_ns, name)."""
    entries: list[_Meta | _Refused] = []
    for name in os.listdir(root):
        if SNAPSHOT_DIR.fullmatch(name) is None:
            continue
        path = os.path.join(root, name)
        try:
            entries.append(_read_meta(path, name))
        except (SnapshotError, OSError) as e:
            entries.append(_Refused(path, name, _reason(e)))
    entries.sort(key=lambda e: e.key, reverse=True)
    return entries


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror}"
    return str(e)


def list_valid(root: PathLike) -> list[Path]:
    """Every snapshot in ``root`` that verifies completely, newest first; ``[]`` for a missing or empty root.

    Finds nothing to verify, and so does not import torch, when the root is missing or has no snapshot.
    """
    path, exists = _fs.check_root(root)
    if not exists:
        return []
    valid = []
    for entry in _scan(path):
        if isinstance(entry, _Refused):
            log.info("snapshot %s is not valid: %s", entry.path, entry.reason)
            continue
        try:
            _verify(entry)
        except (SnapshotError, OSError) as e:
            log.info("snapshot %s is not valid: %s", entry.path, _reason(e))
            continue
        valid.append(Path(entry.path))
    return valid


def _info(meta: _Meta, skipped: list[dict[str, str]]) -> dict[str, Any]:
    step = meta.manifest["step"]
    return {"path": meta.path, "step": step, "manifest": dict(meta.manifest), "skipped": skipped}


def load_latest(root: PathLike) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The newest snapshot in ``root`` that verifies, loaded onto the CPU, as ``(payload, info)``; else None.

    Each snapshot skipped on the way is logged and listed in ``info["skipped"]`` as ``{"path", "reason"}``.
    """
    path, exists = _fs.check_root(root)
    entries = _scan(path) if exists else []
    if not entries:
        log.info("no snapshot in %s", path)
        return None
    _payload.torch()  # a missing torch is an ImportError, not a reason to skip a snapshot
    skipped: list[dict[str, str]] = []
    for entry in entries:
        if isinstance(entry, _Meta):
            try:
                payload = _verify(entry)
            except (SnapshotError, OSError) as e:
                reason = _reason(e)
            else:
                return payload, _info(entry, skipped)
        else:
            reason = entry.reason
        log.warning("skipping snapshot %s: %s", entry.path, reason)
        skipped.append({"path": entry.path, "reason": reason})
    log.warning("no snapshot in %s could be recovered (%d skipped)", path, len(skipped))
    return None


def load(path: PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """The snapshot directory at ``path``, verified as ``load_latest`` would; SnapshotError if it fails."""
    full, exists = _fs.check_root(path)
    if not exists:
        raise SnapshotError(f"{full} does not exist")
    try:
        meta = _read_meta(full, os.path.basename(full))
        return _verify(meta), _info(meta, [])
    except OSError as e:
        raise SnapshotError(_reason(e)) from e


def _check_args(payload: Any, keep_last: Any) -> int:
    if not isinstance(payload, dict):
        raise ValueError(f"the payload is a {type(payload).__name__}, not a dict")
    if "step" not in payload:
        raise ValueError("the payload has no 'step'")
    step = payload["step"]
    if not valid_step(step):
        raise ValueError(f"step {step!r} is not an int in [0, 10^12)")
    if keep_last is not None and (not is_int(keep_last) or keep_last < 2):
        raise ValueError(f"keep_last {keep_last!r} is not None or an int >= 2")
    return int(step)


def _invalidate(directory: str) -> None:
    """Make a snapshot that failed impossible to mistake for a complete one; its other files stay."""
    try:
        os.unlink(os.path.join(directory, READY))
    except FileNotFoundError:
        pass
    except OSError as e:
        log.error("could not remove %s from a failed snapshot: %s", READY, _reason(e))
        return
    try:
        _fs.fsync_dir(directory)
    except OSError as e:
        log.warning("could not fsync %s: %s", directory, _reason(e))


def save_checkpoint(root: PathLike, payload: dict[str, Any], keep_last: int | None = 2) -> Path:
    """Write ``payload`` (a dict with an int ``step``) as a new snapshot in ``root``, verify it, prune.

    Any failure before the new snapshot verified leaves it without READY and is raised.  Retention keeps
    the newest ``keep_last`` valid snapshots and the new one; its failures are logged warnings.
    ``keep_last=None`` removes nothing: for a root that ``publish watch`` publishes and ``publish prune``
    rotates, where the library must not delete a snapshot that an entry names.
    """
    step = _check_args(payload, keep_last)
    _payload.torch()
    path, exists = _fs.check_root(root)
    if not exists:
        _fs.make_root(path)
    if keep_last is not None:
        _fs.drop_cache_of_superseded(path, list(_verified), keep_last, PAYLOAD)
    ident = uuid.uuid4().hex
    name = dir_name(step, ident)
    directory = os.path.join(path, name)
    os.mkdir(directory)
    precheck = _precheck(path) if keep_last is not None else None
    try:
        digest, size, marks = _save.write(directory, PAYLOAD, payload)
        data = manifest_bytes(step, ident, digest, size, time.time_ns())
        _fs.write_file(directory, MANIFEST, data)
        _fs.write_file(directory, READY, ready_bytes(data))
        _fs.fsync_dir(directory)
        _fs.fsync_dir(path)
        new = _read_meta(directory, name)
        _verify_written(new, marks)
    except BaseException:
        _invalidate(directory)
        raise
    if keep_last is not None:
        if precheck is not None:
            _payload._join(precheck)
        _retain(path, new, keep_last)
    return Path(directory)


def _precheck(root: str) -> threading.Thread | None:
    """Check, on a thread of its own, the payload digests of the snapshots in ``root`` that this process has
    not verified, while the new one is written: on the first save after a restart retention's checks then
    overlap the write and its fsyncs instead of following them.  Only a head start: what it verifies goes to
    the cache retention consults, which checks each snapshot is unchanged since (else hashes it again)
    before it decides anything.  Nothing when every snapshot is already verified."""
    try:
        todo = [e for e in _scan(root) if isinstance(e, _Meta) and not _still_verified(e)]
    except Exception:  # noqa: BLE001 - retention lists the root again and reports what fails
        return None
    if not todo:
        return None

    def run() -> None:
        try:
            _check_unverified(todo, threads=1)
        except Exception as e:  # noqa: BLE001 - only a head start: retention checks again
            log.debug("retention: early check of %s failed: %s", root, _reason(e))

    thread = threading.Thread(target=run, name="publish-snapshots-precheck", daemon=True)
    thread.start()
    return thread


def _fingerprint_now(meta: _Meta) -> _payload.Fingerprint:
    return _payload.fingerprint(os.lstat(os.path.join(meta.path, PAYLOAD)))


def _still_verified(meta: _Meta) -> bool:
    cached = _verified.get(meta.path)
    return cached is not None and cached == (meta.ready, meta.manifest_bytes, _fingerprint_now(meta))


def _check_unverified(entries: list[_Meta], threads: int | None = None) -> dict[str, str]:
    """Check the payload digest of each snapshot not verified since it last changed (in parallel, one per
    CPU); the reason for each one that failed.  A snapshot's READY and manifest were checked by the scan, so
    a matching digest shows its payload is the file its writer wrote and verified: nothing is deserialised.
    """
    todo: list[_Meta] = []
    failed: dict[str, str] = {}
    for entry in entries:
        try:
            if not _still_verified(entry):
                todo.append(entry)
        except (SnapshotError, OSError) as e:
            failed[entry.path] = _reason(e)
    jobs = [(os.path.join(m.path, PAYLOAD), m.manifest) for m in todo]
    results = _payload.check_digests(jobs, threads or _cpus())
    assert len(results) == len(todo), "check_digests gives one result per job, in order"
    for meta, result in zip(todo, results):
        if isinstance(result, Exception):
            failed[meta.path] = _reason(result)
        else:
            _verified[meta.path] = (meta.ready, meta.manifest_bytes, result)
    return failed


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _retain(root: str, new: _Meta, keep_last: int) -> None:
    """Remove the valid snapshots older than the newest ``keep_last`` (and the new one); never raises."""
    try:
        entries = _scan(root)
    except Exception as e:
        log.warning("retention: cannot list %s: %s", root, _reason(e))
        return
    failed = _check_unverified([e for e in entries if isinstance(e, _Meta) and e.path != new.path])
    kept = 0
    for entry in entries:
        if isinstance(entry, _Refused):
            log.info("retention: left %s in place: %s", entry.path, entry.reason)
            continue
        if entry.path == new.path:
            kept += 1
            continue
        if entry.path in failed:
            log.warning("retention: left %s in place: %s", entry.path, failed[entry.path])
            continue
        if kept < keep_last:
            kept += 1
            continue
        try:
            _remove(root, entry)
        except Exception as e:
            log.warning("retention: could not remove %s: %s", entry.path, _reason(e))


def _remove(root: str, meta: _Meta) -> None:
    """Check the snapshot once more, then remove READY first, then the other files, then the directory.

    The removal goes through a descriptor of the snapshot directory, verified again through that
    descriptor (_fs.remove_snapshot): a directory swapped for a link meanwhile is left, never followed."""
    again = _read_meta(meta.path, meta.name)
    if not _still_verified(again):
        log.warning("retention: left %s in place: it changed since it was verified", meta.path)
        return
    cached = _verified.pop(meta.path)

    def unchanged(dir_fd: int) -> None:
        now = (
            _fs.read_limited_at(dir_fd, READY, READY_LIMIT),
            _fs.read_limited_at(dir_fd, MANIFEST, MANIFEST_LIMIT),
            _payload.fingerprint(os.stat(PAYLOAD, dir_fd=dir_fd, follow_symlinks=False)),
        )
        if now != cached:
            raise SnapshotError(f"{meta.path} changed since it was verified")

    if not _fs.remove_snapshot(root, meta.name, (READY, MANIFEST, PAYLOAD), unchanged):
        log.info("retention: left %s in place: it is not empty", meta.path)
