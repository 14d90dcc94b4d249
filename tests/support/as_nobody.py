"""Fixtures for running ``publish`` as an unprivileged user (``nobody``, through ``setpriv``): a root that
user can reach, and the command copied where that user can run it, whatever the checkout's mode."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, command, need


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A root an unprivileged user can reach (pytest's tmp_path is root's own)."""
    d = Path(tempfile.mkdtemp(prefix="publish-hint-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def reachable_by_others(path: Path) -> bool:
    """Whether a user who is neither its owner nor in its group can run ``path`` (every folder on the way)."""
    path = Path(os.path.realpath(path))
    return all(p.stat().st_mode & 0o001 for p in path.parents) and path.stat().st_mode & 0o005 == 0o005


@pytest.fixture
def open_command() -> Iterator[tuple[list[str], Path]]:
    """The command under test, from a world-readable folder of its own: the checkout may be private (a clone
    under /root or in a home made by adduser is mode 0700), and the unprivileged user cannot reach into it.
    The package's source is copied there and run by the interpreter the venv was made from (publish needs
    nothing but the standard library); a one file named by PUBLISH_BIN is copied there.  The command and the
    folder (its working directory and PYTHONPATH)."""
    d = Path(tempfile.mkdtemp(prefix="publish-as-nobody-", dir="/tmp"))
    try:
        cmd = command()
        if cmd is None:
            shutil.copytree(REPO / "publish", d / "publish", ignore=shutil.ignore_patterns("__pycache__"))
            python = Path(os.path.realpath(sys.executable))
            need(reachable_by_others(python), f"an interpreter other users can run ({python} is not)")
            cmd = [str(python), "-m", "publish"]
        elif os.sep in cmd[0]:
            shutil.copyfile(cmd[0], d / "publish")
            cmd = [str(d / "publish"), *cmd[1:]]
        for folder, _dirs, files in os.walk(d):
            os.chmod(folder, 0o755)
            for f in files:
                os.chmod(os.path.join(folder, f), 0o755 if f == "publish" else 0o644)
        yield cmd, d
    finally:
        shutil.rmtree(d, ignore_errors=True)
