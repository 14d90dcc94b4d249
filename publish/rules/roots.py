"""``-checkpoint`` (and SAVE arguments) → a POSIX root or an S3 root, with every refusal the README lists."""

from __future__ import annotations

from publish.rules.errors import Failure
from publish.rules.redact import quoted as _quoted
from publish.rules.redact import shown as _shown
from publish.rules.redact import url as _redact_url

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def scheme(text: str) -> str:
    """The ``word:`` a text starts with (RFC 3986's scheme syntax), or ``""``."""
    head, colon, _ = text.partition(":")
    if colon and head and head[0].isascii() and head[0].isalpha() and _SCHEME_CHARS.issuperset(head):
        return head + ":"
    return ""


class PosixRoot:
    """A directory; ``path`` is absolute and lexically clean."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def text(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PosixRoot) and self.path == other.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"PosixRoot({self.path!r})"


class S3Root:
    """``s3://BUCKET[/PREFIX]``; ``prefix`` has no leading or trailing / and may be empty."""

    __slots__ = ("bucket", "prefix")

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix

    @property
    def text(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Root) and (self.bucket, self.prefix) == (other.bucket, other.prefix)

    def __hash__(self) -> int:
        return hash((self.bucket, self.prefix))

    def __repr__(self) -> str:
        return f"S3Root({self.bucket!r}, {self.prefix!r})"


TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Union

    Root = Union[PosixRoot, S3Root]


#: The working folder when it cannot be read (deleted under the process, a parent made unsearchable): an
#: absolute path needs none, a relative one is refused (clean_posix).  No path holds a NUL.
NO_CWD = "\0"


def clean_posix(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` and cleaned lexically; links are not resolved.  A relative
    ``path`` when ``cwd`` is NO_CWD is a Failure naming it.

    As ``posixpath.normpath(posixpath.join(cwd, path))``, with any leading slashes made one (normpath keeps
    a leading //, which POSIX leaves implementation-defined), spelled out: posixpath imports os, whose
    import costs a sixth of a bare interpreter's start."""
    if cwd == NO_CWD and not path.startswith("/"):
        raise Failure(
            f"{_shown(path)}: a relative path, and the working folder cannot be read (deleted?): give an "
            "absolute path"
        )
    joined = path if path.startswith("/") or not cwd else f"{cwd.removesuffix('/')}/{path}"
    absolute = joined.startswith("/")
    parts: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part != ".." or (not absolute and not parts) or (parts and parts[-1] == ".."):
            parts.append(part)
        elif parts:
            parts.pop()
    cleaned = "/".join(parts)
    return "/" + cleaned if absolute else cleaned or "."


_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_BUCKET_ENDS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def _is_ipv4_shaped(bucket: str) -> bool:
    parts = bucket.split(".")
    return len(parts) == 4 and all(p.isascii() and p.isdigit() for p in parts)


def _bucket_problem(bucket: str) -> str:
    # Character sets, not re: an S3 verb's start-up pays for every module it imports.
    if not bucket:
        return "no bucket"
    if (
        not 3 <= len(bucket) <= 63
        or not _BUCKET_CHARS.issuperset(bucket)
        or bucket[0] not in _BUCKET_ENDS
        or bucket[-1] not in _BUCKET_ENDS
        or ".." in bucket
        or ".-" in bucket
        or "-." in bucket
        or _is_ipv4_shaped(bucket)
        or bucket.startswith(("xn--", "sthree-"))
        or bucket.endswith(("-s3alias", "--ol-s3"))
    ):
        return f"bucket {_quoted(bucket)} is not a valid S3 bucket name"
    return ""


def parse_s3(text: str, what: str) -> S3Root:
    """Parse ``s3://BUCKET[/PREFIX]``; Failure naming ``what`` and the fault."""
    rest = text[len("s3://") :]
    for ch, fault in (("?", "a query"), ("#", "a fragment")):
        if ch in rest:
            raise Failure(f"{what} {_redact(text)}: {fault} is not allowed in an S3 root")
    authority, _, prefix = rest.partition("/")
    if "@" in authority:
        raise Failure(f"{what} {_redact(text)}: userinfo is not allowed in an S3 root")
    if ":" in authority:
        raise Failure(
            f"{what} {_redact(text)}: a port is not allowed in an S3 root (the endpoint comes from -creds)"
        )
    problem = _bucket_problem(authority)
    if problem:
        raise Failure(f"{what} {_redact(text)}: {problem}")
    if prefix.endswith("/"):
        prefix = prefix[:-1]
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise Failure(f"{what} {_redact(text)}: the prefix has an empty, '.' or '..' element")
    if "\0" in prefix:
        raise Failure(f"{what}: the prefix holds a NUL byte")
    return S3Root(authority, prefix)


def _redact(text: str) -> str:
    """The URL with any userinfo's password replaced, and quoted when it holds a control character."""
    return _shown(_redact_url(text))


def parse_root(text: str, cwd: str) -> Root:
    """The root ``-checkpoint`` names.  Any ``word:`` scheme other than ``s3://`` is refused (exit 1)."""
    if text.startswith("s3://"):
        return parse_s3(text, "-checkpoint")
    word = scheme(text)
    if word:
        raise Failure(
            f"-checkpoint {_redact(text)}: the scheme {word} is not supported: a root is s3://BUCKET/PREFIX "
            "or a POSIX path (put ./ in front of a relative path whose first element holds a colon)"
        )
    if "\0" in text:
        raise Failure("-checkpoint: the path holds a NUL byte")
    return PosixRoot(clean_posix(text, cwd))


def below(root: Root, text: str, cwd: str, what: str) -> str:
    """The path, relative to ``root``, of a SAVE or SAVES argument; Failure unless it lies strictly below it."""
    if isinstance(root, S3Root):
        if not text.startswith("s3://"):
            raise Failure(
                f"{what} {_redact(text) if text[:1] != '/' else _shown(text)}: the root is {_shown(root.text)}, "
                f"so {what} must be an s3:// URL under it"
            )
        url = parse_s3(text, what)
        if url.bucket != root.bucket:
            raise Failure(f"{what} {_shown(text)}: not under the root {_shown(root.text)}")
        rel = url.prefix[len(root.prefix) + 1 :] if root.prefix else url.prefix
        if not rel or (root.prefix and not url.prefix.startswith(root.prefix + "/")):
            raise Failure(f"{what} {_shown(text)}: not under the root {_shown(root.text)}")
        return rel
    if scheme(text):
        raise Failure(f"{what} {_redact(text)}: the root is a POSIX path, so {what} must be a path under it")
    if "\0" in text:
        raise Failure(f"{what}: the path holds a NUL byte")
    path = clean_posix(text, cwd)
    base = root.path.rstrip("/")
    if not path.startswith(base + "/") or path == base:
        raise Failure(f"{what} {_shown(path)}: not under the root {_shown(root.path)}")
    return path[len(base) + 1 :]
