#!/usr/bin/env bash
# A learner SIGKILLed and never restarted, against diloco_syncer and three
# fashion_mnist learner processes:
#   decoupled       the run still ends by itself (every learner gone: 2 left,
#                   1 dead) within heartbeat timeout + --end-when-gone of the
#                   last event, exit 0, the final model saved and usable;
#   lockstep-fail   a world of 3 with --on-learner-loss fail: the syncer
#                   fails the run naming learner 2 (exit 3) and the others stop;
#   lockstep-continue  --on-learner-loss continue: rounds go on with the two
#                   others (partial rounds counted), the run ends, exit 0.
#
#   test_end.sh DILOCO_SYNCER FASHION_MNIST
# Every process is bounded in time and killed on every exit path.
set -u
syncer=$(realpath "$1") fashion=$(realpath "$2")
source "$(dirname "$0")/processes.sh" diloco_end
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

run() {  # name, expected syncer status, syncer args...
  local name=$1 expected=$2
  shift 2
  local endpoint="tcp://127.0.0.1:$(port)"
  local started=$SECONDS
  timeout 120 "$syncer" --endpoint "$endpoint" --H 20 --heartbeat-timeout 2 --end-when-gone 5 --quiet \
    --save "$work/$name.f32" "$@" > "$work/$name.json" 2> "$work/$name.log" &
  local syncer_pid=$!
  pids+=("$syncer_pid")
  local learners=()
  for id in 0 1 2; do
    timeout 120 "$fashion" --role learner --endpoint "$endpoint" --learners 3 --learner-id "$id" --steps 1000 \
      --trace "$work/$name.learner$id.trace" > "$work/$name.learner$id.json" 2> "$work/$name.learner$id.log" &
    learners+=($!)
    pids+=($!)
  done
  # Killed once it has joined (its trace says so), not at a fixed time: on a
  # loaded machine a learner can take seconds to load the data set. Bounded: 60 s.
  for _ in $(seq 600); do
    grep -q '"joined"' "$work/$name.learner2.trace" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '"joined"' "$work/$name.learner2.trace" 2>/dev/null || fail "$name: learner 2 did not join within 60 s"
  # The learner itself, not the `timeout` that bounds it; it has 1000 steps to go.
  pkill -KILL -P "${learners[2]}" || fail "$name: learner 2 ended before it could be killed"
  local killed_at=$SECONDS
  for p in "${learners[0]}" "${learners[1]}"; do wait "$p" || fail "$name: a surviving learner failed"; done
  wait "${learners[2]}" 2>/dev/null
  local survivors_done=$SECONDS
  wait "$syncer_pid"
  local status=$? ended=$SECONDS
  [[ $status -eq $expected ]] || fail "$name: syncer exit status $status, expected $expected"
  # The stated limit: heartbeat timeout (2 s) + --end-when-gone (5 s) after the
  # later of the kill and the survivors' exits, plus 3 s of slack.
  local last=$((survivors_done > killed_at ? survivors_done : killed_at))
  ((ended - last <= 10)) || fail "$name: the syncer took $((ended - last)) s after the last learner event to exit"
  echo "     $name: learner 2 killed at $((killed_at - started)) s, survivors done at $((survivors_done - started)) s," \
       "syncer exited ($status) at $((ended - started)) s"
  tail -n 1 "$work/$name.json"
}

# Decoupled: ends within heartbeat timeout (2 s) + --end-when-gone (5 s) of the
# later of the kill and the survivors' leaves, plus 3 s of slack.
run decoupled 0 --fragments 4
python3 - "$work/decoupled.json" "$work/decoupled.f32" <<'PY' || fail "decoupled"
import json, os, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
# The dead learner is in the message unless, gone long enough, it was
# already forgotten (its table place freed): then the two who left are all.
assert s["ended"] and ("2 left, 1 dead" in s["ended"] or
                       ("2 left, 0 dead" in s["ended"] and s["learners_forgotten"] == 1)), s
assert s["leaves"] == 2 and s["declared_dead"] >= 1, s
assert s["failure"] is None, s
assert s["contributions_merged"] == s["contributions_accepted"] > 0, s
assert os.path.getsize(sys.argv[2]) == 269322 * 4, os.path.getsize(sys.argv[2])
PY
accuracy=$("$fashion" --evaluate "$work/decoupled.f32" | python3 -c 'import json,sys; print(json.load(sys.stdin)["test_accuracy"])')
python3 -c "import sys; sys.exit(0 if float('$accuracy') > 0.7 else 1)" || fail "decoupled: saved model's accuracy $accuracy"
echo "     decoupled: the saved final model's test accuracy $accuracy"

run lockstep-fail 3 --lock-step --world-size 3 --on-learner-loss fail --loss-wait 1
grep -q '"failure":"learner 2 has been dead' "$work/lockstep-fail.json" || fail "lockstep-fail: no failure naming learner 2"

run lockstep-continue 0 --lock-step --world-size 3 --on-learner-loss continue
python3 - "$work/lockstep-continue.json" <<'PY' || fail "lockstep-continue"
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["ended"] and "2 left, 1 dead" in s["ended"], s["ended"]
# Every round after the kill is partial; learner 2 may die before the first
# round closes (it is killed once it has joined), so all of them may be.
assert s["outer_updates"] >= s["partial_rounds"] > 0, s
assert s["contributions_merged"] == s["contributions_accepted"], s
PY
exit $((failures > 0))
