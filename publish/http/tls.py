"""TLS client connections over CPython's ``_ssl`` module, without the ``ssl`` module above it.

``ssl`` is a Python layer over ``_ssl``; importing it (socket, selectors, enum, base64 and re, and enum classes
built from ``_ssl``'s constants) costs an https:// start more CPU than the handshake itself
(docs/perf-startup.md).  What the client needs of it is small, and every check that matters is ``_ssl``'s
own C code, the same code ``ssl.SSLContext`` runs: a ``PROTOCOL_TLS_CLIENT`` context verifies the chain
(``CERT_REQUIRED``) and the host name (``check_hostname``, set through OpenSSL's X509_VERIFY_PARAM before the
handshake), with CPython's default ciphers and options, and the verify flags ``ssl.create_default_context()``
sets on this Python (:data:`DEFAULT_VERIFY_FLAGS`).  This module adds TLS 1.2 at least, refuses a
context that would not verify, and wraps a connection over a ``_socket.socket`` or over memory BIOs (TLS inside
a proxy's tunnel).  A lost connection without TLS close_notify reads as the end of the stream, as ``ssl``'s
``suppress_ragged_eofs`` does; the HTTP layer then refuses a body shorter than its framing says.
"""

from __future__ import annotations

import _socket
import _ssl
import sys

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from typing import Any

    Context = Any

#: What ssl.create_default_context() adds to a PROTOCOL_TLS_CLIENT context's verify flags on this Python:
#: from 3.13 on, VERIFY_X509_STRICT (RFC 5280's rules: a CA's keyUsage, a leaf's Authority Key Identifier...)
#: and VERIFY_X509_PARTIAL_CHAIN (a trusted intermediate is an anchor).  A table by version, not read from
#: ssl at run time: importing ssl costs 30-100 ms of start-up, more than the handshake.  tests/http/test_tls_flags.py
#: checks it against create_default_context() on every supported version, so a new default is noticed.
DEFAULT_VERIFY_FLAGS = (
    _ssl.VERIFY_X509_PARTIAL_CHAIN | _ssl.VERIFY_X509_STRICT if sys.version_info >= (3, 13) else 0
)

Error = _ssl.SSLError
CertVerificationError = _ssl.SSLCertVerificationError
WantRead = _ssl.SSLWantReadError
ZeroReturn = _ssl.SSLZeroReturnError
RaggedEOF = _ssl.SSLEOFError
MemoryBIO = _ssl.MemoryBIO


def client_context() -> Context:
    """A client context that verifies the certificate chain and the host name, TLS 1.2 or later, with no CA
    certificates yet (load them with ``load_verify_locations``)."""
    ctx = _ssl._SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    if not ctx.check_hostname or ctx.verify_mode != _ssl.CERT_REQUIRED:  # CPython sets both for this protocol
        raise RuntimeError("_ssl made a client context that does not verify: refusing to use it")
    ctx.minimum_version = _ssl.PROTO_TLSv1_2
    ctx.verify_flags |= DEFAULT_VERIFY_FLAGS
    return ctx


def _name(hostname: str) -> str:
    # ASCII only (publish.rules.urls checked it); _ssl sets it as SNI and as the name the certificate must match.
    # ssl would run it through the idna codec, whose import brings stringprep and unicodedata.
    hostname.encode("ascii")
    return hostname.rstrip(".")


class _Socket(_socket.socket):
    """A _socket.socket that a weak reference can point to, as _ssl keeps one to its socket (socket.socket
    adds the same slot)."""

    __slots__ = ("__weakref__",)


class Conn:
    """TLS over a connected ``_socket.socket``: what publish.http.streams needs of a socket (recv_into, sendall,
    settimeout, pending, fileno, close).  Blocking calls wait at most the socket's timeout (``_ssl`` reads it
    on each call) and raise TimeoutError past it."""

    def __init__(self, ctx: Context, sock: _socket.socket, hostname: str) -> None:
        name = _name(hostname)
        # The same connection (its descriptor, options and all) in a socket object _ssl can refer to.
        self.sock = _Socket(sock.family, sock.type, sock.proto, sock.detach())
        self.obj = ctx._wrap_socket(self.sock, False, name)

    def do_handshake(self) -> None:
        self.obj.do_handshake()

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def recv_into(self, buf: memoryview) -> int:
        try:
            return int(self.obj.read(len(buf), buf))
        except (ZeroReturn, RaggedEOF):
            return 0
        except WantRead:  # no application data yet on a socket that does not wait (timeout 0), as a socket's
            raise BlockingIOError from None

    def sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[self.obj.write(view) :]

    def pending(self) -> int:
        return int(self.obj.pending())

    def idle_ended(self) -> bool:
        """Whether what arrived on this connection while it was idle ends its use, read without waiting: the
        server's close (close_notify or the end of TCP), an error, or application data (the connection is out
        of step); not a TLS post-handshake message alone, which yields no application data: a TLS 1.3
        NewSessionTicket (a server may send it after its first answer) or a KeyUpdate, consumed here."""
        try:
            self.sock.settimeout(0.0)
            self.obj.read(1)
        except WantRead:
            return False
        except (Error, OSError):
            return True
        return True

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


def wrap_bio(ctx: Context, incoming: Any, outgoing: Any, hostname: str) -> Any:
    """A TLS client object over two memory BIOs (do_handshake, read, write, pending, as ssl.SSLObject's)."""
    return ctx._wrap_bio(incoming, outgoing, False, _name(hostname))
