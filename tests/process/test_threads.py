"""publish.process.threads: the flag and the worker thread run and watch use instead of the threading module."""

from __future__ import annotations

import _thread
import threading

from publish.process.threads import Flag, Worker


def test_a_flag_waits_until_set_or_its_timeout() -> None:
    flag = Flag()
    assert not flag.is_set() and flag.wait(0.01) is False and flag.wait(0) is False
    threading.Timer(0.05, flag.set).start()
    assert flag.wait(30) is True and flag.is_set()
    flag.set()  # again: still set, no error
    assert flag.wait() is True and flag.wait(0) is True


def test_a_worker_runs_on_its_own_thread_and_join_waits_for_it() -> None:
    go, seen = Flag(), []

    def work() -> None:
        go.wait(30)
        seen.append(_thread.get_ident())

    worker = Worker(work)
    worker.join(0.01)
    assert worker.is_alive() and seen == []  # join gave up: the work waits for go
    go.set()
    worker.join(30)
    assert not worker.is_alive() and seen == [worker.ident] and worker.ident != _thread.get_ident()
