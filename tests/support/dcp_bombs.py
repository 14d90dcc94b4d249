"""Small .metadata files that once made one C call long: each is a DCP Metadata by its globals, and each
holds a structure whose hash, repr, comparison or construction a file can make cost far more than its size.

Each builder returns the whole file.  ``share(n)`` builds t0 = (); t(i+1) = (t(i), t(i)) with memo
references: n levels in 6n bytes, 2^n tuples when walked as a tree.
"""

from __future__ import annotations

import pickle

from tests.support.dcp_shapes import _FS, _MOD, Obj, Raw, dumps


def _memo(i: int) -> bytes:
    return b"h" + bytes([i]) if i < 256 else b"j" + i.to_bytes(4, "little")


def _put(i: int) -> bytes:
    return b"q" + bytes([i]) if i < 256 else b"r" + i.to_bytes(4, "little")


def share(levels: int, empty: bytes = b")", open_: bytes = b"", close: bytes = b"\x86") -> bytes:
    """Opcodes that leave t(levels) on the stack: ``empty`` is t0, and ``open_``, t(i), t(i), ``close`` makes
    t(i+1) (TUPLE2 by default; MARK ... LIST for lists)."""
    out = bytearray(empty + _put(0) + b"0")
    for i in range(levels):
        out += open_ + _memo(i) + _memo(i) + close + _put(i + 1) + b"0"
    return bytes(out + _memo(levels))


def _info(path: object) -> Obj:
    return Obj(_FS, "_StorageInfo", {"relative_path": path, "offset": 0, "length": 1})


def in_key(levels: int = 40) -> bytes:
    """storage_data = {t(levels): _StorageInfo("f", 0, 1)}: hash(t40) walks 2^40 tuples."""
    return dumps(
        Obj(_MOD, "Metadata", {"state_dict_metadata": {}, "storage_data": {Raw(share(levels)): _info("f")}})
    )


def in_set(levels: int = 40) -> bytes:
    """A frozenset holding t(levels) (FROZENSET), beside a good storage_data."""
    bomb = Raw(b"(" + share(levels) + b"\x91")
    return dumps(
        Obj(_MOD, "Metadata", {"state_dict_metadata": {"x": bomb}, "storage_data": {"a": _info("f")}})
    )


def in_path(levels: int = 40) -> bytes:
    """A relative_path that is a list l(levels), l(i+1) = [l(i), l(i)]: its repr is 2^levels lists long."""
    return dumps(
        Obj(
            _MOD,
            "Metadata",
            {"state_dict_metadata": {}, "storage_data": {"a": _info(Raw(share(levels, b"]", b"(", b"l")))}},
        )
    )


def deep(depth: int, open_: bytes, close: bytes) -> bytes:
    """A relative_path nested ``depth`` deep: ``open_`` * depth, an empty list, ``close`` * depth."""
    return dumps(
        Obj(
            _MOD,
            "Metadata",
            {
                "state_dict_metadata": {},
                "storage_data": {"a": _info(Raw(open_ * depth + b"]" + close * depth))},
            },
        )
    )


def field(name: str, value: bytes) -> bytes:
    """A good .metadata naming ``f`` whose _StorageInfo's ``name`` is the opcodes ``value``."""
    fields: dict[str, object] = {"relative_path": "f", "offset": 0, "length": 1}
    fields[name] = Raw(value)
    return dumps(
        Obj(
            _MOD,
            "Metadata",
            {"state_dict_metadata": {}, "storage_data": {"a": Obj(_FS, "_StorageInfo", fields)}},
        )
    )


def huge_int(size: int = 12_000) -> bytes:
    """LONG4 of ``size`` bytes: an int of 8 * size bits."""
    return b"\x8b" + size.to_bytes(4, "little") + b"\x7f" * size


def memo_at(index: int) -> bytes:
    """A good .metadata whose Metadata is PUT at memo ``index`` by a text PUT (the C reader allocates and
    zeroes 16 bytes per index up to it)."""
    data = dumps(Obj(_MOD, "Metadata", {"state_dict_metadata": {}, "storage_data": {"a": _info("f")}}))
    return data[:-1] + b"p%d\n." % index


def unused(value: bytes) -> bytes:
    """A good .metadata with ``value`` under state_dict_metadata["x"] (DCP reads nothing there here)."""
    return dumps(
        Obj(_MOD, "Metadata", {"state_dict_metadata": {"x": Raw(value)}, "storage_data": {"a": _info("f")}})
    )


_ = pickle  # the shapes above write their opcodes by hand
