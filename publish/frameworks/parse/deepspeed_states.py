"""What a DeepSpeed model-states file says its save holds, read without torch and without running any of it.

``DeepSpeedEngine._save_checkpoint`` (deepspeed/runtime/engine.py, 0.19) has ``torch.save`` write a dict
(``_common_checkpoint_state``) into ``mp_rank_<mp:02d>_model_states.pt`` (under ZeRO stage 3, one
``zero_pp_rank_<dp>_mp_rank_<mp:02d>_model_states.pt`` per data-parallel rank).  It records
``dp_world_size`` and ``mp_world_size``, and, when the optimizer's state is partitioned into one file per
data-parallel rank (``zero_pp_rank_<dp>_mp_rank_<mp:02d>_optim_states.pt``, ``bf16_``-prefixed under bf16):
``param_shapes`` (ZeRO stages 1 to 3, whose ``optimizer`` is None) or an ``optimizer`` dict holding
``partition_count`` (DeepSpeed's bf16 optimizer without ZeRO).

``torch.save`` writes a zip archive whose ``<archive>/data.pkl`` is the pickle, the tensors' bytes in
members of their own.  The archive must be whole (publish.frameworks.parse.ziptail), ``data.pkl`` stored as torch stores it
and matching its CRC, and its pickle is read by publish.frameworks.parse.torch_pickle: every global becomes an inert
record, every tensor storage (a persistent id) too.  Unlike a DCP ``.metadata`` the dict holds the
trainer's own ``client_state``, whose objects may be of any class: a global is refused only when it is
what a crafted file names to run something (``os``, ``subprocess``, ``builtins.eval``, ...).
"""

from __future__ import annotations

from publish.frameworks.parse import torch_pickle, ziptail
from publish.frameworks.parse.torch_pickle import (
    FAST_BASE,
    FAST_RATE,
    IN_PROCESS,
    MEMORY_BASE,
    MEMORY_PER_BYTE,
)
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

#: A data.pkl over this is refused (a model's parameter names and shapes stay far below it).
LIMIT = 64 * 1024 * 1024
#: A world size over this is refused: watch would look for that many files.
RANKS_LIMIT = 1 << 20

#: Modules whose names run commands, open files or sockets, or import or compile code: a model-states file
#: never names them, and one that does is refused (nothing named is ever called either way).
_REFUSED_ROOTS = frozenset(
    (
        "os",
        "posix",
        "nt",
        "posixpath",
        "ntpath",
        "subprocess",
        "commands",
        "popen2",
        "sys",
        "shutil",
        "socket",
        "importlib",
        "runpy",
        "code",
        "codeop",
        "ctypes",
        "pickle",
        "_pickle",
        "marshal",
        "pty",
        "webbrowser",
        "io",
        "_io",
        "tempfile",
        "multiprocessing",
        "signal",
        "types",
        "operator",
        "_operator",
    )
)
#: The builtins a pickle of plain data names; any other (``eval``, ``exec``, ``open``, ``__import__``) is refused.
_BUILTINS = frozenset(
    (
        "object",
        "set",
        "frozenset",
        "bytearray",
        "bytes",
        "complex",
        "slice",
        "range",
        "dict",
        "list",
        "tuple",
        "int",
        "float",
        "str",
        "bool",
        "getattr",  # an Enum member pickled by name: here only one more record
    )
)


def allowed(module: str, name: str) -> bool:
    if module in ("builtins", "__builtin__"):  # the second as a protocol 2 pickle from Python 2 names it
        return name in _BUILTINS
    return module.partition(".")[0] not in _REFUSED_ROOTS


FORM = torch_pickle.Form("a DeepSpeed model states file", "a DeepSpeed save", allowed, persistent=True)
Incomplete = torch_pickle.Incomplete


class Layout:
    """What a save holds, by its model-states file: ``dp`` and ``mp`` world sizes, whether each
    data-parallel rank wrote an optimizer shard of its own (``sharded``), the pipeline layers whose
    ``layer_<n>-model_states.pt`` it calls for (``layers``: a pipeline save's model states hold no
    ``module``, and its ``param_shapes`` name each parameter ``<layer>.<name>``), the experts of each MoE
    layer (``experts``: ``num_experts``), and whether each expert-parallel rank wrote an
    ``expp_rank_<r>_mp_rank_<mp>_optim_states.pt`` (``expert_optim``: an MoE save without ZeRO)."""

    __slots__ = ("dp", "mp", "sharded", "layers", "experts", "expert_optim")

    def __init__(
        self,
        dp: int,
        mp: int,
        sharded: bool,
        layers: tuple[int, ...] = (),
        experts: tuple[int, ...] = (),
        expert_optim: bool = False,
    ) -> None:
        self.dp = dp
        self.mp = mp
        self.sharded = sharded
        self.layers = layers
        self.experts = experts
        self.expert_optim = expert_optim

    def _key(self) -> tuple[object, ...]:
        return (self.dp, self.mp, self.sharded, self.layers, self.experts, self.expert_optim)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self._key() == other._key()

    def __repr__(self) -> str:
        return (
            f"Layout(dp={self.dp}, mp={self.mp}, sharded={self.sharded}, layers={self.layers}, "
            f"experts={self.experts}, expert_optim={self.expert_optim})"
        )


def read(
    size: int, read_range: Callable[[int, int], bytes], where: str, deadline: Deadline = UNBOUNDED
) -> Layout:
    """The layout the model-states file of ``size`` bytes records; ``read_range(offset, length)`` returns its
    bytes.

    Raises :class:`Incomplete` while the archive is not whole (still being written, or rewritten while it
    was read), and Failure naming ``where`` when it is anything but a torch.save archive of a DeepSpeed
    model-states dict, or is not read by ``deadline``."""
    data = data_pkl(size, read_range, where)
    try:
        return torch_pickle.staged(
            len(data),
            deadline,
            lambda: _layout(data, where, guarded=True),
            lambda dl, guarded: _in_child(data, where, dl, guarded),
            IN_PROCESS,
            FAST_BASE,
            FAST_RATE,
            lambda dl: torch_pickle.timed_out(where, dl, FORM),
        )
    except Incomplete:  # torch.save writes data.pkl whole before any other member, and its CRC matched
        raise Failure(f"{where}: its data.pkl ends before its pickle does") from None


def data_pkl(size: int, read_range: Callable[[int, int], bytes], where: str) -> bytes:
    """The ``<archive>/data.pkl`` of the torch.save archive of ``size`` bytes, checked against its CRC.

    Raises :class:`Incomplete` while the archive is not whole (still being written, or rewritten while it
    was read), and Failure naming ``where`` when it is not a torch.save archive or its pickle is over LIMIT."""
    import binascii

    found = ziptail.directory(size, read_range)
    if found is None:
        raise Incomplete
    entries, end = found
    folder = entries[0][0].partition(b"/")[0]
    want = folder + b"/data.pkl"
    entry = next((e for e in entries if e[0] == want), None)
    if not folder or entry is None:
        raise Failure(f"{where}: holds no <archive>/data.pkl: not a torch.save archive")
    _, method, crc, packed, _, _ = entry
    if method != 0:
        raise Failure(f"{where}: its data.pkl is compressed (method {method}): not written by torch.save")
    if packed > LIMIT:
        raise Failure(f"{where}: its data.pkl is over {LIMIT >> 20} MiB: refused")
    data = ziptail.member(entry, end, read_range)
    if data is None or binascii.crc32(data) != crc:
        raise Incomplete  # its members are not where the directory says: it changed while it was read
    return data


def _in_child(data: bytes, where: str, deadline: Deadline, guarded: bool) -> Layout:
    fields = torch_pickle.in_child(
        lambda: _fields(data, where, guarded),
        where,
        deadline,
        len(data),
        MEMORY_PER_BYTE * len(data) + MEMORY_BASE,
    )
    dp, mp, sharded, layers, experts, expert_optim = fields
    return Layout(dp, mp, sharded, tuple(layers), tuple(experts), expert_optim)


def _layout(data: bytes, where: str, guarded: bool = False) -> Layout:
    return Layout(*_fields(data, where, guarded))


def _fields(
    data: bytes, where: str, guarded: bool = False
) -> tuple[int, int, bool, tuple[int, ...], tuple[int, ...], bool]:
    """dp_world_size, mp_world_size, whether the optimizer is sharded, the pipeline layers with parameters,
    the experts of each MoE layer and whether expert optimizer files are written, from the pickle ``data``."""
    cap = MEMORY_PER_BYTE * len(data) + MEMORY_BASE if len(data) > IN_PROCESS else None
    document = torch_pickle.load(data, where, FORM, guarded, cap)
    if type(document) is not dict:
        raise Failure(f"{where}: is not a DeepSpeed model states dict (it holds a {type(document).__name__})")
    dp = _ranks(document, "dp_world_size", where)
    mp = _ranks(document, "mp_world_size", where)
    optimizer = document.get("optimizer")
    shapes = document.get("param_shapes")
    sharded = shapes is not None or (type(optimizer) is dict and "partition_count" in optimizer)
    layers: tuple[int, ...] = ()
    if "module" in document and document["module"] is None:  # PipelineEngine: the layers are files
        found: set[int] = set()
        for groups in (shapes, document.get("frozen_param_shapes")):
            for name in _names(groups):
                head = name.partition(".")[0]
                if head.isascii() and head.isdigit() and len(head) <= 6:
                    found.add(int(head))
        layers = tuple(sorted(found))
    experts: tuple[int, ...] = ()
    counts = document.get("num_experts")
    if type(counts) is list and not document.get("ds_autoep_layers"):
        if not all(type(n) is int and 1 <= n <= RANKS_LIMIT for n in counts) or len(counts) > RANKS_LIMIT:
            raise Failure(f"{where}: its num_experts is not a list of expert counts from 1 to {RANKS_LIMIT}")
        experts = tuple(counts)
    return dp, mp, sharded, layers, experts, bool(experts) and shapes is None


def _names(groups: object) -> list[str]:
    """The parameter names of ``param_shapes``: a list of one (ordered) dict of name to shape per group."""
    names: list[str] = []
    if type(groups) is not list:
        return names
    for group in groups:
        if type(group) is dict:
            keys: list[object] = list(group)
        elif isinstance(group, torch_pickle.Record):
            keys = [key for key, _ in group.items]
        else:
            continue
        names += [key for key in keys if type(key) is str]
    return names


def _ranks(document: dict[object, object], key: str, where: str) -> int:
    if key not in document:
        raise Failure(f"{where}: records no {key}")
    value = document[key]
    if type(value) is not int or not 1 <= value <= RANKS_LIMIT:  # type(): a bool is not a world size
        # named by its type alone: the repr of what a file holds can be made as long as 2^n for n bytes
        shown = (
            f"{value}" if type(value) is int and abs(value) < 1 << 64 else f"of type {type(value).__name__}"
        )
        raise Failure(f"{where}: its {key} ({shown}) is not a world size from 1 to {RANKS_LIMIT}")
    return value
