"""What every kind of source shares: the fields, their checks, and the two ways a source can fail.

A source either answers (credentials), does not answer (:class:`NotAnswering`: its location is absent from
this node, so the next source is tried), or is refused (:class:`~publish.rules.errors.CredentialsError`: it is
present but wrong, and the run stops).  Below the kinds (directory, vault) and the list (sources).
"""

from __future__ import annotations

from publish.rules import redact
from publish.rules.credentials import Credentials
from publish.rules.errors import CredentialsError
from publish.rules.redact import quoted
from publish.rules.urls import netloc, parse_endpoint

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Protocol
else:
    Protocol = object

FIELDS = ("access_key_id", "secret_access_key", "session_token", "endpoint", "region")
REQUIRED = ("access_key_id", "secret_access_key")
SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")  # never in a message, nor a piece

_REGION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


class NotAnswering(Exception):
    """The source's location is absent from this node; ``str()`` is the reason."""


class Source(Protocol):
    """One ``kind:location`` item of a ``-creds`` list."""

    text: str

    def fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        """Credentials from this source; NotAnswering when absent here, CredentialsError when wrong."""
        ...


def credentials_from_fields(source: str, fields: Mapping[str, str]) -> Credentials:
    """Credentials from checked field values; CredentialsError naming the source and field otherwise.

    ``fields`` holds the values as found (a file's one trailing newline already dropped).
    """
    redact.register(*(fields.get(name, "") for name in SECRET_FIELDS))
    for name, value in fields.items():
        if name not in FIELDS:
            raise CredentialsError(f"unknown field {quoted(name)}", source)
        if value == "":
            raise CredentialsError(f"{name} is empty", source)
        if any(c.isspace() for c in value):
            raise CredentialsError(f"{name} holds whitespace", source)
        if not value.isprintable():
            raise CredentialsError(f"{name} holds a control character", source)
    for name in REQUIRED:
        if name not in fields:
            raise CredentialsError(f"no {name}", source)
    region = fields.get("region", "us-east-1")
    if not region or not _REGION_CHARS.issuperset(region):
        raise CredentialsError(
            f"region {quoted(region)} is malformed; want lower-case letters, digits and -", source
        )
    if "endpoint" in fields:
        try:
            scheme, host, port = parse_endpoint(fields["endpoint"])
        except ValueError as e:
            # net's message says "endpoint URL ..." and never holds the URL, which may carry a password.
            raise CredentialsError(str(e), source) from None
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
