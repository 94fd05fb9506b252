#!/usr/bin/env bash
# A real one-node Slurm cluster for the length of one command: munged,
# slurmctld and slurmd from Debian's munge and slurm-wlm, with their own
# configuration, sockets, ports and state in a temporary directory (nothing
# of the machine's own Slurm or munge is used or changed), then COMMAND with
# SLURM_CONF pointing at the cluster, so that sbatch, srun and squeue reach
# it. Everything is stopped on every exit path. Exits with COMMAND's status.
#
#   cluster.sh COMMAND [ARG...]
set -euo pipefail
(($# > 0)) || { echo "usage: cluster.sh COMMAND [ARG...]" >&2; exit 2; }
for program in munged slurmctld slurmd sbatch; do
  command -v "$program" > /dev/null || [[ -x /usr/sbin/$program ]] || {
    echo "cluster.sh: $program is missing (Debian packages munge and slurm-wlm)" >&2
    exit 1
  }
done
PATH=$PATH:/usr/sbin

dir=$(mktemp -d "${TMPDIR:-/tmp}/diloco_slurm.XXXXXX")
chmod 755 "$dir"
daemons=()
stop() {
  local status=$?
  for pid in "${daemons[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${daemons[@]}"; do
    for ((i = 0; i < 50; ++i)); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2> /dev/null || true
  done
  if ((status != 0)); then
    for log in "$dir"/*.log; do echo "--- $log"; tail -n 20 "$log"; done >&2
  fi
  rm -rf "$dir"
  exit "$status"
}
trap stop EXIT
trap 'exit 130' INT TERM

port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
# At least 8 CPUs, whatever the machine has: the recipes ask for 4 tasks of
# one CPU, or 2 of two; slurmd takes the configured count (config_overrides).
cpus=$(($(nproc) > 8 ? $(nproc) : 8))
memory=$(awk '/MemTotal/ { print int($2 / 1024 / 2) }' /proc/meminfo)  # half the machine's, in MB
user=$(id -un)

# munge: its own key, socket and files. It refuses to run as root unless forced.
mkdir -p "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$dir/munge"
chmod 400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
daemons+=("$(cat "$dir/munge/pid")")

mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" << EOF
ClusterName=diloco-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(port)
SlurmdPort=$(port)
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out.log" 2>&1 &
daemons+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" > "$dir/slurmd.out.log" 2>&1 &
daemons+=($!)

# Ready when the node is idle: at most 60 s.
for ((i = 0; i < 600; ++i)); do
  state=$(sinfo -h -n "$node" -o %T 2> /dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.1
done
if [[ ${state:-} != idle ]]; then
  echo "cluster.sh: the node did not become idle within 60 s (state '${state:-none}')" >&2
  exit 1
fi
echo "cluster.sh: one-node Slurm cluster up ($node, $cpus CPUs, $SLURM_CONF)" >&2

status=0
"$@" || status=$?
exit "$status"
