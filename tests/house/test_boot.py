"""packaging/build/boot.py's importer of more.zip under the interpreter that runs the tests (./test runs this
file on the other Pythons too): the one file's modules in more.zip, top-level and in a package, are found
on every CPython from 3.9 (whose zipimporter has no find_spec) to 3.13, without building the one file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

BOOT = REPO / "packaging" / "build" / "boot.py"

# boot.py's definitions without its start-up (which installs the finder for the one file and runs the cli);
# the finder is then put in place as _install puts it in the one-file form: its hook first on sys.path_hooks,
# itself last on sys.meta_path, with an archive read that holds no lazy member (so more.zip is on disk).
PROBE = """
import sys
exec(open(sys.argv[1]).read().split("\\n_install()\\n")[0])
finder = _Finder(sys.argv[2], -1)
finder.table, finder.index = {}, {}
sys.path_hooks.insert(0, finder.more_hook)
sys.path_importer_cache.clear()
sys.meta_path.append(finder)
import boot_probe_top
import boot_probe_pkg.inner
from boot_probe_pkg import inner
print(boot_probe_top.VALUE, inner.VALUE, boot_probe_pkg.inner.__file__, type(inner.__loader__).__name__)
"""


def test_boots_finder_imports_modules_of_more_zip_on_this_python(tmp_path: Path) -> None:
    """Issue #31 (./build with CPython 3.9: `'super' object has no attribute 'find_spec'` on `status` and on a
    `resolve` that finds a save): a module of more.zip and one inside a package of more.zip import through
    the finder and its hook on the Python running this test."""
    (tmp_path / "lib").mkdir()
    with zipfile.ZipFile(tmp_path / "lib" / "more.zip", "w") as z:
        z.writestr("boot_probe_top.py", "VALUE = 'top'\n")
        z.writestr("boot_probe_pkg/__init__.py", "")
        z.writestr("boot_probe_pkg/inner.py", "VALUE = 'inner'\n")
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(BOOT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    top, inner, where, loader = r.stdout.split()
    assert (top, inner) == ("top", "inner")
    assert where == f"{tmp_path}/lib/more.zip/boot_probe_pkg/inner.py"
    assert loader == "More"  # the package's submodule came through the hook, which checks more.zip first
