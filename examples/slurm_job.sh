#!/bin/bash
# The README's Slurm job script, runnable as it is: the training command comes as arguments, and gets the
# output directory and, when there is a save to resume from, --resume <save> appended.
#   sbatch examples/slurm_job.sh python examples/tiny_trainer.py
#SBATCH --requeue --signal=B:TERM@120
set -uo pipefail
export CHECKPOINT=${CHECKPOINT:?set CHECKPOINT to the checkpoint root}
export DISPATCH_ATTEMPT=$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}
export DISPATCH_EPOCH=$(date +%s)               # grows with every dispatch: requeues and resubmissions alike

resume=$(publish resolve) || exit 1             # first line: a missing root fails the job, not a restart from 0

publish watch -framework hf &                   # publishes exec/$DISPATCH_ATTEMPT/checkpoint-N once whole
watcher=$!
"$@" "$CHECKPOINT/exec/$DISPATCH_ATTEMPT" ${resume:+--resume "$resume"} &
trainer=$!
trap 'kill -TERM "$trainer" 2>/dev/null' TERM   # Slurm signals only this shell: pass it on to training

wait "$trainer"; status=$?
while kill -0 "$trainer" 2>/dev/null; do wait "$trainer"; status=$?; done

kill -TERM "$watcher"; wait "$watcher" || status=1   # one last scan publishes the newest whole save
publish prune -keep 3
exit "$status"
