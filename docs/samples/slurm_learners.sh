#!/bin/bash
# Decoupled DiLoCo under Slurm: one task per learner, the syncer a job step
# on the batch node. With diloco_syncer and the trainer on PATH:
#   sbatch slurm_learners.sh
#SBATCH --job-name=diloco
#SBATCH --ntasks=4
set -euo pipefail
port=${DILOCO_PORT:-5555}
syncer_host=$(hostname)  # the batch node: where the syncer runs, not the submit host

# --overlap lets the syncer share the node's CPUs with the learners' step:
# without it the syncer's step holds them and the learners' step never starts.
srun --overlap --nodes=1 --ntasks=1 --nodelist="$syncer_host" \
  diloco_syncer --endpoint "tcp://0.0.0.0:$port" --insecure --learners "$SLURM_NTASKS" \
  --fragments 4 --H 50 --quorum 1 --save final.f32 &
syncer=$!

# Task N is learner N; the trainer reads who it is from the DILOCO_* variables.
# srun does not restart a task: a learner that dies stays out and the run goes
# on without it (slurm_launcher.sh restarts learners).
srun --ntasks="$SLURM_NTASKS" --kill-on-bad-exit=0 bash -c \
  "DILOCO_ENDPOINT=tcp://$syncer_host:$port DILOCO_LEARNERS=$SLURM_NTASKS DILOCO_LEARNER_ID=\$SLURM_PROCID \
   exec fashion_mnist --mode decoupled --steps 300 --progress 0"
wait "$syncer"
