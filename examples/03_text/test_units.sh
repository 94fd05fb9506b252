#!/usr/bin/env bash
# char_lm's learner units: Decoupled DiLoCo on the King James Bible with a
# syncer of 2 shards (diloco_syncer processes) over ZeroMQ, run twice with
# the same examples per step:
#
#   units:     2 learners, each a unit of 2 MPI ranks (mpirun -np 2 char_lm
#              --ranks-per-unit 2) at batch 8 per rank;
#   learners:  2 one-process learners at batch 16.
#
# Checked: every rank of every unit took STEPS inner steps and reports the
# unit's bytes (the same on both ranks); the shards count each unit once (2
# joins, 2 leaves) and merge as many examples from the units as from the
# learners; the units put on the wire what the learners do (within 10 %);
# and the units' model learned (training loss below 3.5, where an untrained
# model's is ln 72 = 4.28). How close a unit trains to one process at twice
# the batch is checked on the adapter itself (torch_adapter).
#
#   test_units.sh CHAR_LM DILOCO_SYNCER MPIRUN [STEPS]
# Every process is bounded in time and killed on every exit path.
set -u
char_lm=$(realpath "$1") syncer=$(realpath "$2") mpirun=$3 steps=${4:-200}
source "$(dirname "$0")/../01_fashion_mnist/processes.sh" diloco_text_units
model=(--width 64 --layers 1 --context 32)

run() {  # run name, then the learner command's prefix and flags up to `--`, then its own flags
  local name=$1 prefix=()
  shift
  while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  shift
  local endpoints="" shard_pids=() learner_pids=()
  for shard in 0 1; do
    local endpoint="tcp://127.0.0.1:$(port)"
    timeout 300 "$syncer" --endpoint "$endpoint" --shard "$shard/2" --learners 2 --fragments 4 --H 20 --quorum 1 \
      --quiet > "$work/$name.syncer$shard.json" 2> "$work/$name.syncer$shard.log" &
    shard_pids+=($!)
    pids+=($!)
    endpoints+="${endpoints:+,}$endpoint"
  done
  for id in 0 1; do
    timeout 300 "${prefix[@]}" "$char_lm" --role learner --mode decoupled --learners 2 --learner-id "$id" \
      --steps "$steps" "${model[@]}" --endpoint "$endpoints" "$@" \
      > "$work/$name.learner$id.json" 2> "$work/$name.learner$id.log" &
    learner_pids+=($!)
    pids+=($!)
  done
  # The learners first: a shard waits for learners that failed (the cleanup
  # kills it).
  local ok=1
  for p in "${learner_pids[@]}"; do wait "$p" || ok=0; done
  if ((ok == 1)); then
    for p in "${shard_pids[@]}"; do wait "$p" || ok=0; done
  fi
  if ((ok != 1)); then
    echo "FAIL $name: a process failed"
    tail -n 5 "$work/$name".*.log
    exit 1
  fi
}

run units "$mpirun" --bind-to none -np 2 -- --ranks-per-unit 2 --batch 8
run learners env -- --batch 16

python3 - "$work" "$steps" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
def lines(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
problems = []
shards = {run: [lines(f"{work}/{run}.syncer{k}.json")[-1] for k in (0, 1)] for run in ("units", "learners")}
for run, summaries in shards.items():
    for k, s in enumerate(summaries):
        # Each shard asks one joiner for the initial model, and a learner
        # sends it to every shard: where the shards chose different
        # learners, each refuses the other's upload as `unexpected_kind`
        # (docs/protocol.md, "Session", step 0). Nothing else is refused.
        refused = {why: n for why, n in s["rejected"].items() if why != "unexpected_kind"}
        if s["joins"] != 2 or s["leaves"] != 2 or refused:
            problems.append(f"{run}: shard {k} counted {s['joins']} joins, {s['leaves']} leaves, refused {s['rejected']}")
tokens = {run: sum(s["tokens_merged"] for s in summaries) for run, summaries in shards.items()}
if tokens["units"] != tokens["learners"]:
    problems.append(f"tokens merged: {tokens}")
sent = {"units": 0, "learners": 0}
for unit in (0, 1):
    ranks = lines(f"{work}/units.learner{unit}.json")
    if sorted(r.get("rank") for r in ranks) != [0, 1]:
        problems.append(f"unit {unit}: result lines from ranks {[r.get('rank') for r in ranks]}")
    for r in ranks:
        if r["inner_steps"] != steps or r["bytes_sent"] != ranks[0]["bytes_sent"]:
            problems.append(f"unit {unit} rank {r.get('rank')}: {r['inner_steps']} steps, {r['bytes_sent']} bytes")
    sent["units"] += ranks[0]["bytes_sent"]
    sent["learners"] += lines(f"{work}/learners.learner{unit}.json")[-1]["bytes_sent"]
if abs(sent["units"] - sent["learners"]) > 0.1 * sent["learners"]:
    problems.append(f"bytes sent: {sent}")
loss = shards["units"][0]["training_loss"]
if loss is None or loss > 3.5:
    problems.append(f"the units' training loss {loss}")
print(f"2 units of 2 ranks at batch 8 against 2 learners at batch 16: tokens merged {tokens}, bytes sent {sent}, "
      f"the units' training loss {loss}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
