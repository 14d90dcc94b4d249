"""NeMo 2: ``<name>--...-step=<N>-...`` folders holding ``weights/`` (a Megatron ``torch_dist`` save) and
``context/``, whole once NeMo's unfinished marker beside the folder is gone and both parts are whole.

NeMo's ``ModelCheckpoint`` (nemo/lightning/pytorch/callbacks/model_checkpoint.py, NeMo 2.6.0rc0) names a
save from its ``filename`` template (``{model_name}--{val_loss:.2f}-{step}-{consumed_samples}`` in the
recipes, ``<name>--<monitor>=...-{epoch}-{step}`` from NeMoLogger: ``step=<N>`` after a ``-``).  In
``_save_checkpoint`` rank 0 first touches ``<folder>-unfinished`` beside the folder (and all ranks meet at a
barrier), then the strategy writes ``weights/`` (``MegatronCheckpointIO.save_checkpoint``, nemo/lightning/io/
pl.py: megatron-core's ``dist_checkpointing.save``, so ``common.pt``, DCP's files and ``metadata.json``),
rank 0 dumps ``context/`` (``io.json`` with a plain write, then ``model.yaml``), and only once every rank is
done (a barrier; under async save the finalize step) rank 0 removes the marker.  A folder whose marker is
there is never whole, whatever else it holds (NeMo #10228: an unfinished last save was skipped, and every
requeue restarted from scratch).  The marker's absence alone is not enough where an uploader copies SAVES
to S3 in any order (the marker is never uploaded once removed, and the folder's files land in any order),
so both parts are checked too.

``<...>-last`` (the copy ``save_last`` makes of the newest save, or a link to it) and ``<...>-EMA`` (the EMA
weights' copy) are not saves of their own.
"""

from __future__ import annotations

from publish.rules import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
UNFINISHED = "-unfinished"
WEIGHTS = "weights"
CONTEXT = "context"
IO_JSON = "io.json"
IO_LIMIT = 16 * 1024 * 1024
_COPIES = ("-last", "-EMA", UNFINISHED)


def step_of(name: str) -> str:
    """The digits after the one ``step=`` that starts the name or follows ``-`` and is followed by ``-`` or
    the name's end; ``""`` for none, for two, and for ``-last`` and ``-EMA`` copies."""
    if name.endswith(_COPIES):
        return ""
    found = ""
    at = name.find("step=")
    while at >= 0:
        end = at + 5
        while end < len(name) and "0" <= name[end] <= "9":
            end += 1
        digits = name[at + 5 : end]
        if (
            (at == 0 or name[at - 1] == "-")
            and (end == len(name) or name[end] == "-")
            and layout.digits(digits)
        ):
            if found:
                return ""  # two steps in one name: not ours to choose
            found = digits
        at = name.find("step=", at + 1)
    return found


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    from publish.frameworks import megatron
    from publish.rules.errors import Failure, StoreError

    try:
        if store.exists(dl, path + UNFINISHED):
            return False
    except StoreError:
        raise
    except Failure:  # a folder, a link or a FIFO by the marker's name: NeMo takes anything there for one
        return False
    sizes = store.sizes(dl, path)
    weights = WEIGHTS + "/"
    inner = {name[len(weights) :]: size for name, size in sizes.items() if name.startswith(weights)}
    if not megatron.torch_dist(dl, store, f"{path}/{WEIGHTS}", inner, note):
        return False
    if f"{CONTEXT}/{IO_JSON}" not in sizes:
        return False
    return _json(store.read(dl, f"{path}/{CONTEXT}/{IO_JSON}", IO_LIMIT))


def _json(data: bytes | None) -> bool:
    """True when ``data`` reads as a JSON object (``io.json`` is written in one plain write: cut off, it
    does not)."""
    import json

    if data is None:
        return False
    try:
        return type(json.loads(data.decode("utf-8"))) is dict
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
