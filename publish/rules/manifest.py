"""Manifests: what one publication published, every file of its save with its size and SHA-256.

A manifest lives at ``<root>/man/<entry name>`` and is written before its entry.  Its content is UTF-8 JSON
with sorted keys and no spaces::

    {"entry":"<entry name>","files":[[path,size,sha256-or-null],...],"format":"publish.manifest.v1"}

rows sorted by path; a path is relative to the save with ``/`` separators, and a save that is one file (a
Lightning ``.ckpt``) has the one row ``""``.

A name is bytes: a path is the name's bytes read as UTF-8, each byte that is not part of UTF-8 kept as the lone
surrogate U+DC80 + byte (Python's ``surrogateescape``, as ``os.fsdecode`` reads a name), which the JSON text
carries as the escape ``\\udc80``..``\\udcff`` (the only lone surrogates a manifest holds).  So every name a
POSIX save can hold (any bytes but NUL and ``/``) is recorded and read back exactly, and a manifest of UTF-8
names is byte for byte what it always was.  Pure: no I/O.  :func:`decode` trusts nothing it is given: a
manifest over :data:`MANIFEST_LIMIT` bytes or :data:`MANIFEST_ROWS` rows, a duplicate key, another format,
another entry's name, a bad path, size or digest is a :class:`ManifestError`, found in time linear in its
size.
"""

from __future__ import annotations

from publish.rules.errors import Failure
from publish.rules.redact import quoted, shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    Row = tuple[str, int, "str | None"]

FORMAT = "publish.manifest.v1"
#: The most bytes a manifest may hold, and the most rows (files of one save).
MANIFEST_LIMIT = 64 * 1024 * 1024
MANIFEST_ROWS = 1_000_000
#: A size is below 2^63 (what a file system or a store can report): at most 19 digits.
SIZE_LIMIT = 1 << 63
_KEYS = ("entry", "files", "format")
_HEX = frozenset("0123456789abcdef")
_UNCLEAN = frozenset(("", ".", ".."))


class ManifestError(Failure):
    """A manifest that cannot be trusted, or cannot be made: ``where`` (its location, or for one being made
    ``manifest of <entry>``) and ``why``."""

    def __init__(self, where: str, why: str, made: bool = False) -> None:
        if made:
            text = f"{where}: {why}"
        else:
            text = f"{shown(where)}: damaged manifest: {why}" if where else f"damaged manifest: {why}"
        super().__init__(text)
        self.where = where
        self.why = why


def good_path(path: str) -> bool:
    """True when ``path`` is a clean relative path with ``/`` separators (no empty, ``.`` or ``..`` element,
    no leading ``/``, no NUL) that names bytes: any lone surrogate in it is one ``surrogateescape`` makes of
    a byte that is not UTF-8, in the one spelling reading those bytes back gives (so one name has one path)."""
    if "\0" in path or not _UNCLEAN.isdisjoint(path.split("/")):
        return False
    if path.isascii():
        return True
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape") == path
    except UnicodeEncodeError:  # a surrogate that stands for no byte (U+D800, U+DC00..U+DC7F)
        return False


def utf8(path: str) -> bool:
    """True when ``path`` (a name as a manifest records it) is UTF-8: no byte of it needed an escape, so an
    S3 key can hold it."""
    if path.isascii():
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def good_digest(digest: object) -> bool:
    """True for None (not known) or 64 lower-case hex digits."""
    return digest is None or (
        type(digest) is str and len(digest) == 64 and _HEX.issuperset(digest)  # noqa: E721
    )


def _short(path: str) -> str:
    """A path for a message: quoted, and cut after 300 characters (a hostile one may be 64 MiB long)."""
    return quoted(path) if len(path) <= 300 else quoted(path[:300]) + "..."


def _check_rows(rows: list[Any], where: str, made: bool = False) -> list[Row]:
    """The rows, each checked; ManifestError naming the first bad one."""

    def refuse(why: str) -> ManifestError:
        return ManifestError(where, why, made)

    if len(rows) > MANIFEST_ROWS:
        raise refuse(f"{len(rows)} files, over the {MANIFEST_ROWS} a manifest may list")
    seen: set[str] = set()
    out: list[Row] = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != 3:  # noqa: E721  (a subclass is never what json made)
            raise refuse(f"file {i} is not [path, size, sha256]")
        path, size, digest = row
        if type(path) is not str:  # noqa: E721
            raise refuse(f"file {i}: its path is not a string")
        if path == "":
            if len(rows) != 1:
                raise refuse('the path "" (a save that is one file) beside other files')
        elif not good_path(path):
            raise refuse(f"file {i}: the path {_short(path)} is not a clean relative path")
        if path in seen:
            raise refuse(f"the path {_short(path)} is listed twice")
        seen.add(path)
        if type(size) is not int or not 0 <= size < SIZE_LIMIT:  # noqa: E721  (bool is an int: refused)
            raise refuse(f"{_short(path)}: its size is not a whole number of bytes")
        if not good_digest(digest):
            raise refuse(f"{_short(path)}: its sha256 is not 64 lower-case hex digits or null")
        out.append((path, size, digest))
    return out


def encode(entry: str, files: Iterable[Row]) -> bytes:
    """The manifest of ``entry`` listing ``files`` (any order; each checked as decode would)."""
    import json

    where = f"manifest of {entry}"
    rows = _check_rows([[p, s, d] for p, s, d in files], where, made=True)
    rows.sort()
    text = json.dumps(
        {"entry": entry, "files": rows, "format": FORMAT},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a name with a byte that is not UTF-8: its surrogate written as a JSON escape
        data = text.translate(_escapes()).encode("utf-8")
    if len(data) > MANIFEST_LIMIT:
        raise ManifestError(
            where, f"it would be {len(data)} bytes, over the {MANIFEST_LIMIT} a manifest may hold", made=True
        )
    return data


def _escapes() -> dict[int, str]:
    """str.translate's table: each lone surrogate a path may hold (U+DC80..U+DCFF) to its JSON escape."""
    return {c: f"\\u{c:04x}" for c in range(0xDC80, 0xDD00)}


class _Refused(Exception):
    """Raised from inside the JSON parser by a hook; carries why."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Refused(f"the key {quoted(key)} appears twice")
        found[key] = value
    return found


def _no_float(text: str) -> Any:
    raise _Refused(f"the number {quoted(text[:40])} is not a whole number")


def _no_constant(text: str) -> Any:
    raise _Refused(f"{text} is not a number JSON allows")


def _small_int(text: str) -> int:
    # Digits are turned into an int only when few: a long run of them would take quadratic time.
    if len(text) > 20:
        raise _Refused(f"a number of {len(text)} digits")
    return int(text)


def decode(entry: str, data: bytes, where: str = "") -> list[Row]:
    """The rows of ``entry``'s manifest ``data`` (read from ``where``, which errors name), as written.

    Refused (ManifestError): over MANIFEST_LIMIT bytes, not UTF-8 JSON, a duplicate key, a float, NaN or a
    number of more than 20 digits anywhere, nesting deeper than the interpreter allows, a key other than
    entry, files and format, another format, another entry's name, and any bad row (see encode)."""
    if len(data) > MANIFEST_LIMIT:
        raise ManifestError(where, f"{len(data)} bytes, over the {MANIFEST_LIMIT} a manifest may hold")
    import json

    try:
        text = data.decode("utf-8")
        doc = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_float=_no_float,
            parse_int=_small_int,
            parse_constant=_no_constant,
        )
    except _Refused as e:
        raise ManifestError(where, str(e)) from None
    except UnicodeDecodeError:
        raise ManifestError(where, "not UTF-8") from None
    except RecursionError:
        raise ManifestError(where, "nested too deeply") from None
    except ValueError as e:  # json.JSONDecodeError
        raise ManifestError(where, f"not JSON ({e})") from None
    if type(doc) is not dict:  # noqa: E721
        raise ManifestError(where, "not a JSON object")
    if sorted(doc) != list(_KEYS):
        raise ManifestError(where, "its keys are not entry, files and format")
    if doc["format"] != FORMAT:
        shown_format = doc["format"] if type(doc["format"]) is str else "not a string"  # noqa: E721
        raise ManifestError(where, f"the format {quoted(str(shown_format)[:80])}, not {FORMAT}")
    if doc["entry"] != entry:
        other = doc["entry"] if type(doc["entry"]) is str else "not a string"  # noqa: E721
        raise ManifestError(where, f"it is the manifest of {quoted(str(other)[:300])}, not of {entry}")
    if type(doc["files"]) is not list:  # noqa: E721
        raise ManifestError(where, "files is not a list")
    return _check_rows(doc["files"], where)
