"""The credentials a source yields; secret values never appear in repr or str."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Credentials:
    """S3 credentials and where they are good.  ``endpoint`` is ``http(s)://host[:port]``, never empty."""

    access_key_id: str = field(repr=False)
    secret_access_key: str = field(repr=False)
    session_token: str = field(default="", repr=False)
    endpoint: str = "https://s3.us-east-1.amazonaws.com"
    region: str = "us-east-1"

    def __post_init__(self) -> None:
        from publish import redact

        redact.register(*self.secrets())  # no message may show one, nor a piece of one

    def __str__(self) -> str:
        return f"Credentials(endpoint={self.endpoint}, region={self.region})"

    def secrets(self) -> tuple[str, ...]:
        """The secret values, for tests that check no output holds one."""
        return tuple(v for v in (self.access_key_id, self.secret_access_key, self.session_token) if v)
