#!/usr/bin/env bash
# A whole training job on a local checkpoint root, twice: the second run resumes where the first stopped.
# Needs only python3; runs publish from this checkout.  Usage: bash examples/demo.sh [ROOT]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
publish() { python3 -m publish "$@"; }
# In a real job script this is just `publish`, the binary on PATH.

export CHECKPOINT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/publish-demo.XXXXXX")}
mkdir -p "$CHECKPOINT"
echo "== checkpoint root: $CHECKPOINT"

job() {
  export DISPATCH_ATTEMPT=$1 DISPATCH_EPOCH=$2
  echo "== job: attempt $DISPATCH_ATTEMPT, epoch $DISPATCH_EPOCH"
  resume=$(publish resolve)                       # the job script's first line
  echo "   resolve -> ${resume:-nothing (fresh start)}"
  python3 -m publish watch -framework hf -interval 200ms &   # publishes each save once it is whole
  watcher=$!
  python3 "$here/examples/tiny_trainer.py" "$CHECKPOINT/exec/$DISPATCH_ATTEMPT" ${resume:+--resume "$resume"}
  kill -TERM "$watcher"                           # watch scans once more, then exits
  wait "$watcher"
  publish prune -keep 2
}

job A 0
job B 1
echo "== resolve after both jobs: $(publish resolve)"
echo "== publications:"; ls "$CHECKPOINT/pub"
