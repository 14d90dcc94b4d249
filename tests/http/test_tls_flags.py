"""publish.http.tls verifies as each Python's ssl.create_default_context() does: from 3.13 on that adds
VERIFY_X509_STRICT and VERIFY_X509_PARTIAL_CHAIN, and before, publish's context lacked them (a leaf without an
Authority Key Identifier under a CA without keyUsage, which 3.13 refuses, was accepted).  Each version runs
in a subprocess of its own pyenv interpreter, which needs nothing but the standard library: the chains are
made here."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO
from tests.support.pythons import SUPPORTED, python
from tests.support.tls_chains import chains

# In the interpreter under test: each chain served on loopback, verified by publish.http.tls's context and by
# ssl.create_default_context(), both trusting the same CA.
_SCRIPT = r"""
import json, os, socket, ssl, sys, tempfile, threading
sys.path.insert(0, sys.argv[1])
from publish.http import tls

def serve(chain, key):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "c.pem"), "w") as f:
        f.write(chain)
    with open(os.path.join(d, "k.pem"), "w") as f:
        f.write(key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(os.path.join(d, "c.pem"), os.path.join(d, "k.pem"))
    listener = socket.create_server(("127.0.0.1", 0))
    def run():
        with listener:
            for _ in range(2):
                conn, _ = listener.accept()
                conn.settimeout(10)
                try:
                    with server.wrap_socket(conn, server_side=True):
                        pass
                except (OSError, ssl.SSLError):
                    pass
    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1]

def ours(port, trust):
    ctx = tls.client_context()
    ctx.load_verify_locations(cadata=trust)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        tls.Conn(ctx, sock, "127.0.0.1").do_handshake()
        return "accepted"
    except tls.CertVerificationError as e:
        return "refused: " + str(e.verify_message)

def default(port, trust):
    ctx = ssl.create_default_context(cadata=trust)
    try:
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1"):
            return "accepted"
    except ssl.SSLCertVerificationError as e:
        return "refused: " + str(e.verify_message)

cases = json.load(sys.stdin)
out = {"flags": [tls.client_context().verify_flags, ssl.create_default_context().verify_flags]}
for name, case in cases.items():
    port = serve(case["chain"], case["key"])
    out[name] = [ours(port, case["trust"]), default(port, case["trust"])]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cases() -> str:
    return json.dumps(chains())


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_client_context_verifies_as_create_default_context(version: str, cases: str) -> None:
    out = subprocess.run(
        [python(version), "-I", "-c", _SCRIPT, str(REPO)],
        input=cases, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout)
    ours, default = got.pop("flags")
    assert ours == default, f"verify flags {ours:#x}, create_default_context's {default:#x}"
    for name, (by_ours, by_default) in got.items():
        assert by_ours == by_default, name
    assert got["good"][0] == "accepted"
    # the chains do tell the flags apart: refused (or accepted) here as that version's default does
    new = tuple(map(int, version.split("."))) >= (3, 13)
    assert got["strict"][0].startswith("refused" if new else "accepted"), got
    assert got["partial"][0].startswith("accepted" if new else "refused"), got
