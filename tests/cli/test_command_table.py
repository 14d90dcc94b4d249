"""publish.cli's command table: one module per verb, declaring its synopsis, summary, flags and run."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from publish import cli, stores
from publish.ops.command import Command
from publish.rules import layout, roots
from publish.stores.posix import PosixStore

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("verb", cli.VERBS)
def test_each_verb_is_one_module_declaring_its_command(verb: str) -> None:
    command = cli.command(verb)
    assert isinstance(command, Command) and command.name == verb
    assert command.synopsis.startswith(f"publish {verb} -checkpoint ")
    assert command.summary and command.summary in cli.verb_list()
    usage = command.usage()
    assert usage.startswith(f"usage: {command.synopsis}\n") and "\n  -checkpoint ROOT\n" in usage
    assert command.fs is not cli.command(verb).fs  # a fresh flag set for each command line


def test_a_posix_root_opens_a_posix_store_without_the_probe_capability(tmp_path: Path) -> None:
    opened = stores.open(roots.parse_root(str(tmp_path), "/"), env={}, deadline=0.0)
    assert isinstance(opened.store, PosixStore) and (opened.source, opened.probe) == ("", None)


def test_a_posix_resolve_imports_nothing_of_the_network(tmp_path: Path) -> None:
    """The S3 store, the credential sources, the wire and their standard modules stay out of a POSIX resolve
    (-S: without site, whose .pth files import re and typing themselves)."""
    code = (
        "import sys; from publish.cli import main; "
        f"code = main(['resolve', '-checkpoint', {str(tmp_path)!r}], {{}}, sys.stdout, sys.stderr); "
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ssl', 'http', 'xml', 'json', 're', 'typing', 'threading', 'socket', 'urllib', 'collections', 'enum', "
        "'functools', 'dataclasses') "
        "or m.startswith(('publish.creds', 'publish.stores.s3', 'publish.s3.s3client', 'publish.http.net'))))"
    )
    r = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (r.stdout, r.stderr) == ("0 []\n", "")


#: What a POSIX resolve that answers imports beyond the interpreter's own start (-I -S): the verb, its
#: command line, the pure rules it applies and the POSIX store's entries and root (not its file operations, not
#: what it writes or removes, nor the Store protocol's types; of the file primitives the flags and one lstat,
#: not the walks through a tree; of the verbs' shared code the root flags, not watch's and run's); no framework, no warnings or importlib, no typing, re or collections, none of
#: Go's value rules when no flag holds a number or a duration, and not os (nor posixpath, which imports it):
#: os brings collections.abc, a sixth of a bare start; its functions are posix's, the environment posix's.
POSIX_RESOLVE = {
    "publish",
    "publish.rules.go",
    "publish.rules.files",
    "publish.cli",
    "publish.rules.deadline",
    "publish.rules.errors",
    "publish.rules.go.flags",
    "publish.rules.layout",
    "publish.rules.redact",
    "publish.rules.roots",
    "publish.verbs",
    "publish.ops",
    "publish.ops.command",
    "publish.ops.mirror_flags",
    "publish.ops.resolution",
    "publish.rules",
    "publish.verbs.resolve",
    "publish.rules.files.fsops",
    "publish.stores",
    "publish.stores.posix",
    "publish.stores.posix_root",
    # the standard library: stat's C half alone (not stat.py, not errno: a resolve that finds its save meets no
    # error; not the C modules layout's bulk check runs in: 10 names are parsed)
    "__future__",
    "_stat",
}


def test_a_posix_resolve_imports_only_what_it_uses(tmp_path: Path) -> None:
    (tmp_path / "pub").mkdir()
    (tmp_path / "exec" / "1" / "checkpoint-10").mkdir(parents=True)
    (tmp_path / "pub" / layout.name(0, 10, "exec/1/checkpoint-10")).write_bytes(b"")
    code = (
        "import sys; start = set(sys.modules); from publish.cli import main; "
        f"code = main(['resolve', '-checkpoint', {str(tmp_path)!r}], {{}}, sys.stdout, sys.stderr); "
        "print(code, sorted(set(sys.modules) - start))"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out, _, listed = r.stdout.rpartition("\n0 ")
    assert (out, r.stderr) == (str(tmp_path / "exec" / "1" / "checkpoint-10"), ""), r
    assert set(ast.literal_eval(listed)) == POSIX_RESOLVE


def test_the_framework_names_are_spelled_out_only_in_the_framework_table() -> None:
    """Usage lines and messages about frameworks are made from publish.frameworks.FRAMEWORKS: no string in
    the package outside it names two frameworks."""
    from publish.frameworks import CHOICES, FRAMEWORKS, LISTED

    table = REPO / "publish" / "frameworks" / "__init__.py"
    spelled = []
    for path in sorted((REPO / "publish").rglob("*.py")):
        if path == table:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = node.value.replace("|", " ").replace(",", " ").split()
                if sum(1 for name in FRAMEWORKS if name in words) >= 2:
                    spelled.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert spelled == []
    assert "|".join(FRAMEWORKS) == CHOICES
    assert ", ".join(list(FRAMEWORKS)[:-1]) + " or deepspeed" == LISTED
    for verb in ("watch", "run", "status"):
        usage = cli.command(verb).usage()
        assert f"-framework {CHOICES} " in usage or verb == "status"
        assert usage.count(LISTED) == 1


def test_the_environment_is_os_environ_without_importing_os(tmp_path: Path) -> None:
    """cli.run hands main the environment as os.environ holds it: the same names and values, in the same order,
    bytes that are not UTF-8 included (as lone surrogates), a change made through os.environ included."""
    code = (
        "import sys; from publish import cli; env = cli.environment(); "
        "print('os' in sys.modules); import os; os.environ['ADDED'] = 'late\\udcff'; "
        "print(list(env.items()) == list(os.environ.items())[:-1], cli.environment() == dict(os.environ))"
    )
    env = {
        b"PATH": b"/usr/bin:/bin",
        b"NOT_UTF8": b"\xff\xfe=\x80",
        b"\xe9t\xe9": b"caf\xc3\xa9 \r%",
        b"EMPTY": b"",
    }
    r = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
                       env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (r.stdout, r.stderr) == ("False\nTrue True\n", "")
