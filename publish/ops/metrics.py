"""``-metrics FILE`` for watch and run: a Prometheus text-format file for node_exporter's textfile collector,
written after every scan (and after run's prune and requeue) through a temporary file renamed into place,
so the collector never reads half a file.  Besides the counters, what the root holds (:data:`CAPACITY`):
each publication's bytes and, on POSIX, the free space of the root's filesystem, measured after each scan
that finished.  The file may not go in the root's own folders (:func:`refused`)."""

from __future__ import annotations

import contextlib
import os
import time

from publish.rules.errors import FileError
from publish.rules.layout import MAN, PUB, TOMB
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from publish.rules.deadline import Deadline
    from publish.stores.base import Store

#: (name, type, help) of every series, in the order written.
SERIES = (
    (
        "publish_last_published_step",
        "gauge",
        "Step of the newest save this process published (-1 before its first).",
    ),
    (
        "publish_last_published_timestamp_seconds",
        "gauge",
        "When this process last published a save (seconds since the epoch), or when it started.",
    ),
    ("publish_scan_errors_total", "counter", "Scans that failed (the store, a faulty save passed over)."),
    ("publish_published_total", "counter", "Saves this process published."),
    ("publish_prune_removed_total", "counter", "Folders this process's prune removed."),
    ("publish_requeues_total", "counter", "Requeues this process asked Slurm for."),
    (
        "publish_events_failed_total",
        "counter",
        "-on-publish and -on-mirror commands that failed, were killed or did not start, and events dropped.",
    ),
)
#: (name, help) of the gauges of what the root holds, written once measured (the root's filesystem: POSIX).
CAPACITY = (
    ("publish_save_bytes", "Bytes of each publication's save, by entry (its manifest's, else its files')."),
    ("publish_publications_bytes", "Bytes of all the publications' saves."),
    ("publish_root_free_bytes", "Bytes a user may still write on the root's filesystem (POSIX roots)."),
    ("publish_root_size_bytes", "Bytes of the root's filesystem (POSIX roots)."),
)


def label(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def root_label(root: str) -> str:
    """The ``root`` label's value: the root as it is, or, when it is not UTF-8 (a POSIX path's bytes; the
    text format is UTF-8, and node_exporter refuses a whole file with one bad label), Go's ``%q`` of it,
    quotes included, as messages show such a name.  A root starts with ``/`` or ``s3://``, never with a quote,
    so the two forms never meet."""
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:
        from publish.rules.go.gocompat import go_quote

        return go_quote(root)
    return root


def refused(path: str, root: str) -> str:
    """Why the metrics file ``path`` may not be written for the POSIX root ``root`` (both absolute and
    lexically clean, as the file is written), or "".  The root's ``pub/``, ``tomb/`` and ``man/`` hold only
    what publish puts there (any other name in them fails every resolve or prune): the file may not be one of
    them, nor lie inside one, by its path (``..`` taken lexically, as the file is written), by the path its
    folder resolves to (symbolic links followed), nor in a folder that is one of them by another way in (a
    bind mount).  Checked once, when the command starts."""
    folder = path.rpartition("/")[0] or "/"
    only = "which holds only publish's own files"
    for name in (PUB, TOMB, MAN):
        reserved = f"{root.rstrip('/')}/{name}"
        if path == reserved or path.startswith(reserved + "/"):
            return f"in the root's {name}/, {only}"
    real = os.path.realpath(folder)
    real_root = os.path.realpath(root)
    ids: dict[tuple[int, int], str] = {}
    for name in (PUB, TOMB, MAN):
        reserved = f"{real_root.rstrip('/')}/{name}"
        if real == reserved or real.startswith(reserved + "/"):
            return f"its folder is {shown(real)}, in the root's {name}/, {only}"
        with contextlib.suppress(OSError):
            st = os.stat(reserved)
            ids[(st.st_dev, st.st_ino)] = name
    if ids:
        at = real
        while True:  # the folder and each folder above it, by identity
            with contextlib.suppress(OSError):
                st = os.stat(at)
                name = ids.get((st.st_dev, st.st_ino), "")
                if name:
                    return f"its folder {shown(real)} is in {shown(at)}, the root's {name}/ by another path, {only}"
            if at == "/":
                break
            at = at.rpartition("/")[0] or "/"
    return ""


class Metrics:
    """The counters of one watch or run, and the file they go to (``path``: absolute; "" writes nothing)."""

    def __init__(self, path: str, root: str, clock: float | None = None) -> None:
        self.path = path
        self.root = root
        self._label = label(root_label(root))
        self.values = {name: 0.0 for name, _, _ in SERIES}
        self.values["publish_last_published_step"] = -1
        self.values["publish_last_published_timestamp_seconds"] = time.time() if clock is None else clock
        self._failed = ""  # the last write's fault, said once
        self.saves: dict[str, int] | None = None  # bytes by entry name, once measured
        self.space: dict[str, int] | None = None  # the root's filesystem (POSIX), once measured
        self._unmeasured = ""  # the last measure's fault, said once
        self._sized: dict[str, int] = {}  # what each entry's save holds: a publication's size never changes

    def measure(self, dl: Deadline, store: Store, warn: Callable[[str], None]) -> None:
        """Read what the root holds: pub/ (one listing), the size of each publication not seen before (its
        manifest, publish.ops.capacity), and the free space of a POSIX root's filesystem.  A fault is said
        once on stderr (and once more when it changes), never raised: measuring never stops publishing."""
        from publish.ops.capacity import save_size, space
        from publish.rules import layout
        from publish.rules.errors import PublishError
        from publish.rules.layout import PUB

        try:
            entries = layout.parse_all(store.list_entries(dl), store.location(PUB))
            sized = {}
            for entry in entries:
                n = self._sized.get(entry.name)
                if n is None:
                    n = save_size(dl, store, entry).bytes
                    if n is None:
                        continue  # not told now (a link inside it): asked again next time
                sized[entry.name] = n
            self._sized = sized
            self.saves = sized
            self.space = space(store)
        except (PublishError, OSError) as e:
            text = f"-metrics: what {shown(store.root)} holds could not be measured: {e}"
            if text != self._unmeasured:
                warn(f"{text} (publishing goes on)")
            self._unmeasured = text
        else:
            self._unmeasured = ""

    def published(self, step: int, when: float | None = None) -> None:
        self.values["publish_published_total"] += 1
        if step >= self.values["publish_last_published_step"]:
            self.values["publish_last_published_step"] = step
        self.values["publish_last_published_timestamp_seconds"] = time.time() if when is None else when

    def count(self, name: str, n: int = 1) -> None:
        self.values[name] += n

    def text(self) -> str:
        lines = []
        root = self._label
        for name, kind, help_text in SERIES:
            value = self.values[name]
            number = repr(float(value)) if name.endswith("_seconds") else str(int(value))
            lines += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} {kind}",
                f'{name}{{root="{root}"}} {number}',
            ]
        return "\n".join(lines + self._capacity(root)) + "\n"

    def _capacity(self, root: str) -> list[str]:
        """The lines of :data:`CAPACITY`, once measured."""
        if self.saves is None:
            return []
        values: dict[str, list[tuple[str, int]]] = {
            "publish_save_bytes": [
                (f'root="{root}",entry="{label(name)}"', n) for name, n in sorted(self.saves.items())
            ],
            "publish_publications_bytes": [(f'root="{root}"', sum(self.saves.values()))],
        }
        if self.space is not None:
            values["publish_root_free_bytes"] = [(f'root="{root}"', self.space["free_bytes"])]
            values["publish_root_size_bytes"] = [(f'root="{root}"', self.space["total_bytes"])]
        lines = []
        for name, help_text in CAPACITY:
            if name in values:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
                lines += [f"{name}{{{labels}}} {n}" for labels, n in values[name]]
        return lines

    def write(self) -> None:
        """Write the file: a temporary file beside it, renamed into place.  A FileError naming it otherwise."""
        if not self.path:
            return
        folder, _, base = self.path.rpartition("/")
        tmp = f"{folder}/.{base}.tmp-{os.getpid()}"
        data = self.text().encode("utf-8")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise FileError(f"-metrics {shown(self.path)}", e) from None

    def flush(self, warn: Callable[[str], None]) -> None:
        """:meth:`write`, a fault said once on stderr (and once more when it changes) rather than raised: a
        metrics file that cannot be written never stops publishing."""
        try:
            self.write()
        except FileError as e:
            if str(e) != self._failed:
                warn(f"{e} (publishing goes on)")
            self._failed = str(e)
        else:
            self._failed = ""
