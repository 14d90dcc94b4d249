"""A verb's timeout message names -timeout as the user gave it, not what was left of it when the store call
began (before: "timed out (the time given was 1.95921s)" for -timeout 2s)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from publish.rules.deadline import Deadline
from tests.conftest import remember_secret, run_cli
from tests.support.netfixtures import Listening


class Silent(Listening):
    """A loopback server that reads each request and never answers (a store that hangs)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self._listen()
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            self.closed.wait(60)

    def close(self) -> None:
        self.closed.set()
        super().close()


def test_a_store_that_never_answers_times_out_naming_the_timeout_given(tmp_path: Path) -> None:
    with Silent() as server:
        creds = tmp_path / "creds"
        creds.mkdir(mode=0o700)
        fields = {"access_key_id": "AKIDSILENT", "secret_access_key": "silent-secret", "endpoint": server.url}
        remember_secret(fields["access_key_id"], fields["secret_access_key"])
        for name, value in fields.items():
            (creds / name).write_text(value + "\n")
            (creds / name).chmod(0o600)
        r = run_cli(
            "resolve", "-checkpoint", "s3://bucket-x/run", "-creds", f"file:{creds}", "-timeout", "1500ms"
        )
    assert (r.code, r.out) == (1, "")
    assert r.err == "publish: store: list s3://bucket-x/run/pub/: timed out (the time given was 1.5s)\n"


def test_a_deadline_until_an_instant_keeps_the_timeout_it_was_given() -> None:
    now = [100.0]
    dl = Deadline.until(107.5, 8, clock=lambda: now[0])
    assert (dl.at, dl.timeout, dl.left()) == (107.5, 8, 7.5)
    now[0] = 108.0
    assert dl.left() == -0.5
