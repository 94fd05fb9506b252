#!/bin/sh
# The cross-machine run of across_machines.cpp, here on one machine
# (127.0.0.1): keys, a syncer, two learners, learner 0 stopped halfway and
# restarted from its checkpoint. On real machines the same commands run on
# each host, with the syncer's address in DILOCO_ENDPOINT.
#
#   across_machines.sh PROGRAM KEYGEN WORKDIR
set -eu
program=$(realpath "$1") keygen=$(realpath "$2")
mkdir -p "$3" && cd "$3" && rm -f ./*.key ./*.pub ./*.log ./*.state
mkdir -p keys
# Keys: the syncer's pair, and one pair the learners share, allowed to speak
# for learners 0 and 1. syncer.pub and learners.key go to the learners'
# machines; syncer.key and learners.pub stay with the syncer.
(cd keys && "$keygen" syncer && "$keygen" learners --learners 0-1)

# Gives up after 60 s: a line PATTERN in FILE, or the exit of PID.
wait_for_line() {
  i=0
  until grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1)); [ "$i" -le 600 ] || { echo "no '$2' in $1 after 60 s" >&2; return 1; }
    sleep 0.1
  done
}
wait_for_exit() {
  i=0
  while kill -0 "$1" 2>/dev/null; do
    i=$((i + 1)); [ "$i" -le 600 ] || { echo "process $1 still running after 60 s" >&2; kill "$1"; return 1; }
    sleep 0.1
  done
  wait "$1"
}

# The syncer, on a port the system picks (a fixed one, e.g. tcp://0.0.0.0:5555, across machines).
DILOCO_ENDPOINT=tcp://127.0.0.1:0 DILOCO_LEARNERS=2 "$program" syncer keys >syncer.log 2>&1 &
syncer=$!
trap 'kill $syncer 2>/dev/null || true' EXIT
wait_for_line syncer.log "listening on"
endpoint=$(sed -n 's/^syncer: listening on //p' syncer.log)

# Learner 1 trains 600 steps; learner 0 trains 300, stops, and is started
# again as incarnation 2, which resumes from learner-0.state to step 600.
DILOCO_ENDPOINT=$endpoint DILOCO_LEARNER_ID=1 DILOCO_INCARNATION=1 "$program" learner keys 600 >learner1.log 2>&1 &
learner1=$!
DILOCO_ENDPOINT=$endpoint DILOCO_LEARNER_ID=0 DILOCO_INCARNATION=1 "$program" learner keys 300 >learner0.log 2>&1
DILOCO_ENDPOINT=$endpoint DILOCO_LEARNER_ID=0 DILOCO_INCARNATION=2 "$program" learner keys 600 >>learner0.log 2>&1
wait_for_exit $learner1
wait_for_exit $syncer  # 0 only if the held-out loss fell to under a hundredth
cat syncer.log learner0.log learner1.log
grep -q "learner 0: resumed at step 300" learner0.log
