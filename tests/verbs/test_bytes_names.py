"""A name is bytes, and one save never stops the others (issue #31, "One odd file name stops every
publication"; addendum section 15).

A POSIX save may hold any name but NUL and "/": its manifest records it and resolve -verify checks it.  What
goes wrong with one save in a scan (its own name, its hashing, its manifest, its upload) is named once; the
other saves are published, run prunes, and its exit status says something was left.  A save the mirror
cannot carry (an S3 key must be UTF-8) stays pending on the fast root, as a save holding a link does.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout, manifest
from tests.conftest import REPO, Result, Watch, base_env, command, need, run_cli
from tests.support import dcp_shapes
from tests.support.s3roots import Root
from tests.support.trainer_saves import hf_save

#: The file of the issue: a name that is not UTF-8 (octal 377), legal on every POSIX filesystem.
ODD = b"bad\xff.bin"


def name(raw: bytes) -> str:
    """A name's bytes as Python (and a manifest) hold them."""
    return raw.decode("utf-8", "surrogateescape")


def published(root: Path, step: int, folder: str, epoch: int = 0) -> str:
    return f"published {layout.name(epoch, step, folder)} (epoch {epoch}, step {step}, {root}/{folder})"


def resolve(root: Path, *flags: str) -> Result:
    return run_cli("resolve", "-checkpoint", str(root), *flags)


def watch_last_scan(root: Path, *flags: str) -> Result:
    """A watch stopped before it started: it makes its last scan and exits (in-process: its stderr may hold
    bytes that are not UTF-8)."""
    from publish.cli import main
    from publish.process.threads import Flag

    stop = Flag()
    stop.set()
    out, err = io.StringIO(), io.StringIO()
    code = main(["watch", "-checkpoint", str(root), *flags], {}, out, err, stop=stop)
    return Result(code, out.getvalue(), err.getvalue())


def the_issue(root: Path) -> tuple[Path, Path]:
    """exec/a/checkpoint-2 holding bad\\377.bin, and checkpoint-3 beside it."""
    two = hf_save(root / "exec" / "a", 2)
    (two / name(ODD)).write_bytes(b"\x00odd bytes")
    return two, hf_save(root / "exec" / "a", 3)


def test_watch_publishes_the_save_holding_a_name_that_is_not_utf8_and_the_one_beside_it(root: Path) -> None:
    """The exact reproduction under watch; before, every scan failed on the manifest of checkpoint-2 and
    checkpoint-3 was never published."""
    the_issue(root)
    w = Watch("-checkpoint", str(root), "-framework", "hf", "-interval", "100ms", "-attempt", "a")
    assert w.next_line() == published(root, 2, "exec/a/checkpoint-2")
    assert w.next_line() == published(root, 3, "exec/a/checkpoint-3")
    code, err = w.stop()
    assert (code, err) == (0, "")
    r = resolve(root, "-verify=deep")
    assert (r.code, r.out, r.err) == (0, f"{root}/exec/a/checkpoint-3\n", "")


def test_run_publishes_both_and_prunes_and_the_next_dispatch_resumes_from_the_newest(root: Path) -> None:
    """The exact reproduction under run -keep 1: both saves are published, the prune runs (it removes
    checkpoint-2), the exit status is 0 and the next dispatch resumes from checkpoint-3.  Before: exit 1,
    no prune, and the next dispatch started from step 0."""
    the_issue(root)
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "0",
                "-keep", "1", "--", "true")  # fmt: skip
    assert r.code == 0, r.err
    assert r.lines == [
        published(root, 2, "exec/a/checkpoint-2"),
        published(root, 3, "exec/a/checkpoint-3"),
        f"removed {root}/exec/a/checkpoint-2",
    ]
    assert resolve(root, "-verify=deep").out == f"{root}/exec/a/checkpoint-3\n"


#: Hostile names, each a file of one save: not UTF-8 (alone, cut short, the UTF-8 spelling of a surrogate,
#: 255 bytes of it), a newline, what looks like an escape of the manifest or of a URL, a leading dash, 255
#: bytes, and a folder that is not UTF-8 holding one that is not either.
HOSTILE = [
    ODD,
    b"\xff" * 255,
    b"\xc3",
    b"\xed\xb2\x80",
    b"caf\xc3\xa9",
    b"new\nline",
    b"%ff",
    b"a+b",
    b"back\\slash",
    b"\\udcff",
    b"-leading-dash",
    b"x" * 255,
    b"dir\xfe/in\xff",
]


def test_verify_deep_checks_every_hostile_name_and_catches_a_flipped_byte_in_each(root: Path) -> None:
    """The manifest records every name and -verify=deep reads each file by its bytes: a byte flipped in any
    of them (or the name itself changed) passes the save over, naming that file.  Before, the save could
    not be published at all ("... is not a clean relative path")."""
    folder = root / "exec" / "a" / "step-7"
    for raw in HOSTILE:
        path = folder / name(raw)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw * 3)
    r = run_cli("publish", "-checkpoint", str(root), str(folder), "7")
    assert r.code == 0, r.err
    entry = layout.name(0, 7, "exec/a/step-7")
    rows = manifest.decode(entry, (root / "man" / entry).read_bytes())
    assert sorted(row[0].encode("utf-8", "surrogateescape") for row in rows) == sorted(HOSTILE)
    assert resolve(root, "-verify=deep").out == f"{folder}\n"
    for raw in HOSTILE:
        path = folder / name(raw)
        good = path.read_bytes()
        path.write_bytes(bytes([good[0] ^ 1]) + good[1:])
        r = resolve(root, "-verify=deep")
        assert (r.code, r.out) == (1, ""), raw
        assert "sha256 " in r.err and "manifest says" in r.err, r.err
        assert name(raw).replace("\n", "\\n") in r.err, (raw, r.err)
        path.write_bytes(good)
    os.rename(folder / name(ODD), folder / name(b"bad\xfe.bin"))  # one bit of the name flipped
    r = resolve(root, "-verify")
    assert r.code == 1 and f"{folder}/{name(ODD)}: missing" in r.err, r.err


def test_a_save_whose_own_name_is_not_utf8_is_named_once_and_the_others_are_published(root: Path) -> None:
    """An entry name is UTF-8: a whole DCP save at exec/a/st\\xffep-20 is named once (however many scans
    look at it) and passed over; steps 10 and 30 are published, run prunes, and its exit status is 1.
    Before, the save stopped every scan: step 30 was never published, and no prune."""
    saves = root / "exec" / "a"
    for folder in ("step-10", name(b"st\xffep-20"), "step-30"):
        dcp_shapes.write_save(saves / folder)
    r = run_cli("run", "-checkpoint", str(root), "-framework", "dcp", "-attempt", "a", "-epoch", "0",
                "-interval", "50ms", "-keep", "1", "--", sys.executable, "-c", "import time; time.sleep(0.5)")  # fmt: skip
    assert r.code == 1, r.err
    assert r.lines == [
        published(root, 10, "exec/a/step-10"),
        published(root, 30, "exec/a/step-30"),
        f"removed {root}/exec/a/step-10",
    ]
    odd = f"save {saves}/{name(b'st' + bytes([0xFF]) + b'ep-20')}: its name is not UTF-8"
    assert r.err.count(odd) == 1, r.err
    assert (saves / name(b"st\xffep-20")).is_dir()  # never published, so never pruned
    assert resolve(root, "-verify=deep").out == f"{saves}/step-30\n"


def test_plain_watch_passes_over_a_save_whose_name_is_not_utf8_and_exits_1(root: Path) -> None:
    """Plain watch too: the save is named once, the others are published, and watch's exit status says
    one was left.  Before, watch failed on it and published nothing after it."""
    saves = root / "exec" / "a"
    for folder in ("step-10", name(b"st\xffep-20"), "step-30"):
        dcp_shapes.write_save(saves / folder)
    r = watch_last_scan(root, "-framework", "dcp", "-attempt", "a")
    assert r.code == 1, r.err
    assert r.lines == [published(root, 10, "exec/a/step-10"), published(root, 30, "exec/a/step-30")]
    assert r.err.count("its name is not UTF-8") == 1 and "watch will exit non-zero" in r.err, r.err


def test_a_save_whose_entry_name_is_too_long_is_named_once_and_the_others_are_published(root: Path) -> None:
    """A real fault of one save's manifest and entry (their name, 200 bytes of folder in base32, is too long
    for the filesystem): named once, steps 1 and 3 published, exit 1.  Before, the scan stopped on it."""
    saves = root / "exec" / "a"
    for folder in ("step-1", "x" * 200 + "2", "step-3"):
        dcp_shapes.write_save(saves / folder)
    r = run_cli("run", "-checkpoint", str(root), "-framework", "dcp", "-attempt", "a", "-epoch", "0",
                "-interval", "50ms", "--", sys.executable, "-c", "import time; time.sleep(0.5)")  # fmt: skip
    assert r.code == 1, r.err
    assert r.lines == [published(root, 1, "exec/a/step-1"), published(root, 3, "exec/a/step-3")]
    assert r.err.count("File name too long: not published, tried again on each scan") == 1, r.err
    assert r.err.count(f"save {saves}/{'x' * 200}2: ") == 1, r.err


def _eio_on(monkeypatch: pytest.MonkeyPatch, names: set[str], then: Any = None) -> None:
    """Reading a file whose name is one of ``names`` fails with EIO (a disk error no test filesystem makes);
    ``then()`` runs first."""
    real = os.readv

    def readv(fd: int, buffers: Any) -> int:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) in names:
            if then is not None:
                then()
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, buffers)

    monkeypatch.setattr(os, "readv", readv)


def test_a_save_with_a_file_that_cannot_be_read_does_not_stop_the_scan(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An EIO hashing one file of checkpoint-2: it is named once, checkpoint-3 is published, run prunes
    (-keep 1 removes checkpoint-1; checkpoint-2, never published, stays) and exits 1.  Before, the scan
    failed on it every time: checkpoint-3 unpublished, no prune."""
    need(command() is None and os.path.isdir("/proc/self/fd"), "a fault injected in-process, on Linux")
    saves = root / "exec" / "a"
    for step in (1, 2, 3):
        hf_save(saves, step)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "0", str(saves / "checkpoint-1"), "1")
    assert r.code == 0, r.err
    (saves / "checkpoint-2" / "broken.bin").write_bytes(b"x" * 100)
    _eio_on(monkeypatch, {"broken.bin"})
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "0",
                "-keep", "1", "--", "true")  # fmt: skip
    assert r.code == 1, r.err
    assert r.lines == [published(root, 3, "exec/a/checkpoint-3"), f"removed {saves}/checkpoint-1"]
    assert r.err.count("broken.bin: Input/output error") == 1, r.err
    assert "not published, tried again on each scan" in r.err
    assert (saves / "checkpoint-2").is_dir() and not (
        root / "man" / layout.name(0, 2, "exec/a/checkpoint-2")
    ).exists()
    assert resolve(root, "-verify=deep").out == f"{saves}/checkpoint-3\n"


def test_a_save_that_fails_once_is_published_when_it_reads_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault that passes (one EIO, then the file reads) is tried again on the next scan: the save is
    published, and run's exit status is COMMAND's (nothing was left)."""
    need(command() is None and os.path.isdir("/proc/self/fd"), "a fault injected in-process, on Linux")
    saves = root / "exec" / "a"
    hf_save(saves, 2)
    (saves / "checkpoint-2" / "flaky.bin").write_bytes(b"x" * 100)
    hf_save(saves, 3)
    faults = [1]
    real = os.readv

    def readv(fd: int, buffers: Any) -> int:
        if faults and os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "flaky.bin":
            faults.pop()
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, buffers)

    monkeypatch.setattr(os, "readv", readv)
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "0",
                "-interval", "50ms", "--", sys.executable, "-c", "import time; time.sleep(0.5)")  # fmt: skip
    assert r.code == 0, r.err
    assert r.lines == [published(root, 3, "exec/a/checkpoint-3"), published(root, 2, "exec/a/checkpoint-2")]
    assert r.err.count("flaky.bin: Input/output error") == 1, r.err


def test_the_root_gone_while_a_save_fails_still_fails_the_scan(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of the store is no fault of one save: the root gone (unmounted) while a save is hashed fails
    the scan (no prune, exit 1), naming the root, and is not passed over as that save's.  (A guard: the code
    before failed the scan too, naming the file rather than the root.)"""
    need(command() is None and os.path.isdir("/proc/self/fd"), "a fault injected in-process, on Linux")
    saves = root / "exec" / "a"
    for step in (2, 3):
        hf_save(saves, step)
    (saves / "checkpoint-2" / "broken.bin").write_bytes(b"x")
    _eio_on(monkeypatch, {"broken.bin"}, then=lambda: os.rename(root, root.with_name("gone")))
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "0",
                "-keep", "1", "--", "true")  # fmt: skip
    assert r.code == 1, r.err
    assert r.lines == []
    assert f"checkpoint root {root}" in r.err, r.err
    assert "not published, tried again" not in r.err


def test_a_manifest_is_the_same_whatever_the_locale_encodes_names_with(root: Path) -> None:
    """The manifest records bytes: publish under an ASCII locale (Python then decodes é as two escaped
    bytes) writes the manifest it writes under UTF-8, and each verifies the other's.  Before, the ASCII
    locale's publish refused the name."""
    need(command() is None, "the interpreter's own locale handling")
    folder = root / "exec" / "a" / "step-1"
    for raw in (b"caf\xc3\xa9", ODD):
        (folder / name(raw)).parent.mkdir(parents=True, exist_ok=True)
        (folder / name(raw)).write_bytes(raw)
    entry = layout.name(0, 1, "exec/a/step-1")
    ascii_env = {
        **base_env(),
        "PYTHONPATH": str(REPO),
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
    }
    probe = subprocess.run([sys.executable, "-c", "import sys; print(sys.getfilesystemencoding())"],
                           env=ascii_env, capture_output=True, text=True, check=True)  # fmt: skip
    need(probe.stdout.strip() == "ascii", "an interpreter that honours LC_ALL=C with PYTHONUTF8=0")

    def publish_in(env: dict[str, str] | None) -> bytes:
        (root / "pub" / entry).unlink(missing_ok=True)
        (root / "man" / entry).unlink(missing_ok=True)
        args = ["publish", "-checkpoint", str(root), str(folder), "1"]
        if env is None:
            assert run_cli(*args).code == 0
        else:
            p = subprocess.run(
                [sys.executable, "-m", "publish", *args], env=env, capture_output=True, timeout=120
            )
            assert p.returncode == 0, p.stderr
        return (root / "man" / entry).read_bytes()

    in_ascii = publish_in(ascii_env)
    in_utf8 = publish_in(None)
    assert in_ascii == in_utf8
    assert sorted(r[0] for r in manifest.decode(entry, in_ascii)) == ["bad\udcff.bin", "caf\u00e9"]
    p = subprocess.run([sys.executable, "-m", "publish", "resolve", "-checkpoint", str(root), "-verify=deep"],
                       env=ascii_env, capture_output=True, timeout=120)  # fmt: skip
    assert (p.returncode, p.stdout, p.stderr) == (0, os.fsencode(f"{folder}\n"), b"")


@pytest.mark.s3
def test_run_mirror_leaves_a_save_the_mirror_cannot_carry_pending_and_mirrors_the_others(
    weed: Any, tmp_path: Path
) -> None:
    """run -mirror on SeaweedFS with bad\\377.bin in checkpoint-1: both saves are published on the fast root;
    checkpoint-1 is named once (an S3 key must be UTF-8) and left pending, kept from -keep 1 as a save
    holding a link is; checkpoint-2, whose hostile names are all UTF-8, is mirrored byte for byte; run exits
    1.  Before, checkpoint-1 stopped every scan and nothing after it was published or mirrored."""
    fast = tmp_path / "fast"
    saves = fast / "exec" / "a"
    one = hf_save(saves, 1)
    (one / name(ODD)).write_bytes(b"odd")
    two = hf_save(saves, 2)
    # (not a backslash: SeaweedFS keeps it in a key as "/", and the upload's check then refuses the save)
    carried = [
        b"new\nline",
        b"%ff",
        b"a+b",
        b"-leading-dash",
        b"x" * 255,
        "\u00e9".encode() * 127,
    ]
    for raw in carried:
        (two / name(raw)).write_bytes(raw)
    mirror = Root(weed, tmp_path, init=False)
    r = run_cli("run", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-framework", "hf",
                "-attempt", "a", "-epoch", "0", "-keep", "1", "--", "true")  # fmt: skip
    assert r.code == 1, r.err
    assert sorted(os.listdir(fast / "pub")) == [
        layout.name(0, 1, "exec/a/checkpoint-1"),
        layout.name(0, 2, "exec/a/checkpoint-2"),
    ]
    assert (saves / "checkpoint-1" / name(ODD)).is_file()  # pending: kept
    assert [layout.parse(e).step for e in mirror.entries()] == [2], r.err
    assert not [k for k in mirror.keys("") if "checkpoint-1" in k]
    for raw in carried:
        key = f"{mirror.prefix}/exec/a/checkpoint-2/{raw.decode()}"
        assert mirror.s3.get_object(Bucket=mirror.bucket, Key=key)["Body"].read() == raw
    assert r.err.count("an S3 key must be UTF-8") == 1, r.err
    assert f"upload of {saves}/checkpoint-1/{name(ODD)}: " in r.err, r.err
    r = run_cli(
        "resolve", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-verify=deep"
    )
    assert r.out == f"{saves}/checkpoint-2\n", r.err


def test_a_disk_error_on_one_save_s_marker_stops_plain_watch_but_not_run(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An EIO reading checkpoint-2's trainer_state.json: run names it once, publishes checkpoint-3 and exits
    1 (before, every scan failed on it and checkpoint-3 was never published); plain watch keeps the spec's
    rule for a marker it cannot read and stops on it, naming the file."""
    need(command() is None and os.path.isdir("/proc/self/fd"), "a fault injected in-process, on Linux")
    saves = root / "exec" / "a"
    for step in (2, 3):
        hf_save(saves, step)
    from publish.rules.files import fileio

    real = fileio.read_at_most
    marker = str(saves / "checkpoint-2" / "trainer_state.json")

    def read_at_most(fd: int, limit: int) -> bytes | None:
        if os.readlink(f"/proc/self/fd/{fd}") == marker:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, limit)

    monkeypatch.setattr(fileio, "read_at_most", read_at_most)
    r = watch_last_scan(root, "-framework", "hf", "-attempt", "a")
    assert (r.code, r.out, r.err) == (1, "", f"publish: {marker}: Input/output error\n")
    r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "a", "-epoch", "0",
                "-interval", "50ms", "--", sys.executable, "-c", "import time; time.sleep(0.5)")  # fmt: skip
    assert r.code == 1, r.err
    assert r.lines == [published(root, 3, "exec/a/checkpoint-3")]
    assert r.err.count(f"{marker}: Input/output error") == 1, r.err


def test_a_save_removed_between_its_completion_and_its_hashing_does_not_stop_the_scan(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint-2 is removed (a rotation, an operator) just after watch found it whole: it is named once,
    never published, and checkpoint-3 is.  Before, the scan failed on it ("does not exist") and
    checkpoint-3 waited for the next scan; under run the last scan failed and nothing was pruned."""
    need(command() is None, "a removal timed in-process")
    import shutil

    from publish.frameworks import hf

    saves = root / "exec" / "a"
    for step in (2, 3):
        hf_save(saves, step)
    real = hf.complete

    def complete(dl: Any, store: Any, path: str, step: int, note: Any, *more: Any) -> bool:
        whole = real(dl, store, path, step, note, *more)
        if path.endswith("checkpoint-2"):
            shutil.rmtree(saves / "checkpoint-2", ignore_errors=True)
        return whole

    monkeypatch.setattr(hf, "complete", complete)
    r = watch_last_scan(root, "-framework", "hf", "-attempt", "a")
    assert r.code == 1, r.err
    assert r.lines == [published(root, 3, "exec/a/checkpoint-3")]
    assert r.err == (
        f"publish: save {saves}/checkpoint-2: a prune removed it meanwhile (or a hand did): it does not exist: "
        "not published, tried again on each scan (the other saves are published; watch will exit non-zero "
        "unless it is)\n"
    )
    assert not (root / "man" / layout.name(0, 2, "exec/a/checkpoint-2")).exists()
