#!/usr/bin/env bash
# A whole training job on a local checkpoint root, twice: the second run resumes where the first stopped.
# Needs only python3; runs publish from this checkout.  Usage: bash examples/demo.sh [ROOT]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
publish() { python3 -m publish "$@"; }
# In a real job script this is just `publish`, the binary on PATH.

export CHECKPOINT=${1:-$(mktemp -d -u "${TMPDIR:-/tmp}/publish-demo.XXXXXX")}
publish init                                      # once, when a run starts: makes the root
echo "== checkpoint root: $CHECKPOINT"

job() {
  echo "== job: attempt $1, epoch $2"
  # What a job script does (examples/slurm_run.sh): resolve, run the trainer while publishing each save
  # once it is whole, scan once more after it exits, keep the newest two.  The trainer writes into
  # $PUBLISH_SAVES and gets --resume SAVE when there is a save to resume from.
  publish run -framework hf -interval 200ms -keep 2 -attempt "$1" -epoch "$2" -resume-arg=--resume \
    -- python3 "$here/examples/tiny_trainer.py"
}

job A 1
job B 2
echo "== resolve after both jobs: $(publish resolve)"
echo "== publish status:"
publish status
