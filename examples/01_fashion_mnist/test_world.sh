#!/usr/bin/env bash
# The synchronous modes over ZeroMQ are synchronous: a fashion_mnist syncer
# process and 4 learner processes started one after the other, for --mode dp and
# --mode diloco, RUNS times each. Every run must report partial_rounds 0,
# the outer updates a lock-step run of that length has (dp: one per step;
# diloco: one per H steps), and the same inner steps on every learner.
#
#   test_world.sh FASHION_MNIST [RUNS] [STEPS]
# Every process is bounded in time and killed on every exit path.
set -u
fashion=$(realpath "$1") runs=${2:-1} steps=${3:-200}
source "$(dirname "$0")/processes.sh" diloco_world
failures=0
h=20

run() {  # mode, run number
  local mode=$1 n=$2 name="$1.$2" endpoint="tcp://127.0.0.1:$(port)"
  local common=(--mode "$mode" --learners 4 --steps "$steps" --H "$h" --endpoint "$endpoint")
  timeout 300 "$fashion" --role syncer "${common[@]}" > "$work/$name.json" 2> "$work/$name.log" &
  local syncer_pid=$!
  pids+=("$syncer_pid")
  local learners=()
  for id in 0 1 2 3; do
    # One after the other: learner N starts once learner N-1 has loaded its
    # data and is joining (a "start" line in its trace), at most 60 s on.
    for ((i = 0; id > 0 && i < 600; ++i)); do
      grep -q '"ev":"start"' "$work/$name.learner$((id - 1)).trace" 2> /dev/null && break
      sleep 0.1
    done
    timeout 300 "$fashion" --role learner "${common[@]}" --learner-id "$id" --trace "$work/$name.learner$id.trace" \
      > "$work/$name.learner$id.json" 2> "$work/$name.learner$id.log" &
    learners+=($!)
    pids+=($!)
  done
  local ok=1
  for p in "${learners[@]}"; do wait "$p" || ok=0; done
  wait "$syncer_pid" || ok=0
  local verdict
  verdict=$(python3 - "$mode" "$steps" "$h" "$work/$name" <<'PY'
import json, sys
mode, steps, h, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = json.loads(open(base + ".json").read().strip().splitlines()[-1])
learner_steps = [json.loads(open("%s.learner%d.json" % (base, i)).read().strip().splitlines()[-1])["inner_steps"]
                 for i in range(4)]
rounds = steps if mode == "dp" else steps // h
problems = []
if s["partial_rounds"] != 0: problems.append("partial_rounds %d" % s["partial_rounds"])
if s["outer_updates"] != rounds: problems.append("outer_updates %d, expected %d" % (s["outer_updates"], rounds))
if learner_steps != [steps] * 4: problems.append("inner steps per learner %s" % learner_steps)
if not s["completed"]: problems.append("not completed")
print("partial_rounds %d, outer_updates %d, inner steps %s, accuracy %.4f%s" % (
    s["partial_rounds"], s["outer_updates"], learner_steps, s["test_accuracy"],
    "" if not problems else " -- " + "; ".join(problems)))
sys.exit(1 if problems else 0)
PY
) || ok=0
  if [[ $ok -ne 1 ]]; then
    echo "FAIL $name: $verdict"; tail -n 5 "$work/$name.log" "$work"/$name.learner*.log
    failures=$((failures + 1))
  else
    echo "ok   $name: $verdict"
  fi
}

for ((n = 1; n <= runs; ++n)); do
  run dp "$n"
  run diloco "$n"
done
exit $((failures > 0))
