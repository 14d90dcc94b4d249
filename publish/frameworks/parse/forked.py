"""Pure work on untrusted input, done in a forked child that a deadline can end.

A parse that runs inside one C call (the C unpickler building a dict whose keys a file chose to collide)
holds the interpreter until it returns: no timeout, no signal handler, no other thread runs meanwhile.
Done in a child, the parent only waits on a pipe, under the deadline, and can kill it.  The child computes
and writes its answer; it never touches a file, a socket or the parent's state, and it ends with
``os._exit`` (no atexit, no flushing of buffers it shares with the parent).

Threads.  ``run`` scans on a thread and host lookups run on threads, so the fork may happen while other
threads hold locks; a child that took one of those would wait for ever.  The child takes none: everything
``work`` needs is imported before the fork (an ``import`` of a module already imported takes no lock), it
writes only with ``os.write`` to its own pipe, never to a Python stream, logs nothing, raises nothing past
``work`` (its status says what happened), and ends with ``os._exit``; the interpreter's own state (the
GIL, the allocator's arenas, glibc's malloc) is made whole in the child by the interpreter and the C library.
So CPython 3.12's warning about fork with threads (a DeprecationWarning: "may lead to deadlocks") does not
apply to this child, and is not shown: a job log gets no warning about a hazard that cannot happen here
(tests/frameworks/test_forked_threads.py forks while other threads hold a lock, an import, and a stream).
"""

from __future__ import annotations

import os

from publish.rules.deadline import Deadline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: The child's exit status when ``work`` raised (the parent reports it; ``work`` encodes expected faults).
RAISED = 70
_PIECE = 1 << 16


class TimedOut(Exception):
    """The deadline passed before the child answered; the child was killed."""


class Unavailable(Exception):
    """No child could be started (the pipe or the fork failed: a process or descriptor limit); nothing ran."""


class Died(Exception):
    """The child ended without a whole answer: ``str()`` says how (a signal, an exit status, a long answer)."""


def available() -> bool:
    """True where a child can be forked (POSIX)."""
    return hasattr(os, "fork")


def run(work: Callable[[], bytes], deadline: Deadline, limit: int, memory: int | None = None) -> bytes:
    """What ``work()`` returns, computed in a forked child: at most ``limit`` bytes, within ``deadline``, and
    with at most ``memory`` bytes of address space beyond what the process had (MemoryError in ``work``).

    The child blocks every signal it can, so a signal meant for the command (a job's SIGTERM to the
    process group) is the parent's alone to act on; and a CPU limit of the time left (plus a second) ends
    a child whose parent was killed.  :class:`TimedOut` or :class:`Died` otherwise; the child is reaped
    whatever happens, KeyboardInterrupt included; :class:`Unavailable` when no child could be started."""
    import gc
    import resource  # imported here, not in the child: the one file may unpack it on first import
    import select
    import signal

    left = deadline.left()
    if left is not None and left <= 0:
        raise TimedOut
    space = _address_limit(resource, memory) if memory is not None else None
    try:
        r, w = os.pipe()
    except OSError as e:
        raise Unavailable(e.strerror) from None
    try:
        pid = _fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        raise Unavailable(e.strerror) from None
    if pid == 0:  # pragma: no cover - the child; its answer is what the tests check
        status = RAISED
        try:
            os.close(r)
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            gc.disable()  # short-lived, and ends with _exit: a collection would only copy pages it touches
            if left is not None:
                _cpu_limit(resource, int(left) + 1)
            if space is not None:
                resource.setrlimit(resource.RLIMIT_AS, space)
            view = memoryview(work())
            while view:
                view = view[os.write(w, view) :]
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    reaped = False
    try:
        poller = select.poll()
        poller.register(r, select.POLLIN)
        pieces: list[bytes] = []
        size = 0
        while True:
            left = deadline.left()
            if left is not None and left <= 0:
                raise TimedOut
            if not poller.poll(None if left is None else max(1, int(left * 1000) + 1)):
                continue
            piece = os.read(r, _PIECE)
            if not piece:
                break
            size += len(piece)
            if size > limit:
                raise Died(f"its answer passed {limit} bytes")
            pieces.append(piece)
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        os.close(r)
        if not reaped:
            _kill(pid)
    if os.WIFSIGNALED(status):
        raise Died(f"it was ended by signal {os.WTERMSIG(status)}")
    if os.WEXITSTATUS(status) != 0:
        raise Died(f"it ended with exit status {os.WEXITSTATUS(status)}")
    return b"".join(pieces)


def _fork() -> int:
    """``os.fork()``, without CPython 3.12+'s DeprecationWarning about threads (see the module's note)."""
    import sys

    if sys.version_info < (3, 12):
        return os.fork()
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*fork\(\)")
        return os.fork()


def _cpu_limit(resource: Any, seconds: int) -> None:
    """At most ``seconds`` of CPU (SIGXCPU, blocked here, then SIGKILL a second later), within the hard
    limit the process was given (a batch system may set one; it cannot be raised)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    top = seconds + 1 if hard == resource.RLIM_INFINITY else min(seconds + 1, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (min(seconds, top), top))


def _address_limit(resource: Any, memory: int) -> tuple[int, int] | None:
    """The RLIMIT_AS that allows what the process maps now plus ``memory`` (within the hard limit it was
    given), read before the fork so the child reads no file; None without /proc."""
    try:
        with open("/proc/self/statm", "rb") as f:  # the size of what is mapped, in pages
            mapped = int(f.read(256).split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None  # not Linux, or no /proc: no cap beyond the deadline's
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    return (mapped + memory if hard == resource.RLIM_INFINITY else min(mapped + memory, hard), hard)


def _kill(pid: int) -> None:
    import signal

    os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's, if only as a zombie
    os.waitpid(pid, 0)
