"""Endpoint and proxy URLs: ``http(s)://host[:port]`` checked part by part, and the Host header's form."""

from __future__ import annotations

# No re and no ipaddress at import: an S3 verb's start-up pays for every module (docs/perf-startup.md).
# A label's characters: letters, digits and '_'; '-' too, but not first or last.
_LABEL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def host_name_ok(host: str) -> bool:
    """True when ``host`` is a DNS name (labels of letters, digits, '_' and inner '-', at most 63 each, one
    optional trailing dot: a name already fully qualified) or an IPv4 literal, which has that shape too: the
    one rule for every URL the command takes (endpoints, proxies, vault locations)."""
    if not host or len(host) > 254 or not host.isascii():
        return False
    for label in (host[:-1] if host.endswith(".") else host).split("."):
        if not 0 < len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        if not _LABEL_CHARS.issuperset(label):
            return False
    return True


def ipv6_why(literal: str) -> str:
    """Why the text between ``[`` and ``]`` is not an IPv6 address we connect to, or ``""`` when it is."""
    if "%" in literal:
        return "an IPv6 zone (%) is not supported"
    import ipaddress  # only for a bracketed host

    try:
        ipaddress.IPv6Address(literal)
    except ValueError:
        return "invalid IPv6 address"
    return ""


def split_host_port(authority: str) -> tuple[str, str]:
    """Check ``host[:port]`` (host a name, IPv4 or ``[IPv6]``; port 1-65535); ValueError saying why."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError("has an unclosed [ in its host")
        host, rest = authority[: end + 1], authority[end + 1 :]
        why = ipv6_why(host[1:-1])
        if why == "invalid IPv6 address":
            raise ValueError("has a malformed IPv6 host")
        if why:
            raise ValueError(f"has {why}")
        if rest and not rest.startswith(":"):
            raise ValueError("has text after its IPv6 host")
        port = rest[1:] if rest else ""
        has_colon = bool(rest)
    else:
        host, has_colon_sep, port = authority.partition(":")
        has_colon = bool(has_colon_sep)
        if not host:
            raise ValueError("has no host")
        if not host_name_ok(host):
            raise ValueError("has a malformed host")
    # "host:" is the scheme's port, as Go's net/url reads it
    if has_colon and port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError("has a malformed port; want 1 to 65535")
    return host, port


def _split_url(url: str, what: str) -> tuple[str, str, int]:
    """Split ``scheme://host[:port][/]`` into parts; messages name the part at fault, never the URL."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"{what} URL is empty")
    if any(c.isspace() or ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise ValueError(f"{what} URL contains whitespace or control characters")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"{what} URL must start with http:// or https://")
    scheme = scheme.lower()
    if scheme not in ("http", "https"):
        import re  # only for this message

        shown = f" {scheme!r}" if re.fullmatch(r"[a-z][a-z0-9+.-]{0,9}", scheme) else ""
        raise ValueError(f"{what} URL scheme{shown} is not http or https")
    netloc = rest
    for stop in "/?#":
        netloc = netloc.partition(stop)[0]
    if "@" in netloc:
        raise ValueError(f"{what} URL must not contain a user name or password")
    tail = rest[len(netloc) :]
    if tail not in ("", "/"):
        if tail.startswith("/"):
            if "?" in tail or "#" in tail:
                raise ValueError(f"{what} URL must not have a query or fragment")
            raise ValueError(f"{what} URL must not have a path")
        raise ValueError(f"{what} URL must not have a query or fragment")
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise ValueError(f"{what} URL has an unterminated IPv6 address")
        host = netloc[1:end]
        port_text = netloc[end + 1 :]
        why = ipv6_why(host)
        if why:
            raise ValueError(f"{what} URL has {why}")
        if port_text and not port_text.startswith(":"):
            raise ValueError(f"{what} URL has text after the IPv6 address")
        port_text = port_text[1:] if port_text else ""
        has_port = bool(netloc[end + 1 :])
    else:
        host, has_colon, port_text = netloc.partition(":")
        has_port = bool(has_colon)
        if not host:
            raise ValueError(f"{what} URL has no host")
        if not host_name_ok(host):
            raise ValueError(f"{what} URL has an invalid host name")
    if has_port and port_text:  # "host:" is the scheme's port, as Go's net/url reads it
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{what} URL port must be a number from 1 to 65535")
        port = int(port_text)
    else:
        port = 443 if scheme == "https" else 80
    return scheme, host.lower(), port


def netloc(scheme: str, host: str, port: int) -> str:
    """``host[:port]`` as sent in a Host header: IPv6 in brackets, the scheme's default port left out."""
    shown = f"[{host}]" if ":" in host else host
    if port == (443 if scheme == "https" else 80):
        return shown
    return f"{shown}:{port}"


def parse_proxy(url: str) -> str:
    """Validate a proxy URL: http:// or https://, a host, an optional port, nothing else (one
    trailing '/' is allowed).  Returns ``scheme://host:port`` (lower case, port explicit); ValueError
    naming what is wrong, never echoing the URL."""
    scheme, host, port = _split_url(url, "proxy")
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def parse_endpoint(url: str) -> tuple[str, str, int]:
    """``http(s)://host[:port]`` (one trailing '/' allowed) -> (scheme, host, port); the host lower case,
    an IPv6 address without brackets, the port defaulted from the scheme.  ValueError otherwise."""
    return _split_url(url, "endpoint")
