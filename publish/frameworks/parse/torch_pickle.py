"""Torch pickles read without torch and without running any of their code: the reader that DCP's ``.metadata``
(publish.frameworks.parse.dcp_metadata) and DeepSpeed's model states (publish.frameworks.parse.deepspeed_states) share.

The pickle is read by an unpickler whose every global is an inert record: a class of our own that keeps
the arguments it was built with, the state it was given and the items set on it, and has no behaviour.
Nothing is imported, nothing named by the file is called.  Which globals a file may name is the
:class:`Form`'s to say: one outside it is a fault naming the file.  A persistent id (``torch.save``'s
reference to a tensor's storage) is an inert record too, where the form allows them.

Two readers: the C unpickler, fast, and the guarded one, the pure-Python unpickler whose every dict key and
set item is checked first to be one whose hash a file cannot choose, and whose text numbers and memo indices
are bounded: linear whatever the file holds, and about five times slower.  :func:`staged` picks between
them and runs a read over ``IN_PROCESS`` bytes in a forked child that the deadline ends (publish.frameworks.parse.forked).
"""

from __future__ import annotations

from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    T = TypeVar("T")


class Incomplete(Exception):
    """The pickle ends before it does: the file is still being written."""


class Form:
    """What a pickle is read as.  ``what`` names it in messages (``"a DCP .metadata"``), ``writer`` is what
    writes it (``"a DCP save"``); ``allowed(module, name)`` says whether it may name that global;
    ``persistent``: whether it may hold persistent ids (``torch.save``'s tensor storages)."""

    def __init__(
        self, what: str, writer: str, allowed: Callable[[str, str], bool], persistent: bool = False
    ) -> None:
        self.what = what
        self.writer = writer
        self.allowed = allowed
        self.persistent = persistent


class Record:
    """An inert stand-in for any global the pickle names: it records, it never acts.  ``items`` holds what
    the pickle set on it as on a dict (an ``OrderedDict``'s items), in order, unhashed."""

    __slots__ = ("args", "state", "items", "__weakref__")
    origin: tuple[str, str] = ("", "")
    args: tuple[object, ...]
    state: object
    items: list[tuple[object, object]]

    def __new__(cls, *args: object, **kwargs: object) -> Record:
        record = object.__new__(cls)
        record.args = args
        record.state = None
        record.items = []
        return record

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        self.state = state

    def __setitem__(self, key: object, value: object) -> None:
        self.items.append((key, value))

    def __reduce__(self) -> str:  # never pickled again
        raise TypeError("an inert record is not picklable")


def _record_class(module: str, name: str) -> type[Record]:
    return type("Record", (Record,), {"__slots__": (), "origin": (module, name)})


#: What a persistent id becomes: its ``args`` are the id's items, as the file gave them.
#: A torch pickle (a DCP .metadata, a DeepSpeed data.pkl) up to this size is read in the process, by the guarded reader: a few milliseconds whatever it
#: holds, in Python code between whose steps a signal handler runs.  (The C reader was used before, and a
#: few hundred bytes made one of its calls last for ever: a key built of 2^40 shared tuples to hash, or a
#: memo index of 10^9 that it allocates and zeroes 8 bytes per index for.)  A larger one is read in a forked
#: child under the deadline (publish.frameworks.parse.forked): 560 KB of colliding keys held the interpreter for 20 s in one C
#: call.
IN_PROCESS = 16 * 1024
#: The C reader reads a real DCP .metadata at about 9 MB/s here: one given FAST_BASE seconds plus a second per
#: FAST_RATE bytes (ten times that) and not done has dicts whose keys collide, and is read again by the
#: guarded reader, linear whatever the file holds.  Either way the deadline bounds the whole.
FAST_BASE = 0.5
FAST_RATE = 1_000_000
#: The child's address space beyond the process's: a real .metadata takes about 8 bytes of memory per byte
#: of file to read (16 by the guarded reader); a file that needs more than this fails with MemoryError in the
#: child, where it cannot take the node's memory from the training job beside it.
MEMORY_PER_BYTE = 32
MEMORY_BASE = 256 * 1024 * 1024

PERSISTENT = ("", "persistent id")


class _Exact:
    """The bytes of a pickle as the pure-Python unpickler reads them: a read that the data ends short of is
    EOFError (a file still being written), as the C unpickler reports it "truncated"."""

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
    return kind in (str, bytes, bool, type(None)) or isinstance(key, Record)


class _Memo(dict):  # type: ignore[type-arg]
    """The guarded reader's memo: an index a text PUT gives is below 2^61-1, so no two hash alike (a memo of
    indices that collide would fill in quadratic time)."""

    def __init__(self, where: str, form: Form) -> None:
        super().__init__()
        self.where = where
        self.form = form

    def __setitem__(self, key: int, value: object) -> None:
        if not 0 <= key < _P61:
            raise Failure(f"{self.where}: does not read as {self.form.what}: a memo index of 2^61-1 or more")
        super().__setitem__(key, value)


def _guarded(base: type[Any], where: str, form: Form) -> dict[int, Any]:
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
                    f"{where}: does not read as {form.what}: {what} as a dict key or set item ({form.writer} "
                    "holds none; its hash could be made to collide)"
                )

    def keyed(op: Any, step: int, at: int | None = None) -> Any:
        def run(self: Any) -> None:
            check(self.stack if at is None else [self.stack[at]], step)
            op(self)

        return run

    def short(op: Any, most: int) -> Any:
        """``op`` reading a text number of at most ``most`` bytes: int() of a longer one takes time quadratic
        in its digits before Python 3.11 (torch's writers write binary numbers only)."""

        def run(self: Any) -> None:
            readline = self.readline

            def bounded() -> bytes:
                line: bytes = readline()
                if len(line) > most:
                    raise Failure(
                        f"{where}: does not read as {form.what}: a text number of {len(line) - 1} bytes"
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


def load(data: bytes, where: str, form: Form, guarded: bool = False, cap: int | None = None) -> object:
    """The document, read by the C unpickler, or (``guarded``) by the pure-Python one whose dicts and sets
    refuse keys a file could make collide: linear in ``data`` whatever it holds, and about 5x slower.

    ``cap``: the memory the reader was given (in a child), for the message when it runs out.  Raises
    :class:`Incomplete` when the pickle is cut off, and Failure naming ``where`` for anything else."""
    import io
    import pickle
    import struct

    classes: dict[tuple[str, str], type[Record]] = {}
    base: type[Any] = pickle._Unpickler if guarded else pickle.Unpickler

    class Reader(base):  # type: ignore[misc]
        if guarded:
            dispatch = _guarded(base, where, form)

            def __init__(self, file: Any) -> None:
                super().__init__(file)
                self.memo = _Memo(where, form)

        def find_class(self, module: str, name: str) -> type[Record]:
            if not form.allowed(module, name):
                raise Failure(
                    f"{where}: names {shown(module + '.' + name)}, which {form.writer} never holds: not read "
                    "(nothing in it was run)"
                )
            key = (module, name)
            if key not in classes:
                classes[key] = _record_class(module, name)
            return classes[key]

        if form.persistent:

            def persistent_load(self, pid: object) -> Record:
                if PERSISTENT not in classes:
                    classes[PERSISTENT] = _record_class(*PERSISTENT)
                record = classes[PERSISTENT]
                return record(*pid) if isinstance(pid, tuple) else record(pid)

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
        raise Failure(f"{where}: does not read as {form.what}: {e}") from None
    except MemoryError:
        need = f"more than {cap >> 20} MiB" if cap is not None else "more memory than there is"
        raise Failure(f"{where}: needs {need} of memory to read: not read as {form.what}") from None
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        struct.error,
    ) as e:
        raise Failure(f"{where}: does not read as {form.what}: {type(e).__name__}: {e}") from None
    if stream.tell() != len(data):
        raise Failure(f"{where}: holds {len(data) - stream.tell()} bytes after its pickle ends")
    return document


def fields(record: object, what: str, where: str) -> dict[object, object]:
    """A dataclass record's fields: the dict its BUILD gave it."""
    state = record.state if isinstance(record, Record) else None
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        # (dict state, slots state), as pickle writes for a class with __slots__
        state = {**(state[0] or {}), **state[1]} if isinstance(state[0], (dict, type(None))) else None
    if not isinstance(state, dict):
        raise Failure(f"{where}: {what} has no fields")
    return state


def staged(
    size: int,
    deadline: Deadline,
    here: Callable[[], T],
    child: Callable[[Deadline, bool], T],
    in_process: int,
    fast_base: float,
    fast_rate: float,
    timed_out: Callable[[Deadline], Failure],
) -> T:
    """A read of a pickle of ``size`` bytes within ``deadline``: ``here()`` (the guarded reader, in the
    process) up to ``in_process`` bytes or where no child can be forked; else ``child(deadline, guarded)``
    (:func:`in_child`), first by the C reader given ``fast_base`` seconds plus a second per ``fast_rate``
    bytes, then, not done by then, by the guarded reader given what is left of ``deadline``."""
    from publish.frameworks.parse import forked

    if size <= in_process or not forked.available():
        return here()  # linear; without fork the deadline cannot stop it
    fast = Deadline(fast_base + size / fast_rate)
    left = deadline.left()
    if left is not None and left <= (fast.left() or 0):
        fast = deadline
    try:
        return child(fast, False)
    except forked.TimedOut:
        if fast is deadline:
            raise timed_out(deadline) from None
    except forked.Unavailable:  # at a process or descriptor limit: read here, linear, as without fork
        return here()
    # Longer than the C reader takes on any real file of this size: its dicts' keys may collide.
    try:
        return child(deadline, True)
    except forked.TimedOut:
        raise timed_out(deadline) from None
    except forked.Unavailable:
        return here()


def timed_out(where: str, deadline: Deadline, form: Form) -> Failure:
    given = f" (the time given was {deadline.timeout:g}s)" if deadline.timeout is not None else ""
    return Failure(f"{where}: timed out reading it as {form.what}{given}")


def in_child(work: Callable[[], object], where: str, deadline: Deadline, size: int, memory: int) -> Any:
    """``work()`` (a marshal-able answer, or :class:`Incomplete`, or Failure) in a forked child that
    ``deadline`` ends (forked.TimedOut), whose answer is at most ``4 * size + 65536`` bytes and which may map
    ``memory`` bytes more than the process."""
    import io  # noqa: F401 - what the reader imports, imported before the fork: the one file may unpack
    import marshal
    import pickle  # noqa: F401 - an extension module on first import, and the child must write nothing
    import struct  # noqa: F401

    from publish.frameworks.parse import forked

    def run() -> bytes:
        try:
            return marshal.dumps(("answer", work()))  # type: ignore[arg-type]
        except Incomplete:
            return marshal.dumps(("incomplete", None))
        except Failure as e:
            return marshal.dumps(("fault", str(e)))

    try:
        answer = forked.run(run, deadline, 4 * size + 65536, memory)
        kind, value = marshal.loads(answer)
    except forked.Died as e:
        raise Failure(f"{where}: its reader failed: {e}") from None
    if kind == "incomplete":
        raise Incomplete
    if kind == "fault":
        raise Failure(value)
    return value
