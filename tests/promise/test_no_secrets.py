"""The session-end secret check (tests/support/no_secrets.py) fails a run in which a registered secret reached an
output, wherever in the run the leaking test sits, and leaves a run without a leak alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, base_env

SECRET = "leak-check-" + "0123456789abcdef"  # built here so this file's own text never holds it whole

REGISTER = f"from tests.support.secret_log import record_output, remember_secret\nSECRET = {SECRET!r}\n"
PRINT = "def test_leak():\n    remember_secret(SECRET)\n    print(SECRET)\n"
RECORD = "def test_leak():\n    remember_secret(SECRET)\n    record_output('resolve', 'key ' + SECRET)\n"
FAIL = "def test_leak():\n    remember_secret(SECRET)\n    assert SECRET == ''\n"
QUIET = "def test_quiet():\n    remember_secret(SECRET)\n    print('nothing to see')\n"
# how: (the leaking module, its body, where the check reports the leak)
LEAKS = {
    "printed by the first test": ("test_aaa.py", PRINT, "test_aaa.py::test_leak"),
    "printed by the last test": ("test_zzz.py", PRINT, "test_zzz.py::test_leak"),
    "in a recorded output": ("test_aaa.py", RECORD, "('resolve', 'leak...')"),
    "in a failure's text": ("test_zzz.py", FAIL, "test_zzz.py::test_leak"),
}


def run_suite(directory: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run pytest with the plugin on ``modules`` (file name: body) in a fresh directory of its own."""
    for name, body in modules.items():
        (directory / name).write_text(REGISTER + body)
    args = ["-q", "-p", "no:cacheprovider", "-p", "tests.support.no_secrets", str(directory)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=directory,
        env={**base_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("how", sorted(LEAKS))
def test_a_leaked_secret_fails_the_run_wherever_the_test_sits(tmp_path: Path, how: str) -> None:
    name, body, where = LEAKS[how]
    r = run_suite(tmp_path, {"test_mmm.py": QUIET, name: body})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "secret values in output" in r.stdout
    assert where in r.stdout
    assert "leak..." in r.stdout


def test_a_run_without_a_leak_passes(tmp_path: Path) -> None:
    r = run_suite(tmp_path, {"test_aaa.py": QUIET, "test_zzz.py": QUIET})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "secret values in output" not in r.stdout
