"""The network errors the wire raises, and the words for why a socket or TLS operation failed.

Below both net and trust, so neither imports the other's privates; it imports nothing from publish.
"""

from __future__ import annotations

import sys


class NetError(Exception):
    """Base of network errors; ``str()`` names the host or proxy at fault, never a secret."""


class Unreachable(NetError):
    """Connection refused, connect timed out, name not resolved, or the proxy itself unreachable."""


class Dropped(NetError):
    """The connection was dropped, reset or closed after the request was (maybe) sent."""


class TimedOut(NetError):
    """The deadline ran out while sending or waiting for the response."""


class TLSFailure(NetError):
    """Certificate verification failed or the TLS handshake failed."""


class Untrusted(TLSFailure):
    """The server's certificate chain did not verify against the trust."""


class ProxyRefused(NetError):
    """The proxy answered CONNECT with a non-2xx status."""


class TrustNotFound(NetError):
    """No CA certificates were found for an https connection."""


class TooLarge(NetError):
    """The response body is over the cap: ``size`` is its Content-Length (None when it came without one)."""

    def __init__(self, message: str, size: int | None, limit: int, status: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit
        self.status = status


def reason(e: BaseException) -> str:
    """A few lower-case words for why a socket or TLS operation failed.

    _ssl and _socket are looked up, never imported: an error of theirs exists only once they are loaded."""
    ssl = sys.modules.get("_ssl")
    if ssl is not None and isinstance(e, ssl.SSLCertVerificationError):
        return str(e.verify_message or "certificate verify failed")
    sock = sys.modules.get("_socket")
    if sock is not None and isinstance(e, sock.gaierror):
        return "name not resolved"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError) or (sock is not None and isinstance(e, sock.timeout)):
        return "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__
