"""publish.manifest: the format, its caps, and what decode refuses (hostile manifests)."""

from __future__ import annotations

import json
import time

import pytest

from publish import layout, manifest
from publish.manifest import MANIFEST_LIMIT, MANIFEST_ROWS, ManifestError, decode, encode

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
    data = b'{"entry":"%s","files":[%s],"format":"publish.manifest.v1"}' % (ENTRY.encode(), rows.encode())
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
    data = b'{"entry":"%s","files":[["a",%s,null]],"format":"publish.manifest.v1"}' % (ENTRY.encode(), digits)
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
