"""The scan of watch and run: the saves of one framework under SAVES, each published once it is whole
(:class:`Watcher`), and the stop flag SIGTERM and SIGINT set (:class:`SignalStop`).
"""

from __future__ import annotations

import os

from publish.frameworks import Framework
from publish.ops import Say
from publish.ops.publishing import DOOMED, doomed_folders, doomed_save, publish_entry
from publish.process.threads import Worker
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError, StoreError
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Protocol

    from publish.ops.events import Events
    from publish.ops.metrics import Metrics
    from publish.stores.base import Store

    class Stop(Protocol):
        """What ``watch`` waits on: a ``threading.Event`` (or publish.process.threads.Flag), or a :class:`SignalStop`."""

        def is_set(self) -> bool: ...
        def wait(self, timeout: float | None = None) -> bool: ...


class SignalStop:
    """A stop flag that a signal handler may set.

    ``threading.Event.set()`` takes a lock that the main thread holds for a moment inside ``Event.wait()``;
    a handler that runs in that moment (handlers run in the main thread) waits for itself for ever, and a
    flood of signals breaks the interpreter's handling altogether.  Here :meth:`set` takes no lock: it sets
    a flag and writes one byte to a pipe, and :meth:`wait` sleeps in ``select`` on that pipe, so it wakes as
    soon as the flag is set, from a handler or from another thread.
    """

    def __init__(self) -> None:
        self._flag = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        self._flag = True
        try:
            os.write(self._write, b"\0")
        except OSError:  # the pipe is full (it is awake already) or closed
            return

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if not self._flag:
            import select

            select.select([self._read], [], [], timeout)
        return self._flag

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


class Watcher:
    """Scans SAVES and publishes complete saves in step order, each once.

    ``lenient`` (``publish run``): a save whose marker is faulty is reported once and passed over, and
    ``fault`` is set, instead of the scan failing; watch stops on it, naming the file.  Either way a child
    of SAVES that cannot be examined (a link loop, a name too long, a permission) is named once on stderr
    and passed over, and so is one that a framework recognises but can never publish.

    One save never stops the others: a whole save that cannot be published (its own name is not UTF-8, as an
    entry's must be; its manifest cannot be made, its files hashed, or its manifest written) is named once
    and the scan goes on to the next; ``fault`` is set while it stays unpublished (such a save is tried
    again on each scan, but for a name or a manifest that can never be).  A fault of the store itself (S3
    failing, the root gone) still fails the scan."""

    def __init__(
        self,
        store: Store,
        say: Say,
        framework: Framework,
        saves: str,
        epoch: int,
        lenient: bool = False,
        metrics: Metrics | None = None,
        world_size: int = 0,
    ) -> None:
        self.metrics = metrics
        self.world_size = world_size
        self.store = store
        self.say = say
        self.framework = framework
        self.saves = saves
        self.epoch = epoch
        self.lenient = lenient
        self.faulty = False  # a save was passed over for good (a faulty marker under run, a name not UTF-8)
        self.failing: dict[str, str] = {}  # folder -> why, for each whole save whose publication failed
        self.done: set[str] = set()  # folders published, found published, or faulty; never looked at again
        self.noted: set[tuple[str, str]] = set()  # (folder, kind) of each hint said, so each is said once
        self.on_publish: Callable[[], None] | None = None  # called after each entry this scan creates
        self.events: Events | None = None  # -on-publish: told of each entry this scan creates

    @property
    def fault(self) -> bool:
        """A save was passed over, or is still not published for a fault of its own (each said once)."""
        return self.faulty or bool(self.failing)

    def scan(self, dl: Deadline) -> None:
        """One scan; its store calls share ``dl``.  With metrics, the file is written after it, a failed
        scan counted."""
        if self.metrics is None:
            self._scan(dl)
            return
        try:
            self._scan(dl)
            self.metrics.measure(dl, self.store, self.say.warn)  # what the root holds now
        except BaseException:
            self.metrics.count("publish_scan_errors_total")
            raise
        finally:
            self.metrics.flush(self.say.warn)

    def _scan(self, dl: Deadline) -> None:
        doomed: layout.Nest | None = None  # the folders tomb/ names, read once a save is found whole
        for step, folder in self._candidates(dl):
            path = f"{self.saves}/{folder}"
            if not self._whole(dl, folder, path, step):
                continue
            if doomed is None:
                doomed = doomed_folders(dl, self.store)
            self._publish(dl, folder, path, step, doomed)

    def _candidates(self, dl: Deadline) -> list[tuple[int, str]]:
        """The folders (or files) of SAVES not yet done that name a step, by step; each other one that
        cannot be examined or never will be published said once."""
        candidates = []
        unexamined: list[tuple[str, str]] = []
        listed = (
            self.store.list_files(dl, self.saves)
            if self.framework.kind == "files"
            else self.store.list_folders(dl, self.saves, unexamined)
        )
        for name, why in unexamined:
            self._once(name, "unexamined", f"{self._where(name)}: cannot be examined ({why}): passed over")
        for folder in listed:
            if folder in self.done:
                continue
            step = self.framework.step(folder)
            if step is not None:
                candidates.append((step, folder))
                continue
            hint = self.framework.unpublishable(folder)
            if hint:
                self._once(folder, "unpublishable", f"{self._where(folder)}: {hint}")
        return sorted(candidates)

    def _whole(self, dl: Deadline, folder: str, path: str, step: int) -> bool:
        """Whether the save at ``path`` is whole by its framework's rule; a fault of its own is said (and
        under run passed over) as False, a fault of the store raised."""
        try:
            return self.framework.complete(
                dl, self.store, path, step, self._note_for(folder), self.world_size
            )
        except FileError as e:
            if e.unexaminable:
                self._once(folder, "unexamined", f"{e}: passed over (it cannot be examined)")
                return False
            if not self.lenient:
                raise
            self._failed(dl, folder, e)  # a disk error reading its marker: run goes on to the others
            return False
        except StoreError:
            raise  # the store failing is no fault of this save
        except Failure as e:
            if not self.lenient:
                raise
            self._passed_over(folder, str(e))
            return False

    def _publish(self, dl: Deadline, folder: str, path: str, step: int, doomed: layout.Nest) -> None:
        """Publish the whole save at ``path``, unless a prune is removing it or its name cannot be an
        entry's; a fault of its own is said, a fault of the store raised."""
        if doomed_save(dl, self.store, doomed, path):
            # A prune killed while removing it left its tombstone: what is left of it may look whole
            # and is not; the next prune finishes removing it.
            self._once(folder, "doomed", f"{self._where(folder)}: {DOOMED}: not published")
            return
        if not utf8_name(path):
            self._passed_over(
                folder, f"save {self._where(folder)}: its name is not UTF-8, which an entry name must be"
            )
            return
        try:
            created = publish_entry(dl, self.store, self.say, self.epoch, step, path)
        except FileError as e:  # a file of this save, or its manifest: this save's fault
            self._failed(dl, folder, e)
            return
        except StoreError:
            raise  # the store failing is no fault of this save
        except Failure as e:
            from publish.rules.manifest import ManifestError

            if isinstance(e, ManifestError):  # over a manifest's caps: it never will be published
                self._passed_over(folder, f"save {self._where(folder)}: {e}")
            else:  # gone while it was read, more files than a manifest may list
                self._failed(dl, folder, e)
            return
        self.failing.pop(folder, None)
        if created:
            if self.metrics:
                self.metrics.published(step)
            if self.events is not None:  # before the mirror's pass is woken: its event comes first
                self.events.fire("root", self.store, self.epoch, step, path)
            if self.on_publish is not None:
                self.on_publish()
        self.done.add(folder)

    @property
    def _verb(self) -> str:
        return "run" if self.lenient else "watch"

    def _passed_over(self, folder: str, why: str) -> None:
        """``folder``'s save will never be published by this process (``why``): said once, never looked at
        again."""
        self.done.add(folder)
        self.faulty = True
        if self.metrics is not None:
            self.metrics.count("publish_scan_errors_total")
        self.say.warn(f"{why}: passed over (the other saves are published; {self._verb} will exit non-zero)")

    def _failed(self, dl: Deadline, folder: str, e: Failure) -> None:
        """The publication of ``folder``'s save failed for a fault of its own: said once, the scan goes on,
        and each scan tries it again.  The root is looked at first: a root gone is the store's fault and
        fails the scan."""
        self.store.check_root(dl)
        first = folder not in self.failing
        self.failing[folder] = str(e)
        if first:
            if self.metrics is not None:
                self.metrics.count("publish_scan_errors_total")
            save = f"save {self._where(folder)}"
            text = str(e) if str(e).startswith(save) else f"{save}: {e}"
            if text.endswith(": not published"):  # a withdrawn publication says so already
                text = text[: -len(": not published")]
            self.say.warn(
                f"{text}: not published, tried again on each scan (the other saves are published; "
                f"{self._verb} will exit non-zero unless it is)"
            )

    def _where(self, name: str) -> str:
        return shown(self.store.location(f"{self.saves}/{name}"))

    def _once(self, folder: str, kind: str, text: str) -> None:
        if (folder, kind) not in self.noted:
            self.noted.add((folder, kind))
            self.say.warn(text)

    def _note_for(self, folder: str) -> Callable[[str], None]:
        """A framework's hint about ``folder``, said on stderr once for the whole run."""

        def note(text: str) -> None:
            self._once(folder, "note", text)

        return note


def utf8_name(path: str) -> bool:
    """True when ``path`` (a save's, below the root) is UTF-8, as an entry name must be (the manifest's
    rule, imported only for a name that is not ASCII)."""
    if path.isascii():
        return True
    from publish.rules.manifest import utf8

    return utf8(path)


def bounded(scan: Watcher, dl: Deadline) -> Deadline:
    """One scan within ``dl`` (made from a timeout), given up once that passes even if a filesystem call
    hangs; returns ``dl``."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            scan.scan(dl)
        except BaseException as e:  # handed to the caller's thread
            errors.append(e)

    worker = Worker(run)
    worker.join(dl.left())
    if worker.is_alive():
        raise Failure(f"the last scan of {scan.store.location(scan.saves)} did not finish within -timeout")
    if errors:
        raise errors[0]
    return dl
