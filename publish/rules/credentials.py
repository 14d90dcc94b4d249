"""The credentials a source yields: a frozen value; secret values never appear in repr or str.

A leaf: it imports nothing from publish but redact (a pure rule), so the wire (sigv4, s3client) and the
sources (publish.creds) both use it without the signer sitting above the Vault client.
"""

from __future__ import annotations

from publish.rules import redact

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any


class Credentials:
    """S3 credentials and where they are good.  ``endpoint`` is ``http(s)://host[:port]``, never empty.

    Equal (and hashed) by every field; immutable.  A plain class with ``__slots__`` rather than a
    dataclass, which would cost the S3 start-up the dataclasses import.
    """

    __slots__ = ("access_key_id", "secret_access_key", "session_token", "endpoint", "region")

    access_key_id: str
    secret_access_key: str
    session_token: str
    endpoint: str
    region: str

    def __init__(
        self,
        access_key_id: str,
        secret_access_key: str,
        session_token: str = "",
        endpoint: str = "https://s3.us-east-1.amazonaws.com",
        region: str = "us-east-1",
    ) -> None:
        values = (access_key_id, secret_access_key, session_token, endpoint, region)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)
        redact.register(*self.secrets())  # no message may show one, nor a piece of one

    def _key(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Credentials)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[type[Credentials], tuple[str, ...]]:
        return (Credentials, self._key())

    def __repr__(self) -> str:
        return f"Credentials(endpoint={self.endpoint!r}, region={self.region!r})"

    def __str__(self) -> str:
        return f"Credentials(endpoint={self.endpoint}, region={self.region})"

    def secrets(self) -> tuple[str, ...]:
        """The secret values, for tests that check no output holds one."""
        return tuple(v for v in (self.access_key_id, self.secret_access_key, self.session_token) if v)
