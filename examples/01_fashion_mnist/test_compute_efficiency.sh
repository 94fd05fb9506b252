#!/usr/bin/env bash
# No step is wasted: the share of the learners' work that reaches the global
# model (compute efficiency, docs/design.md "Keeping every step"), measured
# as a user measures it.
#
#   zmq-equal, zmq-uneven  diloco_syncer --fragments 4 --H 50 --quorum 1 and
#                          four fashion_mnist learner processes over ZeroMQ
#                          (Decoupled DiLoCo, the default adoption rule), at
#                          equal speeds and at 1,1,0.7,0.5;
#   threads-8              eight learners on threads in one fashion_mnist,
#                          P = 4, H = 50, K = 1 as above;
#   sim-overwrite          (with --contrast) the uneven run with --adopt
#                          overwrite, in the discrete-event simulator so that
#                          how much it drops does not depend on the machine's
#                          load: the measure must see the work it drops.
#
# Every inner step adds 1 to each fragment's step counter, so if all work
# reached the model the syncer's steps_merged would be P x the inner steps
# the learners took. The reference is P x the steps each learner says it
# computed in its own result line (the run's --steps, checked too), not the
# syncer's own count; the syncer's compute_efficiency must agree with it.
#
#   test_compute_efficiency.sh DILOCO_SYNCER FASHION_MNIST [STEPS] [--contrast]
# Every process is bounded in time and killed on every exit path.
set -u
syncer=$(realpath "$1") fashion=$(realpath "$2") steps=${3:-400} contrast=${4:-}
source "$(dirname "$0")/processes.sh" diloco_efficiency
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# check NAME SUMMARY_FILE BOUND MODE [LEARNER_FILES...]: the efficiency of a
# run against its bound (MODE "at-least" or "below").
check() {
  local name=$1 summary=$2 bound=$3 mode=$4
  shift 4
  python3 - "$name" "$summary" "$bound" "$mode" "$steps" "$@" <<'PY' || fail "$name"
import json, sys
name, summary, bound, mode, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
s = json.loads(open(summary).read().strip().splitlines()[-1])
fragments = 4
if sys.argv[6:]:  # learner processes: each one's own count
    lines = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[6:]]
    computed = [l["steps_computed"] for l in lines]
    assert all(c == steps for c in computed), f"{name}: learners computed {computed}, not {steps} each"
    unsent = sum(l["steps_unsent"] for l in lines)
    overwritten = sum(l["steps_overwritten"] for l in lines)
else:  # one process: the result line's totals
    computed = [s["inner_steps"]]
    assert s["inner_steps"] == steps * s["learners"], f"{name}: {s['inner_steps']} inner steps"
    unsent, overwritten = s["steps_unsent"], s["steps_overwritten"]
expected = fragments * sum(computed)
efficiency = s["steps_merged"] / expected
reported = s["compute_efficiency"]
print(f"     {name}: steps_merged {s['steps_merged']} of {expected} = {efficiency:.4f}"
      f" (syncer says {reported}); overwritten {overwritten}, unsent {unsent};"
      f" test accuracy {s.get('test_accuracy', '-')}")
assert reported is not None and abs(reported - efficiency) < 1e-5, f"{name}: the syncer reports {reported}"
if mode == "at-least":
    assert efficiency >= bound, f"{name}: compute efficiency {efficiency:.4f} < {bound}"
else:
    assert efficiency < bound, f"{name}: compute efficiency {efficiency:.4f} not below {bound}"
PY
}

processes() {  # name, speeds, bound, mode
  local name=$1 speeds=$2 bound=$3 mode=$4
  local endpoint="tcp://127.0.0.1:$(port)"
  timeout 600 "$syncer" --endpoint "$endpoint" --learners 4 --fragments 4 --H 50 --quorum 1 --quiet \
    > "$work/$name.json" 2> "$work/$name.log" &
  local syncer_pid=$!
  pids+=("$syncer_pid")
  local learners=() files=()
  for id in 0 1 2 3; do
    timeout 600 "$fashion" --role learner --mode decoupled --endpoint "$endpoint" --learners 4 --learner-id "$id" \
      --steps "$steps" --speeds "$speeds" --progress 0 \
      > "$work/$name.learner$id.json" 2> "$work/$name.learner$id.log" &
    learners+=($!)
    pids+=($!)
    files+=("$work/$name.learner$id.json")
  done
  local ok=1
  for p in "${learners[@]}"; do wait "$p" || ok=0; done
  wait "$syncer_pid" || ok=0
  if [[ $ok -ne 1 ]]; then
    fail "$name: a process failed"
    cat "$work/$name.log" "$work"/$name.learner*.log
    return
  fi
  check "$name" "$work/$name.json" "$bound" "$mode" "${files[@]}"
}

# one_process NAME BOUND MODE ARGS...: one fashion_mnist run with ARGS.
one_process() {
  local name=$1 bound=$2 mode=$3
  shift 3
  timeout 600 "$fashion" --mode decoupled --fragments 4 --H 50 --quorum 1 --steps "$steps" --progress 0 "$@" \
    > "$work/$name.json" 2> "$work/$name.log" || { fail "$name: exit status $?"; cat "$work/$name.log"; }
  [[ -s $work/$name.json ]] && check "$name" "$work/$name.json" "$bound" "$mode"
}

processes zmq-equal 1,1,1,1 0.95 at-least
processes zmq-uneven 1,1,0.7,0.5 0.95 at-least
one_process threads-8 0.95 at-least --learners 8 --speeds 1,1,0.7,0.5,1,1,0.7,0.5
if [[ $contrast == --contrast ]]; then
  one_process sim-overwrite 0.5 below --transport sim --learners 4 --speeds 1,1,0.7,0.5 --adopt overwrite
fi
exit $((failures > 0))
