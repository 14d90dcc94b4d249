"""``vault:`` sources: log in to Vault or OpenBao, read a KV secret, revoke the token (docs/vault.md).

The client is configured from the location alone.  No ``VAULT_*`` variable is used, and no token is sent
that this module did not get from its own login; but a malformed value in one of the variables the
reference client parses as it is built refuses the source, as that client would.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from publish.creds.fields import FIELDS, NotAnswering, credentials_from_fields
from publish.creds.location import Location, parse_location
from publish.creds.vaultenv import check_vault_env
from publish.rules import redact as _redact
from publish.rules.credentials import Credentials
from publish.rules.errors import CredentialsError
from publish.rules.files.fileio import read_at_most

if TYPE_CHECKING:
    from publish.http.net import Connector, Response

MAX_FILE = 64 * 1024  # a service-account token, role_id or secret_id is far smaller
MAX_BODY = 1024 * 1024
DEFAULT_TIMEOUT = 60.0  # when the caller gives no deadline: nothing waits forever
REVOKE_TIMEOUT = 5.0  # revoking is best effort: never let it hold the run up for long


# ----------------------------------------------------------------------------------------------- the source


class VaultSource:
    """A ``vault:`` source: its location, parsed when the list is."""

    def __init__(self, location: Location, text: str) -> None:
        self.location = location
        self.text = text

    @classmethod
    def parse(cls, location: str) -> VaultSource:
        """Parse what follows ``vault:``; CredentialsError naming the source when it is malformed."""
        # Before the location is echoed: an "&" inside proxy='s password must not show the rest of it.
        _redact.register_userinfo(location.partition("?")[2].split("&"), "&", values=True)
        text = _redact.shown(_redact.echo("vault:" + location))
        try:
            return cls(parse_location(location), text)
        except ValueError as e:
            # A query key may be a piece of a proxy= password that an "&" in it cut off (register_userinfo).
            raise CredentialsError(_redact.cut_pieces(str(e)), text) from None

    def fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        """Log in, read the secret, revoke the token.  Vault's own words in a message are scrubbed where they
        come in (``_denied``, a field's name); the rest of a message names things exactly."""
        return self._fetch(env, timeout)

    def _refuse(self, why: str) -> CredentialsError:
        return CredentialsError(why, self.text)

    def _fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        loc = self.location
        deadline = time.monotonic() + (DEFAULT_TIMEOUT if timeout is None else timeout)
        try:
            check_vault_env(env)
        except ValueError as e:
            raise self._refuse(str(e)) from None
        if loc.ca:
            try:
                st = os.stat(loc.ca)
            except OSError as e:
                raise self._refuse(f"ca={loc.ca}: {(e.strerror or str(e)).lower()}") from None
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse(f"ca={loc.ca}: not a regular file")
        body = self._login_body()

        from publish.http import net

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if loc.namespace:
            headers["X-Vault-Namespace"] = loc.namespace
        try:
            conn = net.Connector(loc.base_url, proxy=loc.proxy or None, cafile=loc.ca or None, env=env)
        except (net.NetError, ValueError) as e:
            raise self._refuse(str(e)) from None
        try:
            login_path = (
                "/v1/auth/" + "/".join(quote(p, safe="") for p in loc.authmount.split("/")) + "/login"
            )
            resp = self._send(conn, "POST", login_path, headers, json.dumps(body).encode(), left())
            if resp.status == 503:
                raise NotAnswering(f"{_server(loc)} is sealed or a standby (HTTP 503)")
            if resp.status != 200:
                raise self._refuse(f"login to auth/{loc.authmount} {_denied(resp)}")
            try:
                token = json.loads(resp.body)["auth"]["client_token"]
                if not isinstance(token, str) or not token:
                    raise TypeError
            except (ValueError, KeyError, TypeError, RecursionError):
                raise self._refuse(f"login to auth/{loc.authmount}: the answer holds no token") from None
            _redact.register(token)
            try:
                return self._read(conn, dict(headers, **{"X-Vault-Token": token}), left())
            finally:
                self._revoke(conn, dict(headers, **{"X-Vault-Token": token}), left())
        finally:
            conn.close()

    def _login_body(self) -> dict[str, str]:
        loc = self.location
        if loc.auth == "kubernetes":
            jwt = self._read_file(loc.jwt, "no service-account token")
            return {"role": loc.role, "jwt": jwt}
        try:
            st = os.stat(loc.approle)
        except (FileNotFoundError, NotADirectoryError):
            raise NotAnswering(f"no AppRole directory {loc.approle}") from None
        except OSError as e:
            raise self._refuse(f"approle={loc.approle}: {(e.strerror or str(e)).lower()}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise self._refuse(f"approle={loc.approle} is not a directory")
        role_id = self._read_file(os.path.join(loc.approle, "role_id"), "")
        secret_id = self._read_file(os.path.join(loc.approle, "secret_id"), "")
        return {"role_id": role_id, "secret_id": secret_id}

    def _read_file(self, path: str, absent: str) -> str:
        """A file's text less one trailing newline; NotAnswering(absent) when it does not exist and
        ``absent`` is given, else refused."""
        try:
            # Links followed (a projected service-account token is one); opened without blocking and
            # checked before any read, so a FIFO or a device there is refused, never waited on.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise self._refuse(f"{path} is not a regular file")
                data = read_at_most(fd, MAX_FILE)
            finally:
                os.close(fd)
        except (FileNotFoundError, NotADirectoryError):
            if absent:
                raise NotAnswering(f"{absent} {path}") from None
            raise self._refuse(f"{path}: no such file") from None
        except OSError as e:
            raise self._refuse(f"{path}: {(e.strerror or str(e)).lower()}") from None
        if data is None:
            raise self._refuse(f"{path} is larger than {MAX_FILE} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise self._refuse(f"{path} is not UTF-8 text") from None
        text = text[:-1] if text.endswith("\n") else text
        if text:
            _redact.register(text)
        if text == "" or any(c.isspace() for c in text) or not text.isprintable():
            raise self._refuse(f"{path} is empty or holds whitespace")
        return text

    def _send(
        self,
        conn: Connector,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        left: float | None,
    ) -> Response:
        from publish.http import net

        try:
            return conn.request(method, target, headers, body, timeout=left, limit=MAX_BODY)
        except net.Unreachable as e:
            raise NotAnswering(str(e)) from None  # names the server or the proxy that does not answer
        except net.NetError as e:
            raise self._refuse(str(e)) from None

    def _read(self, conn: Connector, headers: Mapping[str, str], left: float | None) -> Credentials:
        loc = self.location
        mount = "/".join(quote(p, safe="") for p in loc.mount.split("/"))
        path = "/".join(quote(p, safe="") for p in loc.path)
        target = f"/v1/{mount}/data/{path}" if loc.kv == 2 else f"/v1/{mount}/{path}"
        shown = f"{loc.mount}/{'/'.join(loc.path)}"
        resp = self._send(conn, "GET", target, headers, b"", left)
        if resp.status == 503:
            raise NotAnswering(f"{_server(loc)} is sealed or a standby (HTTP 503)")
        if resp.status == 404:
            raise self._refuse(f"no secret at {shown} (kv {loc.kv}, HTTP 404)")
        if resp.status != 200:
            raise self._refuse(f"reading {shown} {_denied(resp)}")
        try:
            doc = json.loads(resp.body)
            data = doc["data"]["data"] if loc.kv == 2 else doc["data"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise self._refuse(
                f"reading {shown}: the answer holds no data (is it kv {3 - loc.kv}?)"
            ) from None
        if not isinstance(data, dict):
            raise self._refuse(f"reading {shown}: the answer holds no data")
        fields: dict[str, str] = {}
        for name, value in data.items():
            if name not in FIELDS:
                field = _redact.quoted(_redact.foreign(name))  # Vault's text
                raise self._refuse(f"{shown}: unknown field {field}; the fields are {', '.join(FIELDS)}")
            if not isinstance(value, str):
                raise self._refuse(f"{shown}: field {name} is not a string")
            fields[name] = value
        return credentials_from_fields(self.text, fields)

    def _revoke(self, conn: Connector, headers: Mapping[str, str], left: float | None) -> None:
        from publish.http import net

        timeout = REVOKE_TIMEOUT if left is None else min(REVOKE_TIMEOUT, max(left, 0.5))
        # Best effort: the token expires on its own, and the credentials are already read.
        with contextlib.suppress(net.NetError):
            conn.request("POST", "/v1/auth/token/revoke-self", headers, b"", timeout=timeout, limit=MAX_BODY)


def _server(loc: Location) -> str:
    return loc.base_url + (f" via proxy {loc.proxy}" if loc.proxy else "")


def _denied(resp: Any) -> str:
    """``denied (HTTP 403): <Vault's errors>``: the words for a refused request.  Vault's errors are outside
    text: scrubbed of every registered value (the role_id, secret_id, JWT, token) ignoring case."""
    what = "denied" if 400 <= resp.status < 500 else "failed"
    detail = ""
    try:
        errors = json.loads(resp.body).get("errors")
        if isinstance(errors, list) and errors:
            # Scrubbed before they are joined and cut, so no cut leaves a piece of a secret behind.
            detail = ": " + _redact.shown(
                _redact.foreign("; ".join(_redact.foreign(str(e)) for e in errors))[:300]
            )
    except (ValueError, AttributeError, RecursionError):
        pass
    return f"{what} (HTTP {resp.status}){detail}"
