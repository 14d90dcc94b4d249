"""A thread and a flag without the threading module, which brings functools, collections, types, operator,
reprlib and weakref sets with it: about as much start-up CPU as a POSIX ``resolve``'s own imports.
``run`` and ``watch`` need no more than these two (bench/run_lag.py)."""

from __future__ import annotations

import _thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable


class Flag:
    """``threading.Event``'s set, is_set and wait, over one lock (held while the flag is clear)."""

    def __init__(self) -> None:
        self._clear = _thread.allocate_lock()
        self._clear.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._clear.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False after ``timeout`` seconds (None: no limit) if it is not."""
        if not self._set and self._clear.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            self._clear.release()
        return self._set


class Worker:
    """``work()`` on a thread of its own, started at once; like a daemon thread, nothing waits for it when
    the process ends.  ``join(timeout)`` and ``is_alive()`` as ``threading.Thread`` has them; ``ident`` is
    the thread's, once it runs.  What ``work`` raises is its own to catch: the thread's end only says it."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.ident: int | None = None
        self._done = Flag()
        _thread.start_new_thread(self._run, (work,))

    def _run(self, work: Callable[[], None]) -> None:
        self.ident = _thread.get_ident()
        try:
            work()
        finally:
            self._done.set()

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()
