#!/usr/bin/env bash
# The syncer service is killed with SIGKILL in the middle of training and
# started again on the same checkpoint directory and port. The two learner
# processes are not restarted: they keep training through the outage and
# carry on with the restored syncer. Checked: the service resumed from a
# checkpoint, no published revision went backwards (every update line after
# the restart is newer than the same fragment's last one before it), both
# learners finished, and the restarted service merged contributions and
# refused none. Every process is bounded in time and killed on every exit.
set -u
syncer=$(realpath "$1") fashion=$(realpath "$2")
source "$(dirname "$0")/processes.sh" diloco_restart
port=$(port)
endpoint="tcp://127.0.0.1:$port"
args=(--endpoint "$endpoint" --learners 2 --fragments 4 --H 20 --checkpoint-dir "$work/checkpoints")

# The syncer runs unwrapped, so that SIGKILL reaches it; its waits are bounded below.
"$syncer" "${args[@]}" > "$work/first.json" 2> "$work/first.log" &
first=$!
pids+=("$first")
learners=()
for id in 0 1; do
  timeout 300 "$fashion" --role learner --endpoint "$endpoint" --learners 2 --learner-id "$id" --steps 1500 \
    --trace "$work/learner$id.trace" > "$work/learner$id.json" 2> "$work/learner$id.log" &
  learners+=($!)
  pids+=($!)
done

# Let it make progress, then kill it the hard way.
for _ in $(seq 1 300); do
  [[ $(grep -c ' update ' "$work/first.log") -ge 40 ]] && break
  sleep 0.1
done
kill -9 "$first"
wait "$first" 2>/dev/null
# The learners train on, unanswered: the second syncer starts once each has
# sent a contribution to the dead one (a "sent" line in its trace), at most
# 5 s on (a learner whose every fragment awaits an answer sends none).
sent() {
  local n
  n=$(grep -c '"ev":"sent"' "$work/learner$1.trace" 2> /dev/null)
  echo "${n:-0}"
}
at_kill=("$(sent 0)" "$(sent 1)")
for _ in $(seq 1 50); do
  (($(sent 0) > at_kill[0] && $(sent 1) > at_kill[1])) && break
  sleep 0.1
done
"$syncer" "${args[@]}" > "$work/second.json" 2> "$work/second.log" &
second=$!
pids+=("$second")

ok=1
for p in "${learners[@]}"; do wait "$p" || ok=0; done
# With both learners gone the syncer stops by itself; give it 30 s at most.
for _ in $(seq 1 300); do kill -0 "$second" 2>/dev/null || break; sleep 0.1; done
kill -0 "$second" 2>/dev/null && { kill -9 "$second"; ok=0; }
wait "$second" || ok=0
fail() { echo "FAIL: $*"; tail -n 5 "$work"/*.log; exit 1; }
[[ $ok -eq 1 ]] || fail "a process failed"
grep -q "restarting from checkpoint" "$work/second.log" || fail "the second syncer did not resume from a checkpoint"
python3 - "$work/first.log" "$work/second.log" "$work/second.json" <<'PY' || fail "revisions or counters"
import json, re, sys
pattern = re.compile(r" update fragment=(\d+) revision=(\d+)")
def updates(path):
    return [(int(f), int(r)) for f, r in pattern.findall(open(path).read())]
before, after = updates(sys.argv[1]), updates(sys.argv[2])
last = {}
for f, r in before:
    last[f] = max(last.get(f, 0), r)
assert before and after, (len(before), len(after))
for f, r in after:
    assert r > last.get(f, 0), f"fragment {f}: revision {r} after the restart, {last.get(f)} before"
    last[f] = r
summary = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
# A learner that rejoins while the round holding its journaled contribution
# is still open waits for that round's answer: nothing is refused, not even
# as a duplicate.
assert summary["contributions_merged"] > 0 and summary["rejected"] == {}, summary
print(f"ok: {len(before)} updates before the kill, {len(after)} after; last revisions {last}; {summary}")
PY
