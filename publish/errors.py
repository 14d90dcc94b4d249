"""Errors that carry the thing at fault; only the cli turns them into exit codes."""

from __future__ import annotations

from publish.redact import scrub


class PublishError(Exception):
    """Base of every error the command reports; ``str()`` is the message after ``publish: ``.

    The message is scrubbed of every registered credential value as the error is made (publish.redact).
    """

    exit_code = 1

    def __init__(self, message: str = "") -> None:
        super().__init__(scrub(message))


class UsageError(PublishError):
    """A usage error (exit 2): unknown verb or flag, bad value, missing argument, flag not for this root."""

    exit_code = 2


class Failure(PublishError):
    """A run-time failure (exit 1): the root, a file that does not parse, a refused scheme."""


class CredentialsError(Failure):
    """A fault in ``-creds`` or what a source held: ``why``, and the ``source`` at fault as messages show it
    ('' when the fault is the list's as a whole).  The message is ``credentials: [source: ]why``.
    """

    def __init__(self, why: str, source: str = "") -> None:
        super().__init__("credentials: " + (f"{source}: {why}" if source else why))
        self.why = scrub(why)
        self.source = scrub(source)


class StoreError(Failure):
    """A fault reported by, or on the way to, the store; the message starts with ``store: ``.

    ``code`` is the S3 error code when the store sent one (``ExpiredToken``, ``SlowDown``...), else ``""``.
    ``status`` is the HTTP status, or 0 when no response arrived.
    """

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__("store: " + message)
        self.code = code
        self.status = status
