"""Byte streams under the HTTP reader: a socket, or TLS over any stream (so TLS can run inside a proxy's TLS),
each operation bounded by the time left before the request's deadline.  publish.http.tls is imported only to
build a TLSStream, so plain http:// loads no TLS code."""

from __future__ import annotations

import select

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable
    from typing import Optional, Union

    from publish.http.tls import Conn, Context

    Clock = Callable[[], Optional[float]]  # the seconds left before the deadline (None: no deadline)
    Stream = Union["SockStream", "TLSStream"]

_CHUNK = 256 * 1024
_IDLE_CHUNK = 32 * 1024  # a read on an idle connection: more than a whole TLS record
_IDLE_READS = 16  # reads on an idle TLS-in-a-tunnel connection before what keeps coming ends it


class SockStream:
    """A socket (a plain _socket.socket or a publish.http.tls.Conn); every operation gets the time left."""

    def __init__(self, sock: _socket.socket | Conn, left: Clock, pending: bytes = b"") -> None:
        self.sock = sock
        self._left = left
        self._pending = pending

    def recv_into(self, buf: memoryview) -> int:
        if self._pending:
            n = min(len(buf), len(self._pending))
            buf[:n] = self._pending[:n]
            self._pending = self._pending[n:]
            return n
        self.sock.settimeout(self._left())
        return self.sock.recv_into(buf)

    def recv(self, size: int) -> bytes:
        buf = bytearray(size)
        n = self.recv_into(memoryview(buf))
        return bytes(buf[:n])

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for i in range(0, len(view), _CHUNK):
            self.sock.settimeout(self._left())
            self.sock.sendall(view[i : i + _CHUNK])

    def recv_now(self, size: int) -> bytes | None:
        """At most ``size`` bytes of what has arrived, read without waiting: b"" at the end of the stream (or a
        socket already closed), None when nothing has (on TLS: no application data; a post-handshake message
        alone is read and consumed)."""
        if self._pending:
            return self.recv(size)
        pending = getattr(self.sock, "pending", None)  # a tls.Conn's decrypted bytes
        if pending is None or not pending():
            try:
                readable, _, _ = select.select([self.sock], [], [], 0)
            except (OSError, ValueError):
                return b""
            if not readable:
                return None
        self.sock.settimeout(0.0)
        buf = bytearray(size)
        try:
            n = self.sock.recv_into(memoryview(buf))
        except BlockingIOError:
            return None
        return bytes(buf[:n])

    def idle_readable(self) -> bool:
        """True when data or EOF is waiting on a connection that should be quiet (the server closed it).  On
        TLS, bytes that are only a post-handshake message (a late session ticket) are read and do not count."""
        pending = getattr(self.sock, "pending", None)  # a tls.Conn's decrypted bytes
        if self._pending or (pending is not None and pending()):
            return True
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        ended = getattr(self.sock, "idle_ended", None)  # a tls.Conn
        return ended is None or bool(ended())

    def close(self) -> None:
        try:  # noqa: SIM105 - contextlib would load functools and collections
            self.sock.close()
        except OSError:
            pass


class TLSStream:
    """TLS over another stream through memory BIOs: TLS inside a tunnel, itself maybe TLS (https proxy)."""

    def __init__(self, inner: SockStream, ctx: Context, hostname: str) -> None:
        from publish.http import tls

        self._want_read = tls.WantRead
        self._zero = (tls.ZeroReturn, tls.RaggedEOF)
        self.inner = inner
        self._in = tls.MemoryBIO()
        self._out = tls.MemoryBIO()
        self._obj = tls.wrap_bio(ctx, self._in, self._out, hostname)
        self._call(self._obj.do_handshake)

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self.inner.sendall(data)

    def _fill(self) -> None:
        data = self.inner.recv(_CHUNK)
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()

    def _call(self, op: Callable[[], object]) -> object:
        while True:
            try:
                result = op()
            except self._want_read:
                self._flush()
                self._fill()
                continue
            self._flush()
            return result

    def recv_into(self, buf: memoryview) -> int:
        try:
            n = self._call(lambda: self._obj.read(len(buf), buf))
        except self._zero:
            return 0
        assert isinstance(n, int)
        return n

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for i in range(0, len(view), _CHUNK):
            piece = view[i : i + _CHUNK]
            self._call(lambda: self._obj.write(piece))  # noqa: B023 - called before the loop moves on

    def idle_readable(self) -> bool:
        """As SockStream.idle_readable, for the TLS inside: what arrived on the idle connection is taken in
        without waiting; a post-handshake message alone (a late session ticket, a KeyUpdate) is consumed and does
        not count; the end of the stream, an error or application data do, and so does a stream that keeps
        coming.  A reply OpenSSL owes (to a KeyUpdate) leaves in order with the next request."""
        try:
            for _ in range(_IDLE_READS):
                try:
                    self._obj.read(1)
                    return True  # application data: the connection is out of step
                except self._want_read:  # nothing whole yet, or a post-handshake message, consumed
                    pass
                data = self.inner.recv_now(_IDLE_CHUNK)
                if data is None:
                    return False
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
        except OSError:  # the end of the stream (close_notify or not), a TLS error, a lost connection
            return True
        return True

    def close(self) -> None:
        self.inner.close()
