"""Entry names and which entry is latest: pure functions, no I/O.

An entry is ``<epoch>-<step>-<path>``: epoch and step zero-padded to 20 decimal digits, and the save's path
relative to the root as RFC 4648 base32 without padding.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from publish.errors import Failure

LIMIT = 10**20  #: epochs and steps lie in [0, LIMIT)
POSIX_NAME_MAX = 255
S3_KEY_MAX = 1024

_NAME = re.compile(r"([0-9]{20})-([0-9]{20})-([A-Z2-7]+)")


@dataclass(frozen=True, order=True)
class Entry:
    """One publication.  Ordered as (epoch, step, name) so ``max()`` is the latest, ties to the greatest name."""

    epoch: int
    step: int
    path: str

    @property
    def name(self) -> str:
        return name(self.epoch, self.step, self.path)

    def key(self) -> tuple[int, int, str]:
        return (self.epoch, self.step, self.name)


def clean_relative(path: str) -> bool:
    """True when ``path`` is a clean relative path: no empty, ``.`` or ``..`` element, no leading /, no NUL."""
    if not path or "\0" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def name(epoch: int, step: int, path: str) -> str:
    """The entry name for a save at ``path`` (relative to the root)."""
    if not 0 <= epoch < LIMIT or not 0 <= step < LIMIT:
        raise ValueError("epoch and step must lie in [0, 10^20)")
    if not clean_relative(path):
        raise ValueError(f"not a clean relative path: {path!r}")
    encoded = base64.b32encode(path.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{epoch:020d}-{step:020d}-{encoded}"


def parse(entry_name: str) -> Entry:
    """The Entry an entry name stands for; ValueError (saying why) when the name is not canonical."""
    m = _NAME.fullmatch(entry_name)
    if not m:
        raise ValueError("not <20 digits>-<20 digits>-<base32>")
    encoded = m.group(3)
    if len(encoded) % 8 in (1, 3, 6):
        raise ValueError("base32 of impossible length")
    try:
        raw = base64.b32decode(encoded + "=" * (-len(encoded) % 8))
    except (binascii.Error, ValueError):
        raise ValueError("bad base32") from None
    # Canonical: encoding again gives the same text (unused bits zero, no extra characters).
    if base64.b32encode(raw).decode("ascii").rstrip("=") != encoded:
        raise ValueError("base32 is not canonical")
    try:
        path = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("path is not UTF-8") from None
    if not clean_relative(path):
        raise ValueError(f"path {path!r} is not a clean relative path")
    return Entry(int(m.group(1)), int(m.group(2)), path)


def parse_all(names: list[str], where: str) -> list[Entry]:
    """Parse every name listed in pub/; the first that does not parse is a Failure naming it."""
    entries = []
    for entry_name in sorted(names):
        try:
            entries.append(parse(entry_name))
        except ValueError as e:
            raise Failure(f"{where}/{entry_name}: not a publication entry ({e})") from None
    return entries


def latest(entries: list[Entry]) -> Entry | None:
    """The entry with the greatest (epoch, step); ties go to the greatest name."""
    return max(entries, key=Entry.key, default=None)


def oldest_first(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=Entry.key)


def related(a: str, b: str) -> bool:
    """True when folder ``a`` is ``b``, lies inside it, or holds it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")
