"""The CPython interpreters of each minor version the package supports, as pyenv keeps them: for tests that
must run the same thing under 3.9 and 3.13 (a subprocess per version)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import need

#: The versions the package supports (pyproject.toml's requires-python, the spec's Platforms).
SUPPORTED = ("3.9", "3.10", "3.11", "3.12", "3.13")


def _pyenv_root() -> Path | None:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    pyenv = shutil.which("pyenv")
    if pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    home = Path.home() / ".pyenv"
    return home if home.is_dir() else None


def find(version: str) -> str | None:
    """The newest pyenv CPython ``version`` (``3.13``): the path of its interpreter, or None."""
    root = _pyenv_root()
    if root is None:
        return None
    found = [p for p in (root / "versions").glob(f"{version}.*") if p.name[len(version) + 1 :].isdigit()]
    found.sort(key=lambda p: int(p.name[len(version) + 1 :]))
    for path in reversed(found):
        if (path / "bin" / "python").exists():
            return str(path / "bin" / "python")
    return None


def python(version: str) -> str:
    """The interpreter of ``version``; the test is skipped without it (and fails under CI=true)."""
    path = find(version)
    need(path is not None, f"no CPython {version} (pyenv install {version})")
    assert path is not None
    return path
