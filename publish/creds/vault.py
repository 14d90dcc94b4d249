"""``vault:`` sources: log in to Vault or OpenBao, read a KV secret, revoke the token (addendum 5).

The client is configured from the location alone.  No ``VAULT_*`` variable is used, and no token is sent
that this module did not get from its own login; but a malformed value in one of the variables the
reference client parses as it is built refuses the source, as that client would.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from publish import redact as _redact
from publish.creds.model import Credentials
from publish.creds.sources import FIELDS, NotAnswering, credentials_from_fields, split_host_port
from publish.errors import CredentialsError

if TYPE_CHECKING:
    from publish.net import Connector, Response

DEFAULT_JWT = "/var/run/secrets/kubernetes.io/serviceaccount/token"
KEYS = ("auth", "role", "approle", "jwt", "authmount", "mount", "kv", "namespace", "ca", "proxy")
_ONLY_FOR = {"role": "kubernetes", "jwt": "kubernetes", "approle": "approle"}
MAX_FILE = 64 * 1024  # a service-account token, role_id or secret_id is far smaller
MAX_BODY = 1024 * 1024
DEFAULT_TIMEOUT = 60.0  # when the caller gives no deadline: nothing waits forever
REVOKE_TIMEOUT = 5.0  # revoking is best effort: never let it hold the run up for long


def redact(text: str) -> str:
    """``text`` with the password of any URL's userinfo replaced (``publish.redact.url``)."""
    return _redact.url(text)


@dataclass(frozen=True)
class Location:
    """A parsed vault location."""

    base_url: str  # scheme://host[:port]
    path: tuple[str, ...]  # the secret's path inside the mount, decoded elements
    auth: str
    role: str = ""
    approle: str = ""
    jwt: str = DEFAULT_JWT
    authmount: str = ""
    mount: str = "secret"
    kv: int = 2
    namespace: str = ""
    ca: str = ""
    proxy: str = ""


def _unescape(s: str, what: str, plus: bool) -> str:
    """Strict percent-decoding (``+`` is a space in a query); ValueError on a bad escape."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", s):
        raise ValueError(f"a bad % escape in {what}")
    if plus:
        s = s.replace("+", " ")
    try:
        return unquote(s, errors="strict")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 once unescaped") from None


def _elements(value: str, what: str) -> tuple[str, ...]:
    parts = tuple(value.split("/"))
    for p in parts:
        if p in ("", ".", ".."):
            raise ValueError(f"{what} has an empty, . or .. element")
        if not p.isprintable():
            raise ValueError(f"{what} holds a control character")
    return parts


def parse_location(location: str) -> Location:
    """Parse what follows ``vault:``; ValueError saying what is wrong (never echoing a password)."""
    scheme, sep, rest = location.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("the location must start with http:// or https://")
    if "#" in rest:
        raise ValueError("the location has a fragment")
    rest, q, query = rest.partition("?")
    authority, slash, raw_path = rest.partition("/")
    if "@" in authority:
        raise ValueError(
            "the location has userinfo; credentials for Vault come from the login, never the URL"
        )
    try:
        host, port = split_host_port(authority)
    except ValueError as e:
        raise ValueError(f"the location {e}") from None
    if not slash or not raw_path:
        raise ValueError("the location has no secret path after the host")
    path = tuple(_unescape(p, "the secret path", plus=False) for p in raw_path.split("/"))
    for p in path:
        if p in ("", ".", "..") or "/" in p:
            raise ValueError("the secret path has an empty, . or .. element")
        if not p.isprintable():
            raise ValueError("the secret path holds a control character")
    if not q or not query:
        raise ValueError("the location has no query; auth= is required")
    if ";" in query:
        raise ValueError("the query holds a ';'; separate keys with '&'")
    values: dict[str, str] = {}
    for part in query.split("&"):
        raw_key, eq, raw_value = part.partition("=")
        key = _unescape(raw_key, "a query key", plus=True)
        if key == "":
            raise ValueError("the query has an empty key")
        if key not in KEYS:
            raise ValueError(
                f"unknown key {_redact.quoted(key)} in the query; the keys are {', '.join(KEYS)}"
            )
        value = _unescape(raw_value, f"the value of {key}", plus=True)
        if not eq or value == "":
            raise ValueError(f"the key {key} has no value")
        if key in values:
            raise ValueError(f"the key {key} is given twice")
        if not value.isprintable():
            raise ValueError(f"the value of {key} holds a control character")
        values[key] = value
    auth = values.get("auth")
    if auth is None:
        raise ValueError("the query has no auth=; want auth=kubernetes or auth=approle")
    if auth not in ("kubernetes", "approle"):
        raise ValueError(f"auth={_redact.quoted(auth)} is not kubernetes or approle")
    for key, method in _ONLY_FOR.items():
        if key in values and method != auth:
            raise ValueError(f"the key {key} is not for auth={auth}")
    if auth == "kubernetes" and "role" not in values:
        raise ValueError("auth=kubernetes needs role=")
    if auth == "approle" and "approle" not in values:
        raise ValueError("auth=approle needs approle=, the directory holding role_id and secret_id")
    for key in ("approle", "jwt", "ca"):
        if key in values and not values[key].startswith("/"):
            raise ValueError(f"{key}= must be an absolute path")
    for key in ("authmount", "mount", "namespace"):
        if key in values:
            _elements(values[key], f"{key}=")
    kv = values.get("kv", "2")
    if kv not in ("1", "2"):
        raise ValueError("kv= must be 1 or 2")
    proxy = ""
    if "proxy" in values:
        from publish.urls import parse_proxy

        try:
            proxy = parse_proxy(values["proxy"])
        except ValueError as e:
            raise ValueError(f"proxy=: {e}") from None
    hostport = host + (f":{port}" if port else "")
    return Location(
        base_url=f"{scheme.lower()}://{hostport}",
        path=path,
        auth=auth,
        role=values.get("role", ""),
        approle=values.get("approle", ""),
        jwt=values.get("jwt", DEFAULT_JWT),
        authmount=values.get("authmount", auth),
        mount=values.get("mount", "secret"),
        kv=int(kv),
        namespace=values.get("namespace", ""),
        ca=values.get("ca", ""),
        proxy=proxy,
    )


# ------------------------------------------------------------------ what the reference client parses

_GO_BOOL = ("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False")
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_GO_DURATION = re.compile(r"[+-]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)\Z")
_GO_FLOAT = re.compile(
    r"[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)\Z",
    re.IGNORECASE,
)


def _go_url_error(url: str) -> str:
    """Why Go's url.Parse refuses ``url``, or '' when it accepts it (the checks that matter here)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "holds a control character"
    if re.search(r"%(?![0-9A-Fa-f]{2})", url):
        return "has a bad % escape"
    rest = url.split("#", 1)[0]
    m = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", rest)
    if rest.startswith(":"):
        return "has no scheme"
    if m:
        scheme_rest = rest[m.end() :]
    else:
        scheme_rest = rest
        if ":" in rest.split("?", 1)[0].split("/", 1)[0]:
            return "has a colon in its first path element"
    scheme_rest = scheme_rest.split("?", 1)[0]
    if m and not scheme_rest.startswith("/"):
        return ""  # opaque: scheme:opaque
    if scheme_rest.startswith("//"):
        authority = scheme_rest[2:].split("/", 1)[0]
        userinfo, at, host = authority.rpartition("@")
        if at and not re.fullmatch(r"[A-Za-z0-9\-._:~!$&'()*+,;=%@]*", userinfo):
            return "has invalid userinfo"
        if host.startswith("["):
            end = host.find("]")
            if end < 0:
                return "has a missing ] in its host"
            port = host[end + 1 :]
            if port and not re.fullmatch(r":[0-9]*", port):
                return "has an invalid port"
        else:
            name, colon, port = host.rpartition(":")
            if colon and not port.isdigit() and port != "":
                return "has an invalid port"
            if re.search(r"[^A-Za-z0-9\-_.~!$&'()*+,;=:\[\]<>\"%\x80-\U0010ffff]", host):
                return "has an invalid character in its host"
    return ""


def check_vault_env(env: Mapping[str, str]) -> None:
    """ValueError naming the first VAULT_* variable the reference client would refuse (values not shown)."""

    def get(name: str) -> str:
        return env.get(name, "")

    for name in ("VAULT_ADDR", "VAULT_AGENT_ADDR", "VAULT_PROXY_ADDR", "VAULT_HTTP_PROXY"):
        if get(name) and _go_url_error(get(name)):
            raise ValueError(f"{name} is not a URL: it {_go_url_error(get(name))}")
    for name in ("VAULT_CACERT", "VAULT_CLIENT_CERT", "VAULT_CLIENT_KEY"):
        if get(name) and not os.path.isfile(get(name)):
            raise ValueError(f"{name} names no file")
    if get("VAULT_CAPATH") and not os.path.isdir(get("VAULT_CAPATH")):
        raise ValueError("VAULT_CAPATH names no directory")
    for name in ("VAULT_SKIP_VERIFY", "VAULT_SRV_LOOKUP", "VAULT_DISABLE_REDIRECTS"):
        if get(name) and get(name) not in _GO_BOOL:
            raise ValueError(f"{name} is not a boolean (1 0 t f true false ...)")
    if get("VAULT_MAX_RETRIES") and not _GO_INT.match(get("VAULT_MAX_RETRIES")):
        raise ValueError("VAULT_MAX_RETRIES is not an integer")
    timeout = get("VAULT_CLIENT_TIMEOUT").strip()
    if timeout and not (_GO_INT.match(timeout) or _GO_DURATION.match(timeout)):
        raise ValueError("VAULT_CLIENT_TIMEOUT is not an integer or a duration")
    rate = get("VAULT_RATE_LIMIT")
    if rate:
        head, colon, burst = rate.partition(":")
        if not _GO_FLOAT.match(head) or (colon and not _GO_INT.match(burst)):
            raise ValueError("VAULT_RATE_LIMIT is not a rate[:burst]")


# ----------------------------------------------------------------------------------------------- the source


class VaultSource:
    """A ``vault:`` source: its location, parsed when the list is."""

    def __init__(self, location: Location, text: str) -> None:
        self.location = location
        self.text = text

    @classmethod
    def parse(cls, location: str) -> VaultSource:
        """Parse what follows ``vault:``; CredentialsError naming the source when it is malformed."""
        text = _redact.shown(redact("vault:" + location))
        try:
            return cls(parse_location(location), text)
        except ValueError as e:
            raise CredentialsError(f"{text}: {e}") from None

    def fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        """Log in, read the secret, revoke the token."""
        secrets: list[str] = []
        try:
            return self._fetch(env, timeout, secrets)
        except CredentialsError as e:
            raise CredentialsError(_redact.scrub(str(e)[len("credentials: ") :])) from None
        except NotAnswering as e:
            raise NotAnswering(_redact.scrub(str(e))) from None

    def _refuse(self, why: str) -> CredentialsError:
        return CredentialsError(f"{self.text}: {why}")

    def _fetch(self, env: Mapping[str, str], timeout: float | None, secrets: list[str]) -> Credentials:
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
        body = self._login_body(secrets)

        from publish import net

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
            except (ValueError, KeyError, TypeError):
                raise self._refuse(f"login to auth/{loc.authmount}: the answer holds no token") from None
            secrets.append(token)
            _redact.register(token)
            try:
                return self._read(conn, dict(headers, **{"X-Vault-Token": token}), left())
            finally:
                self._revoke(conn, dict(headers, **{"X-Vault-Token": token}), left())
        finally:
            conn.close()

    def _login_body(self, secrets: list[str]) -> dict[str, str]:
        loc = self.location
        if loc.auth == "kubernetes":
            jwt = self._read_file(loc.jwt, "no service-account token", secrets)
            return {"role": loc.role, "jwt": jwt}
        try:
            st = os.stat(loc.approle)
        except (FileNotFoundError, NotADirectoryError):
            raise NotAnswering(f"no AppRole directory {loc.approle}") from None
        except OSError as e:
            raise self._refuse(f"approle={loc.approle}: {(e.strerror or str(e)).lower()}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise self._refuse(f"approle={loc.approle} is not a directory")
        role_id = self._read_file(os.path.join(loc.approle, "role_id"), "", secrets)
        secret_id = self._read_file(os.path.join(loc.approle, "secret_id"), "", secrets)
        return {"role_id": role_id, "secret_id": secret_id}

    def _read_file(self, path: str, absent: str, secrets: list[str]) -> str:
        """A file's text less one trailing newline; NotAnswering(absent) when it does not exist and
        ``absent`` is given, else refused."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE + 1)
        except (FileNotFoundError, NotADirectoryError):
            if absent:
                raise NotAnswering(f"{absent} {path}") from None
            raise self._refuse(f"{path}: no such file") from None
        except OSError as e:
            raise self._refuse(f"{path}: {(e.strerror or str(e)).lower()}") from None
        if len(data) > MAX_FILE:
            raise self._refuse(f"{path} is larger than {MAX_FILE} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise self._refuse(f"{path} is not UTF-8 text") from None
        text = text[:-1] if text.endswith("\n") else text
        if text:
            secrets.append(text)
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
        from publish import net

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
        except (ValueError, KeyError, TypeError):
            raise self._refuse(
                f"reading {shown}: the answer holds no data (is it kv {3 - loc.kv}?)"
            ) from None
        if not isinstance(data, dict):
            raise self._refuse(f"reading {shown}: the answer holds no data")
        fields: dict[str, str] = {}
        for name, value in data.items():
            if name not in FIELDS:
                raise self._refuse(
                    f"{shown}: unknown field {_redact.quoted(name)}; the fields are {', '.join(FIELDS)}"
                )
            if not isinstance(value, str):
                raise self._refuse(f"{shown}: field {name} is not a string")
            fields[name] = value
        return credentials_from_fields(self.text, fields)

    def _revoke(self, conn: Connector, headers: Mapping[str, str], left: float | None) -> None:
        from publish import net

        timeout = REVOKE_TIMEOUT if left is None else min(REVOKE_TIMEOUT, max(left, 0.5))
        # Best effort: the token expires on its own, and the credentials are already read.
        with contextlib.suppress(net.NetError):
            conn.request("POST", "/v1/auth/token/revoke-self", headers, b"", timeout=timeout, limit=MAX_BODY)


def _server(loc: Location) -> str:
    return loc.base_url + (f" via proxy {loc.proxy}" if loc.proxy else "")


def _denied(resp: Any) -> str:
    """``denied (HTTP 403): <Vault's errors>``: the words for a refused request."""
    what = "denied" if 400 <= resp.status < 500 else "failed"
    detail = ""
    try:
        errors = json.loads(resp.body).get("errors")
        if isinstance(errors, list) and errors:
            # Scrubbed before they are joined and cut, so no cut leaves a piece of a secret behind.
            detail = ": " + _redact.scrub("; ".join(_redact.scrub(str(e)) for e in errors))[:300]
    except (ValueError, AttributeError):
        pass
    return f"{what} (HTTP {resp.status}){detail}"
