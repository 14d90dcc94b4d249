"""`./build pyinstaller` and `./build nuitka`: each built into its own directory (not dist/, which the other
binary tests use) and run as a job would run it.

About a minute for PyInstaller and two and a half for Nuitka (which compiles the package and the standard
library it reaches to C; less with a warm ccache) on two cores. With PUBLISH_ALT_DIST=DIR the builds already
made by `./build FREEZER DIR/FREEZER` are used instead (./test makes them once, then runs these tests and the
CLI and binary tests against them).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import (
    REPO,
    VERSION_LINE,
    Chroot,
    env_for,
    first,
    leftovers,
    publish_entry,
    unavailable,
    wait_gone,
)

pytestmark = [pytest.mark.binary, pytest.mark.slow, pytest.mark.timeout(1800)]

FREEZERS = ["pyinstaller", "nuitka"]


@pytest.fixture(scope="module", params=FREEZERS)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT, holding OUT/publish and OUT/publish-folder, made by `./build FREEZER OUT`."""
    made = os.environ.get("PUBLISH_ALT_DIST")
    if made:
        out = Path(made) / request.param
        assert os.access(out / "publish", os.X_OK), f"{out}/publish is missing: ./build {request.param} {out}"
        return out
    out = tmp_path_factory.mktemp(f"build-{request.param}")
    r = subprocess.run(
        [str(REPO / "build"), request.param, str(out)], capture_output=True, text=True, timeout=1800
    )
    assert r.returncode == 0, f"./build {request.param} failed:\n{r.stderr[-4000:]}"
    assert os.access(out / "publish", os.X_OK) and os.access(
        out / "publish-folder" / "bin" / "publish", os.X_OK
    )
    assert "publish-folder/" in r.stdout, r.stdout
    return out


@pytest.mark.parametrize("form", ["one file", "folder"])
def test_version(built: Path, form: str, tmp_path: Path) -> None:
    exe = built / "publish" if form == "one file" else built / "publish-folder" / "bin" / "publish"
    r = subprocess.run(
        [str(exe), "version"], capture_output=True, text=True, env=env_for(tmp_path), timeout=60
    )
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    freezer = "nuitka" if "nuitka" in built.name else "pyinstaller"
    assert r.stdout.splitlines()[1::2] == ["build: none", f"freezer: {freezer}"]  # no payload to read it from
    assert wait_gone(leftovers(tmp_path)) == set()


@pytest.mark.parametrize("form", ["one file", "folder"])
def test_posix_resolve_and_a_missing_root(built: Path, form: str, tmp_path: Path) -> None:
    exe = built / "publish" if form == "one file" else built / "publish-folder" / "bin" / "publish"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    root = tmp_path / "ckpt"
    publish_entry(root, "exec/1/checkpoint-100", 100)
    publish_entry(root, "exec/1/checkpoint-50", 50)
    r = subprocess.run(
        [str(exe), "resolve", "-checkpoint", str(root)], capture_output=True, text=True, env=env_for(tmpdir)
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{root}/exec/1/checkpoint-100\n", "")
    missing = tmp_path / "nothere"
    r = subprocess.run(
        [str(exe), "resolve", "-checkpoint", str(missing)],
        capture_output=True,
        text=True,
        env=env_for(tmpdir),
    )
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith("publish: ") and str(missing) in r.stderr
    assert wait_gone(leftovers(tmpdir)) == set()


@pytest.fixture
def jail(built: Path, tmp_path: Path) -> Iterator[Chroot]:
    if os.geteuid() != 0:
        unavailable("needs root (chroot, mount)")
    c = Chroot(tmp_path, built / "publish")
    try:
        yield c
    finally:
        c.close()


def test_bare_chroot(jail: Chroot) -> None:
    """Only the one file, /proc and /tmp: nothing of a system from the node."""
    assert sorted(os.listdir(jail.dir)) == ["proc", "publish", "tmp"]
    r = jail.run("version")
    assert (r.returncode, first(r.stdout), r.stderr) == (0, VERSION_LINE, "")
    publish_entry(jail.dir / "ckpt", "exec/1/checkpoint-7", 7)
    r = jail.run("resolve", "-checkpoint", "/ckpt")
    assert (r.returncode, r.stdout, r.stderr) == (0, "/ckpt/exec/1/checkpoint-7\n", "")
    r = jail.run("resolve", "-checkpoint", "/nothere")
    assert r.returncode == 1 and r.stderr.startswith("publish: ")
    assert wait_gone(leftovers(jail.dir / "tmp", jail.dir)) == set()
