"""COMMAND as ``publish run`` starts it and waits for it: no subprocess module, and no polling.

:func:`start` starts COMMAND as ``subprocess.Popen(argv, env=env, process_group=0)`` did: its own process
group, the environment given, stdin, stdout and stderr inherited, every other descriptor closed, SIGPIPE and
SIGXFSZ back to their default action, PATH looked up in the given environment, and a failure to execute it
raised as the first OSError that is not "no such file" (Popen's order).  Where ``os.posix_spawn`` reports
such a failure (glibc 2.24 and later, as the one file carries; subprocess itself trusts it only there), it is
used; elsewhere subprocess is, imported then.  subprocess imports re, locale, selectors and signal's enum:
about as much start-up CPU as the rest of a POSIX ``resolve``.

:class:`Waker` is what the main thread sleeps on while COMMAND runs: the stop signals' pipe, written by the
interpreter's C-level handler through ``signal.set_wakeup_fd`` whichever thread a signal lands on, and
COMMAND's exit: a pidfd (Linux 5.3 and later, Python 3.9 and later), else SIGCHLD, whose handler wakes the
same pipe.  Off the main thread neither can be set up, and the wait falls back to polling every ``POLL``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: How often COMMAND's exit is looked for when nothing can wake the wait on it (off the main thread).
POLL = 0.1
#: The longest sleep when something does wake it: a wake that never came is found within this.
SAFETY = 5.0
_NO_SUCH = (2, 20)  # ENOENT, ENOTDIR: the next directory of PATH is tried; any other error is kept


def spawn_reports_exec_errors() -> bool:
    """True when ``os.posix_spawn`` raises the exec's error itself: glibc 2.24 and later (CLONE_VFORK), the
    rule subprocess applies (``subprocess._USE_POSIX_SPAWN``)."""
    if not hasattr(os, "posix_spawn") or not sys.platform.startswith("linux"):
        return False
    try:
        libc, version = os.confstr("CS_GNU_LIBC_VERSION").split(maxsplit=1)  # type: ignore[union-attr]
        return libc == "glibc" and tuple(int(p) for p in version.split(".")[:2]) >= (2, 24)
    except (AttributeError, ValueError, OSError):
        return False


class Spawned:
    """A started COMMAND: its pid, and ``poll()`` as ``Popen.poll`` answers (None while it runs, else its
    status: the exit code, or -N for a signal N; 0 when it was reaped elsewhere, as Popen has it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # SIGCHLD ignored by whoever started us: the kernel reaped it
                self.returncode = 0
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Popened(Spawned):
    """The same, started by subprocess (where posix_spawn would not report a failed exec)."""

    def __init__(self, popen: Any) -> None:
        super().__init__(popen.pid)
        self.popen = popen

    def poll(self) -> int | None:
        self.returncode = self.popen.poll()
        return self.returncode


def start(
    argv: list[str], env: Mapping[str, str] | Mapping[bytes, bytes], output: int | None = None
) -> Spawned:
    """Start ``argv`` with ``env`` in a process group of its own; OSError when it cannot be executed.

    ``output``: a descriptor that becomes the program's stdout and stderr both (else they are inherited);
    through posix_spawn the program then also starts with no signal blocked, whatever thread starts it (the
    commands of -on-publish and -on-mirror, publish.ops.events).  ``env`` may map bytes to bytes (as
    ``os.environb``): each value reaches the program as it is."""
    if not spawn_reports_exec_errors():
        import subprocess

        if sys.version_info >= (3, 11):
            popen = subprocess.Popen(argv, env=env, process_group=0, stdout=output, stderr=output)  # novm
        else:  # the same setpgid(0, 0) in the child; os.setpgrp is C, so no Python code runs before exec
            popen = subprocess.Popen(argv, env=env, preexec_fn=os.setpgrp, stdout=output, stderr=output)
        return _Popened(popen)
    from publish.process import signals as signal

    program = argv[0]
    if os.path.dirname(program):
        candidates = [program]
    else:  # PATH as the child's environment has it (os.get_exec_path's rule, without its warnings import)
        text = env.get("PATH", os.defpath)  # type: ignore[call-overload]
        candidates = [os.path.join(d, program) for d in os.fsdecode(text).split(os.pathsep)]
    actions: list[tuple[int, int] | tuple[int, int, int]] = []
    if output is not None:  # dup2 makes inheritable copies; the closes below come after them
        actions += [(os.POSIX_SPAWN_DUP2, output, 1), (os.POSIX_SPAWN_DUP2, output, 2)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited_descriptors()]
    defaults = [signal.SIGPIPE, signal.SIGXFSZ]  # Python ignores both; Popen's restore_signals puts them back
    first: OSError | None = None
    last: OSError | None = None
    for path in candidates:
        try:
            if output is None:
                pid = os.posix_spawn(path, argv, env, file_actions=actions, setpgroup=0, setsigdef=defaults)
            else:  # an empty mask: a thread's blocked signals stay its own
                pid = os.posix_spawn(
                    path, argv, env, file_actions=actions, setpgroup=0, setsigdef=defaults, setsigmask=()
                )
        except OSError as e:
            if e.errno not in _NO_SUCH and first is None:
                first = e
            last = e
            continue
        return Spawned(pid)
    raise first or last or FileNotFoundError(2, "No such file or directory", program)


def inherited_descriptors() -> list[int]:
    """The descriptors above 2 a new program would inherit (not close-on-exec): Popen's ``close_fds`` closes
    them in its child; posix_spawn is told to.  Python opens every descriptor of its own close-on-exec, so
    these came from whoever started ``publish`` (a job system's, a shell's ``3<file``)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(folder)]
            break
        except (OSError, ValueError):
            continue
    else:  # no listing: every descriptor up to the limit is asked (a cap keeps a huge limit bounded)
        fds = list(range(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16)))
    found = []
    for fd in sorted(fds):
        if fd <= 2:
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue
    return found


class Waker:
    """What ``run`` sleeps on between looks at COMMAND and at the signals received: see the module's note.

    Made on the main thread (elsewhere it only polls); :meth:`watch` then wakes it on COMMAND's exit, which
    the caller looks for first (a SIGCHLD before the handler was set is not lost: the exit is found by that
    look); :meth:`close` puts back what was there.  ``wakes`` counts the returns of the caller's waits."""

    def __init__(self, write_fd: int) -> None:
        from publish.process import signals as signal

        self.pidfd = -1
        self.wakes = 0
        self.via = ""  # what wakes it on COMMAND's exit: "pidfd", "SIGCHLD", or nothing (it polls)
        self._old_wakeup: int | None = None
        self._old_chld: tuple[Any] | None = None  # (SIGCHLD's handler before), once one was set
        try:
            self._old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: nothing can wake the wait but its timeout
            self._old_wakeup = None

    def watch(self, pid: int | None) -> None:
        """Wake on the exit of ``pid`` (COMMAND, not reaped yet): through its pidfd, else through SIGCHLD."""
        if pid is None or self._old_wakeup is None:
            return
        opener = getattr(os, "pidfd_open", None)
        if opener is not None:
            try:
                self.pidfd = opener(pid)
                self.via = "pidfd"
                return
            except OSError:  # ENOSYS: a kernel before 5.3
                pass
        from publish.process import signals as signal

        self._old_chld = (signal.signal(signal.SIGCHLD, _on_child),)
        self.via = "SIGCHLD"

    @property
    def timeout(self) -> float:
        """The longest sleep: SAFETY when an exit and a signal wake it, else POLL."""
        woken = self._old_wakeup is not None and (self.pidfd >= 0 or self._old_chld is not None)
        return SAFETY if woken else POLL

    def fds(self) -> tuple[int, ...]:
        """The descriptors to wait on beside the signals' pipe: the pidfd, when there is one."""
        return (self.pidfd,) if self.pidfd >= 0 else ()

    def close(self) -> None:
        from publish.process import signals as signal

        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self._old_chld is not None:
            old = self._old_chld[0]  # None: set from C, not from Python; the default is what is left
            signal.signal(signal.SIGCHLD, signal.SIG_DFL if old is None else old)
            self._old_chld = None
        if self._old_wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None


def _on_child(signum: int, frame: object) -> None:
    """SIGCHLD's handler: nothing to do here; the interpreter's own handler has written to the wakeup fd."""
