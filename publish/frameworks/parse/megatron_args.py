"""What a Megatron-LM legacy checkpoint file says its save holds, read without torch and without running any
of it.

Megatron-LM's ``save_checkpoint`` (megatron/training/checkpointing.py, Megatron-LM core 0.16 and main at
0.20.0) under ``--ckpt-format torch`` has ``torch.save`` write ``generate_state_dict``'s dict into
``iter_<7 digits>/mp_rank_<tp:02d>[_<pp:03d>][_<ep:03d>]/model_optim_rng.pt``.  Its ``args`` is the
run's ``argparse.Namespace``, which records ``tensor_model_parallel_size``,
``pipeline_model_parallel_size``, ``expert_model_parallel_size`` (absent before expert parallelism was
added: one), ``use_distributed_optimizer`` and ``no_save_optim``: from them, every file of the save.

The archive is read as a DeepSpeed model-states file is (publish.frameworks.parse.deepspeed_states): its
``data.pkl`` checked whole against its CRC, its pickle read by publish.frameworks.parse.torch_pickle with
every global an inert record, over 16 KiB in a forked child the deadline ends.  The dict also holds the
model's and optimizer's own state and the RNG states (numpy's among them), so, as for DeepSpeed, a global
is refused only when it is what a crafted file names to run something.
"""

from __future__ import annotations

from publish.frameworks.parse import deepspeed_states, torch_pickle
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

#: A parallel size over this is refused: watch would look for that many files.
RANKS_LIMIT = 1 << 16
_NAMESPACE = ("argparse", "Namespace")

FORM = torch_pickle.Form(
    "a Megatron-LM checkpoint file", "a Megatron-LM save", deepspeed_states.allowed, persistent=True
)
Incomplete = torch_pickle.Incomplete


class Layout:
    """What a legacy save holds: ``tp``, ``pp`` and ``ep`` parallel sizes, and whether each model-parallel
    folder holds a ``distrib_optim.pt`` (``optim``)."""

    __slots__ = ("tp", "pp", "ep", "optim")

    def __init__(self, tp: int, pp: int, ep: int, optim: bool) -> None:
        self.tp = tp
        self.pp = pp
        self.ep = ep
        self.optim = optim

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and (self.tp, self.pp, self.ep, self.optim) == (
            other.tp,
            other.pp,
            other.ep,
            other.optim,
        )

    def __repr__(self) -> str:
        return f"Layout(tp={self.tp}, pp={self.pp}, ep={self.ep}, optim={self.optim})"


def read(
    size: int, read_range: Callable[[int, int], bytes], where: str, deadline: Deadline = UNBOUNDED
) -> Layout:
    """The layout the ``model_optim_rng.pt`` of ``size`` bytes records; ``read_range(offset, length)``
    returns its bytes.

    Raises :class:`Incomplete` while the archive is not whole, and Failure naming ``where`` when it is
    anything but a torch.save archive of a Megatron-LM checkpoint dict, or is not read by ``deadline``."""
    data = deepspeed_states.data_pkl(size, read_range, where)
    try:
        fields = torch_pickle.staged(
            len(data),
            deadline,
            lambda: _fields(data, where, guarded=True),
            lambda dl, guarded: _in_child(data, where, dl, guarded),
            IN_PROCESS,
            FAST_BASE,
            FAST_RATE,
            lambda dl: torch_pickle.timed_out(where, dl, FORM),
        )
    except Incomplete:  # torch.save writes data.pkl whole before any other member, and its CRC matched
        raise Failure(f"{where}: its data.pkl ends before its pickle does") from None
    return Layout(*fields)


def _in_child(data: bytes, where: str, deadline: Deadline, guarded: bool) -> tuple[int, int, int, bool]:
    tp, pp, ep, optim = torch_pickle.in_child(
        lambda: _fields(data, where, guarded),
        where,
        deadline,
        len(data),
        MEMORY_PER_BYTE * len(data) + MEMORY_BASE,
    )
    return tp, pp, ep, optim


def _fields(data: bytes, where: str, guarded: bool = False) -> tuple[int, int, int, bool]:
    """tensor, pipeline and expert parallel sizes and whether a distrib_optim.pt is written, from ``data``."""
    cap = MEMORY_PER_BYTE * len(data) + MEMORY_BASE if len(data) > IN_PROCESS else None
    document = torch_pickle.load(data, where, FORM, guarded, cap)
    if type(document) is not dict:
        raise Failure(f"{where}: is not a Megatron-LM checkpoint dict (it holds a {type(document).__name__})")
    args = document.get("args")
    if not isinstance(args, torch_pickle.Record) or args.origin != _NAMESPACE:
        raise Failure(f"{where}: records no args (the argparse.Namespace Megatron-LM saves)")
    values = torch_pickle.fields(args, "its args", where)
    tp = _size(values, "tensor_model_parallel_size", where, True)
    pp = _size(values, "pipeline_model_parallel_size", where, True)
    ep = _size(values, "expert_model_parallel_size", where, False)
    optim = values.get("use_distributed_optimizer") is True and values.get("no_save_optim") is not True
    return tp, pp, ep, optim


def _size(values: dict[object, object], key: str, where: str, needed: bool) -> int:
    if key not in values:
        if needed:
            raise Failure(f"{where}: its args record no {key}")
        return 1
    value = values[key]
    if type(value) is not int or not 1 <= value <= RANKS_LIMIT:  # type(): a bool is not a size
        # named by its type alone: the repr of what a file holds can be made as long as 2^n for n bytes
        shown = (
            f"{value}" if type(value) is int and abs(value) < 1 << 64 else f"of type {type(value).__name__}"
        )
        raise Failure(f"{where}: its args' {key} ({shown}) is not a parallel size from 1 to {RANKS_LIMIT}")
    return value
