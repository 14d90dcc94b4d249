"""init: make a new checkpoint root, so that resolve on it answers "nothing yet" instead of "missing"."""

from __future__ import annotations

from publish.ops import command
from publish.rules.redact import shown


class Init(command.Command):
    name = "init"
    synopsis = f"publish init {command.ROOT_FLAGS}"
    summary = "make a new checkpoint root (POSIX: the directory; S3: the root's own object)"

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        store = self.open(call, self.root(call)).store
        if store.create_root(self.deadline(call)):
            call.say.out(f"created {shown(store.root)}")
        else:
            call.say.warn(f"checkpoint root {shown(store.root)} already exists")
        return 0


COMMAND = Init
