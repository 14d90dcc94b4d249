"""One snapshot directory rule: the library's SNAPSHOT_DIR, its manifest check and the command's snapshot
framework accept exactly the same names."""

from __future__ import annotations

import pytest

from publish import snapshots
from publish.frameworks import snapshot as framework
from publish.rules import snapshot_format, snapshot_name

HEX = "0123456789abcdef" * 2
ARABIC = "\u0660" * 12  # twelve ARABIC-INDIC DIGIT ZERO: decimal digits to str.isdigit and to re's \d

NAMES = [
    f"step_000000000042_{HEX}",
    f"step_{ARABIC}_{HEX}",
    f"step_00000000042_{HEX}",
    f"step_000000000042_{HEX.upper()}",
    f"step_000000000042-{HEX}",
    f"step_000000000042_{HEX}x",
    f"Step_000000000042_{HEX}",
    "",
]


@pytest.mark.parametrize("name", NAMES)
def test_library_and_framework_agree(name: str) -> None:
    by_library = snapshots.SNAPSHOT_DIR.fullmatch(name) is not None
    assert by_library == (framework.step_of(name) != "") == (snapshot_name.parse(name) is not None)


def test_a_step_in_other_scripts_digits_is_not_a_snapshot() -> None:
    name = f"step_{ARABIC}_{HEX}"
    assert snapshots.SNAPSHOT_DIR.fullmatch(name) is None
    assert framework.step_of(name) == ""
    manifest = snapshot_format.manifest_bytes(0, HEX, "0" * 64, 1, 0)
    with pytest.raises(snapshot_format.SnapshotError, match="directory name"):
        snapshot_format.parse_manifest(manifest, name)


def test_made_names_parse_back() -> None:
    name = snapshot_format.dir_name(42, HEX)
    assert name == f"step_000000000042_{HEX}"
    assert snapshot_name.parse(name) == ("000000000042", HEX)
    assert framework.step_of(name) == "000000000042"
