"""A CA bundle as a hashed directory in the cache (publish.rules.caname, publish.http.trustcache, publish.http.net).

The subject hash is checked against OpenSSL's own (`openssl x509 -subject_hash`, and the hash links Debian
keeps in /etc/ssl/certs); the cache against a real TLS server on loopback, a hostile neighbour's planted
directories and concurrent cold starts.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.http import net, trustcache
from publish.http.trust import Trust
from publish.rules import caname
from tests.conftest import need
from tests.support.netfixtures import Server, TestCA

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()  # noqa: S324 - OpenSSL's file names are made of SHA-1


def openssl_hash(der: bytes) -> str:
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-subject_hash"],
        input=pem(der).encode(),
        capture_output=True,
        check=True,
        timeout=30,
    )
    return out.stdout.decode().strip()


def self_signed(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def attr(oid: x509.ObjectIdentifier, value: str, kind: _ASN1Type | None = None) -> x509.NameAttribute:
    return x509.NameAttribute(oid, value) if kind is None else x509.NameAttribute(oid, value, _type=kind)


NAMES = {
    "case and white space": x509.Name([attr(NameOID.COMMON_NAME, "  Hello \t\t WORLD\n x  ")]),
    "printable": x509.Name(
        [
            attr(NameOID.COUNTRY_NAME, "DE", _ASN1Type.PrintableString),
            attr(NameOID.ORGANIZATION_NAME, "ACME  Ltd"),
        ]
    ),
    "utf-8": x509.Name([attr(NameOID.COMMON_NAME, "Zürich ÜBER Straße  CA")]),
    "bmp": x509.Name([attr(NameOID.COMMON_NAME, "Ünïcode  BMP CA", _ASN1Type.BMPString)]),
    "universal": x509.Name([attr(NameOID.COMMON_NAME, "Universal ÄÖ CA", _ASN1Type.UniversalString)]),
    "t61": x509.Name([attr(NameOID.COMMON_NAME, "T61 Ça CA", _ASN1Type.T61String)]),
    "ia5": x509.Name([attr(NameOID.EMAIL_ADDRESS, "Root@Example.ORG", _ASN1Type.IA5String)]),
    "multi-valued RDN": x509.Name(
        [
            x509.RelativeDistinguishedName(
                [attr(NameOID.ORGANIZATIONAL_UNIT_NAME, "Zeta Unit"), attr(NameOID.COMMON_NAME, "Alpha")]
            ),
            x509.RelativeDistinguishedName([attr(NameOID.ORGANIZATION_NAME, "Org")]),
        ]
    ),
    "long": x509.Name([attr(NameOID.ORGANIZATION_NAME, "x" * 60), attr(NameOID.COMMON_NAME, "Y " * 30)]),
    "empty": x509.Name([]),
}


# ----------------------------------------------------------------------------- the subject hash


def test_subject_hash_is_openssls_for_every_certificate_of_the_system_bundle() -> None:
    need(SYSTEM_BUNDLE.is_file(), f"{SYSTEM_BUNDLE} (Debian's ca-certificates)")
    need(shutil.which("openssl") is not None, "the openssl command")
    ders = caname.pem_certificates(SYSTEM_BUNDLE.read_text("latin-1"))
    assert len(ders) > 50
    for der in ders:
        assert caname.subject_hash(der, sha1) == openssl_hash(der)


def test_subject_hash_names_what_debian_links_in_etc_ssl_certs() -> None:
    need(SYSTEM_BUNDLE.is_file(), f"{SYSTEM_BUNDLE} (Debian's ca-certificates)")
    links = [p for p in SYSTEM_BUNDLE.parent.iterdir() if p.is_symlink() and p.name[-2:-1] == "."]
    assert len(links) > 50
    for link in links:
        (der,) = caname.pem_certificates(link.read_text("latin-1"))
        assert caname.subject_hash(der, sha1) == link.name[:8]


@pytest.mark.parametrize("case", sorted(NAMES))
def test_subject_hash_is_openssls_for_every_kind_of_name(case: str) -> None:
    need(shutil.which("openssl") is not None, "the openssl command")
    der = self_signed(NAMES[case])
    assert caname.subject_hash(der, sha1) == openssl_hash(der)


def test_a_name_that_differs_only_in_case_and_spaces_hashes_alike() -> None:
    a = self_signed(x509.Name([attr(NameOID.COMMON_NAME, "My  CA")]))
    b = self_signed(x509.Name([attr(NameOID.COMMON_NAME, " my ca\t")]))
    c = self_signed(x509.Name([attr(NameOID.COMMON_NAME, "my-ca")]))
    assert caname.subject_hash(a, sha1) == caname.subject_hash(b, sha1) != caname.subject_hash(c, sha1)


DAMAGED_BASE = (self_signed(NAMES["multi-valued RDN"]), b"\x30\x03\x02\x01\x01")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_damaged_certificate_is_unsure_never_another_error(data: st.DataObject) -> None:
    der = bytearray(DAMAGED_BASE[data.draw(st.integers(0, 1))])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(der) - 1))
        der[i] = data.draw(st.integers(0, 255))
    der = der[: data.draw(st.integers(0, len(der)))]
    try:
        digest = caname.subject_hash(bytes(der), sha1)
    except caname.Unsure:
        return
    assert len(digest) == 8 and int(digest, 16) >= 0


# ---------------------------------------------------------------------------------- the bundle


def pem(der: bytes) -> str:
    text = base64.b64encode(der).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"


def test_pem_certificates_reads_the_blocks_and_skips_the_text_around_them() -> None:
    a, b = self_signed(NAMES["utf-8"]), self_signed(NAMES["ia5"])
    text = f"# a comment\n{pem(a)}\nIssuer: someone\r\n{pem(b).replace(chr(10), chr(13) + chr(10))}"
    assert caname.pem_certificates(text) == [a, b]


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace("BEGIN CERTIFICATE", "BEGIN TRUSTED CERTIFICATE", 1),
        lambda t: t + "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
        lambda t: " " + t,  # an indented BEGIN line, which OpenSSL would not read as one
        lambda t: t.replace("\n", "\n ", 2),  # an indented base64 line
        lambda t: t.replace("\n", "*\n", 2),  # a character outside base64
        lambda t: t.replace("-----END CERTIFICATE-----\n", ""),
        lambda t: "-----BEGIN CERTIFICATE-----\n" + "A" * 80 + "\n-----END CERTIFICATE-----\n",
    ],
)
def test_a_bundle_openssl_might_read_otherwise_is_unsure(change: object) -> None:
    text = pem(self_signed(NAMES["printable"]))
    assert callable(change)
    with pytest.raises(caname.Unsure):
        caname.pem_certificates(change(text))


# ----------------------------------------------------------------------------------- the cache


def big_bundle(path: Path, *extra: str) -> Path:
    """A bundle past trustcache.SMALLEST: certificates of their own names, then ``extra`` PEM texts."""
    parts = [pem(self_signed(x509.Name([attr(NameOID.COMMON_NAME, f"Filler CA {i}")]))) for i in range(80)]
    path.write_text("".join(parts + list(extra)))
    assert path.stat().st_size >= trustcache.SMALLEST
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "publish"


def lazy(bundle: Path, env: dict[str, str]) -> Trust:
    return trustcache.lazy(Trust(str(bundle), cafile=str(bundle)), env)


def test_a_bundle_gets_one_hashed_copy_in_the_cache(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    got = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)})
    assert got.capath is not None and got.cafile == str(bundle)
    copy = Path(got.capath)
    assert copy.parent == cache and copy.name.startswith("ca-")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and stat.S_IMODE(copy.stat().st_mode) == 0o700
    names = sorted(p.name for p in copy.iterdir())
    ders = caname.pem_certificates(bundle.read_text())
    assert names == sorted(f"{caname.subject_hash(d, sha1)}.0" for d in ders)
    for d in ders:
        assert caname.pem_certificates((copy / f"{caname.subject_hash(d, sha1)}.0").read_text()) == [d]
    before = {p.name: p.stat().st_ino for p in copy.iterdir()}
    again = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)})
    assert again.capath == got.capath and {p.name: p.stat().st_ino for p in copy.iterdir()} == before
    assert [p.name for p in cache.iterdir()] == [copy.name]  # no temporary directory left


def test_two_certificates_of_one_subject_hash_get_suffixes(tmp_path: Path, cache: Path) -> None:
    same = x509.Name([attr(NameOID.COMMON_NAME, "Twin CA")])
    bundle = big_bundle(tmp_path / "bundle.pem", pem(self_signed(same)), pem(self_signed(same)))
    got = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)})
    assert got.capath is not None
    digest = caname.subject_hash(self_signed(same), sha1)
    assert {p.name for p in Path(got.capath).iterdir()} >= {f"{digest}.0", f"{digest}.1"}


def test_a_changed_bundle_gets_a_new_copy(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    first = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath
    big_bundle(bundle, pem(self_signed(NAMES["utf-8"])))
    second = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath
    assert first and second and first != second
    assert len(list(Path(second).iterdir())) == len(list(Path(first).iterdir())) + 1


def test_where_the_cache_is(tmp_path: Path) -> None:
    home, xdg = str(tmp_path / "home"), str(tmp_path / "xdg")
    assert trustcache.cache_dir({"HOME": home}) == f"{home}/.cache/publish"
    assert trustcache.cache_dir({"HOME": home, "XDG_CACHE_HOME": xdg + "/"}) == f"{xdg}/publish"
    assert trustcache.cache_dir({"HOME": home, "XDG_CACHE_HOME": "rel", "PUBLISH_CACHE_DIR": "/c/"}) == "/c"
    assert trustcache.cache_dir({"HOME": home, "XDG_CACHE_HOME": "relative"}) == f"{home}/.cache/publish"
    for none in (
        {"HOME": home, "PUBLISH_CACHE_DIR": "off"},
        {"PUBLISH_CACHE_DIR": "relative"},
        {"HOME": "rel"},
        {},
    ):
        assert trustcache.cache_dir(none) is None
    bundle = big_bundle(tmp_path / "bundle.pem")
    got = lazy(bundle, {"HOME": home})
    assert got.capath is not None and got.capath.startswith(f"{home}/.cache/publish/ca-")


def test_no_copy_without_a_cache_for_a_small_bundle_or_an_unsure_one(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    for env in ({"PUBLISH_CACHE_DIR": "off", "HOME": str(tmp_path)}, {}):
        assert lazy(bundle, env).capath is None
    small = tmp_path / "small.pem"
    small.write_text(pem(self_signed(NAMES["utf-8"])))
    assert lazy(small, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None
    odd = big_bundle(tmp_path / "odd.pem", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n")
    assert lazy(odd, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None
    assert not cache.exists() or list(cache.iterdir()) == []


def copy_name(bundle: Path) -> str:
    return "ca-" + hashlib.sha256(bundle.read_bytes()).hexdigest()[:32]


def test_bundles_of_the_same_bytes_share_one_copy(tmp_path: Path, cache: Path) -> None:
    # As the nodes of a cluster do in a shared home: each has its own file (inode, times), the same bytes.
    one = big_bundle(tmp_path / "node1.pem")
    two = tmp_path / "node2.pem"
    two.write_bytes(one.read_bytes())
    env = {"PUBLISH_CACHE_DIR": str(cache)}
    assert lazy(one, env).capath == lazy(two, env).capath == str(cache / copy_name(one))
    assert [p.name for p in cache.iterdir()] == [copy_name(one)]


def test_a_cache_others_may_write_to_or_a_link_is_not_used(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    cache.mkdir(parents=True)
    cache.chmod(0o770)
    assert lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None
    assert list(cache.iterdir()) == []
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert lazy(bundle, {"PUBLISH_CACHE_DIR": str(link)}).capath is None
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("planted", ["writable by others", "a link", "another user's", "a file"])
def test_a_copy_planted_by_a_neighbour_is_never_trusted(tmp_path: Path, cache: Path, planted: str) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    cache.mkdir(parents=True, mode=0o700)
    evil = self_signed(x509.Name([attr(NameOID.COMMON_NAME, "Evil CA")]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{caname.subject_hash(evil, sha1)}.0").write_text(pem(evil))
    target = cache / copy_name(bundle)
    if planted == "writable by others":
        shutil.copytree(elsewhere, target)
        target.chmod(0o777)
    elif planted == "a link":
        target.symlink_to(elsewhere)
    elif planted == "another user's":
        need(os.geteuid() == 0, "root, to make a directory another user owns")
        shutil.copytree(elsewhere, target)
        target.chmod(0o700)
        os.chown(target, 12345, 12345)
    else:
        target.write_text(pem(evil))
    assert lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None


def test_concurrent_cold_starts_agree_on_one_whole_copy(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem")
    code = (
        "import sys; from publish.http import trustcache; from publish.http.trust import Trust; "
        "t = trustcache.lazy(Trust('b', cafile=sys.argv[1]), {'PUBLISH_CACHE_DIR': sys.argv[2]}); "
        "print(t.capath)"
    )
    root = str(Path(__file__).resolve().parents[2])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(bundle), str(cache)],
            stdout=subprocess.PIPE,
            cwd=root,
        )
        for _ in range(12)
    ]
    outs = {p.communicate(timeout=60)[0].decode().strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert outs == {str(cache / copy_name(bundle))}
    assert [p.name for p in cache.iterdir()] == [copy_name(bundle)]
    assert len(list((cache / copy_name(bundle)).iterdir())) == len(
        caname.pem_certificates(bundle.read_text())
    )


# ------------------------------------------------------------------------ against a TLS server


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
def tls_server(ca: TestCA) -> Iterator[Server]:
    with Server(tls=ca) as srv:
        yield srv


def test_https_verifies_through_the_copy(ca: TestCA, tls_server: Server, tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem", Path(ca.pem).read_text())
    env = {"SSL_CERT_FILE": str(bundle), "PUBLISH_CACHE_DIR": str(cache)}
    for _ in range(2):  # cold, then warm
        c = net.Connector(tls_server.url, env=env)
        assert c.request("GET", "/echo", {}, timeout=5).status == 200
        assert c._trust is not None and c._trust.capath == str(cache / copy_name(bundle))
        c.close()


def test_a_server_the_bundle_does_not_trust_is_refused(tmp_path: Path, cache: Path) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem", Path(TestCA(tmp_path).pem).read_text())
    with Server(tls=TestCA(tmp_path)) as srv:
        c = net.Connector(srv.url, env={"SSL_CERT_FILE": str(bundle), "PUBLISH_CACHE_DIR": str(cache)})
        with pytest.raises(net.TLSFailure, match=f"{srv.url}: certificate not trusted"):
            c.request("GET", "/echo", {}, timeout=5)
        assert srv.requests == []


def test_a_copy_missing_a_certificate_falls_back_to_the_bundle(
    ca: TestCA, tls_server: Server, tmp_path: Path, cache: Path
) -> None:
    bundle = big_bundle(tmp_path / "bundle.pem", Path(ca.pem).read_text())
    env = {"SSL_CERT_FILE": str(bundle), "PUBLISH_CACHE_DIR": str(cache)}
    copy = lazy(bundle, env).capath
    assert copy is not None
    der = caname.pem_certificates(Path(ca.pem).read_text())[0]
    (Path(copy) / f"{caname.subject_hash(der, sha1)}.0").unlink()  # as a damaged copy would miss it
    c = net.Connector(tls_server.url, env=env)
    assert c.request("GET", "/echo", {}, timeout=5).status == 200
    assert c._trust is not None and c._trust.capath is None  # the bundle itself, from then on
    assert len(tls_server.requests) == 1


def test_an_https_proxy_verifies_through_the_copy_too(ca: TestCA, tmp_path: Path, cache: Path) -> None:
    from tests.support.netfixtures import Proxy

    bundle = big_bundle(tmp_path / "bundle.pem", Path(ca.pem).read_text())
    env = {"SSL_CERT_FILE": str(bundle), "PUBLISH_CACHE_DIR": str(cache)}
    with Server() as srv, Proxy(tls=ca) as proxy:
        c = net.Connector(srv.url, proxy=proxy.url, env=env)
        assert c.request("GET", "/echo", {}, timeout=5).status == 200
        assert c._proxy_trust is not None and c._proxy_trust.capath == str(cache / copy_name(bundle))


def test_a_read_only_cache_costs_a_failed_mkdir_not_a_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(os.geteuid() == 0 and shutil.which("mount") is not None, "root and mount, for a read-only tmpfs")
    bundle = big_bundle(tmp_path / "bundle.pem")
    cache = tmp_path / "ro"
    cache.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,mode=0700", "tmpfs", str(cache)], check=True, timeout=30
    )
    try:
        parsed: list[str] = []
        monkeypatch.setattr(trustcache, "_files", lambda b, s: parsed.append(b))
        assert lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None
        assert parsed == []
    finally:
        subprocess.run(["umount", str(cache)], check=True, timeout=30)


def test_https_with_ssl_cert_dir_verifies_through_a_copy_too(
    ca: TestCA, tls_server: Server, tmp_path: Path, cache: Path
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    big_bundle(certs / "fillers.pem")
    (certs / "site-ca.crt").write_text(Path(ca.pem).read_text())
    env = {"SSL_CERT_DIR": str(certs), "PUBLISH_CACHE_DIR": str(cache)}
    c = net.Connector(tls_server.url, env=env)
    assert c.request("GET", "/echo", {}, timeout=5).status == 200
    assert c._trust is not None and c._trust.where == f"SSL_CERT_DIR={certs}"
    assert c._trust.capath is not None and Path(c._trust.capath).parent == cache
    # a CA that is not in the directory stays untrusted through the copy and through the text itself
    with (
        Server(tls=TestCA(tmp_path)) as other,
        pytest.raises(net.TLSFailure, match="certificate not trusted"),
    ):
        net.Connector(other.url, env=env).request("GET", "/echo", {}, timeout=5)


def test_a_bundle_over_the_limit_is_left_to_openssl_unread(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = pem(self_signed(NAMES["utf-8"]))
    bundle = tmp_path / "huge.pem"
    bundle.write_text(one * (trustcache.LARGEST // len(one) + 1))
    assert bundle.stat().st_size > trustcache.LARGEST
    parsed: list[bytes] = []
    monkeypatch.setattr(trustcache, "_files", lambda data: parsed.append(data))
    assert lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)}).capath is None
    assert parsed == [] and (not cache.exists() or list(cache.iterdir()) == [])


def test_a_fill_left_by_a_killed_start_is_neither_used_nor_in_the_way(tmp_path: Path, cache: Path) -> None:
    # A start killed while filling its private directory leaves it (clean-unpacked removes such
    # directories); one of this very process id, from a start before a reboot, must not stop the next.
    bundle = big_bundle(tmp_path / "bundle.pem")
    cache.mkdir(parents=True, mode=0o700)
    leftover = cache / f".tmp-{os.getpid()}-0"
    leftover.mkdir(mode=0o700)
    (leftover / "deadbeef.0").write_text("half a cert")
    got = lazy(bundle, {"PUBLISH_CACHE_DIR": str(cache)})
    assert got.capath == str(cache / copy_name(bundle))
    assert len(list(Path(got.capath).iterdir())) == len(caname.pem_certificates(bundle.read_text()))
    assert sorted(p.name for p in cache.iterdir()) == sorted([leftover.name, copy_name(bundle)])
    assert (leftover / "deadbeef.0").read_text() == "half a cert"
