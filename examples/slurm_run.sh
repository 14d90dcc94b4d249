#!/bin/bash
# sbatch slurm_run.sh [srun ...] COMMAND...: COMMAND writes its saves into $PUBLISH_SAVES (examples/slurm_run.sh)
#SBATCH --requeue --signal=B:TERM@120 --open-mode=append
export CHECKPOINT=${CHECKPOINT:?set CHECKPOINT to the checkpoint root}
exec publish run -framework hf -keep 3 -requeue -resume-arg=--resume -- "$@"
