"""Entry names and which entry is latest: pure functions, no I/O.

An entry is ``<epoch>-<step>-<path>``: epoch and step zero-padded to 20 decimal digits, and the save's path
relative to the root as RFC 4648 base32 without padding.
"""

from __future__ import annotations

from publish.errors import Failure
from publish.redact import quoted

LIMIT = 10**20  #: epochs and steps lie in [0, LIMIT)
POSIX_NAME_MAX = 255
S3_KEY_MAX = 1024

_BASE32 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


def digits(text: str) -> bool:
    """True when ``text`` is one or more ASCII decimal digits (str.isdigit alone admits other scripts')."""
    return text.isascii() and text.isdigit()


class Entry:
    """One publication: the save at ``path`` (relative to the root), published at (epoch, step).

    Ordered as (epoch, step, name), so ``max()`` is the latest and ties go to the greatest name."""

    __slots__ = ("epoch", "step", "path", "_name")

    def __init__(self, epoch: int, step: int, path: str, entry_name: str = "") -> None:
        self.epoch = epoch
        self.step = step
        self.path = path
        self._name = entry_name

    @property
    def name(self) -> str:
        if not self._name:
            self._name = name(self.epoch, self.step, self.path)
        return self._name

    def key(self) -> tuple[int, int, str]:
        return (self.epoch, self.step, self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and (self.epoch, self.step, self.path) == (
            other.epoch,
            other.step,
            other.path,
        )

    def __lt__(self, other: Entry) -> bool:
        return self.key() < other.key()

    def __hash__(self) -> int:
        return hash((self.epoch, self.step, self.path))

    def __repr__(self) -> str:
        return f"Entry(epoch={self.epoch}, step={self.step}, path={self.path!r})"


_UNCLEAN = frozenset(("", ".", ".."))
# base32's alphabet mapped onto int()'s base-32 digits, so a name decodes in C rather than in base64's Python.
_TO_DIGITS = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789abcdefghijklmnopqrstuv")


def clean_relative(path: str) -> bool:
    """True when ``path`` is a clean relative path: no empty, ``.`` or ``..`` element, no leading /, no NUL."""
    return "\0" not in path and _UNCLEAN.isdisjoint(path.split("/"))


def name(epoch: int, step: int, path: str) -> str:
    """The entry name for a save at ``path`` (relative to the root)."""
    if not 0 <= epoch < LIMIT or not 0 <= step < LIMIT:
        raise ValueError("epoch and step must lie in [0, 10^20)")
    if not clean_relative(path):
        raise ValueError(f"not a clean relative path: {quoted(path)}")
    import base64

    encoded = base64.b32encode(path.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{epoch:020d}-{step:020d}-{encoded}"


def parse(entry_name: str) -> Entry:
    """The Entry an entry name stands for; ValueError (saying why) when the name is not canonical."""
    # No regular expression: importing re costs more start-up time than every other module of a resolve.
    epoch, step, encoded = entry_name[:20], entry_name[21:41], entry_name[42:]
    if (
        entry_name[20:21] != "-"
        or entry_name[41:42] != "-"
        or not digits(epoch)
        or not digits(step)
        or not encoded
        or not _BASE32.issuperset(encoded)
    ):
        raise ValueError("not <20 digits>-<20 digits>-<base32>")
    if len(encoded) % 8 in (1, 3, 6):
        raise ValueError("base32 of impossible length")
    nbytes, unused = divmod(len(encoded) * 5, 8)
    value = int(encoded.encode("ascii").translate(_TO_DIGITS), 32)
    if value & ((1 << unused) - 1):  # canonical: the bits past the last byte are zero
        raise ValueError("base32 is not canonical")
    try:
        path = (value >> unused).to_bytes(nbytes, "big").decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("path is not UTF-8") from None
    if not clean_relative(path):
        raise ValueError(f"path {quoted(path)} is not a clean relative path")
    return Entry(int(epoch), int(step), path, entry_name)


def parse_all(names: list[str], where: str) -> list[Entry]:
    """Parse every name listed in pub/; the first that does not parse is a Failure naming it."""
    entries = []
    for entry_name in sorted(names):
        try:
            entries.append(parse(entry_name))
        except ValueError as e:
            from publish.redact import shown

            raise Failure(f"{shown(where + '/' + entry_name)}: not a publication entry ({e})") from None
    return entries


def latest_of(names: list[str], where: str) -> Entry | None:
    """The latest entry among ``names``, every one of which must parse (else Failure naming the first bad one).

    With epoch and step zero-padded to the same width, the greatest name is the latest entry, ties included,
    so only that one is turned into an Entry."""
    for entry_name in names:
        try:
            parse(entry_name)
        except ValueError:
            parse_all(names, where)  # reports the first bad name in sorted order
            raise
    return parse(max(names)) if names else None


def latest(entries: list[Entry]) -> Entry | None:
    """The entry with the greatest (epoch, step); ties go to the greatest name."""
    return max(entries, key=Entry.key, default=None)


def oldest_first(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=Entry.key)


def related(a: str, b: str) -> bool:
    """True when folder ``a`` is ``b``, lies inside it, or holds it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")
