#!/bin/bash
# Decoupled DiLoCo under Slurm with learner units of R MPI ranks: one job
# step per unit (R tasks: one node with --ntasks-per-node=R, or R GPUs),
# so that a rank that dies ends its own unit's step and no other, and the unit
# is started again (a new incarnation) while the others go on; a syncer of
# S shards (S a multiple of R), each a job step on the batch node. With
# diloco_syncer and the trainer (built with MPI) on PATH:
#   sbatch slurm_units.sh
#SBATCH --job-name=diloco
#SBATCH --ntasks=4
set -euo pipefail
port=${DILOCO_PORT:-5555}
ranks=2                               # R: ranks per unit
units=$((SLURM_NTASKS / ranks))
shards=2                              # S: syncer shards
host=$(hostname)

steps=() endpoints=""
for ((k = 0; k < shards; ++k)); do
  srun --overlap --nodes=1 --ntasks=1 --nodelist="$host" \
    diloco_syncer --endpoint "tcp://0.0.0.0:$((port + k))" --insecure --shard "$k/$shards" --learners "$units" \
    --fragments 4 --H 50 --quorum 1 --save "final$k.f32" &
  steps+=($!)
  endpoints+="${endpoints:+,}tcp://$host:$((port + k))"
done

# A unit is restarted as a whole, with the next incarnation, when one of its
# ranks dies: --kill-on-bad-exit ends the unit's other ranks at once.
unit() {
  for ((incarnation = 1; incarnation <= 4; ++incarnation)); do
    srun --nodes=1 --ntasks="$ranks" --exact --mpi=pmix --kill-on-bad-exit=1 \
      fashion_mnist --role learner --mode decoupled --steps 300 --progress 0 --learners "$units" \
      --learner-id "$1" --incarnation "$incarnation" --ranks-per-unit "$ranks" --endpoint "$endpoints" && return
  done
  return 1
}
for ((u = 0; u < units; ++u)); do
  unit "$u" &
  steps+=($!)
done

status=0
for step in "${steps[@]}"; do wait "$step" || status=1; done
exit "$status"
