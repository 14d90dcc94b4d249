"""Host name lookup within a deadline: getaddrinfo on a thread of its own, waited for at most the time left.

A nameserver that never answers would otherwise hold a request as long as resolv.conf's timeouts and
attempts say, whatever the request's deadline.  publish.http.net imports this module only for a host name: a
literal IP address needs no lookup, so it costs neither this import nor a thread.  Built on the _socket and
_thread C modules, which every start has loaded already (the threading module is not).
"""

from __future__ import annotations

import _socket
import _thread

from publish.rules.neterrors import Unreachable

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["addresses"]


class _Lookup:
    """One getaddrinfo on its own thread: ``done`` is released once ``outcome`` holds its answer or error."""

    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.outcome: list[Any] = []


# The lookups still running, by (name, port): a caller whose deadline passed leaves its lookup here, and a
# retry waits on that one instead of starting another thread that asks the same silent nameserver.
_running: dict[tuple[bytes, int], _Lookup] = {}
_guard = _thread.allocate_lock()


def addresses(name: bytes, port: int, timeout: float | None, who: str) -> list[tuple[Any, ...]]:
    """getaddrinfo(name, port, SOCK_STREAM), waited for ``timeout`` seconds at most (None: as long as it
    takes).  No answer in time is :class:`Unreachable` naming ``who``; the lookup's own errors (gaierror) are
    raised as they are.  A lookup of the same name and port still running from an earlier call is waited
    for rather than started again."""
    if timeout is None:
        return _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM)
    key = (name, port)
    with _guard:
        lookup = _running.get(key)
        if lookup is None:
            lookup = _running[key] = _Lookup()
            # Not waited for at exit (a _thread thread is as a daemon thread): one still asking a silent
            # nameserver never holds the command up once the lookup was given up.
            _thread.start_new_thread(_run, (key, lookup))
    if not lookup.done.acquire(True, max(timeout, 0.0)):
        raise Unreachable(f"{who} does not answer: host name lookup timed out")
    lookup.done.release()  # for any other caller waiting on the same lookup
    if isinstance(lookup.outcome[0], BaseException):
        raise lookup.outcome[0]
    result: list[tuple[Any, ...]] = lookup.outcome[0]
    return result


def _run(key: tuple[bytes, int], lookup: _Lookup) -> None:
    try:
        lookup.outcome.append(_socket.getaddrinfo(key[0], key[1], 0, _socket.SOCK_STREAM))
    except BaseException as e:  # handed to the callers, who raise it
        lookup.outcome.append(e)
    finally:
        with _guard:
            del _running[key]
        lookup.done.release()
