"""What follows ``vault:``: a Vault or OpenBao URL whose path is the secret and whose query says how to log
in (docs/vault.md).  A pure rule: parsing only, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from publish.rules.redact import quoted, register_userinfo
from publish.rules.urls import parse_proxy, split_host_port

DEFAULT_JWT = "/var/run/secrets/kubernetes.io/serviceaccount/token"
KEYS = ("auth", "role", "approle", "jwt", "authmount", "mount", "kv", "namespace", "ca", "proxy")
_ONLY_FOR = {"role": "kubernetes", "jwt": "kubernetes", "approle": "approle"}
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


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
    if _BAD_ESCAPE.search(s):
        raise ValueError(f"a bad % escape in {what}")
    if plus:
        s = s.replace("+", " ")
    try:
        return unquote(s, errors="strict")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 once unescaped") from None


def _check_elements(parts: Iterable[str], what: str) -> None:
    """Each element of a path names one thing: not empty, ``.`` or ``..``, no ``/`` (once decoded) and
    no control character; ValueError naming ``what`` otherwise."""
    # Not layout.clean_relative nor roots' prefix rule: Vault paths are checked once %-decoded and refuse
    # control characters too, and each rule keeps the message its users have always seen.
    for p in parts:
        if p in ("", ".", "..") or "/" in p:
            raise ValueError(f"{what} has an empty, . or .. element")
        if not p.isprintable():
            raise ValueError(f"{what} holds a control character")


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
    _check_elements(path, "the secret path")
    if not q or not query:
        raise ValueError("the location has no query; auth= is required")
    if ";" in query:
        raise ValueError("the query holds a ';'; separate keys with '&'")
    values: dict[str, str] = {}
    parts = query.split("&")
    register_userinfo(parts, "&", values=True)  # an "&" inside proxy='s password must not show the rest
    for part in parts:
        raw_key, eq, raw_value = part.partition("=")
        key = _unescape(raw_key, "a query key", plus=True)
        if key == "":
            raise ValueError("the query has an empty key")
        if key not in KEYS:
            raise ValueError(f"unknown key {quoted(key)} in the query; the keys are {', '.join(KEYS)}")
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
        raise ValueError(f"auth={quoted(auth)} is not kubernetes or approle")
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
            _check_elements(values[key].split("/"), f"{key}=")
    kv = values.get("kv", "2")
    if kv not in ("1", "2"):
        raise ValueError("kv= must be 1 or 2")
    proxy = ""
    if "proxy" in values:
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
