"""Entry names and which entry is latest: pure functions, no I/O.

An entry is ``<epoch>-<step>-<path>``: epoch and step zero-padded to 20 decimal digits, and the save's path
relative to the root as RFC 4648 base32 without padding.
"""

from __future__ import annotations

from publish.rules.errors import Failure
from publish.rules.redact import quoted

LIMIT = 10**20  #: epochs and steps lie in [0, LIMIT)
POSIX_NAME_MAX = 255
S3_KEY_MAX = 1024

#: The root's folders: the published entries, the saves (trainers write below exec/), and tombstones
#: (beside pub/: the folders a prune is about to remove, one empty file each).
PUB = "pub"
EXEC = "exec"
TOMB = "tomb"
#: Beside pub/: each entry's manifest, under the entry's name (publish.rules.manifest).
MAN = "man"
#: The object ``publish init`` puts directly under an S3 root's prefix, so a new root holds something.
ROOT_OBJECT = ".publish-root"

_BASE32 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
_BASE32_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_DIGIT_BYTES = b"0123456789"


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


def reserved(path: str) -> str:
    """Why the clean relative ``path`` can never be a save, or ``""``: pub/, tomb/ and man/ and everything in
    them, exec/ itself, and the root's own object.  (The root itself is no relative path at all.)"""
    first = path.partition("/")[0]
    if first in (PUB, TOMB, MAN):
        return f"{first}/ holds the root's own records" if first == path else f"it lies in {first}/"
    if path == EXEC:
        return f"{EXEC}/ holds every attempt's saves"
    if path == ROOT_OBJECT:
        return "it marks the root itself"
    return ""


# The reserved paths as all_canonical looks for them in paths joined by NUL: one ``in`` each, in C.
_RESERVED_MARKS = tuple(f"\0{head}{tail}" for head in (PUB, TOMB, MAN) for tail in ("\0", "/")) + (
    f"\0{EXEC}\0",
    f"\0{ROOT_OBJECT}\0",
)


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
    return Entry(int(epoch), int(step), _decode(encoded), entry_name)


def _decode(encoded: str, errors: str = "strict") -> str:
    """The clean relative path ``encoded`` (non-empty, base32 letters only) spells canonically; else ValueError.
    ``errors``: how bytes that are not UTF-8 are read ("strict": refused, as in an entry name)."""
    if len(encoded) % 8 in (1, 3, 6):
        raise ValueError("base32 of impossible length")
    nbytes, unused = divmod(len(encoded) * 5, 8)
    value = int(encoded.encode("ascii").translate(_TO_DIGITS), 32)
    if value & ((1 << unused) - 1):  # canonical: the bits past the last byte are zero
        raise ValueError("base32 is not canonical")
    try:
        path = (value >> unused).to_bytes(nbytes, "big").decode("utf-8", errors)
    except UnicodeDecodeError:
        raise ValueError("path is not UTF-8") from None
    if not clean_relative(path):
        raise ValueError(f"path {quoted(path)} is not a clean relative path")
    why = reserved(path)
    if why:
        raise ValueError(f"it names {quoted(path)}, which is never a save: {why}")
    return path


def parse_all(names: list[str], where: str) -> list[Entry]:
    """Parse every name listed in pub/; the first that does not parse is a Failure naming it."""
    entries = []
    for entry_name in sorted(names):
        try:
            entries.append(parse(entry_name))
        except ValueError as e:
            from publish.rules.redact import shown

            raise Failure(f"{shown(where + '/' + entry_name)}: not a publication entry ({e})") from None
    return entries


#: Up to this many entries, latest_of parses each name rather than checking them at once: parse_all costs about
#: 1.5 us a name more than all_canonical, and all_canonical's two C modules about 0.15 ms to import.
_FEW = 64


def all_canonical(names: list[str]) -> bool:
    """True when :func:`parse` takes every one of ``names`` (a non-empty list), checked in a few passes that
    run in C over all of them at once rather than name by name: a resolve of 100,000 entries spends its time
    here.  The same rules as parse and _decode, which report what is wrong with a name."""
    return _joined_paths(names) is not None


def paths_of(names: list[str]) -> list[str] | None:
    """The save each of ``names`` (a non-empty list) names, in their order, as :func:`parse` reads it, when
    parse takes every one of them (checked and decoded as :func:`all_canonical` checks them, in a few passes
    in C); else None (parse_all then says which name is wrong, and why)."""
    joined = _joined_paths(names)
    return None if joined is None else joined.split("\0")


def _joined_paths(names: list[str]) -> str | None:
    """The paths ``names`` (a non-empty list) name, joined by NUL, when parse takes every one; else None."""
    # the C modules, not operator.py; imported here, for a root of many entries: two modules less at start-up
    from _operator import and_, itemgetter, rshift
    from itertools import repeat

    count = len(names)
    if min(map(len, names)) < 43:  # 20 digits, '-', 20 digits, '-', at least one base32 letter
        return None
    heads = "".join(map(itemgetter(slice(0, 41)), names))
    encoded = list(map(itemgetter(slice(42, None)), names))
    if heads[20::41] != "-" * count or "".join(map(itemgetter(41), names)) != "-" * count:
        return None
    try:
        head_bytes = heads.encode("ascii")
        letters = ",".join(encoded).encode("ascii")
    except UnicodeEncodeError:
        return None
    # Deleting the allowed bytes leaves only the separators: the '-' at offset 20 of each head (checked above,
    # so every other byte of a head is a digit), and the ',' between the encoded parts.
    if head_bytes.translate(None, _DIGIT_BYTES) != b"-" * count:
        return None
    if letters.translate(None, _BASE32_BYTES) != b"," * (count - 1):
        return None
    lengths = list(map(len, encoded))
    sizes = {n: divmod(n * 5, 8) for n in set(lengths)}
    if any(n % 8 in (1, 3, 6) for n in sizes):
        return None
    nbytes = {n: size for n, (size, _) in sizes.items()}
    unused = {n: bits for n, (_, bits) in sizes.items()}
    masks = {n: (1 << bits) - 1 for n, bits in unused.items()}
    values = list(map(int, letters.translate(_TO_DIGITS).split(b","), repeat(32)))
    if any(map(and_, values, map(masks.__getitem__, lengths))):  # canonical: the unused bits are zero
        return None
    shifted = map(rshift, values, map(unused.__getitem__, lengths))
    raw = b"\0".join(map(int.to_bytes, shifted, map(nbytes.__getitem__, lengths), repeat("big")))  # type: ignore[arg-type]
    try:
        paths = raw.decode("utf-8")  # a NUL joins them: no sequence can run from one path into the next
    except UnicodeDecodeError:
        return None
    if paths.count("\0") != count - 1:  # a path holds a NUL
        return None
    elements = "/" + paths.replace("\0", "/") + "/"  # every path's elements, each between two '/'
    if "//" in elements or "/./" in elements or "/../" in elements:
        return None
    framed = "\0" + paths + "\0"  # each path between two NULs
    if any(mark in framed for mark in _RESERVED_MARKS):
        return None
    return paths


def latest_of(names: list[str], where: str) -> Entry | None:
    """The latest entry among ``names``, every one of which must parse (else Failure naming the first bad one).

    With epoch and step zero-padded to the same width, the greatest name is the latest entry, ties included,
    so only that one is turned into an Entry."""
    if not names:
        return None
    if len(names) <= _FEW:  # each name parsed costs less than importing what all_canonical runs in
        return parse_all(names, where)[-1]  # sorted by name: the last is the greatest
    if not all_canonical(names):
        parse_all(names, where)  # reports the first bad name in sorted order
        raise AssertionError("all_canonical refused names that parse takes")  # never: the same rules
    return parse(max(names))


def oldest_first(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=Entry.key)


# -- tombstones: tomb/<base32 of a folder's path>, the folders a prune is about to remove ----------------------


def tomb_name(path: str) -> str:
    """The tombstone name of the folder at ``path``: its path's bytes as RFC 4648 base32 without padding.

    A POSIX name is bytes: a leftover folder that ``prune -orphans`` removes may be named with bytes that are
    not UTF-8 (read by Python as lone surrogates, ``surrogateescape``), and its tombstone records those bytes
    as they are.  An entry's path must be UTF-8; a tombstone's need not."""
    if not clean_relative(path):
        raise ValueError(f"not a clean relative path: {path!r}")
    import base64

    return base64.b32encode(path.encode("utf-8", "surrogateescape")).decode("ascii").rstrip("=")


def parse_tomb(text: str) -> str:
    """The folder path a tombstone name stands for (bytes that are not UTF-8 as lone surrogates, as Python
    reads a POSIX name); ValueError (saying why) when the name is not canonical."""
    if not text or not _BASE32.issuperset(text):
        raise ValueError("not base32")
    return _decode(text, "surrogateescape")


def parse_tombs(names: list[str], where: str) -> list[str]:
    """The folder of every name listed in tomb/, sorted by name; the first that does not parse is a Failure."""
    folders = []
    for text in sorted(names):
        try:
            folders.append(parse_tomb(text))
        except ValueError as e:
            from publish.rules.redact import shown

            raise Failure(f"{shown(where + '/' + text)}: not a tombstone ({e})") from None
    return folders


# -- which folders are related, for many paths at once --------------------------------------------------------


def _key(path: str) -> str:
    # NUL lies below every character of a clean path, so these keys sort as tuples of elements would: the
    # folders inside a path follow it directly.
    return path.replace("/", "\0")


class Nest:
    """The paths of some entries, asking in O(log n) whether a folder is related to one of them.

    A folder is related when one of the paths is that folder, lies inside it or holds it."""

    __slots__ = ("_keys", "_outer", "_left", "_right")

    def __init__(self, paths: list[str]) -> None:
        import bisect  # only prune asks; resolve does not import it

        self._left, self._right = bisect.bisect_left, bisect.bisect_right
        self._keys = sorted({_key(p) for p in paths})
        # The outermost paths (none holds another): of these, only the greatest key not above a folder's
        # own can hold that folder.
        self._outer: list[str] = []
        for k in self._keys:
            if not self._outer or not k.startswith(self._outer[-1] + "\0"):
                self._outer.append(k)

    def __len__(self) -> int:
        return len(self._keys)

    def related(self, path: str) -> bool:
        k = _key(path)
        i = self._left(self._keys, k)
        if i < len(self._keys) and (self._keys[i] == k or self._keys[i].startswith(k + "\0")):
            return True  # the folder itself, or one inside it
        j = self._right(self._outer, k) - 1
        return j >= 0 and k.startswith(self._outer[j] + "\0")  # one around it
