#!/usr/bin/env bash
# diloco_syncer --etcd against a real etcd, started here as a user would
# start it: syncers of one shard, one leading and the others standing by.
#
#   1. A leads (epoch a); B, started next, stands by and names A.
#   2. A is SIGSTOPped past its 2 s lease (the zombie leader): B leads, with
#      an epoch b > a. A, SIGCONTed, steps down: it exits with status 4 and
#      says so, and serves nothing more.
#   3. C stands by and names B; B is SIGKILLed: C leads within the lease
#      (plus a campaign period) of the kill, with an epoch c > b.
#
# No learner takes part (the leaders wait for a model); what is checked is
# the leadership itself, in the processes a user runs.
#
#   test_failover.sh ETCD DILOCO_SYNCER
# Every wait is bounded; every process is killed on every exit path.
set -u
etcd=$1 syncer=$2
work=$(mktemp -d /tmp/diloco_failover.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill -KILL "$p" 2> /dev/null
    kill -CONT "$p" 2> /dev/null
  done
  wait 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.log; do
    echo "--- $f"
    tail -n 8 "$f"
  done
  exit 1
}
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits up to $3 seconds for a line matching $2 in file $1; prints it.
wait_for() {
  local line
  for ((i = 0; i < $3 * 10; ++i)); do
    line=$(grep -m1 -E -- "$2" "$1" 2> /dev/null) && {
      echo "$line"
      return 0
    }
    sleep 0.1
  done
  return 1
}
epoch_of() { sed -E 's/.*with epoch ([0-9]+).*/\1/' <<< "$1"; }

client=$(port) peer=$(port)
url=http://127.0.0.1:$client
"$etcd" --name failover --data-dir "$work/etcd" --listen-client-urls "$url" --advertise-client-urls "$url" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "failover=http://127.0.0.1:$peer" > "$work/etcd.out" 2>&1 &
pids+=($!)

start_syncer() {  # name; sets the variable named after it to its pid, and ${name}_endpoint
  local endpoint="tcp://127.0.0.1:$(port)"
  # Not under timeout(1): the signals must reach the syncer itself. The
  # test's own waits are bounded, and cleanup kills it on every exit path.
  "$syncer" --endpoint "$endpoint" --etcd "$url" --lease-ttl 2 --fragments 4 --quiet \
    > "$work/$1.out" 2> "$work/$1.log" &
  pids+=($!)
  printf -v "$1" '%s' "$!"
  printf -v "${1}_endpoint" '%s' "$endpoint"
}

key=/diloco/shard-0/leader
start_syncer A
leading_a=$(wait_for "$work/A.log" "leading $key with epoch" 30) || fail "A did not lead"
start_syncer B
wait_for "$work/B.log" "standby: $key is led by $A_endpoint \\(epoch $(epoch_of "$leading_a")\\)" 30 > /dev/null ||
  fail "B did not stand by naming A"

kill -STOP "$A"
leading_b=$(wait_for "$work/B.log" "leading $key with epoch" 30) || fail "B did not lead while A was stopped"
((10#$(epoch_of "$leading_b") > 10#$(epoch_of "$leading_a"))) || fail "epoch did not grow: $leading_a / $leading_b"
kill -CONT "$A"
for ((i = 0; i < 300; ++i)); do kill -0 "$A" 2> /dev/null || break; sleep 0.1; done
wait "$A"
status=$?
((status == 4)) || fail "A, back after its lease ended, exited with $status, not 4 (stepped down)"
grep -q "stepped down from $key (epoch $(epoch_of "$leading_a"))" "$work/A.log" || fail "A did not say it stepped down"

start_syncer C
wait_for "$work/C.log" "standby: $key is led by $B_endpoint" 30 > /dev/null || fail "C did not stand by naming B"
killed_at=$(date +%s.%N)
kill -KILL "$B"
leading_c=$(wait_for "$work/C.log" "leading $key with epoch" 30) || fail "C did not lead after B was killed"
took=$(python3 -c "import time; print('%.1f' % (time.time() - $killed_at))")
((10#$(epoch_of "$leading_c") > 10#$(epoch_of "$leading_b"))) || fail "epoch did not grow: $leading_b / $leading_c"
# The lease (2 s) and one campaign period (0.5 s) after the kill, with room for a loaded machine.
python3 -c "import sys; sys.exit(0 if $took <= 6 else 1)" || fail "C led $took s after B's kill"
kill -TERM "$C"
wait "$C" || fail "C did not stop cleanly on SIGTERM"
echo "epochs $(epoch_of "$leading_a") -> $(epoch_of "$leading_b") (A SIGSTOPped past its lease; it stepped down," \
  "exit 4, once SIGCONTed) -> $(epoch_of "$leading_c") (B SIGKILLed; C led ${took} s later)"
