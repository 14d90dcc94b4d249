"""Loopback ports for test servers and for addresses where nothing listens."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port free at the time of the call (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dead_port() -> int:
    """A loopback port with nothing listening (bound, then closed)."""
    return free_port()
