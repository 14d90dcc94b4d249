"""Arguments and paths that are not UTF-8: written back as the bytes they were, as Go writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, base_env, command


def run_bytes(*args: bytes) -> subprocess.CompletedProcess[bytes]:
    """The real process (source or PUBLISH_BIN), its arguments given as bytes."""
    cmd = [os.fsencode(w) for w in (command() or [sys.executable, "-m", "publish"])]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    return subprocess.run([*cmd, *args], env=env, capture_output=True, timeout=60)


def test_an_unknown_flag_with_a_byte_that_is_not_utf8_is_echoed_as_that_byte() -> None:
    r = run_bytes(b"resolve", b"-\xff")
    assert r.returncode == 2
    assert r.stderr.startswith(b"publish: flag provided but not defined: -\xff\n")


def test_a_root_that_is_not_utf8_is_named_by_its_own_bytes(tmp_path: Path) -> None:
    missing = os.fsencode(tmp_path) + b"/ckpt\xfe"
    r = run_bytes(b"resolve", b"-checkpoint", missing)
    assert r.returncode == 1
    assert r.stderr == (
        b"publish: checkpoint root " + missing + b" does not exist; for a new run, make it first: "
        b"publish init -checkpoint " + missing + b"\n"
    )


def test_resolve_prints_a_root_that_is_not_utf8_so_that_it_names_the_same_folder(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path) + b"/ckpt\xe9"
    save = root + b"/exec/A/checkpoint-5"
    os.makedirs(save)
    published = run_bytes(b"publish", b"-checkpoint", root, save, b"5")
    assert published.returncode == 0, published.stderr
    r = run_bytes(b"resolve", b"-checkpoint", root)
    assert (r.returncode, r.stdout) == (0, save + b"\n")
    assert os.path.isdir(r.stdout.rstrip(b"\n"))


def test_a_save_whose_path_below_the_root_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path) + b"/ckpt"
    save = root + b"/exec/A/step-\xe9-5"
    os.makedirs(save)
    r = run_bytes(b"publish", b"-checkpoint", root, save, b"5")
    assert r.returncode == 1
    assert (
        r.stderr
        == b"publish: save " + save + b": its path below the root is not UTF-8, which an entry name must be\n"
    )
    assert not os.path.exists(root + b"/pub") or os.listdir(root + b"/pub") == []
