"""The ``VAULT_*`` variables the reference Go client parses as it is built: a malformed one refuses a
``vault:`` source, as that client would, though none of them is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from publish.rules.go.gocompat import parse_duration_ns, parse_go_bool

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


# Go's net/url.Parse as Go 1.27 has it, with the defaults of a program whose go.mod says go 1.27, read in
# Go's source (net/url/url.go and net/netip/netip.go).  Older Go accepts more; four rules came late:
#   - a host holds a [ only at its start, and a host in brackets is an IPv6 address as netip.ParseAddr
#     reads it, an optional zone after %25 (Go 1.24.8 and 1.25.2 on; before, anything went in brackets);
#   - an http or https host holds at most one colon outside brackets (Go 1.26 on, GODEBUG urlstrictcolons;
#     Go 1.26 applied it to every scheme, Go 1.27 to http and https only);
#   - a group of an IPv6 address holds at most four hex digits, leading zeros counted (Go 1.19 read
#     00000001 as 1; Go 1.27 refuses it).
# Deliberately looser than publish.rules.urls (which checks the URLs publish connects to): these variables are
# never used, only refused when the reference client would refuse them.  Go works on bytes; a value from
# the environment is the str that os.environ decoded with surrogateescape, encoded back here.  Every pass
# below is a scan or a regular expression without nested repeats: linear in the length of the value.
_CTL = re.compile(rb"[\x00-\x1f\x7f]")
_SCHEME = re.compile(rb"[A-Za-z][A-Za-z0-9+.\-]*:")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
# In a host, an escape stands only for a byte of 0x80 and up, or is %25 (url.go, unescape, encodeHost).
_HOST_ASCII_ESCAPE = re.compile(rb"%(?!25)[0-7]")
# The ASCII a host or a zone holds as it is (shouldEscape, encodeHost); bytes from 0x80 up are let through.
_HOST_ASCII = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~!$&'()*+,;=:[]<>\""
_HOST_BAD_BYTE = re.compile(rb"[^" + re.escape(_HOST_ASCII) + rb"%\x80-\xff]")
# validUserinfo: ASCII only (Go ranges over runes: any other rune, or a byte that is not UTF-8, is refused).
_USERINFO_BAD_BYTE = re.compile(rb"[^A-Za-z0-9\-._:~!$&'()*+,;=%@]")
_PORT = re.compile(rb":[0-9]*")  # validOptionalPort, when not empty: ASCII digits only
_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _unescape(data: bytes) -> bytes:
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), data)


def _host_error(part: bytes) -> str:
    """Why url.go's unescape(part, encodeHost) fails, or ''."""
    if _BAD_ESCAPE.search(part):
        return "has a bad % escape in its host"
    if _HOST_ASCII_ESCAPE.search(part):
        return "has an escaped ASCII character in its host"
    if _HOST_BAD_BYTE.search(part):
        return "has an invalid character in its host"
    return ""


def _zone_error(part: bytes) -> str:
    """Why url.go's unescape(part, encodeZone) fails, or '': an escape stands for %, a space, or an ASCII
    byte a host holds as it is (so not for a byte of 0x80 and up, which the zone may hold raw)."""
    if _BAD_ESCAPE.search(part):
        return "has a bad % escape in its host"
    for m in _ESCAPE.finditer(part):
        byte = int(m.group(1), 16)
        if m.group() != b"%25" and byte != 0x20 and (byte >= 0x80 or bytes([byte]) not in _HOST_ASCII):
            return "has an escaped character its IPv6 zone may not hold"
    if _HOST_BAD_BYTE.search(part):
        return "has an invalid character in its host"
    return ""


def _is_ipv4(data: bytes) -> bool:
    """netip's parseIPv4: four decimal fields of 0 to 255, no leading zero."""
    val = dots = digits = 0
    for i, c in enumerate(data):
        if 0x30 <= c <= 0x39:
            if digits == 1 and val == 0:
                return False
            val = val * 10 + c - 0x30
            digits += 1
            if val > 255:
                return False
        elif c == 0x2E:
            if i == 0 or i == len(data) - 1 or data[i - 1] == 0x2E or dots == 3:
                return False
            dots += 1
            val = digits = 0
        else:
            return False
    return dots == 3


def _is_ipv6_address(data: bytes) -> bool:
    """netip.ParseAddr(data) succeeds with an IPv6 address (an IPv4-mapped one too, not an IPv4 one)."""
    first = re.search(rb"[.:%]", data)
    if first is None or first.group() != b":":
        return False  # IPv4 (or nothing ParseAddr reads), or a zone with no address
    zone = data.find(b"%")
    if zone >= 0:
        data, rest = data[:zone], data[zone + 1 :]
        if not rest:
            return False
    ellipsis = -1  # parseIPv6: at most 8 fields, so the loop below runs at most 8 times
    if data.startswith(b"::"):
        ellipsis, data = 0, data[2:]
        if not data:
            return True
    filled = 0
    while filled < 16:
        off = 0
        while off < len(data) and data[off] in _HEX_DIGITS:
            off += 1
            if off > 4:  # at most four hex digits in a group, leading zeros counted (Go 1.27; not 1.19)
                return False
        if off == 0:
            return False
        if off < len(data) and data[off] == 0x2E:  # an IPv4 address in the last two fields
            if (ellipsis < 0 and filled != 12) or filled + 4 > 16 or not _is_ipv4(data):
                return False
            data, filled = b"", filled + 4
            break
        filled += 2
        data = data[off:]
        if not data:
            break
        if data[0] != 0x3A or len(data) == 1:
            return False
        data = data[1:]
        if data[0] == 0x3A:
            if ellipsis >= 0:
                return False
            ellipsis, data = filled, data[1:]
            if not data:
                break
    if data:
        return False
    return ellipsis >= 0 if filled < 16 else ellipsis < 0


def _go_host_error(scheme: bytes, host: bytes) -> str:
    """Why url.go's parseHost refuses ``host`` (host[:port], no userinfo), or ''."""
    bracket = host.rfind(b"[")
    if bracket > 0:
        return "has a [ inside its host"
    if bracket == 0:
        close = host.rfind(b"]")
        if close < 0:
            return "has a missing ] in its host"
        if close + 1 < len(host) and not _PORT.fullmatch(host, close + 1):
            return "has an invalid port"
        name = host[1:close]
        zone = name.find(b"%25")  # the zone, if any, starts at the first %25
        head, tail = (name[:zone], name[zone:]) if zone >= 0 else (name, b"")
        error = _host_error(head) or _zone_error(tail)
        if error:
            return error
        if not _is_ipv6_address(_unescape(name)):
            return "has a host in brackets that is not an IPv6 address"
        return ""
    colon = host.find(b":")
    if colon >= 0:
        if scheme not in (b"http", b"https"):
            colon = host.rfind(b":")
        elif host.find(b":", colon + 1) >= 0:
            return "has more than one colon in its host (an IPv6 address goes in brackets)"
        if not _PORT.fullmatch(host, colon):
            return "has an invalid port"
    return _host_error(host)


def _go_url_error(url: str) -> str:
    """Why Go's url.Parse refuses ``url``, or '' when it accepts it (phrased to follow "it"; never quoting
    the value, which may hold a password)."""
    try:
        raw = url.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate os.environ never makes: bytes that are not UTF-8, as there
        raw = url.encode("utf-8", "surrogatepass")
    before, _, fragment = raw.partition(b"#")
    if _CTL.search(before):
        return "holds a control character"
    if before.startswith(b":"):
        return "has no scheme"
    m = _SCHEME.match(before)
    scheme = before[: m.end() - 1].lower() if m else b""
    rest = before[m.end() :] if m else before
    rest = rest.partition(b"?")[0]  # the query is not checked
    if scheme and not rest.startswith(b"/"):
        rest = b""  # scheme:opaque, not checked
    elif not scheme and not rest.startswith(b"/") and b":" in rest.partition(b"/")[0]:
        return "has a colon in its first path element"
    if rest.startswith(b"//") and (scheme or not rest.startswith(b"///")):
        authority, slash, path = rest[2:].partition(b"/")
        rest = slash + path
        userinfo, at, host = authority.rpartition(b"@")
        error = _go_host_error(scheme, host)
        if error:
            return error
        if at and (_USERINFO_BAD_BYTE.search(userinfo) or _BAD_ESCAPE.search(userinfo)):
            return "has invalid userinfo"
    if _BAD_ESCAPE.search(rest):
        return "has a bad % escape in its path"
    if _BAD_ESCAPE.search(fragment):
        return "has a bad % escape in its fragment"
    return ""


def check_vault_env(env: Mapping[str, str]) -> None:
    """ValueError naming the first VAULT_* variable the reference client would refuse (values not shown)."""

    def get(name: str) -> str:
        return env.get(name, "")

    for name in ("VAULT_ADDR", "VAULT_AGENT_ADDR", "VAULT_PROXY_ADDR", "VAULT_HTTP_PROXY"):
        error = _go_url_error(get(name)) if get(name) else ""
        if error:
            raise ValueError(f"{name} is not a URL: it {error}")
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
