"""Host name lookup within a deadline: getaddrinfo on a thread of its own, waited for at most the time left.

A nameserver that never answers would otherwise hold a request as long as resolv.conf's timeouts and
attempts say, whatever the request's deadline.  publish.net imports this module only for a host name: a
literal IP address needs no lookup, so it costs neither this import nor a thread.  Built on the _socket and
_thread C modules, which every start has loaded already (the threading module is not).
"""

from __future__ import annotations

import _socket
import _thread

from publish.neterrors import Unreachable

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["addresses"]


def addresses(name: bytes, port: int, timeout: float | None, who: str) -> list[tuple[Any, ...]]:
    """getaddrinfo(name, port, SOCK_STREAM), waited for ``timeout`` seconds at most (None: as long as it
    takes).  No answer in time is :class:`Unreachable` naming ``who``; the lookup's own errors (gaierror) are
    raised as they are."""
    if timeout is None:
        return _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM)
    done = _thread.allocate_lock()
    done.acquire()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(_socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM))
        except BaseException as e:  # handed to the caller, who raises it
            outcome.append(e)
        finally:
            done.release()

    # Not waited for at exit (a _thread thread is as a daemon thread): one still asking a silent nameserver
    # never holds the command up once the lookup was given up.
    _thread.start_new_thread(run, ())
    if not done.acquire(True, max(timeout, 0.0)):
        raise Unreachable(f"{who} does not answer: host name lookup timed out")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    result: list[tuple[Any, ...]] = outcome[0]
    return result
