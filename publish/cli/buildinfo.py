"""Which build is running, for ``publish version``: the one file's digest, the Python it carries, the freezer.

Lean: only ``sys`` (``version`` is the first thing a module install or a job script runs).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable


def freezer() -> str:
    """``python`` (./build python: packaging/build/boot.py started it), ``pyinstaller``, ``nuitka``, or
    ``source`` when run from the package."""
    if "__compiled__" in globals():  # Nuitka gives every module it compiled this name
        return "nuitka"
    if getattr(sys, "frozen", False) and hasattr(sys, "_MEIPASS"):
        return "pyinstaller"
    if _boot() is not None:
        return "python"
    return "source"


def build_id() -> str:
    """The one file's build digest (its ``.build-id`` member: 64 hex digits), or ``""`` where the running
    program cannot know it: from the source, the folder form, the PyInstaller and Nuitka forms (their
    launcher passes the program no payload)."""
    read = _boot()
    if read is None:
        return ""
    try:
        digest = str(read())
    except (OSError, ImportError, ValueError):  # a damaged archive: the digest is not known
        return ""
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else ""


def python() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


def lines() -> list[str]:
    """The lines ``publish version`` prints after ``publish <version>``."""
    return [f"build: {build_id() or 'none'}", f"python: {python()}", f"freezer: {freezer()}"]


def _boot() -> Callable[[], object] | None:
    """The ``build_id`` of packaging/build/boot.py's finder, last on sys.meta_path in the default frozen form."""
    for finder in sys.meta_path:
        read = getattr(finder, "build_id", None)
        if type(finder).__name__ == "_Finder" and callable(read):
            return read  # type: ignore[no-any-return]
    return None
