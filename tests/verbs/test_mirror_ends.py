"""How `run -mirror` ends when the mirror fails, what it says of a save it cannot carry, and what
`resolve -mirror` says when both tiers fail (issue #31 items 2 to 5).

The fast root is a temporary directory; the mirror an s3:// root on SeaweedFS, reached directly, through
the fault proxy (tests/support/fault_proxy.py: PUTs held and never answered), or at a loopback port where
nothing listens (every connection refused). The run processes are real ones (the binary when PUBLISH_BIN
names it).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import Result, run_cli
from tests.support.fault_proxy import FaultProxy, Rule, Stall
from tests.support.ports import dead_port
from tests.support.s3roots import Root, creds_dir
from tests.support.servers import Weed
from tests.support.trainer_saves import hf_save

pytestmark = pytest.mark.s3


def saves_of(tmp: Path, *steps: int) -> tuple[Path, list[Path]]:
    """A fast root (as `publish init` makes it) with the saves ``steps`` under exec/a/, none published."""
    fast = tmp / "fast"
    (fast / "pub").mkdir(parents=True)
    return fast, [hf_save(fast / "exec" / "a", step) for step in steps]


def run_mirrored(fast: Path, mirror: Root, *command: str, timeout: str = "30s") -> Result:
    return run_cli(
        "run", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework", "hf",
        "-attempt", "a", "-interval", "100ms", "-timeout", timeout, "--", *command,
    )  # fmt: skip


def test_run_whose_last_uploads_did_not_finish_exits_1(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """Issue #31 item 2: the mirror takes the save's PUTs and never answers them. The upload under way when
    COMMAND exits does not finish within -timeout: run says so last and exits 1 although COMMAND exited
    0 (Slurm: FAILED, not COMPLETED with no save on the mirror), as watch does."""
    fast, [folder] = saves_of(tmp_path, 1)
    (folder / "shard-0.bin").write_bytes(os.urandom(24 << 20))  # its upload is given -timeout + 24 s
    mirror = Root(weed, tmp_path, endpoint=fault_proxy.endpoint, init=False)
    stall = fault_proxy.add(Stall(600), method="PUT", path="shard")
    flag = tmp_path / "upload-started"
    # COMMAND ends once the upload is under way, so the end meets it in an upload pass
    wait = f'while [ ! -e "{flag}" ]; do sleep 0.05; done'
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_mirrored, fast, mirror, "sh", "-c", wait, timeout="4s")
        fault_proxy_saw_put(stall, running)
        flag.touch()
        r = running.result(timeout=120)
    assert r.code == 1, r.err
    assert r.err.splitlines()[-1] == (
        "publish: mirror: the uploads did not finish within -timeout: the next run or watch finishes them"
    ), r.err
    assert mirror.entries() == []
    assert [layout.parse(e).step for e in os.listdir(fast / "pub")] == [
        1
    ]  # published on the root all the same


def fault_proxy_saw_put(stall: Rule, running: Future[Result]) -> None:
    """Until the proxy holds a PUT of the save (the upload is under way), or the run ended first."""
    deadline = time.monotonic() + 60
    while not stall.used and not running.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stall.used, "no upload reached the mirror"


def test_run_with_a_mirror_that_refuses_connections_says_so_at_its_end(weed: Weed, tmp_path: Path) -> None:
    """Issue #31 item 3: every pass fails the same way. The end's pass says its failure again (not only the
    first pass at the start of the run), then how many saves are left on the root alone; the exit status 1
    is explained by the last lines."""
    fast, _ = saves_of(tmp_path, 1, 2)
    mirror = Root(weed, tmp_path, endpoint=f"http://127.0.0.1:{dead_port()}", init=False)
    r = run_mirrored(fast, mirror, "sleep", "1")  # passes every 100ms meanwhile, each failing
    assert r.code == 1, r.err
    *_, failure, left = r.err.splitlines()
    assert failure.startswith(f"publish: mirror: store: list {mirror.url}/") and failure.endswith(
        ": connection refused (the next run or watch tries again)"
    ), r.err
    assert left == "publish: mirror: 2 saves not mirrored: the next run or watch uploads them", r.err
    assert len(os.listdir(fast / "pub")) == 2


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_save_holding_a_link_is_named_once(weed: Weed, tmp_path: Path, kind: str) -> None:
    """Issue #31 item 5: a save the upload refuses (a link or a FIFO inside it) is named in one line, by the
    upload, however many passes meet it (the first passes measured its size first, and said a second
    line in other words); the other save is mirrored."""
    fast, [odd_save, _] = saves_of(tmp_path, 1, 2)
    odd = odd_save / "odd"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to(odd_save / "config.json")
    mirror = Root(weed, tmp_path, init=False)
    r = run_mirrored(fast, mirror, "sleep", "1")  # passes every 100ms meanwhile
    assert r.code == 1, r.err
    what = (
        "a symbolic link inside a save is not uploaded (it may name a file outside the save)"
        if kind == "link"
        else "a FIFO, not a regular file: not uploaded"
    )
    assert [line for line in r.err.splitlines() if str(odd) in line] == [
        f"publish: upload of {odd}: {what}: not mirrored (tried again on the next pass)"
    ], r.err
    assert [layout.parse(e).step for e in mirror.entries()] == [2]


# --- resolve -mirror with both tiers failing ----------------------------------------------------------------


def mirror_holding_a_save(weed: Weed, tmp: Path) -> Root:
    mirror = Root(weed, tmp)
    mirror.put("exec/a/checkpoint-4/trainer_state.json", b'{"global_step": 4}')
    mirror.put(f"pub/{layout.name(1, 4, 'exec/a/checkpoint-4')}")
    return mirror


def test_resolve_mirror_names_both_failures(weed: Weed, tmp_path: Path) -> None:
    """Issue #31 item 4: on a node without the fast root, the mirror refusing connections or refusing
    the keys (keys rotated): both failures are named, and no `publish init` is advised, as the mirror
    may well hold saves (it does here)."""
    fast = tmp_path / "not-on-this-node"
    mirror = mirror_holding_a_save(weed, tmp_path)
    missing = f"checkpoint root {fast} does not exist"
    dead = creds_dir(tmp_path, weed, f"http://127.0.0.1:{dead_port()}")
    rotated = creds_dir(tmp_path, weed, secret_access_key="rotated-" + "x" * 32)
    for creds, why in ((dead, "connection refused"), (rotated, "SignatureDoesNotMatch")):
        r = run_cli("resolve", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", creds)
        assert (r.code, r.out) == (1, ""), r.err
        [line] = r.err.splitlines()
        assert line.startswith(f"publish: {missing}; the mirror failed too: store: ") and why in line, line
        assert "publish init" not in line, line
    # the mirror answering: the root's failure is said, without the advice for a new run
    r = run_cli("resolve", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds)
    assert (r.code, r.out) == (0, f"{mirror.url}/exec/a/checkpoint-4\n"), r.err
    assert r.err.splitlines()[0] == f"publish: {missing}: answering from the mirror", r.err


def test_resolve_mirror_on_a_new_run_advises_init_of_the_root(weed: Weed, tmp_path: Path) -> None:
    """Both tiers missing (a new run: nothing was ever written to either) is the one case for the advice,
    and it names the fast root, which `publish init` makes (the first upload makes the mirror)."""
    fast = tmp_path / "fast"
    mirror = Root(weed, tmp_path, init=False)
    r = run_cli("resolve", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds)
    assert (r.code, r.out) == (1, ""), r.err
    [line] = r.err.splitlines()
    assert line.startswith(f"publish: checkpoint root {fast} does not exist; the mirror: ") and line.endswith(
        f"; for a new run, make it first: publish init -checkpoint {fast}"
    ), line
    assert mirror.url in line
