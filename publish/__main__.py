"""``python -m publish``."""

import sys

from publish.cli import run

sys.exit(run())
