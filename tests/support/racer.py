"""A second process that swaps two names with renameat2(RENAME_EXCHANGE) while a test runs the command,
for the race tests: :class:`Racer` drives it, :func:`racer_main` is the process itself."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO

RENAME_EXCHANGE = 2
AT_FDCWD = -100
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}


def exchange_function() -> Any:
    """``swap(a, b) -> errno`` (0 on success) through libc's renameat2, or the raw system call."""
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]

        def call(a: bytes, b: bytes) -> int:
            return int(function(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE))

    else:
        number = _SYS_RENAMEAT2.get(platform.machine())
        if number is None:
            return None
        syscall = libc.syscall
        syscall.restype = ctypes.c_long

        def call(a: bytes, b: bytes) -> int:
            return int(
                syscall(
                    ctypes.c_long(number),
                    ctypes.c_int(AT_FDCWD),
                    ctypes.c_char_p(a),
                    ctypes.c_int(AT_FDCWD),
                    ctypes.c_char_p(b),
                    ctypes.c_uint(RENAME_EXCHANGE),
                )
            )

    def swap(a: bytes, b: bytes) -> int:
        return 0 if call(a, b) == 0 else ctypes.get_errno()

    return swap


def racer_main(flag_path: str) -> None:
    """The racer process: ``a<TAB>b<TAB>D<TAB>E`` on stdin starts swapping a and b until the shared flag is
    cleared, keeping them as they were for a random time up to D microseconds and swapped up to E (0: swapping
    back as fast as it can).

    It then swaps once more if needed, so both names are as they were, and answers ``stopped N`` (N swaps).
    A swap that fails (one name was removed) ends the swapping: the answer is then ``error E``, its errno.
    The flag is a byte of a shared mapping, so the loop makes no system call but the swap.  End of input
    ends the process.
    """
    import mmap
    import random
    import time

    swap = exchange_function()
    with open(flag_path, "r+b") as f:
        flag = mmap.mmap(f.fileno(), 1)
    clock = time.perf_counter
    for command in sys.stdin.buffer:
        a, b, *dwell = command.rstrip(b"\n").split(b"\t")
        longest = [int(d) / 1e6 for d in dwell]  # [as they were, swapped]
        count, error = 0, 0
        while flag[0] and not error:
            error = swap(a, b)
            count += not error
            if longest[count % 2]:  # a busy wait: sleeping is far coarser than the windows raced
                until = clock() + random.uniform(0, longest[count % 2])
                while clock() < until and flag[0]:
                    pass
        if count % 2 and not error:
            error = swap(a, b)
        sys.stdout.buffer.write(b"error %d\n" % error if error else b"stopped %d\n" % count)
        sys.stdout.buffer.flush()


class Racer:
    def __init__(self, flag_path: Path) -> None:
        import mmap

        flag_path.write_bytes(b"\0")
        with open(flag_path, "r+b") as f:
            self.flag = mmap.mmap(f.fileno(), 1)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        code = f"from tests.support.racer import racer_main; racer_main({str(flag_path)!r})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO
        )
        self.swaps = 0

    def start(self, a: Path, b: Path, dwell_us: tuple[int, int] = (0, 0)) -> None:
        """Swap ``a`` and ``b``, keeping each state up to ``dwell_us`` (as they were, swapped) microseconds."""
        assert self.proc.stdin is not None
        self.flag[0] = 1
        self.proc.stdin.write(b"%s\t%s\t%d\t%d\n" % (os.fsencode(a), os.fsencode(b), *dwell_us))
        self.proc.stdin.flush()

    def stop(self, timeout: float = 20) -> int:
        """Stop swapping: both names are as before when this returns 0, else the errno of a failed swap."""
        assert self.proc.stdout is not None
        self.flag[0] = 0
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "the racer did not answer within 20 s"
        word, number = self.proc.stdout.readline().split()
        if word == b"error":
            return int(number)
        self.swaps += int(number)
        return 0

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=20)
        self.flag.close()
