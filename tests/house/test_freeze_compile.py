"""The freezer compiles ``from __future__ import annotations`` as the flag it sets: the same code, without the
``__future__`` module imported at run time (packaging/build/freeze.py, ``compiled``)."""

from __future__ import annotations

import dis
import importlib.util
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def freeze() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "freeze_under_test", REPO / "packaging" / "build" / "freeze.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imports(code: types.CodeType) -> list[str]:
    return [i.argval for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME"]


SOURCE = b'''"""A module."""

from __future__ import annotations

import sys


def f(x: int | None, y: list[str] = []) -> dict[str, Undefined]:
    return {"line": sys._getframe().f_lineno}
'''


def test_the_future_import_is_the_flag_it_sets() -> None:
    code = freeze().compiled(SOURCE, "m.py")
    assert imports(code) == ["sys"]  # no __future__
    frozen: dict[str, object] = {}
    exec(code, frozen)
    source: dict[str, object] = {}
    exec(compile(SOURCE, "m.py", "exec", dont_inherit=True), source)
    f, g = frozen["f"], source["f"]
    assert isinstance(f, types.FunctionType) and isinstance(g, types.FunctionType)
    # annotations stay strings (a | of types, an undefined name: never evaluated), line numbers stay
    assert (
        f.__annotations__
        == g.__annotations__
        == {
            "x": "int | None",
            "y": "list[str]",
            "return": "dict[str, Undefined]",
        }
    )
    assert f(None) == g(None) == {"line": 9}
    assert frozen["__doc__"] == source["__doc__"] == "A module."
    assert "annotations" in source and "annotations" not in frozen  # the _Feature object, which nothing reads


def test_other_sources_compile_as_they_are() -> None:
    compiled = freeze().compiled
    for text in (
        b"import os\nx: int = 1\n",
        b"from __future__ import annotations, division\n",  # not the one form: left as a statement
        b'"""doc"""\nimport sys\nfrom __future__ import annotations\n',  # not a future statement: a SyntaxError
    ):
        try:
            want = compile(text, "m.py", "exec", dont_inherit=True)
        except SyntaxError as e:
            try:
                compiled(text, "m.py")
            except SyntaxError as f:
                assert (f.msg, f.lineno) == (e.msg, e.lineno)
                continue
            raise AssertionError(f"compiled {text!r}") from None
        assert compiled(text, "m.py").co_code == want.co_code
        assert imports(compiled(text, "m.py")) == imports(want)


def test_no_module_of_the_package_imports_future_once_frozen() -> None:
    compiled = freeze().compiled
    named = []
    for path in sorted((REPO / "publish").rglob("*.py")):
        code = compiled(path.read_bytes(), str(path))
        if "__future__" in imports(code):
            named.append(str(path.relative_to(REPO)))
    assert named == []
