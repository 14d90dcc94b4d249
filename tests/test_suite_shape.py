"""The shape of the code: tests share helpers, never another test module.  (A module's length is a review
question, docs/design.md's Habits, not a test: a cap forced splits by size rather than by idea.)"""

from __future__ import annotations

import ast
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
