"""The shape of the code: tests share helpers, never another test module.  (A module's length is a review
question, docs/design.md's Habits, not a test: a cap forced splits by size rather than by idea.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):  # imports inside functions count too
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in sorted(HERE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in sorted(_imported(tree)):
            if name.startswith("tests.test_") or (
                name.startswith("test_") and (HERE / f"{name}.py").exists()
            ):
                offenders.append(f"{path.name} imports {name}")
    assert offenders == []


def test_a_test_that_uses_a_server_carries_its_marker() -> None:
    """test_status.py's S3 tests are not marked s3 in the module; they use the S3 server fixtures, so
    conftest marks them, and `-m "not s3"` (./test on other Pythons, without the servers) leaves them out."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "s3"]
        + ["tests/test_status.py"],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    chosen = {line for line in r.stdout.splitlines() if line.startswith("tests/")}
    assert (
        "tests/test_status.py::test_s3_status_json_reports_everything_and_changes_nothing[moto-None]"
        in chosen
    )
    assert not {line for line in chosen if "::test_s3_" not in line}, chosen
