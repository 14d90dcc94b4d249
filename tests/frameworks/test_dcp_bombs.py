"""Small .metadata files built to make one C call long (spec addendum section 14: every parse of a file from
the root ends within its deadline, and a pending SIGTERM is acted on within a second, whatever the file
holds).  Before, a .metadata up to 16 KiB was read in the process by the C unpickler: a 552-byte one hashing
2^40 shared tuples held status, watch and run for ever, deaf to SIGTERM and -timeout.

Each read runs in a child interpreter with an address-space cap, so a reader that hangs or swells fails the
test (by the subprocess's timeout, a safety net) instead of taking the machine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Watch, spawn
from tests.support import dcp_bombs
from tests.support.running import Running

TUPLE = (
    "does not read as a DCP .metadata: a tuple as a dict key or set item (a DCP save holds none; its hash "
    "could be made to collide)"
)
READ = (
    "import json, resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))\n"
    "from publish.frameworks.parse.dcp_metadata import storage_ends, Incomplete\n"
    "from publish.rules.errors import Failure\n"
    "data = sys.stdin.buffer.read()\n"
    "try:\n"
    "    print(json.dumps(storage_ends(data, 'm')))\n"
    "except Failure as e:\n"
    "    print(json.dumps(str(e)))\n"
)


def read(data: bytes) -> object:
    """storage_ends(data) in a fresh interpreter: the ends, or the Failure's message."""
    out = subprocess.run(
        [sys.executable, "-c", READ], input=data, cwd=REPO, capture_output=True, timeout=120, check=False
    )
    assert (out.returncode, out.stderr) == (0, b""), out
    return json.loads(out.stdout)


def test_the_bomb_is_small() -> None:
    assert len(dcp_bombs.in_key()) < 600


@pytest.mark.parametrize(
    "data, answer",
    [
        # hash() of a key or a set item built of 2^40 tuples
        (dcp_bombs.in_key(), "m: " + TUPLE),
        (dcp_bombs.in_set(), "m: " + TUPLE),
        # repr() in the message of a relative_path that is a list of 2^40 lists; of one nested 5,000 deep
        (dcp_bombs.in_path(), "m: a storage file's relative_path is not a path (it is of type list)"),
        (
            dcp_bombs.deep(5000, b"(", b"l"),
            "m: a storage file's relative_path is not a path (it is of type list)",
        ),
        (
            dcp_bombs.deep(5000, b"(", b"t"),
            "m: a storage file's relative_path is not a path (it is of type tuple)",
        ),
        (
            dcp_bombs.deep(2000, b"}X\x01\x00\x00\x00k", b"s"),
            "m: a storage file's relative_path is not a path (it is of type dict)",
        ),
        # repr() of an int of 96,000 bits (ValueError past 4,300 digits from Python 3.11 on)
        (
            dcp_bombs.field("relative_path", dcp_bombs.huge_int()),
            "m: a storage file's relative_path is not a path (it is of type int)",
        ),
        (dcp_bombs.field("offset", dcp_bombs.huge_int()), "m: f's offset is not a byte count"),
        (
            dcp_bombs.field("length", b"\x8a\x09" + (1 << 63).to_bytes(9, "little")),
            "m: f's length is not a byte count",
        ),
        # a memo index the C reader allocates 16 bytes each up to (10^8: 1.5 GB and seconds)
        (dcp_bombs.memo_at(10**8), {"f": 1}),
        (dcp_bombs.memo_at(1 << 61), "m: does not read as a DCP .metadata: a memo index of 2^61-1 or more"),
        # a text number whose int() is quadratic in its digits before 3.11
        (
            dcp_bombs.unused(b"L" + b"7" * 12000 + b"\n"),
            "m: does not read as a DCP .metadata: a text number of 12000 bytes",
        ),
        # structures shared many times over that nothing walks: read as they are
        (dcp_bombs.unused(dcp_bombs.share(40)), {"f": 1}),
        (dcp_bombs.unused(dcp_bombs.share(40, b"]", b"(", b"l")), {"f": 1}),
        (dcp_bombs.unused(b"(" * 3000 + b"t" * 3000), {"f": 1}),
        (dcp_bombs.unused(b"X\x00\x30\x00\x00" + b"a" * 0x3000), {"f": 1}),
    ],
)
def test_a_small_file_built_to_make_one_call_long_is_read_at_once(data: bytes, answer: object) -> None:
    assert len(data) <= 16 * 1024
    assert read(data) == answer


def _bomb_save(root: Path) -> Path:
    folder = root / "exec" / "A" / "step-1"
    folder.mkdir(parents=True)
    (folder / "f").write_bytes(b"\x01")
    (folder / ".metadata").write_bytes(dcp_bombs.in_key())
    return folder


def test_watch_stops_at_the_bomb_naming_it(root: Path) -> None:
    folder = _bomb_save(root)
    w = Watch(
        "-checkpoint", str(root), "-framework", "dcp", "-interval", "100ms", "-attempt", "A", "-timeout", "5s"
    )
    try:
        code, err = w.finish(timeout=60)
    except subprocess.TimeoutExpired:
        w.proc.kill()
        w.finish()
        pytest.fail("watch did not stop")
    assert (code, err) == (1, f"publish: {folder}/.metadata: {TUPLE}\n")
    assert not (root / "pub").exists()


def test_status_shows_the_bomb_as_faulty(root: Path) -> None:
    folder = _bomb_save(root)
    proc = spawn("status", "-checkpoint", str(root), "-json")
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("status did not end")
    assert (proc.returncode, err) == (0, "")
    saves = [s for s in json.loads(out)["saves"] if s["framework"] == "dcp"]
    assert [(s["state"], s["message"]) for s in saves] == [("faulty", f"{folder}/.metadata: {TUPLE}")]


def test_run_passes_a_sigterm_on_while_it_scans_the_bomb(root: Path, tmp_path: Path) -> None:
    """COMMAND writes the bomb where run scans every 100 ms, waits for the scans to meet it, and then for a
    SIGTERM.  Before, the scanning thread held the interpreter inside hash() and run never acted on the
    signal: COMMAND ran on, and run never ended."""
    bomb = tmp_path / "bomb"
    bomb.write_bytes(dcp_bombs.in_key())
    command = (
        "import os, shutil, signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
        "save = os.path.join(os.environ['PUBLISH_SAVES'], 'step-1')\n"
        "os.makedirs(save)\n"
        "open(os.path.join(save, 'f'), 'wb').write(b'x')\n"
        f"shutil.copy({str(bomb)!r}, os.path.join(save, '.metadata'))\n"
        "time.sleep(1)\n"
        "print('ready', flush=True)\n"
        "end = time.monotonic() + 120  # then it gives up: nobody passed the signal on\n"
        "while not got and time.monotonic() < end: time.sleep(0.01)\n"
        "print('TERM', flush=True)\n"
        "sys.exit(143)\n"
    )
    r = Running("-checkpoint", str(root), "-framework", "dcp", "-attempt", "a", "-interval", "100ms",
                "--", sys.executable, "-c", command)  # fmt: skip
    r.wait_line("ready")
    r.proc.send_signal(signal.SIGTERM)
    try:
        code, err, lines = r.finish(timeout=60)
    except subprocess.TimeoutExpired:
        r.proc.kill()
        r.finish()
        pytest.fail("run did not pass the SIGTERM on")
    assert (code, lines) == (143, ["ready", "TERM"]), err
    save = f"{root}/exec/a/step-1"
    # the order of events: the bomb read and reported, then the signal passed on
    assert err.index(f"{save}/.metadata: {TUPLE}") < err.index("publish: run: passing SIGTERM on to"), err
