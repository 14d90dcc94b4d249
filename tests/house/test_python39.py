"""The package runs on Python 3.9 (pyproject.toml's requires-python), checked without a 3.9 interpreter:
vermin finds library names, keyword arguments and syntax newer than 3.9 in publish/, and two checks of our own
cover what vermin leaves out (annotations, which it skips, and a ``X | Y`` of types evaluated at run time)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys

from tests.conftest import REPO, need

PACKAGE = REPO / "publish"

# vermin 1.9: target 3.9 or lower; only the violations, one per line as path:line:column:py2:py3:feature;
# no config file, so a vermin.ini or setup.cfg cannot change the verdict; `# novm` comments honoured (each one
# must be listed in NOVM below).  Annotations are not evaluated (every module that has one imports
# annotations from __future__, checked below), so they are left out, as the interpreter leaves them.
VERMIN_ARGS = [
    "--no-config-file",
    "--target=3.9-",
    "--violations",
    "--no-eval-annotations",
    "--parse-comments",
    "--no-tips",
    "--format",
    "parsable",
    "--processes",
    "1",
]

# Each `# novm` in publish/: (file, text of the line it ends) -> why that newer name never runs on 3.9.
NOVM = {
    ("process/child.py", "process_group=0"): "only under sys.version_info >= (3, 11); older: preexec_fn",
}

_TYPES = {"bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list", "memoryview"}
_TYPES |= {"object", "set", "str", "tuple", "type"}


def _files() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def _tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name).read_text(encoding="utf-8"), name)


def test_vermin_finds_nothing_newer_than_python_39() -> None:
    need(importlib.util.find_spec("vermin") is not None, "vermin is not installed (pip install vermin)")
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from vermin import main; sys.exit(main())",
            *VERMIN_ARGS,
            str(PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # A violation's line names its place and the feature; the per-file and overall summaries have neither.
    found = [line for line in run.stdout.splitlines() if line.split(":")[-1]]
    assert not found, (
        "newer than Python 3.9 (path:line:column:py2:py3:feature; vermin shows the first of each feature in a file):\n"
        + "\n".join(found)
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_novm_comment_is_listed_with_its_reason() -> None:
    marked = set()
    for name in _files():
        for line in (PACKAGE / name).read_text(encoding="utf-8").splitlines():
            if "# novm" in line or "# novermin" in line:
                listed = [key for key in NOVM if key[0] == name and key[1] in line]
                assert listed, f"publish/{name}: `# novm` not listed in NOVM with a reason: {line.strip()}"
                marked.update(listed)
    assert marked == set(NOVM), f"NOVM lists comments that are gone: {sorted(set(NOVM) - marked)}"


def _annotations(tree: ast.Module) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotation = node.returns
        elif isinstance(node, (ast.arg, ast.AnnAssign)):
            annotation = node.annotation
        else:
            continue
        if annotation is not None:
            found.append(annotation)
    return found


def test_annotations_are_never_evaluated() -> None:
    # `int | None` or `list[str]` in an annotation is evaluated at definition time without this import.
    missing = []
    for name in _files():
        tree = _tree(name)
        future = any(
            isinstance(node, ast.ImportFrom)
            and node.module == "__future__"
            and "annotations" in {a.name for a in node.names}
            for node in tree.body
        )
        if _annotations(tree) and not future:
            missing.append(f"publish/{name}")
    assert not missing, "annotations without `from __future__ import annotations`: " + ", ".join(missing)


def _typeish(node: ast.expr) -> bool:
    """An operand that looks like a type: None, a builtin type, a CamelCase name, a subscript, a union."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Subscript):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _typeish(node.left) or _typeish(node.right)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in _TYPES or (name[:1].isupper() and not name.isupper())  # not a constant such as os.O_RDONLY


def _runtime_unions(tree: ast.Module) -> list[ast.BinOp]:
    """Each ``X | Y`` of types that runs (isinstance, cast, an alias): outside annotations and
    ``if TYPE_CHECKING:``."""
    skip = {id(a) for a in _annotations(tree)}
    found: list[ast.BinOp] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if id(node) in skip:
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and _typeish(node):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def test_no_union_of_types_runs() -> None:
    # types.UnionType (`int | None` as a value) is Python 3.10; vermin leaves it out (its union-types
    # feature also flags every annotation and every `os.O_RDONLY | os.O_CLOEXEC`).
    found = [
        f"publish/{name}:{u.lineno}: {ast.unparse(u)}"
        for name in _files()
        for u in _runtime_unions(_tree(name))
    ]
    assert not found, (
        "`X | Y` of types evaluated at run time (Python 3.10+; use typing.Union):\n" + "\n".join(found)
    )


def test_the_union_check_sees_what_it_should() -> None:
    code = (
        "from __future__ import annotations\n"
        "def f(a: int | None) -> str | None:\n"
        "    b: list[int] | None = None\n"
        "    flags = os.O_RDONLY | os.O_CLOEXEC | mask\n"
        "    return isinstance(a, int | str), cast(Callable[[], int] | None, a)\n"
        "Alias = Path | None\n"
        "if TYPE_CHECKING:\n"
        "    Other = int | None\n"
    )
    assert sorted(u.lineno for u in _runtime_unions(ast.parse(code))) == [5, 5, 6]
