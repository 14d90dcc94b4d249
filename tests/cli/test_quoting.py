"""A location holding a control character is printed as Go's %q prints it, in quotes, by every verb: a
folder named ``a<LF>b`` and one named ``a\\nb`` (a backslash and an n) never give the same line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

LF = "a\nb"  # a line feed in the attempt folder's name
BACKSLASH = "a\\nb"  # a real backslash, then n: no control character


def save(root: Path, attempt: str, step: int) -> Path:
    folder = root / "exec" / attempt / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    return folder


def published(root: Path, folder: Path, step: int) -> str:
    r = run_cli("publish", "-checkpoint", str(root), str(folder), str(step))
    assert r.code == 0, r
    return r.out


def test_publish_and_resolve_quote_a_control_character_and_only_then(tmp_path: Path) -> None:
    outs = {}
    for attempt in (LF, BACKSLASH):
        root = tmp_path / ("lf" if attempt == LF else "backslash")
        folder = save(root, attempt, 5)
        line = published(root, folder, 5)
        resolved = run_cli("resolve", "-checkpoint", str(root))
        assert resolved.code == 0, resolved
        outs[attempt] = (line, resolved.out)
    lf_root, bs_root = tmp_path / "lf", tmp_path / "backslash"
    assert outs[LF][1] == f'"{lf_root}/exec/a\\nb/checkpoint-5"\n'
    assert outs[LF][0].endswith(f', "{lf_root}/exec/a\\nb/checkpoint-5")\n')
    assert outs[BACKSLASH][1] == f"{bs_root}/exec/a\\nb/checkpoint-5\n"  # as it is: its path, byte for byte
    assert outs[BACKSLASH][0].endswith(f", {bs_root}/exec/a\\nb/checkpoint-5)\n")


def test_already_published_and_a_save_that_is_gone_are_quoted(tmp_path: Path) -> None:
    folder = save(tmp_path, LF, 3)
    published(tmp_path, folder, 3)
    again = run_cli("publish", "-checkpoint", str(tmp_path), str(folder), "3")
    assert again.code == 0 and f'"{tmp_path}/exec/a\\nb/checkpoint-3")' in again.err, again
    missing = run_cli(
        "publish", "-checkpoint", str(tmp_path), str(tmp_path / "exec" / LF / "checkpoint-9"), "9"
    )
    assert missing.code == 1 and f'save "{tmp_path}/exec/a\\nb/checkpoint-9" does not exist' in missing.err
    shutil.rmtree(folder)
    later = save(tmp_path, "ok", 1)
    published(tmp_path, later, 1)
    os.rmdir(later)  # both saves gone: each entry is passed over, then exit 1
    r = run_cli("resolve", "-checkpoint", str(tmp_path))
    assert r.code == 1, r
    assert f'names "{tmp_path}/exec/a\\nb/checkpoint-3", which does not exist: passed over' in r.err


def test_prune_status_and_dry_run_quote_it(tmp_path: Path) -> None:
    old = save(tmp_path, LF, 1)
    published(tmp_path, old, 1)
    published(tmp_path, save(tmp_path, "ok", 2), 2)
    want = f'"{tmp_path}/exec/a\\nb/checkpoint-1"'
    dry = run_cli("prune", "-checkpoint", str(tmp_path), "-keep", "1", "-dry-run")
    assert dry.code == 0 and f"would remove {want}\n" in dry.out, dry
    status = run_cli("status", "-checkpoint", str(tmp_path), "-keep", "1")
    assert status.code == 0, status
    assert f"  epoch 0 step 1 {want} (exists), " in status.out  # then its size
    assert f"  would remove {want}\n" in status.out
    pruned = run_cli("prune", "-checkpoint", str(tmp_path), "-keep", "1")
    assert pruned.code == 0 and pruned.out == f"removed {want}\n", pruned
    assert not old.exists()


def test_a_root_holding_a_control_character_is_quoted_in_status(tmp_path: Path) -> None:
    root = tmp_path / "r\x1bx"
    published(root, save(root, "ok", 1), 1)
    r = run_cli("status", "-checkpoint", str(root))
    assert r.code == 0, r
    assert f'publications in "{tmp_path}/r\\x1bx/pub": 1, newest first\n' in r.out
    assert "\x1b" not in r.out


# ------------------------------------------------------------------------ messages naming such a value


def test_a_missing_root_is_quoted(tmp_path: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(tmp_path / "gone\x1b"))
    assert r.code == 1 and f'checkpoint root "{tmp_path}/gone\\x1b" does not exist' in r.err, r


def test_a_tombstone_that_does_not_parse_is_quoted_like_an_entry(tmp_path: Path) -> None:
    published(tmp_path, save(tmp_path, "ok", 1), 1)
    (tmp_path / "tomb").mkdir()
    (tmp_path / "tomb" / "bad\x1bname").touch()
    r = run_cli("prune", "-checkpoint", str(tmp_path), "-keep", "1")
    assert r.code == 1 and f'"{tmp_path}/tomb/bad\\x1bname": not a tombstone (not base32)' in r.err, r


def test_a_dcp_metadata_naming_a_foreign_class_quotes_its_name(tmp_path: Path) -> None:
    from publish.frameworks.parse import dcp_metadata
    from publish.rules.errors import Failure

    data = b"\x80\x02cos\x1b[2J\nsys\xe2\x80\xa8tem\n."  # GLOBAL 'os<ESC>[2J' 'sys<U+2028>tem'
    with pytest.raises(Failure) as e:
        dcp_metadata.storage_ends(data, "/r/exec/a/step-2/.metadata")
    assert 'names "os\\x1b[2J.sys\\u2028tem", which a DCP save never holds' in str(e.value)


def test_a_dcp_save_whose_path_holds_a_control_character_is_quoted(tmp_path: Path) -> None:
    folder = tmp_path / "exec" / "a" / "step\r-2"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"\x80\x02cos\nsystem\n.")
    r = run_cli("status", "-checkpoint", str(tmp_path))
    assert r.code == 0, r
    assert (
        f'"{tmp_path}/exec/a/step\\r-2/.metadata": names os.system, which a DCP save never holds' in r.out
    ), r


def test_a_command_that_cannot_start_is_quoted(tmp_path: Path) -> None:
    tmp_path.joinpath("exec").mkdir()
    r = run_cli("run", "-checkpoint", str(tmp_path), "-framework", "hf", "-attempt", "a", "--", "no\x1bne")
    assert r.code == 1 and 'publish: cannot start "no\\x1bne": ' in r.err, r


def test_vaults_error_strings_are_quoted() -> None:
    from types import SimpleNamespace

    from publish.creds.vault import _denied

    resp = SimpleNamespace(status=400, body=b'{"errors": ["bad\\u001b[2J role", "x"]}')
    assert _denied(resp) == 'denied (HTTP 400): "bad\\x1b[2J role; x"'


def test_a_bidirectional_control_is_quoted(tmp_path: Path) -> None:
    """Before, a folder holding U+202E was printed as it is: a terminal then shows the rest of the line
    reversed, so the path read is not the path printed."""
    folder = save(tmp_path, "a\u202e", 4)
    line = published(tmp_path, folder, 4)
    assert line.endswith(f', "{tmp_path}/exec/a\\u202e/checkpoint-4")\n')
    r = run_cli("resolve", "-checkpoint", str(tmp_path))
    assert (r.code, r.out) == (0, f'"{tmp_path}/exec/a\\u202e/checkpoint-4"\n')
