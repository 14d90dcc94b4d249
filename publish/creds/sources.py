"""Parse a ``-creds`` list and resolve it: the first source that answers gives the credentials.

A source either answers (credentials), does not answer (:class:`NotAnswering`: its location is absent from
this node, so the next source is tried), or is refused (:class:`~publish.errors.CredentialsError`: it is
present but wrong, and the run stops).  Messages name the source by its text with any URL password removed,
and never hold a secret value.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Protocol

from publish.creds.model import Credentials
from publish.errors import CredentialsError
from publish.redact import quoted

FIELDS = ("access_key_id", "secret_access_key", "session_token", "endpoint", "region")
REQUIRED = ("access_key_id", "secret_access_key")
SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")  # never in a message, nor a piece
KINDS = ("secret", "file", "vault")

_REGION = re.compile(r"[a-z0-9-]+\Z")


class NotAnswering(Exception):
    """The source's location is absent from this node; ``str()`` is the reason."""


class Source(Protocol):
    """One ``kind:location`` item of a ``-creds`` list."""

    text: str

    def fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        """Credentials from this source; NotAnswering when absent here, CredentialsError when wrong."""
        ...


def parse_sources(spec: str) -> list[Source]:
    """Parse a ``-creds`` list (addendum 4); CredentialsError for anything that does not parse."""
    # Imported here: the kinds import this module for NotAnswering and the field rules.
    from publish.creds.directory import DirectorySource
    from publish.creds.vault import VaultSource
    from publish.redact import shown as shown_as
    from publish.redact import url

    if spec == "":
        raise CredentialsError("the -creds list is empty")
    sources: list[Source] = []
    seen: dict[tuple[str, str], str] = {}
    for item in spec.split(","):
        shown = shown_as(url(item))
        if item == "":
            whole = ",".join(url(i) for i in spec.split(","))
            raise CredentialsError(f"an empty item in the -creds list {quoted(whole)}")
        kind, colon, location = item.partition(":")
        if not colon:
            raise CredentialsError(f"{shown}: not a kind:location source; want secret:, file: or vault:")
        if kind not in KINDS:
            raise CredentialsError(
                f"{shown}: unknown source kind {quoted(kind)}; want secret:, file: or vault:"
            )
        source: Source
        if kind == "vault":
            source = VaultSource.parse(location)
            key = (kind, location)
        else:
            if not location.startswith("/"):
                raise CredentialsError(f"{shown}: the location must be an absolute path")
            if "\0" in location:
                raise CredentialsError(f"{shown}: the path holds a NUL byte")
            source = DirectorySource(kind, location)
            key = (kind, os.path.normpath(location))
        if key in seen:
            raise CredentialsError(f"{shown}: the same source is listed twice")
        seen[key] = shown
        sources.append(source)
    return sources


def resolve(spec: str, env: Mapping[str, str], timeout: float | None) -> tuple[Credentials, str]:
    """Try the sources in order; the first that answers gives (credentials, its text)."""
    sources = parse_sources(spec)
    deadline = None if timeout is None else time.monotonic() + timeout
    reasons = []
    for source in sources:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return source.fetch(env, left), source.text
        except NotAnswering as e:
            reasons.append(f"{source.text}: {e}")
    raise CredentialsError("no source answered: " + "; ".join(reasons))


def split_host_port(authority: str) -> tuple[str, str]:
    """Check ``host[:port]`` (host a name, IPv4 or ``[IPv6]``; port 1-65535); ValueError saying why."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError("has an unclosed [ in its host")
        host, rest = authority[: end + 1], authority[end + 1 :]
        from publish.urls import ipv6_why

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
        from publish.urls import host_name_ok

        if not host_name_ok(host):
            raise ValueError("has a malformed host")
    # "host:" is the scheme's port, as Go's net/url reads it
    if has_colon and port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError("has a malformed port; want 1 to 65535")
    return host, port


def credentials_from_fields(source: str, fields: Mapping[str, str]) -> Credentials:
    """Credentials from checked field values; CredentialsError naming the source and field otherwise.

    ``fields`` holds the values as found (a file's one trailing newline already dropped).
    """
    from publish import redact

    redact.register(*(fields.get(name, "") for name in SECRET_FIELDS))
    for name, value in fields.items():
        if name not in FIELDS:
            raise CredentialsError(f"{source}: unknown field {quoted(name)}")
        if value == "":
            raise CredentialsError(f"{source}: {name} is empty")
        if any(c.isspace() for c in value):
            raise CredentialsError(f"{source}: {name} holds whitespace")
        if not value.isprintable():
            raise CredentialsError(f"{source}: {name} holds a control character")
    for name in REQUIRED:
        if name not in fields:
            raise CredentialsError(f"{source}: no {name}")
    region = fields.get("region", "us-east-1")
    if not _REGION.match(region):
        raise CredentialsError(
            f"{source}: region {quoted(region)} is malformed; want lower-case letters, digits and -"
        )
    if "endpoint" in fields:
        from publish.urls import netloc
        from publish.urls import parse_endpoint as parse

        try:
            scheme, host, port = parse(fields["endpoint"])
        except ValueError as e:
            # net's message says "endpoint URL ..." and never holds the URL, which may carry a password.
            raise CredentialsError(f"{source}: {e}") from None
        endpoint = f"{scheme}://{netloc(scheme, host, port)}"
    else:
        endpoint = f"https://s3.{region}.amazonaws.com"
    return Credentials(
        access_key_id=fields["access_key_id"],
        secret_access_key=fields["secret_access_key"],
        session_token=fields.get("session_token", ""),
        endpoint=endpoint,
        region=region,
    )
