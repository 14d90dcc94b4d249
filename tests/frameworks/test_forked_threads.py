"""A .metadata over 16 KiB read while other threads run (``run`` scans on a thread; host lookups run on
threads), on Python 3.13: the child must be started in a way that is safe with threads, and nothing may be
printed about it.  os.fork() in a process with threads is deprecated from 3.12 on (a DeprecationWarning), and
a child could block on a lock another thread held at the fork."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO
from tests.support.pythons import python

_SCRIPT = r"""
import logging, os, sys, tempfile, threading
sys.path.insert(0, sys.argv[1])
from publish.frameworks.parse.dcp_metadata import storage_ends
from publish.rules.deadline import Deadline
from tests.support.dcp_shapes import metadata

# Locks other threads hold across the fork: a plain lock, logging's module lock, and the import lock of a
# module whose import is under way (its body waits), each of which a child that took it would wait on for ever.
held = threading.Lock()
held.acquire()
logging._acquireLock() if hasattr(logging, "_acquireLock") else logging._lock.acquire()
release = threading.Event()
slow_dir = tempfile.mkdtemp()
with open(os.path.join(slow_dir, "slowmod.py"), "w") as f:
    f.write("import builtins\nbuiltins.importing.set()\nbuiltins.release.wait()\n")
sys.path.insert(0, slow_dir)
import builtins
builtins.importing, builtins.release = threading.Event(), release
stop = threading.Event()

def spin():
    while not stop.is_set():
        with threading.Lock():
            pass

threads = [
    threading.Thread(target=spin),
    threading.Thread(target=lambda: held.acquire()),
    threading.Thread(target=lambda: __import__("slowmod")),
]
for t in threads:
    t.start()
builtins.importing.wait()
data = metadata({f"w{i}": {"relative_path": "f", "offset": i, "length": 1} for i in range(3000)})
assert len(data) > 16 * 1024
print(storage_ends(data, "m", Deadline(60)))
stop.set()
release.set()
held.release()
for t in threads:
    t.join()
"""


@pytest.mark.parametrize("version", ["3.9", "3.11", "3.13"])
def test_a_large_metadata_read_while_threads_hold_locks_answers_and_warns_of_nothing(version: str) -> None:
    """The child takes no lock (publish/frameworks/parse/forked.py's note): it answers though other threads hold a lock, an
    import and logging's lock across the fork, and ``-W default`` (which shows every warning) shows none."""
    out = subprocess.run(
        [python(version), "-I", "-W", "default", "-c", _SCRIPT, str(REPO)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, "{'f': 3000}\n", "")
