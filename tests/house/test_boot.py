"""packaging/build/boot.py's importers under the interpreter that runs the tests (./test runs this file on
the other Pythons too): the modules of pythonXY.zip and more.zip, top-level and in a package, are found on
every CPython from 3.9 (whose zipimporter has neither find_spec nor exec_module) to 3.13, and a module two
threads import at once is whole in both, without building the one file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO

BOOT = REPO / "packaging" / "build" / "boot.py"

# boot.py's definitions without its start-up (which installs the finder for the one file and runs the cli);
# the hooks are then put in place as _install puts them in the one-file form: ZIP for the zips on sys.path,
# the finder's hook first on sys.path_hooks, the finder last on sys.meta_path, with an archive read that
# holds no lazy member (so more.zip is on disk).
PROBE = """
import sys, threading
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])
sys.path.insert(0, sys.argv[2] + "/lib/python.zip")
_zip_hook()
finder = _Finder(sys.argv[2], -1)
finder.table, finder.index = {}, {}
sys.path_hooks.insert(0, finder.more_hook)
sys.path_importer_cache.clear()
sys.meta_path.append(finder)
import boot_probe_top
import boot_probe_pkg.inner
from boot_probe_pkg import inner
print(boot_probe_top.VALUE, inner.VALUE, boot_probe_pkg.inner.__file__, type(inner.__loader__).__name__)

# A module that one thread is running while another imports it: the other waits for it (3.9's load_module
# handed it over half made).
entered, gate, seen = threading.Event(), threading.Event(), []
for name in ("boot_probe_slow_std", "boot_probe_slow_more"):
    entered.clear(), gate.clear()
    first = threading.Thread(target=__import__, args=(name,))
    first.start()
    entered.wait(60)
    second = threading.Thread(target=lambda: seen.append(getattr(__import__(name), "VALUE", "half made")))
    second.start()
    second.join(1)  # time to reach the import: a half-made module is handed over at once
    gate.set()
    first.join(60), second.join(60)
print(*seen)
"""

SLOW = """
import sys
main = sys.modules["__main__"]
main.entered.set()
main.gate.wait(60)
VALUE = "whole"
"""


def test_boots_importers_load_modules_whole_on_this_python(tmp_path: Path) -> None:
    """Issue #31 (./build with CPython 3.9: `'super' object has no attribute 'find_spec'` on `status` and on a
    `resolve` that finds a save; then, on `publish` and `watch`, `module 'hashlib' has no attribute 'sha256'`
    now and then, from the threads that hash a save): a module of more.zip and one in a package of more.zip
    import through the finder and its hook, and a module of either zip that two threads import at once is
    whole in both, on the Python running this test."""
    (tmp_path / "lib").mkdir()
    with zipfile.ZipFile(tmp_path / "lib" / "more.zip", "w") as z:
        z.writestr("boot_probe_top.py", "VALUE = 'top'\n")
        z.writestr("boot_probe_pkg/__init__.py", "")
        z.writestr("boot_probe_pkg/inner.py", "VALUE = 'inner'\n")
        z.writestr("boot_probe_slow_more.py", SLOW)
    with zipfile.ZipFile(tmp_path / "lib" / "python.zip", "w") as z:
        z.writestr("boot_probe_slow_std.py", SLOW)
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(BOOT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    first, second = r.stdout.splitlines()
    top, inner, where, loader = first.split()
    assert (top, inner) == ("top", "inner")
    assert where == f"{tmp_path}/lib/more.zip/boot_probe_pkg/inner.py"
    assert loader == "More"  # the package's submodule came through the hook, which checks more.zip first
    assert second.split() == ["whole", "whole"]


# boot.py's definitions, then its finder of pythonXY.zip first on sys.meta_path as _install puts it, made from
# the zipimporter that read the archive (as the one that imported _publish_boot), after ZIP took the place of
# zipimporter for what the finder leaves to zipimport (3.9: _Zip39); then the probe's imports.
STORED = """
import sys, zipimport
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])
_zip_hook()
archive = sys.argv[2]
stored = _stored(zipimport.zipimporter(archive))
sys.path.insert(0, archive)
sys.meta_path.insert(0, stored)
for name in sys.argv[3:]:
    try:
        module = __import__(name, fromlist=["VALUE"])
    except Exception as e:
        print(name, type(e).__name__, str(e).replace(archive, "ARCHIVE"))
    else:
        path = getattr(module, "__path__", None)
        where = [module.__file__, module.__cached__, *(path or [])]
        print(name, module.VALUE, type(module.__loader__).__name__, *[w.replace(archive, "ARCHIVE") for w in where])
"""


def compiled_pyc(source: str, name: str) -> bytes:
    """A module compiled as packaging/build/freeze.py compiles it: an unchecked hash-based .pyc."""
    import importlib.util
    from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]

    code = compile(source, name, "exec", dont_inherit=True)
    return bytes(_code_to_hash_pyc(code, importlib.util.source_hash(source.encode()), checked=False))


def central_entry(raw: bytes, member: str) -> int:
    """Where the central directory's entry of `member` starts in the archive's bytes."""
    pos = raw.find(b"PK\x01\x02")
    while pos >= 0:
        length = int.from_bytes(raw[pos + 28 : pos + 30], "little")
        if raw[pos + 46 : pos + 46 + length] == member.encode():
            return pos
        pos = raw.find(b"PK\x01\x02", pos + 1)
    raise AssertionError(f"{member} is not in the central directory")


def run_stored(
    tmp_path: Path,
    members: dict[str, tuple[bytes, int, bytes]],
    names: list[str],
    damage: Callable[[bytearray], None] = lambda raw: None,
) -> list[str]:
    """The probe's lines for `names`, imported from an archive of `members` (name -> data, compression, extra
    field), its bytes changed by `damage` once written."""
    archive = tmp_path / "python.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for member, (data, method, extra) in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type, info.extra = method, extra
            z.writestr(info, data)
    raw = bytearray(archive.read_bytes())
    damage(raw)
    archive.write_bytes(bytes(raw))
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", STORED, str(BOOT), str(archive), *names],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    return r.stdout.splitlines()


def test_the_modules_of_the_stored_zip_are_read_by_boots_own_finder(tmp_path: Path) -> None:
    """Issue 33 (start-up: each module zipimport reads costs about a quarter of a million instructions, and the
    package move added five to a resolve): a module and a package's submodule of pythonXY.zip are imported
    through boot.py's finder, with zipimport's __file__, __cached__ and __path__ (in the archive, as
    tracebacks and `publish version` show them), on the Python running this test."""
    stored = zipfile.ZIP_STORED
    members = {
        "probe_top.pyc": (compiled_pyc("VALUE = 'top'\n", "probe_top.py"), stored, b""),
        "probe_pkg/__init__.pyc": (compiled_pyc("VALUE = 'pkg'\n", "probe_pkg/__init__.py"), stored, b""),
        "probe_pkg/inner.pyc": (compiled_pyc("VALUE = 'inner'\n", "probe_pkg/inner.py"), stored, b""),
    }
    lines = run_stored(tmp_path, members, ["probe_top", "probe_pkg.inner", "probe_pkg"])
    assert lines == [
        "probe_top top _Stored ARCHIVE/probe_top.pyc ARCHIVE/probe_top.pyc",
        "probe_pkg.inner inner _Stored ARCHIVE/probe_pkg/inner.pyc ARCHIVE/probe_pkg/inner.pyc",
        "probe_pkg pkg _Stored ARCHIVE/probe_pkg/__init__.pyc ARCHIVE/probe_pkg/__init__.pyc ARCHIVE/probe_pkg",
    ]


def test_a_member_the_finder_does_not_read_as_stored_is_left_to_zipimport(tmp_path: Path) -> None:
    """A member deflated, with an extra field in its local header, or a source file, is imported as zipimport
    imports it; a member whose local header is damaged, whose central directory entry points at another
    member, or whose size there runs past the archive's end fails or loads as zipimport has it, as before the
    finder: the finder reads nothing it cannot check."""
    stored, deflated = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED

    def pyc(name: str) -> tuple[bytes, int, bytes]:
        return compiled_pyc(f"VALUE = {name!r}\n", f"probe_{name}.py"), stored, b""

    members = {
        "probe_deflated.pyc": (compiled_pyc("VALUE = 'deflated'\n", "probe_deflated.py"), deflated, b""),
        "probe_extra.pyc": (compiled_pyc("VALUE = 'extra'\n", "probe_extra.py"), stored, b"\xfe\xca\x00\x00"),
        "probe_source.py": (b"VALUE = 'source'\n", stored, b""),
        "probe_damaged.pyc": pyc("damaged"),
        "probe_elsewhere.pyc": pyc("elsewhere"),
        "probe_long.pyc": pyc("long"),
        "probe_other.pyc": pyc("other"),
    }

    def damage(raw: bytearray) -> None:
        def offset(member: str) -> slice:  # of its local header, in its central directory entry
            at = central_entry(raw, member) + 42
            return slice(at, at + 4)

        local = int.from_bytes(raw[offset("probe_damaged.pyc")], "little")
        raw[local : local + 4] = b"PK\x00\x00"  # no longer a local header's signature
        raw[offset("probe_elsewhere.pyc")] = raw[offset("probe_other.pyc")]
        entry = central_entry(raw, "probe_long.pyc")  # its sizes, compressed and not, past the archive's end
        size = int.from_bytes(raw[entry + 20 : entry + 24], "little") + len(raw)
        raw[entry + 20 : entry + 28] = size.to_bytes(4, "little") * 2

    names = [m.split(".")[0] for m in members if m != "probe_other.pyc"]
    lines = run_stored(tmp_path, members, names, damage)
    tag = f"{sys.version_info[0]}{sys.version_info[1]}"
    zip = "_Zip39" if sys.version_info < (3, 10) else "zipimporter"  # boot.py's ZIP
    assert lines[:3] == [
        f"probe_deflated deflated {zip} ARCHIVE/probe_deflated.pyc ARCHIVE/probe_deflated.pyc",
        f"probe_extra extra {zip} ARCHIVE/probe_extra.pyc ARCHIVE/probe_extra.pyc",
        f"probe_source source {zip} ARCHIVE/probe_source.py ARCHIVE/__pycache__/probe_source.cpython-{tag}.pyc",
    ]
    assert lines[3] == "probe_damaged ZipImportError bad local file header: 'ARCHIVE'"
    # zipimport reads whatever the entry points at, unchecked: the other member's code
    assert lines[4] == f"probe_elsewhere other {zip} ARCHIVE/probe_elsewhere.pyc ARCHIVE/probe_elsewhere.pyc"
    assert lines[5].startswith("probe_long OSError "), lines[5]
