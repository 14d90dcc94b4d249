"""The rules written out by hand so an S3 verb starts without re, urllib, hashlib, hmac, ElementTree or
datetime: each against the standard-library function it replaces, on generated input."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from urllib.parse import quote, unquote_plus
from xml.sax.saxutils import escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from publish.rules import hashing, percent, roots, urls
from publish.rules.errors import Failure, StoreError
from publish.s3 import s3xml, sigv4
from publish.s3.s3retry import Counts

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_OLD_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")

hostish = st.text(alphabet="ab9_-.Z%é:", max_size=12) | st.builds(
    lambda n, dot: "a" * n + dot, st.integers(60, 66), st.sampled_from(["", ".", ".b", ".-"])
)


@given(hostish)
def test_host_name_rule_is_the_old_expression(host: str) -> None:
    old = len(host) <= 254 and host.isascii() and _OLD_HOST.fullmatch(host) is not None
    assert urls.host_name_ok(host) == old


def _old_bucket_ok(b: str) -> bool:
    return not (
        not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", b)
        or ".." in b
        or ".-" in b
        or "-." in b
        or re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+", b)
        or b.startswith(("xn--", "sthree-"))
        or b.endswith(("-s3alias", "--ol-s3"))
    )


@given(st.text(alphabet="a0.-A_٣", min_size=1, max_size=8) | st.sampled_from(["1.2.3.4", "1.2.3", "a" * 64]))
def test_bucket_rule_is_the_old_expression(bucket: str) -> None:
    try:
        roots.parse_s3(f"s3://{bucket}/p", "-checkpoint")
        ok = True
    except Failure:
        ok = False
    assert ok == _old_bucket_ok(bucket)


@given(st.text(max_size=40))
def test_percent_encode_is_quote(text: str) -> None:
    try:
        want = quote(text, safe="~"), quote(text, safe="/~")
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            percent.encode(text)
        return
    assert (percent.encode(text), percent.encode(text, keep_slash=True)) == want


escapes = st.lists(
    st.sampled_from(["%", "+", "a", "é", "%2F", "%C3", "%A9", "%E2%82", "%AC", "%zz", "%4", "%%", "/"]),
    max_size=10,
).map("".join)


@given(escapes | st.text(max_size=20))
def test_percent_decode_is_unquote_plus_strict(text: str) -> None:
    try:
        want = unquote_plus(text, errors="strict")
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            percent.decode_plus(text)
        return
    assert percent.decode_plus(text) == want


@given(st.binary(max_size=200), st.binary(max_size=300))
def test_hashes_are_hashlibs(key: bytes, message: bytes) -> None:
    assert hashing.hmac_sha256(key, message) == hmac.new(key, message, hashlib.sha256).digest()
    assert hashing.sha256_hex(message) == hashlib.sha256(message).hexdigest()
    assert hashing.md5_digest(message) == hashlib.md5(message).digest()


@given(st.integers(0, 4_000_000_000))
def test_amz_date_of_seconds_is_that_of_the_datetime(seconds: int) -> None:
    when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    assert sigv4.amz_date(float(seconds)) == sigv4.amz_date(when)


@given(st.text(alphabet="a&<>\"'é", max_size=10))
def test_xml_escape_is_saxutils(text: str) -> None:
    assert s3xml._escape(text) == escape(text)


def page(contents: str, truncated: str = "false") -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<IsTruncated>{truncated}</IsTruncated>{contents}</ListBucketResult>"
    ).encode()


def test_listing_joins_text_that_expat_hands_over_in_pieces() -> None:
    body = page(
        "<Contents><Key>a&amp;b&lt;c<![CDATA[&d]]>&#233;</Key><Size>7</Size>"
        "<LastModified>2026-12-02T06:00:01.500Z</LastModified></Contents>"
    )
    keys, prefixes, sizes, modified, truncated, token = s3xml.listing("s3://b/", body)
    assert (keys, prefixes, sizes, modified, truncated, token) == (
        ["a&b<c&dé"],
        [],
        [7],
        ["2026-12-02T06:00:01.500Z"],
        False,
        "",
    )


def test_listing_text_is_what_comes_before_the_first_child() -> None:
    # ElementTree's text: the key is "k", not "k" plus the tail after a stray child
    body = page("<Contents><Key>k<x/>tail</Key></Contents>")
    assert s3xml.listing("s3://b/", body)[0] == ["k"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<ListBucketResult>",
        b"not xml",
        b'<?xml version="1.0" encoding="x-unknown"?><ListBucketResult/>',
        # a document type declaration (S3 sends none): refused, so no entity is ever expanded
        b'<!DOCTYPE l [<!ENTITY e "x">]><ListBucketResult><IsTruncated>false</IsTruncated>'
        b"<Contents><Key>&e;</Key></Contents></ListBucketResult>",
    ],
)
def test_not_a_listing(body: bytes) -> None:
    with pytest.raises(StoreError, match="not a listing"):
        s3xml.listing("s3://b/", body)


def test_counts_start_at_zero() -> None:
    counts = Counts()
    counts["list"] += 1
    assert (counts["list"], counts["get"]) == (1, 0)
