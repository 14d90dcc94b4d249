"""The only module that touches the process: argv, environment, streams and the exit code."""

from __future__ import annotations

import os
import sys
from typing import Mapping, TextIO

from publish import __version__


def main(argv: list[str], env: Mapping[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """Run one command line (without the program name) and return its exit status."""
    if argv[:1] == ["version"]:
        stdout.write(f"publish {__version__}\n")
        return 0
    stderr.write("publish: not implemented yet\n")
    return 2


def run() -> int:
    return main(sys.argv[1:], os.environ, sys.stdout, sys.stderr)
