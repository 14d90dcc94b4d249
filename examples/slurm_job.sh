#!/bin/bash
# sbatch slurm_job.sh [srun ...] COMMAND...: runs COMMAND OUTPUT_DIR [--resume SAVE] (examples/slurm_job.sh)
#SBATCH --requeue --signal=B:TERM@120 --open-mode=append
set -uo pipefail
export CHECKPOINT=${CHECKPOINT:?set CHECKPOINT to the checkpoint root}
export DISPATCH_ATTEMPT=$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}
export DISPATCH_EPOCH=$(date +%s%N)             # grows with every dispatch (nodes' clocks kept in step)

resume=$(publish resolve) || exit 1             # first line: a missing root fails the job, not a restart from 0

publish watch -framework hf &                   # publishes exec/$DISPATCH_ATTEMPT/checkpoint-N once whole
watcher=$!
"$@" "$CHECKPOINT/exec/$DISPATCH_ATTEMPT" ${resume:+--resume "$resume"} &
trainer=$!

if [ "${1##*/}" = srun ]; then
    # srun forwards most signals to its tasks, but answers SIGTERM by killing them with SIGKILL (it logs
    # "forcing job termination"), and the trainer could not save: signal the job's steps instead (without
    # -b or -f, scancel leaves out the batch step: this shell, watch, srun itself); their tasks get SIGTERM.
    # Only while the job runs (SIGNALING: the --signal warning under way): after scancel or requeue Slurm
    # has signalled the tasks itself, and scancel would retry ("Job can not be altered now") until KillWait
    # killed this shell before its last scan.
    forward='case $(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null) in RUNNING | SIGNALING)
        timeout 10 scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null ;; esac'
else
    forward='kill -TERM "$trainer" 2>/dev/null'
fi
stopped=
trap 'stopped=1; '"$forward" TERM              # --signal=B:TERM, scancel -b: only this shell hears it

wait "$trainer"; status=$?
while kill -0 "$trainer" 2>/dev/null; do wait "$trainer"; status=$?; done

kill -TERM "$watcher" 2>/dev/null; wait "$watcher" || status=1   # its last scan
if [ -n "$stopped" ]; then
    # scancel and requeue signal every process of the job at once: watch made its last scan while training
    # was still writing the save it makes on SIGTERM. A second watch scans once as it starts and once more
    # on SIGTERM; it is signalled once its handler is set (SIGTERM's bit in SigCgt), or it would die unheard.
    publish watch -framework hf -interval 1h &
    rescan=$!
    for _ in $(seq 100); do
        mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$rescan/status" 2>/dev/null) || break
        [ -n "$mask" ] && (( (16#$mask >> 14) & 1 )) && break
        sleep 0.1
    done
    kill -TERM "$rescan" 2>/dev/null; wait "$rescan" || status=1
fi
publish prune -keep 3
if [ -n "$stopped" ]; then
    # Stopped before its end. After scancel or requeue the job is COMPLETING already: Slurm ends it, or
    # brings it back. After the --signal warning or scancel -b it is still RUNNING: ask for a requeue, or it
    # would end FAILED for good (--requeue alone covers node failure and preemption only).
    [ "$(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null)" = RUNNING ] && scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
exit "$status"
