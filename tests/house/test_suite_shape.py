"""The shape of the code: tests share helpers, never another test module.  (A module's length is a review
question, docs/design.md's Habits, not a test: a cap forced splits by size rather than by idea. The verbs'
functions are the one exception, below.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # tests/


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
    for path in sorted(HERE.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in sorted(_imported(tree)):
            if name.rpartition(".")[2].startswith("test_") or ".test_" in name:
                offenders.append(f"{path.name} imports {name}")
    assert offenders == []


def test_a_test_that_uses_a_server_carries_its_marker() -> None:
    """test_status.py's S3 tests are not marked s3 in the module; they use the S3 server fixtures, so
    conftest marks them, and `-m "not s3"` (./test on other Pythons, without the servers) leaves them out."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "s3"]
        + ["tests/verbs/test_status.py"],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    chosen = {line for line in r.stdout.splitlines() if line.startswith("tests/")}
    assert (
        "tests/verbs/test_status.py::test_s3_status_json_reports_everything_and_changes_nothing[moto-None]"
        in chosen
    )
    assert not {line for line in chosen if "::test_s3_" not in line}, chosen


#: Names a module offers through a protocol rather than by import: each framework module's rules (read from
#: the module object by publish.frameworks.Framework) and the snapshot library's public API.
_PROTOCOL = {"KIND", "RANKED", "step_of", "complete", "unpublishable"}
#: Known, and to move into tests/ (prune.py is being reworked): prune's plan, which only tests and bench call.
_LEFT = {("publish.ops.retention", "plan")}


def test_no_dead_api_in_the_package() -> None:
    """Every function, class and constant at the top of a module in publish/ is used by the package itself:
    one that only tests or bench/ call lives with them."""
    root = HERE.parent
    modules = {}
    for path in sorted((root / "publish").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(path.read_text())
    used: set[tuple[str, str]] = set()
    for name, tree in modules.items():
        package = name if name in {m.rpartition(".")[0] for m in modules} else name.rpartition(".")[0]
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
                    base = base.rstrip(".")
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
                    used.add((base, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    aliases[alias.asname or alias.name] = alias.name
        listed = {  # the strings of __all__ are not a use
            elt
            for node in tree.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
            for elt in ast.walk(node.value)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add((name, node.id))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node not in listed:
                used.add((name, node.value))  # getattr(rules, "name")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                used.add((aliases.get(node.value.id, ""), node.attr))
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                chain, inner = [node.value.attr], node.value.value
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in aliases:
                    used.add((".".join([aliases[inner.id], *reversed(chain)]), node.attr))
    dead = []
    for name, tree in modules.items():
        public = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
                public = {elt.value for elt in node.value.elts}  # type: ignore[attr-defined]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined = [node.name]
            elif isinstance(node, ast.Assign):
                defined = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            for item in defined:
                if item.startswith("__") or item in ("TYPE_CHECKING", "COMMAND") or item in _PROTOCOL:
                    continue
                if name == "publish.snapshots" and item in public or (name, item) in _LEFT:
                    continue
                if (name, item) not in used:
                    dead.append(f"{name}.{item}")
    assert dead == []


def test_the_tests_mirror_the_package() -> None:
    """A folder of tests/ is a package of publish/ (its tests), or one of the suite's own: promise/ (the promise
    as one property), jobs/ (a real Slurm), house/ (the build, the binary, the docs, the code's shape), support/
    (what the tests share). Every module that is not a test lives in support/."""
    root = HERE.parent
    packages = {
        p.parent.relative_to(root / "publish").as_posix() for p in (root / "publish").rglob("__init__.py")
    }
    own = {"promise", "jobs", "house", "support"}
    folders = {
        p.relative_to(HERE).as_posix() for p in HERE.rglob("*") if p.is_dir() and p.name != "__pycache__"
    }
    stray = sorted(f for f in folders if f not in packages | own and not f.startswith("support/"))
    assert stray == []
    helpers = sorted(
        p.relative_to(HERE).as_posix()
        for p in HERE.rglob("*.py")
        if not p.name.startswith("test_")
        and p.name not in ("__init__.py", "conftest.py")
        and p.relative_to(HERE).parts[0] != "support"
    )
    assert helpers == []


def test_a_verb_is_its_flags_and_its_run() -> None:
    """The one cap on length the house keeps (docs/design.md): in publish/verbs/ no function is over 60 lines
    or takes over 8 parameters besides self. A verb longer than that holds an operation other verbs will
    want, which belongs in publish/ops/; that no verb imports another is the `verbs` import contract."""
    over = []
    for path in sorted((HERE.parent / "publish" / "verbs").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [
                    p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")
                ]
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60 or len(params) > 8:
                    over.append(
                        f"{path.name}:{node.lineno} {node.name}: {lines} lines, {len(params)} parameters"
                    )
    assert over == []
