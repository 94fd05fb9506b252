#!/usr/bin/env bash
# The Slurm recipes of docs/launch.md (docs/samples/slurm_*.sh), submitted
# with sbatch as written, on a real one-node Slurm cluster (cluster.sh):
#
#   slurm_learners.sh  4 learner tasks and a syncer step: every learner
#                      leaves, the syncer ends with 0 and saves a model
#                      that classifies Fashion-MNIST;
#   slurm_launcher.sh  one diloco_launch per node: learner 1 is SIGKILLed while
#                      it trains and its launcher restarts it (incarnation 2);
#                      the run ends normally all the same;
#   slurm_units.sh     2 learner units of 2 MPI ranks (srun --mpi=pmix) and a
#                      syncer of 2 shards: a rank of unit 1 is SIGKILLed, the
#                      unit starts again with incarnation 2, each shard
#                      counts 2 learners and the run ends normally.
#
# Each job must end within 5 minutes (it is cancelled otherwise).
#
#   recipes.sh BUILD_DIR [RECIPE...]     (run by CTest inside cluster.sh)
set -uo pipefail
build=$(realpath "$1")
shift
recipes=("$@")
((${#recipes[@]})) || recipes=(learners launcher units)
root=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=$build/tools:$build/examples/01_fashion_mnist:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
work=$(mktemp -d "${TMPDIR:-/tmp}/diloco_recipes.XXXXXX")
trap 'scancel --user="$(id -un)" 2> /dev/null; rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
failures=0

fail() {
  echo "FAIL $1: $2"
  for f in "$work/$1"/*.out; do echo "--- $f"; tail -n 30 "$f"; done
  failures=$((failures + 1))
}

# Sets `p`, the recipe's DILOCO_PORT: two free ports in a row, for a recipe
# that binds port and port+1.
pick_ports() {
  for ((i = 0; i < 20; ++i)); do
    p=$(port)
    python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $p + 1))" 2> /dev/null && break
  done
}

# Submits docs/samples/slurm_$1.sh from $work/$1 and waits for it to end;
# extra sbatch flags after the name. Returns 0 if the job completed.
submit() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  job=$(cd "$work/$name" && DILOCO_PORT=$p sbatch --parsable --output=job.out "$@" "$root/docs/samples/slurm_$name.sh") ||
    return 1
  # The job's state, polled (sbatch --wait polls too, but backs off to 30 s
  # between looks): at most 5 minutes, then it is cancelled.
  local state
  for ((i = 0; i < 1500; ++i)); do
    state=$(scontrol show job --oneliner "$job" | grep -o 'JobState=[A-Z_]*')
    case $state in
      JobState=COMPLETED) return 0 ;;
      JobState=PENDING | JobState=RUNNING | JobState=CONFIGURING | JobState=COMPLETING) sleep 0.2 ;;
      *) echo "job $job: $state"; return 1 ;;
    esac
  done
  echo "job $job: still $state after 5 minutes; cancelled"
  scancel "$job"
  return 1
}

# Whether process PID holds a connection to the syncer (port p or p + 1):
# it has joined, and its death is a learner's loss, not a failed start.
connected() {
  ss -Htnp state established "( dport = :$p or dport = :$((p + 1)) )" | grep -q "pid=$1,"
}

# Sets `victim` to a fashion_mnist process whose /proc/PID/$1 (environ or
# cmdline, its words between spaces) holds $2; waits up to a minute.
find_trainer() {
  victim=""
  for ((i = 0; i < 600; ++i)); do
    for pid in $(pgrep -x fashion_mnist); do
      if { printf ' '; tr '\0' ' ' < "/proc/$pid/$1"; } 2> /dev/null | grep -qF -- "$2"; then victim=$pid; fi
    done
    [[ -n $victim ]] && return 0
    sleep 0.1
  done
}

# Kills process $victim with SIGKILL once it is connected to the syncer
# (waits up to a minute); sets `killed` to 1 if it did.
kill_connected() {
  killed=0
  [[ -n $victim ]] || return 0
  for ((i = 0; i < 600; ++i)); do
    if connected "$victim"; then
      sleep 0.2
      kill -9 "$victim" 2> /dev/null && killed=1
      return 0
    fi
    sleep 0.1
  done
}

# The last JSON line of FILE that has KEY.
json_line() { grep "\"$2\"" "$1" | tail -n 1; }

accuracy_of() {  # files...: the test accuracy of the model they hold (shards of it if several)
  local flag=--evaluate
    (($# > 1)) && flag=--evaluate-shards
  fashion_mnist --mode decoupled --fragments 4 "$flag" "$@" | python3 -c \
    'import json, sys; print(json.loads(sys.stdin.read().splitlines()[-1])["test_accuracy"])'
}

for recipe in "${recipes[@]}"; do
  pick_ports
  case $recipe in
    learners)
      started=$SECONDS
      if ! submit learners; then fail learners "the job failed or timed out"; continue; fi
      syncer=$(json_line "$work/learners/job.out" outer_updates)
      learners=$(grep -c '"role":"learner"' "$work/learners/job.out")
      accuracy=$(accuracy_of "$work/learners/final.f32")
      echo "learners: $((SECONDS - started)) s, $learners learner lines, test accuracy $accuracy; syncer: $syncer"
      python3 - "$syncer" "$learners" "$accuracy" << 'PY' || fail learners "the run did not end as it should"
import json, sys
s, learners, accuracy = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
assert s["leaves"] == 4 and s["joins"] == 4, s
assert learners == 4, learners
assert accuracy > 0.75, accuracy
PY
      ;;
    launcher)
      started=$SECONDS
      submit launcher &
      sbatch_pid=$!
      # Learner 1's first process: SIGKILLed once it has joined.
      find_trainer environ " DILOCO_LEARNER_ID=1 "
      kill_connected
      if ! wait "$sbatch_pid"; then fail launcher "the job failed or timed out"; continue; fi
      summary=$(json_line "$work/launcher/job.out" interrupted_by)
      syncer=$(json_line "$work/launcher/job.out" outer_updates)
      accuracy=$(accuracy_of "$work/launcher/final.f32")
      echo "launcher: $((SECONDS - started)) s, learner 1 killed: $killed, test accuracy $accuracy;" \
        "launcher: $summary; syncer: $syncer"
      python3 - "$summary" "$syncer" "$killed" "$accuracy" << 'PY' || fail launcher "the restart did not happen"
import json, sys
summary, s, killed, accuracy = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
assert killed == "1", "learner 1 was never seen running"
assert summary["exit_status"] == 0, summary
one = [l for l in summary["learners"] if l["id"] == 1][0]
assert one["restarts"] == 1 and one["incarnation"] == 2, one
assert s["leaves"] == 2 and s["rejoins"] >= 1, s
assert accuracy > 0.75, accuracy
PY
      ;;
    units)
      started=$SECONDS
      submit units &
      sbatch_pid=$!
      # One rank of unit 1's first incarnation: SIGKILLed once it has joined.
      find_trainer cmdline " --learner-id 1 --incarnation 1 "  # the rank, not srun with the same command line
      kill_connected
      if ! wait "$sbatch_pid"; then fail units "the job failed or timed out"; continue; fi
      shard0=$(grep '"outer_updates"' "$work/units/job.out" | sed -n 1p)
      shard1=$(grep '"outer_updates"' "$work/units/job.out" | sed -n 2p)
      ranks=$(grep '"ranks":2' "$work/units/job.out" | tr '\n' ' ')
      accuracy=$(accuracy_of "$work/units/final0.f32" "$work/units/final1.f32")
      echo "units: $((SECONDS - started)) s, a rank of unit 1 killed: $killed, test accuracy $accuracy;" \
        "shards: $shard0 $shard1"
      python3 - "$shard0" "$shard1" "$ranks" "$killed" "$accuracy" << 'PY' || fail units "the units did not train as they should"
import json, re, sys
shards, killed, accuracy = [json.loads(sys.argv[1]), json.loads(sys.argv[2])], sys.argv[4], float(sys.argv[5])
ranks = [json.loads(l) for l in re.findall(r"\{[^{}]*\}", sys.argv[3])]
assert killed == "1", "no rank of unit 1 was seen running"
for s in shards:  # each shard counts 2 learners: unit 1 rejoined, it did not become a third
    assert s["joins"] == 2 and s["leaves"] == 2 and s["rejoins"] >= 1, s
# Every rank of the final incarnations reported, unit 1's with 300 steps of its new incarnation.
assert sorted((r["learner"], r["rank"]) for r in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)], ranks
assert all(r["inner_steps"] == 300 for r in ranks), ranks
assert accuracy > 0.75, accuracy
PY
      ;;
    *) echo "recipes.sh: unknown recipe '$recipe'" >&2; exit 2 ;;
  esac
done
((failures == 0)) || { echo "recipes.sh: $failures recipe(s) failed"; exit 1; }
echo "recipes.sh: every recipe ran as written"
