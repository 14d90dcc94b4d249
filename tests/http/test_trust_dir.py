"""SSL_CERT_DIR as the system trust, against a hostile directory: what its files may do to a start.

Every file of the directory is read, as Go reads it, links followed.  A FIFO there must not hang the start,
a link to a device must not be read without end, and an oversized file must not be read into memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from publish.http import net, trust
from publish.rules.files import fileio
from tests.support.netfixtures import Server, TestCA

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
def tls_server(ca: TestCA) -> Iterator[Server]:
    with Server(tls=ca) as srv:
        yield srv


@pytest.fixture
def certs(tmp_path: Path, ca: TestCA, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory whose last file (by name) is the test CA; the machine's bundles out of the way."""
    monkeypatch.setattr(trust, "BUNDLE_PATHS", (str(tmp_path / "none.pem"),))
    directory = tmp_path / "certs"
    directory.mkdir()
    ca.ca.cert_pem.write_to_path(str(directory / "zz-test-ca.crt"))
    return directory


def find_in_thread(env: dict[str, str], release: Path | None = None) -> trust.Trust:
    """find_trust(env) on a thread that must end within 20 s; a FIFO at ``release`` is opened for writing
    if it does not, so the thread can end and the test fail rather than hang."""
    found: list[trust.Trust] = []
    thread = threading.Thread(target=lambda: found.append(trust.find_trust(env)), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        if release is not None:
            os.close(os.open(release, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail("find_trust blocked on a file of SSL_CERT_DIR")
    return found[0]


def test_a_fifo_in_the_directory_is_not_opened_for_a_read_that_waits(
    certs: Path, ca: TestCA, tls_server: Server
) -> None:
    fifo = certs / "aa-fifo"
    os.mkfifo(fifo)
    env = {"SSL_CERT_DIR": str(certs), "PUBLISH_CACHE_DIR": "off"}
    found = find_in_thread(env, release=fifo)
    assert found.where == f"SSL_CERT_DIR={certs}"
    assert found.cadata is not None and Path(ca.pem).read_text().strip() in found.cadata
    c = net.Connector(tls_server.url, env=env)  # the whole start: trust found, chain verified
    assert c.request("GET", "/echo", {}, timeout=5).status == 200


def test_a_link_to_a_device_is_not_read(certs: Path, ca: TestCA) -> None:
    """/dev/zero never ends: read whole, it would take all memory.  Checked in a child process held to
    1 GiB of address space, so a read without end fails it instead of the machine."""
    (certs / "aa-zero").symlink_to("/dev/zero")
    (certs / "ab-null").symlink_to("/dev/null")
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from publish.http import trust\n"
        "t = trust.find_trust({'SSL_CERT_DIR': sys.argv[1]}, [])\n"
        "print(t.where)\n"
        "print(len(t.cadata or ''))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(certs)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    where, size = out.stdout.split("\n")[:2]
    assert where == f"SSL_CERT_DIR={certs}"
    assert int(size) == len(Path(ca.pem).read_text())  # the CA alone: nothing of the devices


def test_a_file_over_the_limit_is_not_read(certs: Path, tmp_path: Path) -> None:
    other = TestCA(tmp_path)
    pem = Path(other.pem).read_text()
    big = certs / "aa-big.pem"
    with big.open("w") as f:  # a certificate, then padding to one byte over the limit
        f.write(pem)
        f.write("#" * (trust.FILE_LIMIT + 1 - len(pem)))
    assert big.stat().st_size == trust.FILE_LIMIT + 1
    found = trust.find_trust({"SSL_CERT_DIR": str(certs)}, [])
    assert found.cadata is not None and pem.strip() not in found.cadata
    assert "-----BEGIN CERTIFICATE-----" in found.cadata  # the test CA's, read beside it
    with big.open("r+") as f:  # at the limit exactly, it is read
        f.truncate(trust.FILE_LIMIT)
    found = trust.find_trust({"SSL_CERT_DIR": str(certs)}, [])
    assert found.cadata is not None and pem.strip() in found.cadata


def test_what_is_read_from_one_directory_has_a_limit(
    certs: Path, ca: TestCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Path(ca.pem).read_bytes()
    (certs / "aa-first.pem").write_bytes(first)
    monkeypatch.setattr(trust, "DIR_LIMIT", len(first) + 10)
    found = trust.find_trust({"SSL_CERT_DIR": str(certs)}, [])
    assert found.cadata == first.decode()  # zz-test-ca.crt would go past the limit: not read


def test_links_are_followed_as_in_debians_directory(tmp_path: Path, ca: TestCA, tls_server: Server) -> None:
    shared = tmp_path / "share"
    shared.mkdir()
    ca.ca.cert_pem.write_to_path(str(shared / "test-ca.crt"))
    certs = tmp_path / "etc-certs"
    certs.mkdir()
    (certs / "test-ca.pem").symlink_to(shared / "test-ca.crt")
    (certs / "subdir").mkdir()  # a directory there is passed over
    env = {"SSL_CERT_DIR": str(certs), "PUBLISH_CACHE_DIR": "off"}
    assert net.Connector(tls_server.url, env=env).request("GET", "/echo", {}, timeout=5).status == 200


def test_read_regular_gives_only_a_regular_file_within_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert fileio.read_regular(str(path), 100) == b"x" * 100
    assert fileio.read_regular(str(path), 99) is None
    assert fileio.read_regular(str(tmp_path / "missing"), 100) is None
    assert fileio.read_regular(str(tmp_path), 100) is None  # a directory
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert fileio.read_regular(str(fifo), 100) is None  # returns at once: opened without blocking


def test_newlines_come_as_text_mode_gives_them(
    tmp_path: Path, ca: TestCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CA file with CRLF (or CR) line ends gives the same text as one with LF, as when it was read in
    text mode: the cache's copy of the gathered text depends on it."""
    monkeypatch.setattr(trust, "BUNDLE_PATHS", ())
    pem = Path(ca.pem).read_text()
    lf, crlf = tmp_path / "lf", tmp_path / "crlf"
    lf.mkdir()
    crlf.mkdir()
    (lf / "ca.pem").write_bytes(pem.encode())
    (crlf / "ca.pem").write_bytes(pem.replace("\n", "\r\n").encode())
    assert (
        trust.find_trust({"SSL_CERT_DIR": str(crlf)}).cadata
        == trust.find_trust({"SSL_CERT_DIR": str(lf)}).cadata
    )
