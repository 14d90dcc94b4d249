"""What a resolve does beyond finding the newest save (publish.verbs.resolve): the check of a save against its
manifest (-verify), and the count of unpublished saves it mentions when nothing is published. A resolve that
answers without -verify loads none of it."""

from __future__ import annotations

from publish.rules import manifest
from publish.rules.errors import Failure, FileError, StoreError
from publish.rules.layout import EXEC, MAN, PUB
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.ops import Say
    from publish.rules import layout
    from publish.rules.deadline import Deadline
    from publish.stores.base import Store


def verified(dl: Deadline, store: Store, say: Say, entry: layout.Entry, deep: bool) -> bool:
    """True when the save of ``entry`` matches its manifest (``deep``: the digests too), or when the entry
    has none (said on stderr: roots written before manifests keep working).  Else False, said on stderr
    with the first bad file, or the manifest, and why.  A fault of the store itself is raised."""
    loc = shown(store.location(f"{PUB}/{entry.name}"))
    why = mismatch(dl, store, entry, deep)
    if why is None:
        man = store.location(f"{MAN}/{entry.name}")
        say.warn(f"resolve: {loc} has no manifest ({shown(man)}): not verified")
        return True
    if why:
        say.warn(f"resolve: passing over {loc}: {why}")
        return False
    return True


def mismatch(dl: Deadline, store: Store, entry: layout.Entry, deep: bool) -> str | None:
    """How the save of ``entry`` differs from its manifest (``deep``: the digests too), as ``resolve -verify``
    sees it: the first bad file, or the manifest, and why; "" when it matches; None when the entry has no
    manifest.  A fault of the store itself is raised.  Retention asks it too (publish.ops.retention.Saves),
    so a prune counts as kept only saves ``resolve -verify`` would answer."""
    man = store.location(f"{MAN}/{entry.name}")
    try:
        data = store.read_manifest(dl, entry.name, manifest.MANIFEST_LIMIT)
        if data is None:
            return None
        rows = manifest.decode(entry.name, data, man)
    except Failure as e:
        if isinstance(e, StoreError) and not isinstance(e, FileError) and e.limit is None:
            raise  # the store failing says nothing about this entry
        return str(e)
    bad = store.check_rows(dl, entry.path, rows, deep)
    return "" if bad is None else f"{shown(bad[0])}: {bad[1]}"


def unpublished_saves(dl: Deadline, store: Store) -> int:
    """How many folders (and files: Lightning's ``.ckpt``) under exec/<attempt>/ look like saves of any
    framework."""
    from publish.frameworks import FRAMEWORKS  # here: -verify needs none of them

    count = 0
    for attempt in store.list_folders(dl, EXEC, []):
        folders, files = store.children(dl, f"{EXEC}/{attempt}")
        for kind, names in (("folders", folders), ("files", files)):
            rules = [fw for fw in FRAMEWORKS.values() if fw.kind == kind]
            count += sum(1 for child in names if any(fw.step(child) is not None for fw in rules))
    return count
