"""The frozen executable's entry point: the same function as the `publish` console script."""

import sys

from publish.cli import run

sys.exit(run())
