#!/bin/bash
# Decoupled DiLoCo under Slurm with restarts: one diloco_launch per node
# starts that node's learners and restarts one that dies (a new incarnation);
# the syncer is a job step on the batch node. With diloco_syncer,
# diloco_launch and the trainer on PATH:
#   sbatch --nodes=2 slurm_launcher.sh
#SBATCH --job-name=diloco
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
set -euo pipefail
port=${DILOCO_PORT:-5555}
per_node=2                                 # learners per node
learners=$((SLURM_NNODES * per_node))
syncer_host=$(hostname)

srun --overlap --nodes=1 --ntasks=1 --nodelist="$syncer_host" \
  diloco_syncer --endpoint "tcp://0.0.0.0:$port" --insecure --learners "$learners" \
  --fragments 4 --H 50 --quorum 1 --save final.f32 &
syncer=$!

# Node K runs learners K*per_node .. K*per_node+per_node-1.
srun --ntasks-per-node=1 bash -c \
  "first=\$((SLURM_NODEID * $per_node)); \
   exec diloco_launch --learners $learners --learner-ids \$first-\$((first + $per_node - 1)) --no-syncer \
     --endpoint tcp://$syncer_host:$port --summary -- fashion_mnist --mode decoupled --steps 300 --progress 0"
wait "$syncer"
