"""The package installs as the docs say: ``pip install .`` and a built wheel from a clean clone, each into a
fresh virtual environment, and the editable install; and ``./test`` names the package to install when the
interpreter has no venv module.

The clone is ``git clone`` of this checkout, so these tests install what is committed, not uncommitted edits.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import publish
from tests.conftest import REPO, need

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]

DIST = "publish-checkpoints"
STEP_TIMEOUT = 300  # seconds for one venv creation, install or build


def env() -> dict[str, str]:
    """The caller's environment without what would let a subprocess import this checkout's package."""
    e = dict(os.environ)
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        e.pop(name, None)
    return e


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=STEP_TIMEOUT)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    need(shutil.which("git") is not None, "git")
    need((REPO / ".git").exists(), f"{REPO} is a git checkout")
    need(
        importlib.util.find_spec("ensurepip") is not None,
        "the venv module with ensurepip (Debian: python3-venv)",
    )
    d = Path(tempfile.mkdtemp(prefix="publish-install-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def clone(work: Path) -> Path:
    src = work / "src"
    run(["git", "clone", "-q", str(REPO), str(src)], work)
    return src


def venv(work: Path, name: str) -> Path:
    """A fresh virtual environment; returns its bin directory."""
    run([sys.executable, "-m", "venv", str(work / name)], work)
    return work / name / "bin"


def untracked(clone: Path) -> str:
    return run(["git", "status", "--porcelain", "--ignored"], clone).stdout


def check_installed(bindir: Path, work: Path, where: Path) -> None:
    """The installed command and package run from outside the source tree, from `where`, as a POSIX resolve."""
    out = run([str(bindir / "publish"), "version"], work).stdout
    assert out.splitlines()[0] == f"publish {publish.__version__}"  # the build's lines follow
    assert out.splitlines()[-1] == "freezer: source"
    probe = (
        "import importlib.metadata as m, publish; print(publish.__file__); print(m.version('" + DIST + "'))"
    )
    file, version = run([str(bindir / "python"), "-c", probe], work).stdout.split()
    assert Path(file).resolve().is_relative_to(where.resolve()), file
    assert version == publish.__version__

    root = work / f"root-{bindir.parent.name}"
    save = root / "exec" / "A" / "checkpoint-2"
    save.mkdir(parents=True)
    (save / "model.safetensors").write_bytes(b"x")
    run([str(bindir / "publish"), "publish", "-checkpoint", str(root), "-epoch", "1", str(save), "2"], work)
    out = run([str(bindir / "publish"), "resolve", "-checkpoint", str(root)], work).stdout
    assert out == f"{save}\n"
    missing = subprocess.run(
        [str(bindir / "publish"), "resolve", "-checkpoint", str(work / "nowhere")],
        cwd=work,
        env=env(),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
    )
    assert missing.returncode == 1 and missing.stderr.startswith("publish: "), missing


def test_pip_install_dot_from_a_clean_clone(work: Path, clone: Path) -> None:
    """`pip install .` works where `build` is the build script, and writes nothing into the source tree."""
    assert (clone / "build").is_file()
    bindir = venv(work, "venv-dot")
    run([str(bindir / "python"), "-m", "pip", "install", "-q", "."], clone)
    assert untracked(clone) == ""
    check_installed(bindir, work, bindir.parent)


def test_wheel_installs_into_another_venv(work: Path, clone: Path) -> None:
    """`pip wheel . --no-deps` builds one pure wheel of the publish package alone, under the distribution name."""
    wheels = work / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), "."], clone)
    assert untracked(clone) == ""
    (wheel,) = wheels.iterdir()
    assert wheel.name == f"publish_checkpoints-{publish.__version__}-py3-none-any.whl"
    names = run([sys.executable, "-m", "zipfile", "-l", str(wheel)], work).stdout.split("\n")[1:]
    tops = {line.split("/", 1)[0] for line in names if line.strip()}
    assert tops == {"publish", f"publish_checkpoints-{publish.__version__}.dist-info"}, tops
    bindir = venv(work, "venv-wheel")
    run([str(bindir / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], work)
    check_installed(bindir, work, bindir.parent)


def test_editable_install_runs_the_checkout(work: Path, clone: Path) -> None:
    """`pip install -e .` (what ./test does) imports the package from the source tree."""
    bindir = venv(work, "venv-editable")
    run([str(bindir / "python"), "-m", "pip", "install", "-q", "-e", "."], clone)
    check_installed(bindir, work, clone / "publish")


def test_dot_test_names_the_venv_package_when_ensurepip_is_missing() -> None:
    """Without venv's ensurepip (Debian without python3-venv) and no apt-get to install it with, ./test stops
    and says what to install, before it writes anything."""
    d = Path(tempfile.mkdtemp(prefix="publish-noenv-"))
    try:
        (d / "shadow" / "ensurepip").mkdir(parents=True)
        (d / "shadow" / "ensurepip" / "__init__.py").write_text(
            "raise ImportError('ensurepip is not installed')\n"
        )
        fake = d / "python3"
        real = os.path.realpath(sys.executable)
        fake.write_text(f'#!/bin/sh\nPYTHONPATH={d}/shadow exec {real} "$@"\n')
        shutil.copy(REPO / "test", d / "test")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        # A PATH without apt-get, through which ./test could otherwise install the package as root.
        tools = d / "bin"
        tools.mkdir()
        for tool in ("env", "bash", "dirname", "id"):
            found = shutil.which(tool)
            assert found, tool
            (tools / tool).symlink_to(found)
        r = subprocess.run(
            [str(d / "test"), "--version"],
            cwd=d,
            env={"PATH": str(tools), "PYTHON": str(fake)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        ver = "{}.{}".format(*sys.version_info[:2])
        assert r.returncode == 1, r
        assert "has no venv module (ensurepip)" in r.stderr, r.stderr
        assert f"apt-get install python{ver}-venv" in r.stderr, r.stderr
        assert not (d / ".venv").exists()
    finally:
        shutil.rmtree(d, ignore_errors=True)
