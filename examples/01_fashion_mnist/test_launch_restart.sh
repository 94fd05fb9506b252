#!/usr/bin/env bash
# fashion_mnist --role all runs on diloco_launch's supervisor: this test
# SIGKILLs learner 1 mid-run; the launcher must restart it as incarnation 2,
# and the run must end by itself with exit status 0 and the syncer's JSON
# result as the last line of stdout (completed, accuracy >= 0.8).
#
# Mid-run is an event, not a time: the learners append their events to a
# trace (--trace, docs/chaos.md), and learner 1 is paused with SIGSTOP as soon
# as its first contribution is there (a few steps in, nearly all of STEPS to
# go), then killed; paused, it cannot end before the kill.
#
#   test_launch_restart.sh FASHION_MNIST [STEPS]
# Every wait is bounded; the launcher and its children are killed on every exit path.
set -u
fashion=$(realpath "$1") steps=${2:-300}
source "$(dirname "$0")/processes.sh" diloco_launch_restart
fail() { echo "FAIL $*"; tail -n 30 "$work/err"; exit 1; }

"$fashion" --role all --mode decoupled --learners 4 --steps "$steps" --speeds 1,1,0.7,0.5 --progress 2 \
  --trace "$work/trace" > "$work/out" 2> "$work/err" &
launcher=$!
pids+=("$launcher")
# A watchdog: the launcher passes SIGTERM on to its children.
( sleep 150; kill -TERM "$launcher" 2>/dev/null ) > /dev/null 2>&1 &
watchdog=$!
disown "$watchdog"  # no "Killed" notice when cleanup ends it
# The launcher's children are in their own process groups, the watchdog's
# sleep too: kill them first.
trap 'pkill -KILL -P "$launcher" 2>/dev/null; pkill -KILL -P "$watchdog" 2>/dev/null; pids+=("$watchdog"); cleanup' EXIT

pid=
for ((i = 0; i < 300 && ${#pid} == 0; ++i)); do  # at most 30 s
  pid=$(sed -n 's/^fashion_mnist: started learner 1 incarnation 1 (pid \([0-9]*\)).*/\1/p' "$work/err" 2> /dev/null)
  sleep 0.1
done
[[ -n $pid ]] || fail "the launcher named no pid for learner 1"
# Its first contribution: it has joined and trains, with most of its steps to
# go. At most 60 s (loading the data set takes seconds on a loaded machine).
sent='"ev":"sent","learner":1,"incarnation":1,'
for ((i = 0; i < 600; ++i)); do
  grep -q "$sent" "$work/trace" 2> /dev/null && break
  sleep 0.1
done
grep -q "$sent" "$work/trace" 2> /dev/null || fail "learner 1 sent no contribution within 60 s"
kill -STOP "$pid" || fail "learner 1 (pid $pid) ended before it could be paused: raise STEPS ($steps)"
at=$(grep "$sent" "$work/trace" | tail -n 1 | sed -n 's/.*"steps":\([0-9]*\).*/\1/p')
grep -q '"ev":"stop","learner":1,"incarnation":1,' "$work/trace" &&
  fail "learner 1 had finished its $steps steps before it could be paused: raise STEPS"
kill -KILL "$pid" || fail "learner 1 (pid $pid) could not be killed"
killed_at=$SECONDS
echo "learner 1 paused and killed after its contribution at step ${at:-?} of $steps"

wait "$launcher"
status=$?
echo "learner 1 killed; the run ended $((SECONDS - killed_at)) s later with exit status $status"
grep "learner 1 incarnation\|restarts:" "$work/err"
[[ $status -eq 0 ]] || fail "exit status $status"
grep -q "^fashion_mnist: learner 1 incarnation 1 ended: signal 9; restarting it as incarnation 2" "$work/err" ||
  fail "no restart of learner 1 reported"
grep -q "^fashion_mnist: started learner 1 incarnation 2 (pid" "$work/err" || fail "learner 1 incarnation 2 did not start"
grep -q "^\[learner 1\] .*--incarnation 2\|^fashion_mnist: started learner 1 incarnation 2 (pid [0-9]*): .* --incarnation 2 " \
  "$work/err" || fail "learner 1 incarnation 2 was not given --incarnation 2"
python3 - "$work/out" <<'PY' || fail "result line"
import json, sys
lines = open(sys.argv[1]).read().strip().splitlines()
r = json.loads(lines[-1])
print("result: test_accuracy %.4f, outer_updates %d, inner_steps %d, completed %s"
      % (r["test_accuracy"], r["outer_updates"], r["inner_steps"], r["completed"]))
assert r["transport"] == "zmq" and r["completed"] is True, r
assert r["test_accuracy"] >= 0.8, r["test_accuracy"]
PY
echo "ok"
