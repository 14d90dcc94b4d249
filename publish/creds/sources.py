"""Parse a ``-creds`` list and resolve it: the first source that answers gives the credentials.

A source either answers (credentials), does not answer (:class:`NotAnswering`: its location is absent from
this node, so the next source is tried), or is refused (:class:`~publish.rules.errors.CredentialsError`: it is
present but wrong, and the run stops).  Messages name the source by its text with any URL password removed,
and never hold a secret value.
"""

from __future__ import annotations

import os
import time

from publish.creds.directory import DirectorySource
from publish.creds.fields import NotAnswering, Source
from publish.rules.errors import CredentialsError
from publish.rules.redact import cut_pieces, echo, quoted, register_userinfo
from publish.rules.redact import shown as shown_as

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping

    from publish.rules.credentials import Credentials

KINDS = ("secret", "file", "vault")


def parse_sources(spec: str) -> list[Source]:
    """Parse a ``-creds`` list (README: S3 roots); CredentialsError for anything that does not parse."""
    if spec == "":
        raise CredentialsError("the -creds list is empty")
    sources: list[Source] = []
    seen: dict[tuple[str, str], str] = {}
    items = spec.split(",")
    register_userinfo(items, ",")  # a "," inside a URL's password must not show the rest of it
    for item in items:
        shown = shown_as(echo(item))
        if item == "":
            whole = ",".join(echo(i) for i in spec.split(","))
            raise CredentialsError(f"an empty item in the -creds list {quoted(whole)}")
        kind, colon, location = item.partition(":")
        if not colon:
            raise CredentialsError("not a kind:location source; want secret:, file: or vault:", shown)
        if kind not in KINDS:
            raise CredentialsError(
                f"unknown source kind {quoted(cut_pieces(kind))}; want secret:, file: or vault:", shown
            )
        source: Source
        if kind == "vault":
            from publish.creds.vault import VaultSource  # only for a vault: item: it brings json along

            source = VaultSource.parse(location)
            key = (kind, location)
        else:
            if not location.startswith("/"):
                raise CredentialsError("the location must be an absolute path", shown)
            if "\0" in location:
                raise CredentialsError("the path holds a NUL byte", shown)
            source = DirectorySource(kind, location)
            key = (kind, os.path.normpath(location))
        if key in seen:
            raise CredentialsError("the same source is listed twice", shown)
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
