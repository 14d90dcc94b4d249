"""When an S3 request is sent again: the one loop that decides retry, backoff and the deadline.

Modelled on restic's backend_retry wrapper: every request the client sends goes through :func:`retrying`,
which calls ``send`` until an answer settles it.  A dropped connection, 500, 502, 503, 504 and SlowDown are
sent again with jittered exponential backoff while time is left; a conditional PUT answered 409
ConditionalRequestConflict waits :data:`CONFLICT_WAITS` between sends; a clean-up that must not be left
undone (``rekey``) is also sent again, with the same backoff, after a refusal of the credentials, each send
renewing them; anything else is handed back or fails.
"""

from __future__ import annotations

from publish.http import net
from publish.rules.errors import StoreError

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable

    from publish.rules.deadline import Deadline

#: Statuses and codes worth sending an idempotent request again for.
RETRY_STATUS = frozenset((500, 502, 503, 504))
RETRY_CODES = frozenset(("SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"))
#: Codes that mean the store refused the credentials (the client renews them, :class:`Policy` ``rekey``).
REFUSED_CODES = frozenset(("ExpiredToken", "InvalidAccessKeyId"))
#: Waits between the sends of a conditional PUT answered 409 ConditionalRequestConflict (seconds).
CONFLICT_WAITS = ((0.05, 0.1), (0.1, 0.2), (0.2, 0.4))
CONFLICT_CODES = frozenset(("ConditionalRequestConflict", "OperationAborted", "Conflict"))
#: Backoff for the other retries: the first wait is in [BASE/2, BASE], doubling up to CAP.
BACKOFF_BASE = 0.1
BACKOFF_CAP = 5.0
#: Sends of one idempotent request when no deadline bounds them.
UNBOUNDED_ATTEMPTS = 8


# Plain classes with __slots__, not dataclasses: the dataclasses import (inspect, ast, ...) would cost every
# S3 verb's start-up more than the rest of this module.


class Answer:
    """One HTTP answer, with the S3 error code and message of an error (scrubbed)."""

    __slots__ = ("status", "headers", "body", "code", "message")

    def __init__(
        self, status: int, headers: dict[str, str], body: bytes, code: str = "", message: str = ""
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.code!r}, {len(self.body)} bytes)"


class Policy:
    """Which answers :func:`retrying` hands back as they are.

    ``ok``: statuses besides 2xx.  ``conditional``: a PUT with ``If-None-Match: *``: 409 conflicts wait and are
    sent again up to ``len(CONFLICT_WAITS)`` more times, 501 and NotImplemented are handed back, and a body
    over its cap is not sent again.  ``rekey``: a refusal of the credentials (:data:`REFUSED_CODES`), which the
    send already renewed once, is backed off and sent again while time is left, as a 503 is: for the abort of
    a multipart upload, whose refusal by a key rotated away would leave the upload behind until a sweep,
    while the new key is still being written."""

    __slots__ = ("ok", "conditional", "rekey")

    def __init__(
        self, ok: frozenset[int] = frozenset(), conditional: bool = False, rekey: bool = False
    ) -> None:
        self.ok = ok
        self.conditional = conditional
        self.rekey = rekey


class Clock:
    """Time for the loop: ``now`` and ``sleep`` in seconds, ``rand`` in [0, 1), and the deadline (an instant of
    ``now``; None: unbounded)."""

    __slots__ = ("now", "sleep", "rand", "deadline")

    def __init__(
        self,
        now: Callable[[], float],
        sleep: Callable[[float], None],
        rand: Callable[[], float],
        deadline: float | None,
    ) -> None:
        self.now = now
        self.sleep = sleep
        self.rand = rand
        self.deadline = deadline


class Counts(dict):  # type: ignore[type-arg]
    """Requests sent, by operation, resends included: 0 for one never sent (collections.Counter's import
    would cost the start-up)."""

    def __missing__(self, key: str) -> int:
        return 0


def jitter() -> float:
    """A random number in [0, 1) for the backoff; random is imported by the first retry, not by every start."""
    import random

    return random.random()


def timed_out(deadline: Deadline, op: str, thing: str) -> StoreError:
    """``OP THING: timed out (the time given was Ns)``."""
    given = f" (the time given was {deadline.timeout:g}s)" if deadline.timeout is not None else ""
    return StoreError(f"timed out{given}", op=op, thing=thing)


def time_left(deadline: Deadline, op: str, thing: str) -> float | None:
    """Seconds left for one send (None: unbounded); the timed-out StoreError when none are."""
    left = deadline.left()
    if left is not None and left <= 0:
        raise timed_out(deadline, op, thing)
    return left


def too_large(op: str, thing: str, e: net.TooLarge) -> StoreError:
    """``the answer is N bytes, over the limit of L bytes``: a refused body, in the operation's words."""
    size = f"{e.size} bytes" if e.size is not None else f"more than {e.limit} bytes"
    kind = f"HTTP {e.status} answer" if e.status >= 300 else "object" if op == "get" else "answer"
    return StoreError(
        f"the {kind} is {size}, over the limit of {e.limit} bytes",
        op=op,
        thing=thing,
        status=e.status,
        size=e.size,
        limit=e.limit,
    )


def refused(op: str, thing: str, a: Answer) -> StoreError:
    """The error answer ``a`` as a StoreError: ``OP THING: CODE[: MESSAGE]``."""
    message = f": {a.message}" if a.message else ""
    return StoreError(f"{a.code}{message}", op=op, thing=thing, code=a.code, status=a.status)


def retrying(send: Callable[[], Answer], policy: Policy, clock: Clock, op: str, thing: str) -> Answer:
    """Call ``send`` until it gives a 2xx answer or one ``policy`` hands back, and return that; raise
    StoreError ``OP THING: ...`` for any other, or when no time or attempt is left for another send."""
    attempt = 0
    conflicts = 0

    def backoff(last: str) -> None:
        if clock.deadline is None and attempt >= UNBOUNDED_ATTEMPTS:
            raise StoreError(f"{last} (gave up after {attempt} attempts)", op=op, thing=thing)
        high = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
        wait = high / 2 + clock.rand() * high / 2
        if clock.deadline is not None and clock.now() + wait >= clock.deadline:
            raise StoreError(f"{last} (gave up after {attempt} attempts: out of time)", op=op, thing=thing)
        clock.sleep(wait)

    while True:
        attempt += 1
        try:
            a = send()
        except net.Dropped as e:
            backoff(str(e))
            continue
        except net.TooLarge as e:
            if policy.conditional:
                raise StoreError(str(e), op=op, thing=thing) from None
            if e.status in RETRY_STATUS:  # a proxy's error page can be large: still worth another send
                backoff(str(too_large(op, thing, e).detail))
                continue
            raise too_large(op, thing, e) from None
        except net.NetError as e:
            raise StoreError(str(e), op=op, thing=thing) from None
        if a.status < 300 or a.status in policy.ok:
            return a
        if policy.conditional:
            if a.status == 501 or a.code == "NotImplemented":
                return a
            if a.status == 409 and a.code in CONFLICT_CODES:
                if conflicts == len(CONFLICT_WAITS):
                    raise StoreError(
                        f"{a.code}: another conditional write of this key was still in flight "
                        f"after {conflicts + 1} attempts",
                        op=op,
                        thing=thing,
                        code=a.code,
                        status=a.status,
                    )
                low, high = CONFLICT_WAITS[conflicts]
                conflicts += 1
                wait = low + clock.rand() * (high - low)
                if clock.deadline is not None and clock.now() + wait >= clock.deadline:
                    raise refused(op, thing, a)
                clock.sleep(wait)
                continue
        if a.status in RETRY_STATUS or a.code in RETRY_CODES or (policy.rekey and a.code in REFUSED_CODES):
            backoff(f"{a.code}: {a.message}" if a.message else a.code)
            continue
        raise refused(op, thing, a)
