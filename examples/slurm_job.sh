#!/bin/bash
# sbatch slurm_job.sh [srun ...] COMMAND...: runs COMMAND OUTPUT_DIR [--resume SAVE] (examples/slurm_job.sh)
#SBATCH --requeue --signal=B:TERM@120 --open-mode=append
set -uo pipefail
stopped= trainer= srun=
case ${1:-} in srun | */srun) srun=1 ;; esac   # training runs as a job step
forward() {                                     # SIGTERM to training, once it has started
    [ -n "$trainer" ] || return 0
    if [ -n "$srun" ]; then
        # srun answers SIGTERM by killing its tasks with SIGKILL: signal the job's steps instead (without
        # -b or -f, scancel leaves out the batch step), only while the job runs (SIGNALING: the --signal
        # warning under way). After scancel or requeue Slurm has signalled the tasks itself, and scancel
        # would retry ("Job can not be altered now") until KillWait killed this shell.
        case $(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null) in RUNNING | SIGNALING)
            timeout 10 scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null ;; esac
    else
        kill -TERM "$trainer" 2>/dev/null
    fi
}
trap 'stopped=1; forward' TERM                  # before all else: the --signal warning, scancel -b
export CHECKPOINT=${CHECKPOINT:?set CHECKPOINT to the checkpoint root}
export DISPATCH_ATTEMPT=$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}
export DISPATCH_EPOCH=$(date +%s%N)             # grows with every dispatch (nodes' clocks kept in step)

resume=$(publish resolve) || exit 1             # a missing root fails the job, not a restart from 0

status=0
if [ -z "$stopped" ]; then                      # (stopped already: no training, on to the requeue)
    publish watch -framework hf &               # publishes exec/$DISPATCH_ATTEMPT/checkpoint-N once whole
    watcher=$!
    "$@" "$CHECKPOINT/exec/$DISPATCH_ATTEMPT" ${resume:+--resume "$resume"} &
    trainer=$!
    [ -z "$stopped" ] || forward                # the trap ran before $trainer was set
    # wait returns early (above 128) whenever the trap runs: wait again until training is really gone
    until wait "$trainer"; status=$?; [ "$status" -le 128 ] || ! kill -0 "$trainer" 2>/dev/null; do :; done
    trap '' TERM                                # training is over: a late SIGTERM must not cut the rest short

    kill -TERM "$watcher" 2>/dev/null; wait "$watcher"; watched=$?   # watch's last scan
    case $watched in 0 | 143) ;; *) status=1 ;; esac
    if [ -n "$stopped" ] || [ "$watched" != 0 ]; then
        # scancel, requeue and the time limit signal every process of the job at once: watch made its
        # last scan while training was still writing the save it makes on SIGTERM (143: watch was stopped
        # before it could hear). Scan once more: publish run scans as COMMAND runs and once more after it
        # exits, so `run -- true` is one scan that waits for no signal.
        publish run -framework hf -- true || status=1
    fi
fi
trap '' TERM
publish prune -keep 3 || status=1
if [ -n "$stopped" ]; then
    # Stopped before its end. After scancel or requeue the job is COMPLETING already: Slurm ends it, or
    # brings it back. After the --signal warning or scancel -b it is still RUNNING: ask for a requeue, or
    # it would end FAILED for good (--requeue alone covers node failure and preemption only).
    case $(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null) in RUNNING | SIGNALING)
        scontrol requeue "$SLURM_JOB_ID" && echo "slurm_job.sh: asked Slurm to requeue job $SLURM_JOB_ID" >&2
        ;;
    esac
    exit 0
fi
exit "$status"
