"""Errors that carry the thing at fault; only the cli turns them into exit codes."""

from __future__ import annotations


class PublishError(Exception):
    """Base of every error the command reports; ``str()`` is the message after ``publish: ``.

    The message is scrubbed of every registered credential value as the error is made (publish.redact).
    """

    exit_code = 1

    def __init__(self, message: str = "") -> None:
        from publish.redact import scrub  # imported late: redact uses flags, which uses this module

        super().__init__(scrub(message))


class UsageError(PublishError):
    """A usage error (exit 2): unknown verb or flag, bad value, missing argument, flag not for this root."""

    exit_code = 2


class Failure(PublishError):
    """A run-time failure (exit 1): the root, a file that does not parse, a refused scheme."""


class CredentialsError(Failure):
    """A fault in ``-creds`` or what a source held; the message starts with ``credentials: ``."""

    def __init__(self, message: str) -> None:
        super().__init__("credentials: " + message)


class StoreError(Failure):
    """A fault reported by, or on the way to, the store; the message starts with ``store: ``.

    ``code`` is the S3 error code when the store sent one (``ExpiredToken``, ``SlowDown``...), else ``""``.
    ``status`` is the HTTP status, or 0 when no response arrived.
    """

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__("store: " + message)
        self.code = code
        self.status = status
