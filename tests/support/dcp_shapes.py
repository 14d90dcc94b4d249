"""DCP saves shaped as torch.distributed.checkpoint writes them, without torch: for tests of watch and the stores.

The ``.metadata`` pickle is made by hand the way DCP's pickle looks (protocol 2: the global, NEWOBJ, then
BUILD with the dataclass's field dict), so it reads with publish.frameworks.parse.dcp_metadata exactly as a real one does;
tests/frameworks/test_dcp_metadata.py checks the reader against real saves made with torch.
"""

from __future__ import annotations

import pickle
from pathlib import Path

_MOD = "torch.distributed.checkpoint.metadata"
_FS = "torch.distributed.checkpoint.filesystem"


class Obj:
    """A record to pickle as ``module.name`` built with ``state``."""

    def __init__(self, module: str, name: str, state: object) -> None:
        self.module, self.name, self.state = module, name, state


class Raw:
    """Pickle opcodes written as they are, for shapes other writers produce."""

    def __init__(self, code: bytes) -> None:
        self.code = code


def dumps(obj: object) -> bytes:
    out = bytearray(b"\x80\x02")

    def emit(o: object) -> None:
        if isinstance(o, Raw):
            out.extend(o.code)
        elif isinstance(o, Obj):
            out.extend(f"c{o.module}\n{o.name}\n".encode())
            out.extend(b")\x81")
            emit(o.state)
            out.extend(b"b")
        elif isinstance(o, dict):
            out.extend(b"}(")
            for k, v in o.items():
                emit(k)
                emit(v)
            out.extend(b"u")
        else:
            out.extend(pickle.dumps(o, protocol=2)[2:-1])

    emit(obj)
    out.extend(b".")
    return bytes(out)


def metadata(storage: object, **fields: object) -> bytes:
    """A .metadata whose storage_data is ``storage``: {item: {relative_path, offset, length}} (or anything
    else, given as it is)."""
    infos = (
        {Obj(_MOD, "MetadataIndex", {"fqn": k}): Obj(_FS, "_StorageInfo", v) for k, v in storage.items()}
        if isinstance(storage, dict)
        else storage
    )
    return dumps(Obj(_MOD, "Metadata", {"state_dict_metadata": {}, "storage_data": infos, **fields}))


def metadata_for(files: dict[str, int]) -> bytes:
    """A .metadata naming each storage file with one item that fills it."""
    return metadata(
        {
            f"item{i}": {"relative_path": name, "offset": 0, "length": size}
            for i, (name, size) in enumerate(files.items())
        }
    )


DEFAULT_FILES = {"__0_0.distcp": 64, "__1_0.distcp": 48}


def write_save(folder: Path, files: dict[str, int] | None = None, *, marker: bool = True) -> bytes:
    """Write a whole DCP save into ``folder``: the storage files, then .metadata (unless ``marker`` is False).
    Returns the .metadata's bytes."""
    files = DEFAULT_FILES if files is None else files
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in files.items():
        (folder / name).write_bytes(b"\x01" * size)
    data = metadata_for(files)
    if marker:
        (folder / ".metadata").write_bytes(data)
    return data


_P61 = (1 << 61) - 1  # CPython hashes an int modulo this prime: k * _P61 all hash to 0


def colliding(keys: int) -> bytes:
    """A .metadata naming ``f`` (1 byte) whose storage_data has ``keys`` int keys of one hash, each naming one
    memoized _StorageInfo: building that dict takes time quadratic in ``keys``, inside one C call (about
    20 s for 40,000 keys, 560 KB)."""
    info = metadata({"a": {"relative_path": "f", "offset": 0, "length": 1}})
    record = info[info.index(f"c{_FS}".encode()) : info.rindex(b"bu") + 1]
    body = bytearray(b"}(") + pickle.dumps(_P61, protocol=2)[2:-1] + record + b"q\x01"
    for k in range(2, keys + 1):
        body += pickle.dumps(k * _P61, protocol=2)[2:-1] + b"h\x01"
    body += b"u"
    return metadata(Raw(bytes(body)))
