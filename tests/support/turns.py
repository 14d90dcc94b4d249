"""Two commands in one process, taking turns at their store calls, so an overlap is made on purpose.

Each command runs through ``publish.cli.main`` in a thread of its own.  The stores they open (those whose
root starts with a given prefix) are wrapped: every call of a Store method first waits for the command's
turn.  :meth:`Turns.let` lets one command make ``n`` more store calls (or run to its end) and returns once
it waits at its next call, or has ended.  So ``let(a, i); let(b, j); let(a); let(b)`` is the interleaving
"i calls of a, j of b, then the rest of a, then the rest of b", the same every time it is run.
"""

from __future__ import annotations

import io
import math
import threading
import time
from typing import Any, Callable

import publish.stores as stores
from publish.cli import main

#: The Store protocol's methods (publish.stores.base), each a step of a command.
OPERATIONS = frozenset(
    [
        "check_root",
        "check_exists",
        "create_root",
        "list_entries",
        "entry_times",
        "create_entry",
        "remove_entries",
        "list_tombs",
        "create_tombs",
        "remove_tombs",
        "tomb_times",
        "create_mark",
        "write_manifest",
        "read_manifest",
        "list_manifests",
        "manifest_times",
        "remove_manifests",
        "save_rows",
        "check_rows",
        "holds",
        "exists",
        "size",
        "read",
        "read_range",
        "list_folders",
        "list_files",
        "children",
        "sizes",
        "newest",
        "uploads",
        "abort_upload",
        "remove_folder",
    ]
)

#: How long a command may take to reach its next store call (a hang is a failure, never a wait for ever).
PATIENCE = 120.0


class Ran:
    """What a command did: its exit status, stdout and stderr, and the store calls it made, in order."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.out = ""
        self.err = ""
        self.calls: list[str] = []
        self.error: BaseException | None = None


class _Gated:
    """A store whose protocol calls wait for their command's turn."""

    def __init__(self, store: Any, actor: str, turns: Turns) -> None:
        self._store = store
        self._actor = actor
        self._turns = turns

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in OPERATIONS:
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            self._turns._gate(self._actor, name)
            return attr(*args, **kw)

        return call


class Turns:
    """The turns of the commands started with :meth:`start`; ``gated``: the prefix of the roots whose
    stores take turns (the others run freely)."""

    def __init__(self, monkeypatch: Any, gated: str) -> None:
        self._cv = threading.Condition()
        self._allowed: dict[str, float] = {}
        self._waiting: dict[str, bool] = {}
        self._done: set[str] = set()
        self._local = threading.local()
        self.ran: dict[str, Ran] = {}
        self._threads: list[threading.Thread] = []
        real = stores.open

        def opened(root: Any, **kw: Any) -> Any:
            result = real(root, **kw)
            actor = getattr(self._local, "actor", None)
            if actor is not None and result.store.root.startswith(gated):
                result.store = _Gated(result.store, actor, self)
            return result

        monkeypatch.setattr(stores, "open", opened)

    def actor(self) -> str | None:
        """The command whose thread this is (None: none of them)."""
        return getattr(self._local, "actor", None)

    def start(self, actor: str, argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> None:
        """Start ``publish <argv>`` as ``actor``; it waits at its first store call."""
        ran = self.ran[actor] = Ran()
        self._allowed[actor] = 0
        self._waiting[actor] = False

        def body() -> None:
            self._local.actor = actor
            out, err = io.StringIO(), io.StringIO()
            try:
                ran.code = main(argv, dict(env or {}), out, err, **kw)
            except BaseException as e:  # handed to the test
                ran.error = e
            finally:
                ran.out, ran.err = out.getvalue(), err.getvalue()
                with self._cv:
                    self._done.add(actor)
                    self._cv.notify_all()

        thread = threading.Thread(target=body, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _gate(self, actor: str, name: str) -> None:
        with self._cv:
            self._waiting[actor] = True
            self._cv.notify_all()
            if not self._cv.wait_for(lambda: self._allowed[actor] > 0, PATIENCE):
                raise AssertionError(f"{actor} was never given its turn at {name}")
            self._allowed[actor] -= 1
            self._waiting[actor] = False
            self.ran[actor].calls.append(name)

    def let(self, actor: str, n: float = math.inf, ready: Callable[[], bool] | None = None) -> None:
        """Let ``actor`` make ``n`` store calls (all it makes: to its end), and wait until it waits at its
        next one or has ended.  ``ready``: first also wait until that is true (or the actor has ended)."""
        with self._cv:
            self._allowed[actor] = n
            self._cv.notify_all()

            def parked() -> bool:
                if actor in self._done:
                    return True
                if ready is not None and not ready():
                    return False
                return self._waiting[actor] and self._allowed[actor] == 0

            end = time.monotonic() + PATIENCE
            while not parked():  # ``ready`` may turn true with nothing to notify: looked at again often
                if time.monotonic() > end:
                    raise AssertionError(f"{actor} neither ended nor came to a store call")
                self._cv.wait(0.01)

    def finish(self) -> None:
        """Let every command run to its end."""
        for actor in list(self.ran):
            self.let(actor)
        for thread in self._threads:
            thread.join(PATIENCE)
        for actor, ran in self.ran.items():
            if ran.error is not None:
                raise AssertionError(f"{actor} raised") from ran.error
