"""Errors that carry the thing at fault; only the cli turns them into exit codes."""

from __future__ import annotations


class PublishError(Exception):
    """Base of every error the command reports; ``str()`` is the message after ``publish: ``.

    The message is kept as it is made: it names things exactly (spec addendum, section 14).  Text from
    outside in it (a store's or Vault's words) was scrubbed where it came in (``publish.rules.redact.foreign``).
    """

    exit_code = 1

    def __init__(self, message: str = "") -> None:
        super().__init__(message)


class UsageError(PublishError):
    """A usage error (exit 2): unknown verb or flag, bad value, missing argument, flag not for this root."""

    exit_code = 2


class Failure(PublishError):
    """A run-time failure (exit 1): the root, a file that does not parse, a refused scheme."""


class MissingRoot(Failure):
    """A checkpoint root that does not exist: ``fact`` says so, naming it; the message adds the advice for a
    new run (``publish init``), which a caller answering from another tier leaves out."""

    def __init__(self, fact: str, init: str) -> None:
        super().__init__(f"{fact}; {advice(init)}")
        self.fact = fact
        self.init = init


def advice(init: str) -> str:
    """The advice of a missing root: the ``publish init`` command that makes it."""
    return f"for a new run, make it first: {init}"


class CredentialsError(Failure):
    """A fault in ``-creds`` or what a source held: ``why``, and the ``source`` at fault as messages show it
    ('' when the fault is the list's as a whole).  The message is ``credentials: [source: ]why``.
    """

    def __init__(self, why: str, source: str = "") -> None:
        super().__init__("credentials: " + (f"{source}: {why}" if source else why))
        self.why = why
        self.source = source


class StoreError(Failure):
    """A fault reported by, or on the way to, the store, rendered ``store: [probe: STEP: ][OP ][THING: ]DETAIL``.

    ``op`` is the request (``list``, ``get``...), ``thing`` the key or location at fault, ``detail`` what went
    wrong; ``code`` is the S3 error code when the store sent one (``ExpiredToken``, ``SlowDown``...), else
    ``""``; ``status`` the HTTP status, or 0 when no response arrived; ``size`` and ``limit`` the bytes of a
    refused body (None when unknown) and its cap; ``step`` the probe step it happened in.
    """

    def __init__(
        self,
        detail: str,
        *,
        op: str = "",
        thing: str = "",
        code: str = "",
        status: int = 0,
        size: int | None = None,
        limit: int | None = None,
        step: str = "",
    ) -> None:
        where = f"{op} {thing}" if op and thing else op or thing
        text = f"{where}: {detail}" if where else detail
        super().__init__("store: " + (f"probe: {step}: " if step else "") + text)
        self.detail = detail
        self.op = op
        self.thing = thing
        self.code = code
        self.status = status
        self.size = size
        self.limit = limit
        self.step = step

    def in_step(self, step: str) -> StoreError:
        """The same fault, as met in the probe step ``step``."""
        return StoreError(
            self.detail,
            op=self.op,
            thing=self.thing,
            code=self.code,
            status=self.status,
            size=self.size,
            limit=self.limit,
            step=step,
        )


class UploadError(Failure):
    """A file of a save that was not uploaded whole: ``path`` is the file on the source root (as messages show
    it), ``detail`` what went wrong (a store's fault in its own words, scrubbed where it came in).  The
    message is ``upload of PATH: DETAIL``."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"upload of {path}: {detail}")
        self.path = path
        self.detail = detail


class FileError(StoreError):
    """An OSError met on a POSIX root, as a store error: ``op`` (what the store was doing: ``open``, ``stat``,
    ``read``, ``list``, ``create``, ``make``, ``remove``, ``sync``), ``path`` (the location, as ``thing``) and
    ``errno``.

    Its message is ``<path>: <strerror>`` (with ``detail`` in between when given), as POSIX faults have
    always been shown.  ``unexaminable`` is true for a file the process may not or cannot look at."""

    def __init__(self, path: str, error: OSError, detail: str = "", *, op: str = "") -> None:
        why = error.strerror or str(error)
        text = f"{path}: {detail + ': ' if detail else ''}{why}"
        Failure.__init__(self, text)
        self.detail = why
        self.op = op
        self.thing = path
        self.code = ""
        self.status = 0
        self.size = None
        self.limit = None
        self.step = ""
        self.errno = error.errno or 0

    @property
    def unexaminable(self) -> bool:
        import errno as _errno

        return self.errno in (_errno.EPERM, _errno.EACCES, _errno.ENAMETOOLONG, _errno.ELOOP)
