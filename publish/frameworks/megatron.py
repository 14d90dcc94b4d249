"""Megatron-LM: ``iter_<7 digits>/`` folders, whole once ``latest_checkpointed_iteration.txt`` beside them
names that iteration or a later one and every file the save's format calls for is whole.

``save_checkpoint`` (megatron/training/checkpointing.py; Megatron-LM main at core 0.20.0, the same in core
0.16) writes the save into ``<save>/iter_<iteration:07d>/``, waits for every rank at a barrier (a
synchronous save) or runs its finalize functions once every rank's writes are done (``--async-save``),
then rank 0 writes the iteration into the tracker with a plain ``open(..., 'w')``, no rename: a reader can
find it empty.  A save whose tracker was never written (a job killed before an async save finalized) is
not one Megatron resumes from, and neither is a folder the tracker never reached.  An uploader copying
SAVES to S3 lands the files in any order, the tracker before the shards among them, so the tracker only
says the save was finished where it was written; each format's own files say whether the copy here is.

- ``--ckpt-format torch_dist`` (the default): megatron.core.dist_checkpointing's ``save``
  (serialization.py) has rank 0 write ``common.pt`` (torch.save), then every rank its DCP storage files,
  the coordinator ``.metadata``, then rank 0 ``metadata.json`` (``{"sharded_backend": "torch_dist", ...}``,
  a plain write; under ``--async-save`` in the finalize step, before the tracker's).  Whole when
  ``metadata.json`` reads as a ``torch_dist`` config, ``common.pt`` is a whole zip, and the DCP rule holds
  (publish.frameworks.dcp).  A folder with DCP's files and no ``metadata.json`` (``--ckpt-format
  torch_dcp`` or ``fsdp_dtensor``) is never whole here: watch such saves with ``-framework dcp``.
- ``--ckpt-format torch`` (legacy): each model-parallel rank ``torch.save``\\ s
  ``mp_rank_<tp:02d>[_<pp:03d>][_<ep:03d>]/model_optim_rng.pt`` (the pipeline part when the pipeline size is
  over one, the expert part when the expert size is), with ``distrib_optim.pt`` beside it under the
  distributed optimizer.  Whole when the first rank's file records the sizes
  (publish.frameworks.parse.megatron_args) and every file they call for is a whole zip.

``release/`` (a tracker reading ``release``) is a converted model, not a training save: never published.
"""

from __future__ import annotations

from publish.rules import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

KIND = "folders"
PREFIX = "iter_"
TRACKER = "latest_checkpointed_iteration.txt"
TRACKER_LIMIT = 4096
CONFIG = "metadata.json"
CONFIG_LIMIT = 64 * 1024
COMMON = "common.pt"
LEGACY = "model_optim_rng.pt"
OPTIM = "distrib_optim.pt"


def step_of(name: str) -> str:
    """``iter_<digits>`` (seven digits as Megatron-LM pads them, more past iteration 9,999,999)."""
    digits = name[len(PREFIX) :]
    return digits if name.startswith(PREFIX) and layout.digits(digits) else ""


def rank_folder(tp: int, pp: int | None, ep: int | None) -> str:
    """The folder of ranks ``tp``, ``pp``, ``ep`` in a legacy save (None: that parallelism is off):
    ``get_checkpoint_name``."""
    name = f"mp_rank_{tp:02d}"
    if pp is not None:
        name += f"_{pp:03d}"
    return name if ep is None else f"{name}_{ep:03d}"


def tracker_step(dl: Deadline, store: Store, saves: str) -> int | None:
    """The iteration the tracker in ``saves`` names, or None (absent, empty while rank 0 rewrites it,
    ``release``, anything but ASCII digits)."""
    data = store.read(dl, f"{saves}/{TRACKER}" if saves else TRACKER, TRACKER_LIMIT)
    if data is None:
        return None
    text = data.strip(b" \t\r\n")
    return int(text) if text.isdigit() and len(text) < 21 else None  # bytes.isdigit: ASCII digits only


def complete(dl: Deadline, store: Store, path: str, step: int, note: Callable[[str], None]) -> bool:
    latest = tracker_step(dl, store, path.rpartition("/")[0])
    if latest is None or latest < step:
        return False
    sizes = store.sizes(dl, path)
    if any(name.endswith("/" + LEGACY) and name.startswith("mp_rank_") for name in sizes):
        return _legacy(dl, store, path, sizes, note)
    return torch_dist(dl, store, path, sizes, note)


def torch_dist(
    dl: Deadline, store: Store, path: str, sizes: dict[str, int], note: Callable[[str], None]
) -> bool:
    """True when the folder ``path`` (its files ``sizes``) holds a whole ``torch_dist`` save: shared with
    NeMo, whose ``weights/`` is one."""
    from publish.frameworks import dcp
    from publish.frameworks.parse import ziptail

    if CONFIG not in sizes or COMMON not in sizes:
        return False
    backend = _backend(store.read(dl, f"{path}/{CONFIG}", CONFIG_LIMIT))
    if backend is None:
        return False  # cut off while rank 0 writes it, or not there yet
    if backend != "torch_dist":
        from publish.rules.redact import quoted, shown

        note(
            f"{shown(store.location(f'{path}/{CONFIG}'))} names the sharded backend {quoted(backend)}, not "
            "torch_dist: the save is not published (publish it with `publish publish` once you know it is whole)"
        )
        return False
    if not ziptail.whole(sizes[COMMON], _reader(dl, store, f"{path}/{COMMON}")):
        return False
    return dcp.storage_whole(dl, store, path, sizes)


def _backend(data: bytes | None) -> str | None:
    """The ``sharded_backend`` a ``metadata.json`` names, or None when it does not read as one."""
    import json

    if data is None:
        return None
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    backend = config.get("sharded_backend") if type(config) is dict else None
    return backend if type(backend) is str else None


def _reader(dl: Deadline, store: Store, path: str) -> Callable[[int, int], bytes]:
    def read(offset: int, length: int) -> bytes:
        return store.read_range(dl, path, offset, length) or b""

    return read


def _legacy(
    dl: Deadline, store: Store, path: str, sizes: dict[str, int], note: Callable[[str], None]
) -> bool:
    from publish.frameworks.parse import megatron_args, ziptail
    from publish.rules.errors import Failure, StoreError
    from publish.rules.redact import shown

    first = next(
        (
            f"{folder}/{LEGACY}"
            for folder in ("mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000")
            if f"{folder}/{LEGACY}" in sizes
        ),
        None,
    )
    if first is None:
        return False
    where = shown(store.location(f"{path}/{first}"))
    try:
        saved = megatron_args.read(sizes[first], _reader(dl, store, f"{path}/{first}"), where, dl)
    except megatron_args.Incomplete:
        return False
    except StoreError:
        raise  # the store failing is no fault of the file
    except Failure as e:
        note(f"{e}: the save is not published (publish it with `publish publish` once you know it is whole)")
        return False
    pp, ep = saved.pp > 1, saved.ep > 1
    if first != f"{rank_folder(0, 0 if pp else None, 0 if ep else None)}/{LEGACY}":
        note(
            f"{where}: its args record tensor {saved.tp}, pipeline {saved.pp} and expert {saved.ep} parallel "
            "ranks, whose folders it does not lie in: the save is not published"
        )
        return False
    count = saved.tp * saved.pp * saved.ep * (2 if saved.optim else 1)
    if count > len(sizes):  # up to 2^48 names a file could ask for: counted before any is made
        return False
    needed: list[str] = []
    for t in range(saved.tp):
        for p in range(saved.pp):
            for x in range(saved.ep):
                folder = rank_folder(t, p if pp else None, x if ep else None)
                needed.append(f"{folder}/{LEGACY}")
                if saved.optim:
                    needed.append(f"{folder}/{OPTIM}")
    if any(name not in sizes for name in needed):
        return False
    return all(
        name == first or ziptail.whole(sizes[name], _reader(dl, store, f"{path}/{name}")) for name in needed
    )
