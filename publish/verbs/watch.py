"""watch: publish each save once it is complete, until told to stop."""

from __future__ import annotations

import threading

from publish.errors import Failure
from publish.frameworks import Framework
from publish.stores.base import Store
from publish.verbs import Say
from publish.verbs.publish import publish_entry


class Watcher:
    """Scans SAVES and publishes complete saves in step order, each once."""

    def __init__(self, store: Store, say: Say, framework: Framework, saves: str, epoch: int) -> None:
        self.store = store
        self.say = say
        self.framework = framework
        self.saves = saves
        self.epoch = epoch
        self.done: set[str] = set()  # folders published (or found published); never looked at again

    def scan(self, timeout: float | None) -> None:
        self.store.begin(timeout)
        candidates = []
        for folder in self.store.list_folders(self.saves):
            if folder in self.done:
                continue
            step = self.framework.step(folder)
            if step is not None:
                candidates.append((step, folder))
        for step, folder in sorted(candidates):
            path = f"{self.saves}/{folder}"
            if self.framework.complete(self.store, path, step):
                publish_entry(self.store, self.say, self.epoch, step, path)
                self.done.add(folder)


def _bounded(scan: Watcher, timeout: float) -> None:
    """One scan that gives up after ``timeout`` seconds even if a filesystem call hangs."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            scan.scan(timeout)
        except BaseException as e:  # handed to the caller's thread
            errors.append(e)

    worker = threading.Thread(target=run, name="publish-last-scan", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise Failure(f"the last scan of {scan.store.location(scan.saves)} did not finish within -timeout")
    if errors:
        raise errors[0]


def watch(
    store: Store,
    say: Say,
    framework: Framework,
    saves: str,
    epoch: int,
    interval: float,
    timeout: float,
    stop: threading.Event,
) -> None:
    """Scan every ``interval`` seconds until ``stop`` is set, then scan once more (bounded by ``timeout``)."""
    store.check_root()
    watcher = Watcher(store, say, framework, saves, epoch)
    while not stop.is_set():
        watcher.scan(timeout)
        stop.wait(interval)
    _bounded(watcher, timeout)
