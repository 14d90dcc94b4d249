"""-checkpoint and SAVE parsing: schemes, S3 roots, lexical cleaning."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.rules.errors import Failure
from publish.rules.roots import PosixRoot, S3Root, below, clean_posix, parse_root


@pytest.mark.parametrize(
    "text, cwd, expected",
    [
        ("/data/ckpt", "/", "/data/ckpt"),
        ("/data/ckpt/", "/", "/data/ckpt"),
        ("../ckpt/./", "/work/job", "/work/ckpt"),
        ("ckpt", "/work", "/work/ckpt"),
        ("./a:b", "/work", "/work/a:b"),
        ("//data//x", "/", "/data/x"),
        ("with space:x", "/w", "/w/with space:x"),
    ],
)
def test_posix_roots_are_absolute_and_clean(text: str, cwd: str, expected: str) -> None:
    assert parse_root(text, cwd) == PosixRoot(expected)


@pytest.mark.parametrize(
    "text", ["gs://x", "s3:/bucket", "file:/data", "S3://b/x", "https://h/x", "a:b", "c:", "s3a://b"]
)
def test_other_schemes_are_refused(text: str) -> None:
    with pytest.raises(Failure, match="not supported"):
        parse_root(text, "/")


@pytest.mark.parametrize(
    "text, bucket, prefix",
    [
        ("s3://ckpts/run-7", "ckpts", "run-7"),
        ("s3://ckpts/run-7/", "ckpts", "run-7"),
        ("s3://ckpts", "ckpts", ""),
        ("s3://ckpts/", "ckpts", ""),
        ("s3://my.bucket-1/a/b c/d", "my.bucket-1", "a/b c/d"),
    ],
)
def test_s3_roots(text: str, bucket: str, prefix: str) -> None:
    root = parse_root(text, "/")
    assert root == S3Root(bucket, prefix)
    assert root.text == text.rstrip("/")


@pytest.mark.parametrize(
    "text, why",
    [
        ("s3://", "no bucket"),
        ("s3:///x", "no bucket"),
        ("s3://Ckpts/x", "not a valid S3 bucket name"),
        ("s3://ab/x", "not a valid S3 bucket name"),
        ("s3://a_b/x", "not a valid S3 bucket name"),
        ("s3://-ab/x", "not a valid S3 bucket name"),
        ("s3://a..b/x", "not a valid S3 bucket name"),
        ("s3://192.168.1.1/x", "not a valid S3 bucket name"),
        ("s3://" + "a" * 64, "not a valid S3 bucket name"),
        ("s3://user:secret@bkt/x", "userinfo"),
        ("s3://bkt:9000/x", "port"),
        ("s3://bkt/x?versionId=1", "query"),
        ("s3://bkt/x#frag", "fragment"),
        ("s3://bkt/a//b", "empty, '.' or '..'"),
        ("s3://bkt/a/./b", "empty, '.' or '..'"),
        ("s3://bkt/../b", "empty, '.' or '..'"),
        ("s3://bkt/a//", "empty, '.' or '..'"),
    ],
)
def test_bad_s3_roots(text: str, why: str) -> None:
    with pytest.raises(Failure, match=why) as info:
        parse_root(text, "/")
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    "save, expected",
    [
        ("/r/exec/A/x", "exec/A/x"),
        ("exec/A/x", "exec/A/x"),
        ("exec/B/../A/x", "exec/A/x"),
        ("/r/exec/A/x/", "exec/A/x"),
    ],
)
def test_save_below_posix_root(save: str, expected: str) -> None:
    assert below(PosixRoot("/r"), save, "/r", "SAVE") == expected


@pytest.mark.parametrize("save", ["/r", "/r/", "/rx/a", "/other", "../r2/x", "/r/..", "s3://b/x"])
def test_save_outside_posix_root(save: str) -> None:
    with pytest.raises(Failure):
        below(PosixRoot("/r"), save, "/r", "SAVE")


def test_save_below_s3_root() -> None:
    root = S3Root("bkt", "run")
    assert below(root, "s3://bkt/run/exec/A/x", "/", "SAVE") == "exec/A/x"
    assert below(S3Root("bkt", ""), "s3://bkt/exec/A/x/", "/", "SAVE") == "exec/A/x"
    for bad in ["s3://bkt/run", "s3://bkt/running/x", "s3://other/run/x", "/run/x", "exec/A/x"]:
        with pytest.raises(Failure):
            below(root, bad, "/", "SAVE")


def _posixpath_clean(path: str, cwd: str) -> str:
    """clean_posix as it was made from posixpath: the reference its own spelling must match."""
    import posixpath

    cleaned = posixpath.normpath(posixpath.join(cwd, path))
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


_PIECES = st.lists(st.sampled_from(["/", "//", "///", ".", "..", "...", "a", "pub", "é", "\r", "%2F", " "]))


@settings(max_examples=2000, deadline=None)
@given(path=_PIECES.map("".join), cwd=_PIECES.map("".join))
def test_clean_posix_is_posixpaths_join_and_normpath_with_one_leading_slash(path: str, cwd: str) -> None:
    assert clean_posix(path, cwd) == _posixpath_clean(path, cwd)


@pytest.mark.parametrize(
    ("path", "cwd"),
    [("", ""), ("", "/"), ("..", ""), ("../..", "a"), ("//x/../..", "/"), ("x", "//"), ("a/./b/", "rel/..")],
)
def test_clean_posix_at_the_edges(path: str, cwd: str) -> None:
    assert clean_posix(path, cwd) == _posixpath_clean(path, cwd)
