"""The ``VAULT_*`` variables the reference Go client parses as it is built: a malformed one refuses a
``vault:`` source, as that client would, though none of them is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from publish.gocompat import parse_duration_ns, parse_go_bool

# strconv.ParseInt and ParseFloat accept a sign, which gocompat.parse_decimal (flag values) refuses.
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_GO_FLOAT = re.compile(
    r"[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)\Z",  # no nested repeats
    re.IGNORECASE,
)


def _is_go_bool(text: str) -> bool:
    try:
        parse_go_bool(text)
    except ValueError:
        return False
    return True


def _is_go_duration(text: str) -> bool:
    try:
        parse_duration_ns(text)
    except ValueError:
        return False
    return True


def _go_url_error(url: str) -> str:
    """Why Go's url.Parse refuses ``url``, or '' when it accepts it (the checks that matter here)."""
    # Go's url.Parse, deliberately looser than publish.urls (which checks the URLs publish connects to):
    # these variables are never used, only refused when the reference client would refuse them.
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
        if get(name) and not _is_go_bool(get(name)):
            raise ValueError(f"{name} is not a boolean (1 0 t f true false ...)")
    if get("VAULT_MAX_RETRIES") and not _GO_INT.match(get("VAULT_MAX_RETRIES")):
        raise ValueError("VAULT_MAX_RETRIES is not an integer")
    timeout = get("VAULT_CLIENT_TIMEOUT").strip()
    if timeout and not (_GO_INT.match(timeout) or _is_go_duration(timeout)):
        raise ValueError("VAULT_CLIENT_TIMEOUT is not an integer or a duration")
    rate = get("VAULT_RATE_LIMIT")
    if rate:
        head, colon, burst = rate.partition(":")
        if not _GO_FLOAT.match(head) or (colon and not _GO_INT.match(burst)):
            raise ValueError("VAULT_RATE_LIMIT is not a rate[:burst]")
