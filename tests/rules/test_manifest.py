"""publish.rules.manifest: the format, its caps, and what decode refuses (hostile manifests)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.rules import layout, manifest
from publish.rules.manifest import MANIFEST_LIMIT, MANIFEST_ROWS, ManifestError, decode, encode

ENTRY = layout.name(1, 7, "exec/A/step-7")
OTHER = layout.name(1, 8, "exec/A/step-8")
DIGEST = "ab" * 32
WHERE = "/r/man/" + ENTRY


def doc(files: object, entry: str = ENTRY, fmt: str = manifest.FORMAT) -> bytes:
    return json.dumps({"entry": entry, "files": files, "format": fmt}).encode()


def test_encode_is_sorted_compact_and_decodes_back() -> None:
    rows = [("b/x", 3, None), ("a", 0, DIGEST), ("é/ü", 12, DIGEST)]
    data = encode(ENTRY, rows)
    assert (
        data
        == (
            f'{{"entry":"{ENTRY}","files":[["a",0,"{DIGEST}"],["b/x",3,null],["é/ü",12,"{DIGEST}"]],'
            '"format":"publish.manifest.v1"}'
        ).encode()
    )
    assert decode(ENTRY, data) == sorted(rows)


def test_a_save_that_is_one_file_has_the_one_row_of_the_empty_path() -> None:
    assert decode(ENTRY, encode(ENTRY, [("", 5, DIGEST)])) == [("", 5, DIGEST)]
    with pytest.raises(ManifestError, match='the path "" .* beside other files'):
        decode(ENTRY, doc([["", 5, None], ["a", 1, None]]))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            b'{"entry":"%s","entry":"%s","files":[],"format":"publish.manifest.v1"}'
            % (ENTRY.encode(), ENTRY.encode()),
            "the key 'entry' appears twice",
        ),
        (b"", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "not a JSON object"),
        (b'{"entry":"x","files":[]}', "its keys are not entry, files and format"),
        (b'{"entry":"x","files":[],"format":"publish.manifest.v1","more":1}', "its keys are not"),
    ],
)
def test_refusals_of_the_document(data: bytes, why: str) -> None:
    with pytest.raises(ManifestError, match=why) as e:
        decode(ENTRY, data, WHERE)
    assert str(e.value).startswith(f"{WHERE}: damaged manifest: ")
    assert e.value.where == WHERE


def test_another_format_is_refused() -> None:
    with pytest.raises(ManifestError, match="the format 'publish.manifest.v2', not publish.manifest.v1"):
        decode(ENTRY, doc([], fmt="publish.manifest.v2"), WHERE)


def test_a_manifest_planted_for_another_entry_is_refused_naming_it() -> None:
    with pytest.raises(ManifestError, match=f"it is the manifest of '{OTHER}', not of {ENTRY}"):
        decode(ENTRY, encode(OTHER, [("a", 1, None)]), WHERE)


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "..", "a/../b", "a/./b", ".", "a//b", "a/", "a\0b", "\ud800"]
)
def test_a_bad_path_is_refused(path: str) -> None:
    with pytest.raises(ManifestError, match="is not a clean relative path"):
        decode(ENTRY, doc([[path, 1, None]]), WHERE)
    with pytest.raises(ManifestError):
        encode(ENTRY, [(path, 1, None)])


def test_a_path_listed_twice_is_refused() -> None:
    with pytest.raises(ManifestError, match="the path 'a' is listed twice"):
        decode(ENTRY, doc([["a", 1, None], ["b", 1, None], ["a", 2, None]]))


@pytest.mark.parametrize(
    "size",
    ["-1", "1.0", "1e3", "NaN", "Infinity", "-Infinity", "true", "null", '"12"', str(1 << 63), "9" * 21],
)
def test_a_size_that_is_no_whole_number_of_bytes_is_refused(size: str) -> None:
    data = b'{"entry":"%s","files":[["a",%s,null]],"format":"publish.manifest.v1"}' % (
        ENTRY.encode(),
        size.encode(),
    )
    with pytest.raises(ManifestError):
        decode(ENTRY, data, WHERE)


@pytest.mark.parametrize("digest", ["AB" * 32, "ab" * 31, "ab" * 33, "zz" * 32, 5, ["ab" * 32], ""])
def test_a_digest_that_is_not_64_lower_case_hex_digits_is_refused(digest: object) -> None:
    with pytest.raises(ManifestError, match="sha256 is not 64 lower-case hex digits"):
        decode(ENTRY, doc([["a", 1, digest]]))


@pytest.mark.parametrize("row", [["a", 1], ["a", 1, None, 2], "a", {"a": 1}, [1, 1, None]])
def test_a_malformed_row_is_refused(row: object) -> None:
    with pytest.raises(ManifestError, match="file 0"):
        decode(ENTRY, doc([row]))


def test_files_must_be_a_list() -> None:
    with pytest.raises(ManifestError, match="files is not a list"):
        decode(ENTRY, doc({"a": [1, None]}))


def test_over_64_mib_is_refused_before_it_is_parsed() -> None:
    data = encode(ENTRY, [])
    big = data[:-1] + b" " * (MANIFEST_LIMIT + 1 - len(data)) + b"}"
    assert len(big) == MANIFEST_LIMIT + 1
    with pytest.raises(ManifestError, match=f"{MANIFEST_LIMIT + 1} bytes, over the {MANIFEST_LIMIT}"):
        decode(ENTRY, big, WHERE)
    at_limit = data[:-1] + b" " * (MANIFEST_LIMIT - len(data)) + b"}"
    assert decode(ENTRY, at_limit) == []


def test_more_than_a_million_rows_is_refused() -> None:
    rows = ",".join(f'["{i}",0,null]' for i in range(MANIFEST_ROWS + 1))
    data = b'{"entry":"%s","files":[%s],"format":"publish.manifest.v1"}' % (
        ENTRY.encode(),
        rows.encode(),
    )
    with pytest.raises(ManifestError, match=f"{MANIFEST_ROWS + 1} files, over the {MANIFEST_ROWS}"):
        decode(ENTRY, data)


def test_a_million_rows_decode_in_linear_time() -> None:
    rows = [(f"shard/{i:07d}.distcp", i, None) for i in range(MANIFEST_ROWS)]
    data = encode(ENTRY, rows)
    assert len(data) < MANIFEST_LIMIT
    started = time.monotonic()
    assert len(decode(ENTRY, data)) == MANIFEST_ROWS
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("depth", [10_000, 5_000_000])
def test_deep_nesting_is_refused_not_a_crash(depth: int) -> None:
    data = b'{"entry":"x","files":' + b"[" * depth + b"]" * depth + b',"format":"publish.manifest.v1"}'
    with pytest.raises(ManifestError):
        decode(ENTRY, data)


def test_a_long_run_of_digits_is_refused_quickly() -> None:
    digits = b"9" * (MANIFEST_LIMIT - 200)
    data = b'{"entry":"%s","files":[["a",%s,null]],"format":"publish.manifest.v1"}' % (
        ENTRY.encode(),
        digits,
    )
    started = time.monotonic()
    with pytest.raises(ManifestError, match="digits"):
        decode(ENTRY, data)
    assert time.monotonic() - started < 10


def test_a_million_rows_with_digests_are_over_the_byte_cap_and_encode_says_so() -> None:
    rows = [(f"shard/{i:07d}.distcp", i, DIGEST) for i in range(MANIFEST_ROWS)]
    with pytest.raises(
        ManifestError, match=f"manifest of {ENTRY}: it would be .* bytes, over the {MANIFEST_LIMIT}"
    ):
        encode(ENTRY, rows)


def test_encode_refuses_what_decode_would() -> None:
    with pytest.raises(ManifestError, match="size"):
        encode(ENTRY, [("a", -1, None)])
    with pytest.raises(ManifestError, match="sha256"):
        encode(ENTRY, [("a", 1, "x")])
    with pytest.raises(ManifestError, match="listed twice"):
        encode(ENTRY, [("a", 1, None), ("a", 2, None)])


def test_a_huge_bad_path_is_cut_short_in_the_message() -> None:
    path = "../" + "x" * 10_000
    with pytest.raises(ManifestError) as e:
        decode(ENTRY, doc([[path, 1, None]]), WHERE)
    assert len(str(e.value)) < 500 and str(e.value).endswith("... is not a clean relative path")


# -- a name is bytes (issue #31, "One odd file name stops every publication"; addendum section 15)

#: Names a POSIX save can hold: any bytes but NUL and "/", among them bytes that are not UTF-8, the bytes
#: of a surrogate's UTF-8 spelling, what looks like an escape, and the longest name a filesystem allows.
HOSTILE = [
    b"bad\xff.bin",
    b"\xff" * 255,
    b"\x80",
    b"\xed\xb2\x80",  # U+DC80 spelled in UTF-8 (which UTF-8 forbids): three bytes, not that character
    b"\xc3",  # a UTF-8 sequence cut short
    b"caf\xc3\xa9",  # UTF-8: recorded as it always was
    b"new\nline",
    b"%ff",
    b"+",
    b"back\\slash",
    b"\\udcff",  # the six characters of the escape itself
    b"-leading-dash",
    b"\xfe" * 255,
]


def read(name: bytes) -> str:
    """A name's bytes as a manifest records them (UTF-8, a byte that is not kept by surrogateescape)."""
    return name.decode("utf-8", "surrogateescape")


def test_every_name_a_posix_save_can_hold_is_recorded_and_read_back_exactly() -> None:
    """A manifest records any name (its bytes) and gives back the same bytes; fails on the code before,
    which refused every name that is not UTF-8 ('the path ... is not a clean relative path')."""
    names = [read(raw) for raw in [*HOSTILE, b"dir\xff/in\xfe"]]
    rows = [(name, i, DIGEST) for i, name in enumerate(names)]
    data = encode(ENTRY, rows)
    data.decode("utf-8")  # the document is UTF-8 JSON, whatever the names
    back = decode(ENTRY, data, WHERE)
    assert sorted(p.encode("utf-8", "surrogateescape") for p, _, _ in back) == sorted(
        [*HOSTILE, b"dir\xff/in\xfe"]
    )
    assert back == sorted(rows)


def test_a_byte_that_is_not_utf8_is_written_as_its_json_escape_and_utf8_names_are_unchanged() -> None:
    """The one byte of bad\\xff.bin is the escape \\udcff; a manifest whose names are all UTF-8 is byte for
    byte what the format always wrote.  Fails on the code before (it refused the name)."""
    data = encode(ENTRY, [(read(b"bad\xff.bin"), 1, None), ("caf\u00e9", 2, None)])
    assert (
        data
        == (
            f'{{"entry":"{ENTRY}","files":[["bad\\udcff.bin",1,null],["caf\u00e9",2,null]],'
            '"format":"publish.manifest.v1"}'
        ).encode()
    )


def test_a_manifest_written_before_names_were_bytes_still_reads_as_it_did() -> None:
    """An old root keeps verifying: a manifest of the format as it was written before (UTF-8 names, among
    them escapes that look like the new ones, as the literal characters they are) reads back unchanged."""
    old = (
        b'{"entry":"%s","files":[["%%ff",1,null],["+",2,null],["\\\\udcff",3,null],["a\\nb",4,null],'
        b'["caf\xc3\xa9",5,"%s"]],"format":"publish.manifest.v1"}' % (ENTRY.encode(), DIGEST.encode())
    )
    assert decode(ENTRY, old, WHERE) == [
        ("%ff", 1, None),
        ("+", 2, None),
        ("\\udcff", 3, None),
        ("a\nb", 4, None),
        ("caf\u00e9", 5, DIGEST),
    ]
    assert encode(ENTRY, decode(ENTRY, old)) == old


@pytest.mark.parametrize(
    "spelling",
    [
        "\\udcc3\\udca9",  # the bytes of an e-acute, escaped: UTF-8 reads them as the character, one spelling
        "\\udc41",  # a surrogate for an ASCII byte, which no name's reading makes
        "\\ud800x",  # a high surrogate: no byte
        "\\udfff",
    ],
)
def test_a_surrogate_that_is_no_name_s_one_spelling_is_refused(spelling: str) -> None:
    """One name has one path: escapes that name no bytes, or bytes that UTF-8 reads otherwise, are a
    damaged manifest, so a name can never be listed twice under two spellings."""
    data = b'{"entry":"%s","files":[["%s",1,null]],"format":"publish.manifest.v1"}' % (
        ENTRY.encode(),
        spelling.encode(),
    )
    with pytest.raises(ManifestError, match="is not a clean relative path"):
        decode(ENTRY, data, WHERE)


_NAME = st.binary(min_size=1, max_size=255).filter(
    lambda b: b"\0" not in b and b"/" not in b and b not in (b".", b"..")
)


@settings(max_examples=500, deadline=None)
@given(paths=st.lists(st.lists(_NAME, min_size=1, max_size=4).map(b"/".join), max_size=20, unique=True))
def test_any_byte_names_round_trip(paths: list[bytes]) -> None:
    """Any save's relative paths (names of any bytes but NUL and "/", joined by "/") come back from the
    manifest as the same bytes, in one canonical spelling; fails on the code before for any name that is
    not UTF-8."""
    rows = [(p.decode("utf-8", "surrogateescape"), len(p), None) for p in paths]
    back = decode(ENTRY, encode(ENTRY, rows))
    assert sorted(p.encode("utf-8", "surrogateescape") for p, _, _ in back) == sorted(paths)
    assert encode(ENTRY, back) == encode(ENTRY, rows)
