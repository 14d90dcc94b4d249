"""packaging/build/boot.py's importers under the interpreter that runs the tests (./test runs this file on
the other Pythons too): the modules of pythonXY.zip and more.zip, top-level and in a package, are found on
every CPython from 3.9 (whose zipimporter has neither find_spec nor exec_module) to 3.13, and a module two
threads import at once is whole in both, without building the one file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
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
