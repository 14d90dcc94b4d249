"""What a DCP ``.metadata`` says a save holds, read without torch and without running any of its code.

torch.distributed.checkpoint's writers (``FileSystemWriter``, ``FsspecWriter``) pickle a ``Metadata``
dataclass whose ``storage_data`` maps each item of the state dict to a ``_StorageInfo(relative_path,
offset, length)``: the storage file beside ``.metadata`` and the byte range the item occupies in it
(torch/distributed/checkpoint/metadata.py and filesystem.py).  A save is whole only when every file named
there holds at least ``offset + length`` bytes.

The pickle is read by publish.frameworks.parse.torch_pickle, whose every global is an inert record: a class of our own that
keeps the arguments it was built with and the state it was given, and has no behaviour.  Nothing is
imported, nothing named by the file is called.  A global outside the modules a DCP save names (``torch`` and its
submodules, and the few builtins pickle itself uses) is a fault: a ``.metadata`` that names ``os.system``
was not written by DCP.
"""

from __future__ import annotations

from publish.frameworks.parse import torch_pickle

# How a .metadata is read (in the process up to IN_PROCESS bytes, else in a child under the deadline, the C
# reader first, within an address-space cap) is publish.frameworks.parse.torch_pickle's rule, which a DeepSpeed data.pkl
# shares.  Imported by name, so that a test may change them here.
from publish.frameworks.parse.torch_pickle import (
    FAST_BASE,
    FAST_RATE,
    IN_PROCESS,
    MEMORY_BASE,
    MEMORY_PER_BYTE,
)
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure
from publish.rules.layout import clean_relative
from publish.rules.redact import quoted

#: A .metadata over this is refused (a save with millions of items stays far below it).
LIMIT = 64 * 1024 * 1024

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

#: Incomplete: the .metadata ends before its pickle does (it is still being written).
Incomplete = torch_pickle.Incomplete
_Record = torch_pickle.Record


def _allowed(module: str, name: str) -> bool:
    if (module, name) in _ALLOWED:
        return True
    return any(module == root or module.startswith(root + ".") for root in _ALLOWED_ROOTS)


FORM = torch_pickle.Form("a DCP .metadata", "a DCP save", _allowed)


def _load(data: bytes, where: str, guarded: bool = False) -> object:
    """The document, read by the C unpickler, or (``guarded``) by the pure-Python one whose dicts and sets
    refuse keys a file could make collide: linear in ``data`` whatever it holds, and about 5x slower."""
    cap = MEMORY_PER_BYTE * len(data) + MEMORY_BASE if len(data) > IN_PROCESS else None
    return torch_pickle.load(data, where, FORM, guarded, cap)


_fields = torch_pickle.fields


def _count(value: object, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise Failure(f"{where}: {what} is not a byte count")
    return value


def storage_ends(data: bytes, where: str, deadline: Deadline = UNBOUNDED) -> dict[str, int]:
    """Each storage file the .metadata names, and the least size it must have (the greatest offset + length).

    Raises :class:`Incomplete` when the pickle is cut off, and Failure naming ``where`` when it is anything
    but a DCP Metadata naming at least one storage file, or when it is not read by ``deadline``."""
    return torch_pickle.staged(
        len(data),
        deadline,
        lambda: _ends(data, where, guarded=True),
        lambda dl, guarded: _in_child(data, where, dl, guarded),
        IN_PROCESS,
        FAST_BASE,
        FAST_RATE,
        lambda dl: torch_pickle.timed_out(where, dl, FORM),
    )


def _in_child(data: bytes, where: str, deadline: Deadline, guarded: bool) -> dict[str, int]:
    """:func:`_ends` in a forked child that ``deadline`` ends (forked.TimedOut)."""
    ends = torch_pickle.in_child(
        lambda: _ends(data, where, guarded),
        where,
        deadline,
        len(data),
        MEMORY_PER_BYTE * len(data) + MEMORY_BASE,
    )
    return dict(ends)


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
