"""A ``publish run`` process under test, its output read as it comes (shared by the run tests)."""

from __future__ import annotations

import queue

from tests.conftest import Lines, record_output


class Running(Lines):
    """A ``publish run`` process whose stdout (its lines and COMMAND's) arrives on a queue."""

    def __init__(self, *args: str) -> None:
        super().__init__("run", *args)

    def wait_line(self, start: str, timeout: float = 30) -> str:
        while True:
            line = self.lines.get(timeout=timeout)
            self.seen.append(line)
            if line.startswith(start):
                return line

    def finish(self, timeout: float = 60) -> tuple[int, str, list[str]]:
        code = self.proc.wait(timeout=timeout)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        assert self.proc.stdout is not None
        while True:
            try:
                self.seen.append(self.lines.get(timeout=1))
            except queue.Empty:
                break
        record_output("run", "\n".join(self.seen), err)
        return code, err, self.seen
