#!/usr/bin/env bash
# diloco_syncer knows nothing about the model: two fashion_mnist learner
# processes connect over TCP, the first provides the model, both train and
# leave. Run once in plaintext and once with CURVE keys from diloco_keygen.
# Every process is bounded in time and killed on every exit path.
set -u
syncer=$(realpath "$1") keygen=$(realpath "$2") fashion=$(realpath "$3")
source "$(dirname "$0")/processes.sh" diloco_service
failures=0

run() {  # name, syncer extra args, learner extra args
  local name=$1 sargs=$2 largs=$3 endpoint="tcp://127.0.0.1:$(port)"
  timeout 300 "$syncer" --endpoint "$endpoint" --learners 2 --fragments 4 --H 20 --quiet $sargs \
    > "$work/$name.json" 2> "$work/$name.log" &
  local syncer_pid=$!
  pids+=("$syncer_pid")
  local learners=()
  for id in 0 1; do
    timeout 300 "$fashion" --role learner --endpoint "$endpoint" --learners 2 --learner-id "$id" --steps 120 ${largs//\{id\}/$id} \
      > "$work/$name.learner$id.json" 2> "$work/$name.learner$id.log" &
    learners+=($!)
    pids+=($!)
  done
  local ok=1
  for p in "${learners[@]}"; do wait "$p" || ok=0; done
  wait "$syncer_pid" || ok=0
  local summary
  summary=$(tail -n 1 "$work/$name.json")
  if [[ $ok -ne 1 ]] || ! grep -q '"rejected":{}' <<<"$summary" ||
     ! grep -q "model from the first learner: 6 tensors, 269322 parameters" "$work/$name.log"; then
    echo "FAIL $name"; cat "$work/$name.log" "$work"/$name.learner*.log; echo "$summary"
    failures=$((failures + 1))
    return
  fi
  # Every accepted contribution was merged, and there were outer updates.
  python3 - "$summary" <<'PY' || { echo "FAIL $name: counters"; failures=$((failures + 1)); return; }
import json, sys
s = json.loads(sys.argv[1])
assert s["outer_updates"] > 0, s
assert s["contributions_merged"] == s["contributions_accepted"] > 0, s
assert s["leaves"] == 2, s
PY
  echo "ok   $name: $summary"
}

run plaintext "" ""
# A key per learner, each bound to its own learner id.
(cd "$work" && "$keygen" syncer > /dev/null && "$keygen" learner0 --learners 0 > /dev/null &&
 "$keygen" learner1 --learners 1 > /dev/null) || { echo "FAIL keygen"; exit 1; }
run curve "--curve-secret $work/syncer.key --allow $work/learner0.pub --allow $work/learner1.pub" \
          "--curve-secret $work/learner{id}.key --curve-peer $work/syncer.pub"
grep -q '"curve_admitted":[1-9]' "$work/curve.json" || { echo "FAIL curve: no learner was admitted"; failures=$((failures + 1)); }
exit $((failures > 0))
