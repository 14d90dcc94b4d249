"""Kill ``publish prune`` with SIGKILL at random moments, many times, and check that one more prune always
leaves exactly the tree an uninterrupted prune leaves.

    python bench/prune_soak.py [--trials 2000] [--seed N] [--workers 2] [--dir /var/tmp]

The trials are those of tests/verbs/test_prune_crash.py (a root of nested saves, a link, many entries; the kill at
a random moment of the prune's own run; the whole tree compared, tomb/ included), in larger number.  Prints
where the kills landed and exits 1 at the first trial whose tree differs (naming its seed and number).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.verbs.test_prune_crash import kill_trials  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000, help="number of killed prunes")
    ap.add_argument("--seed", type=int, default=int(time.time()), help="random seed (printed)")
    ap.add_argument("--workers", type=int, default=2, help="trials run at once")
    ap.add_argument("--dir", default=None, help="where to build the roots (default: a temporary directory)")
    opts = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="prune-soak-", dir=opts.dir))
    start = time.perf_counter()
    try:
        try:
            states, mid = kill_trials(base, opts.trials, opts.seed, opts.workers)
        except AssertionError as e:
            print(f"FAILED (seed {opts.seed}): {e}", file=sys.stderr)
            return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    took = time.perf_counter() - start
    print(
        f"{opts.trials} killed prunes (seed {opts.seed}, {opts.workers} at a time, {took:.0f} s): every one"
    )
    print("finished by one more prune into the uninterrupted prune's tree.")
    print(f"{mid} kills landed inside the prune:")
    for where, count in sorted(states.items(), key=lambda kv: -kv[1]):
        print(f"  {count:6d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
