"""What a DCP ``.metadata`` says a save holds, read without torch and without running any of its code.

torch.distributed.checkpoint's writers (``FileSystemWriter``, ``FsspecWriter``) pickle a ``Metadata``
dataclass whose ``storage_data`` maps each item of the state dict to a ``_StorageInfo(relative_path,
offset, length)``: the storage file beside ``.metadata`` and the byte range the item occupies in it
(torch/distributed/checkpoint/metadata.py and filesystem.py).  A save is whole only when every file named
there holds at least ``offset + length`` bytes.

The pickle is read by an unpickler whose every global is an inert record: a class of our own that keeps
the arguments it was built with and the state it was given, and has no behaviour.  Nothing is imported,
nothing named by the file is called.  A global outside the modules a DCP save names (``torch`` and its
submodules, and the few builtins pickle itself uses) is a fault: a ``.metadata`` that names ``os.system``
was not written by DCP.
"""

from __future__ import annotations

from publish.deadline import UNBOUNDED, Deadline
from publish.errors import Failure
from publish.layout import clean_relative
from publish.redact import quoted, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: A .metadata over this is refused (a save with millions of items stays far below it).
LIMIT = 64 * 1024 * 1024
#: A .metadata up to this size is read in the process, by the guarded reader: a few milliseconds whatever it
#: holds, in Python code between whose steps a signal handler runs.  (The C reader was used before, and a
#: few hundred bytes made one of its calls last for ever: a key built of 2^40 shared tuples to hash, or a
#: memo index of 10^9 that it allocates and zeroes 8 bytes per index for.)  A larger one is read in a forked
#: child under the deadline (publish.forked): 560 KB of colliding keys held the interpreter for 20 s in one C
#: call.
IN_PROCESS = 16 * 1024
#: The C reader reads a real .metadata at about 9 MB/s here: one given FAST_BASE seconds plus a second per
#: FAST_RATE bytes (ten times that) and not done has dicts whose keys collide, and is read again by the
#: guarded reader, linear whatever the file holds.  Either way the deadline bounds the whole.
FAST_BASE = 0.5
FAST_RATE = 1_000_000
#: The child's address space beyond the process's: a real .metadata takes about 8 bytes of memory per byte
#: of file to read (16 by the guarded reader); a file that needs more than this fails with MemoryError in the
#: child, where it cannot take the node's memory from the training job beside it.
MEMORY_PER_BYTE = 32
MEMORY_BASE = 256 * 1024 * 1024

#: Modules whose globals a DCP save's pickle may name (each becomes an inert record).
_ALLOWED_ROOTS = ("torch",)
_ALLOWED = frozenset(
    (
        ("collections", "OrderedDict"),
        ("copyreg", "_reconstructor"),
        ("builtins", "object"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        # an Enum member pickled by name (TensorProperties' memory format, on some Python 3.11 releases):
        # getattr(<the enum's record>, "NAME"), which here only builds one more record
        ("builtins", "getattr"),
    )
) | frozenset(
    # StorageMeta.checkpoint_id is the path the writer was given, often a pathlib.Path: its class is pickled
    # as pathlib.X up to Python 3.12, as pathlib._local.X from 3.13 on (where the classes moved)
    (module, name)
    for module in ("pathlib", "pathlib._local")
    for name in ("Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
)

_METADATA = ("torch.distributed.checkpoint.metadata", "Metadata")
_STORAGE_INFO = ("torch.distributed.checkpoint.filesystem", "_StorageInfo")


class Incomplete(Exception):
    """The .metadata ends before its pickle does: it is still being written."""


class _Record:
    """An inert stand-in for any global the pickle names: it records, it never acts."""

    __slots__ = ("args", "state", "__weakref__")
    origin: tuple[str, str] = ("", "")
    args: tuple[object, ...]
    state: object

    def __new__(cls, *args: object, **kwargs: object) -> _Record:
        record = object.__new__(cls)
        record.args = args
        record.state = None
        return record

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        self.state = state

    def __reduce__(self) -> str:  # never pickled again
        raise TypeError("an inert record is not picklable")


def _record_class(module: str, name: str) -> type[_Record]:
    return type("Record", (_Record,), {"__slots__": (), "origin": (module, name)})


def _allowed(module: str, name: str) -> bool:
    if (module, name) in _ALLOWED:
        return True
    return any(module == root or module.startswith(root + ".") for root in _ALLOWED_ROOTS)


class _Exact:
    """The bytes of a .metadata as the pure-Python unpickler reads them: a read that the data ends short of
    is EOFError (a file still being written), as the C unpickler reports it "truncated"."""

    def __init__(self, data: bytes) -> None:
        import io

        self._io = io.BytesIO(data)

    def tell(self) -> int:
        return self._io.tell()

    def read(self, n: int = -1) -> bytes:
        got = self._io.read(n)
        if n >= 0 and len(got) < n:
            raise EOFError
        return got

    def readinto(self, buf: Any) -> int:
        n = self._io.readinto(buf)
        if n < len(buf):
            raise EOFError
        return n

    def readline(self) -> bytes:
        got = self._io.readline()
        if not got.endswith(b"\n"):
            raise EOFError
        return got


#: Hashes no pickle can make collide in numbers: str and bytes (randomised), an inert record (its identity),
#: and ints below CPython's modulus (their own value; only -1 and -2 share one), floats other than NaN (at
#: most a few dozen per hash), bools and None.  A tuple or frozenset key hashes from its items, which a file
#: can choose to collide; an int past the modulus hashes to its remainder.
_P61 = (1 << 61) - 1


def _plain_key(key: object) -> bool:
    kind = type(key)
    if kind is int:
        return -_P61 < key < _P61  # type: ignore[operator]
    if kind is float:
        return key == key  # a NaN: before Python 3.10 every NaN hashed to 0, and no two are equal
    return kind in (str, bytes, bool, type(None)) or isinstance(key, _Record)


class _Memo(dict):  # type: ignore[type-arg]
    """The guarded reader's memo: an index a text PUT gives is below 2^61-1, so no two hash alike (a memo of
    indices that collide would fill in quadratic time)."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def __setitem__(self, key: int, value: object) -> None:
        if not 0 <= key < _P61:
            raise Failure(f"{self.where}: does not read as a DCP .metadata: a memo index of 2^61-1 or more")
        super().__setitem__(key, value)


def _guarded(base: type[Any], where: str) -> dict[int, Any]:
    """The pure-Python unpickler's opcodes, with every dict key and set item checked first to be one whose
    hash a file cannot collide (:func:`_plain_key`): a dict or set then fills in linear time."""

    def check(items: list[object], step: int) -> None:
        for item in items[::step]:
            if not _plain_key(item):
                what = (
                    "an int of 2^61-1 or more"
                    if type(item) is int
                    else "a NaN"
                    if type(item) is float
                    else f"a {type(item).__name__}"
                )
                raise Failure(
                    f"{where}: does not read as a DCP .metadata: {what} as a dict key or set item (a DCP save "
                    "holds none; its hash could be made to collide)"
                )

    def keyed(op: Any, step: int, at: int | None = None) -> Any:
        def run(self: Any) -> None:
            check(self.stack if at is None else [self.stack[at]], step)
            op(self)

        return run

    def short(op: Any, most: int) -> Any:
        """``op`` reading a text number of at most ``most`` bytes: int() of a longer one takes time quadratic
        in its digits before Python 3.11 (a DCP save writes binary numbers only)."""

        def run(self: Any) -> None:
            readline = self.readline

            def bounded() -> bytes:
                line: bytes = readline()
                if len(line) > most:
                    raise Failure(
                        f"{where}: does not read as a DCP .metadata: a text number of {len(line) - 1} bytes"
                    )
                return line

            self.readline = bounded
            try:
                op(self)
            finally:
                self.readline = readline

        return run

    dispatch = dict(base.dispatch)
    for code, most in ((b"I", 64), (b"L", 64), (b"p", 20), (b"g", 20)):
        dispatch[code[0]] = short(base.dispatch[code[0]], most)
    for code, step, at in (
        (b"s", 1, -2),
        (b"u", 2, None),
        (b"d", 2, None),
        (b"\x90", 1, None),
        (b"\x91", 1, None),
    ):
        dispatch[code[0]] = keyed(base.dispatch[code[0]], step, at)
    return dispatch


def _load(data: bytes, where: str, guarded: bool = False) -> object:
    """The document, read by the C unpickler, or (``guarded``) by the pure-Python one whose dicts and sets
    refuse keys a file could make collide: linear in ``data`` whatever it holds, and about 5x slower."""
    import io
    import pickle
    import struct

    classes: dict[tuple[str, str], type[_Record]] = {}
    base: type[Any] = pickle._Unpickler if guarded else pickle.Unpickler

    class Reader(base):  # type: ignore[misc]
        if guarded:
            dispatch = _guarded(base, where)

            def __init__(self, file: Any) -> None:
                super().__init__(file)
                self.memo = _Memo(where)

        def find_class(self, module: str, name: str) -> type[_Record]:
            if not _allowed(module, name):
                raise Failure(
                    f"{where}: names {shown(module + '.' + name)}, which a DCP save never holds: not read "
                    "(nothing in it was run)"
                )
            key = (module, name)
            if key not in classes:
                classes[key] = _record_class(module, name)
            return classes[key]

    stream = _Exact(data) if guarded else io.BytesIO(data)
    try:
        document = Reader(stream).load()
    except Failure:
        raise
    except EOFError:
        raise Incomplete from None
    except pickle.UnpicklingError as e:
        if "truncated" in str(e):
            raise Incomplete from None
        raise Failure(f"{where}: does not read as a DCP .metadata: {e}") from None
    except MemoryError:
        need = (
            f"more than {(MEMORY_PER_BYTE * len(data) + MEMORY_BASE) >> 20} MiB"
            if len(data) > IN_PROCESS
            else "more memory than there is"
        )
        raise Failure(f"{where}: needs {need} of memory to read: not read as a DCP .metadata") from None
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        struct.error,
    ) as e:
        raise Failure(f"{where}: does not read as a DCP .metadata: {type(e).__name__}: {e}") from None
    if stream.tell() != len(data):
        raise Failure(f"{where}: holds {len(data) - stream.tell()} bytes after its pickle ends")
    return document


def _fields(record: object, what: str, where: str) -> dict[object, object]:
    """A dataclass record's fields: the dict its BUILD gave it."""
    state = record.state if isinstance(record, _Record) else None
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        # (dict state, slots state), as pickle writes for a class with __slots__
        state = {**(state[0] or {}), **state[1]} if isinstance(state[0], (dict, type(None))) else None
    if not isinstance(state, dict):
        raise Failure(f"{where}: {what} has no fields")
    return state


def _count(value: object, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise Failure(f"{where}: {what} is not a byte count")
    return value


def storage_ends(data: bytes, where: str, deadline: Deadline = UNBOUNDED) -> dict[str, int]:
    """Each storage file the .metadata names, and the least size it must have (the greatest offset + length).

    Raises :class:`Incomplete` when the pickle is cut off, and Failure naming ``where`` when it is anything
    but a DCP Metadata naming at least one storage file, or when it is not read by ``deadline``."""
    from publish import forked

    if len(data) <= IN_PROCESS:
        return _ends(data, where, guarded=True)
    if not forked.available():
        return _ends(data, where, guarded=True)  # linear, though the deadline cannot stop it
    fast = Deadline(FAST_BASE + len(data) / FAST_RATE)
    left = deadline.left()
    if left is not None and left <= (fast.left() or 0):
        fast = deadline
    try:
        return _in_child(data, where, fast, guarded=False)
    except forked.TimedOut:
        if fast is deadline:
            raise _timed_out(where, deadline) from None
    except forked.Unavailable:  # at a process or descriptor limit: read here, linear, as without fork
        return _ends(data, where, guarded=True)
    # Longer than the C reader takes on any real .metadata of this size: its dicts' keys may collide.
    try:
        return _in_child(data, where, deadline, guarded=True)
    except forked.TimedOut:
        raise _timed_out(where, deadline) from None
    except forked.Unavailable:
        return _ends(data, where, guarded=True)


def _timed_out(where: str, deadline: Deadline) -> Failure:
    given = f" (the time given was {deadline.timeout:g}s)" if deadline.timeout is not None else ""
    return Failure(f"{where}: timed out reading it as a DCP .metadata{given}")


def _in_child(data: bytes, where: str, deadline: Deadline, guarded: bool) -> dict[str, int]:
    """:func:`_ends` in a forked child that ``deadline`` ends (forked.TimedOut)."""
    import io  # noqa: F401 - what the reader imports, imported before the fork: the one file may unpack
    import marshal
    import pickle  # noqa: F401 - an extension module on first import, and the child must write nothing
    import struct  # noqa: F401

    from publish import forked

    def work() -> bytes:
        try:
            return marshal.dumps(("ends", _ends(data, where, guarded)))
        except Incomplete:
            return marshal.dumps(("incomplete", None))
        except Failure as e:
            return marshal.dumps(("fault", str(e)))

    try:
        answer = forked.run(work, deadline, 4 * len(data) + 65536, MEMORY_PER_BYTE * len(data) + MEMORY_BASE)
        kind, value = marshal.loads(answer)
    except forked.Died as e:
        raise Failure(f"{where}: its reader failed: {e}") from None
    if kind == "incomplete":
        raise Incomplete
    if kind == "fault":
        raise Failure(value)
    return dict(value)


def _ends(data: bytes, where: str, guarded: bool = False) -> dict[str, int]:
    document = _load(data, where, guarded)
    if not isinstance(document, _Record) or document.origin != _METADATA:
        raise Failure(f"{where}: is not a DCP Metadata")
    storage = _fields(document, "its Metadata", where).get("storage_data")
    if not isinstance(storage, dict) or not storage:
        raise Failure(f"{where}: names no storage (storage_data is empty or missing)")
    ends: dict[str, int] = {}
    for info in storage.values():
        if not isinstance(info, _Record) or info.origin != _STORAGE_INFO:
            raise Failure(f"{where}: a storage_data value is not a _StorageInfo")
        fields = _fields(info, "a _StorageInfo", where)
        path = fields.get("relative_path")
        if not isinstance(path, str):
            # named by its type alone: the repr of what a file holds can be made as long as 2^n for n bytes
            raise Failure(
                f"{where}: a storage file's relative_path is not a path (it is of type {type(path).__name__})"
            )
        if not path or not clean_relative(path):
            raise Failure(
                f"{where}: a storage file's relative_path {quoted(path)} is not a clean relative path"
            )
        end = _count(fields.get("offset"), f"{path}'s offset", where) + _count(
            fields.get("length"), f"{path}'s length", where
        )
        if end > ends.get(path, -1):
            ends[path] = end
    return ends
