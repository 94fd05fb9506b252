#!/usr/bin/env bash
# A rank of a unit SIGKILLed while the other waits in a collective with a
# minute's deadline: mpirun must end the whole unit, with a non-zero status
# that names the signal, and the waiting rank must never come back from its
# collective (it is ended, not left to time out).
#
#   run_killed.sh MPIRUN PROGRAM
set -euo pipefail
mpirun=$1 program=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

started=$SECONDS
status=0
timeout 90 "$mpirun" -np 2 "$program" killed >"$out" 2>&1 || status=$?
took=$((SECONDS - started))
cat "$out"
echo "run_killed: mpirun exited with status $status after $took s"
if ((status == 0)); then
  echo "run_killed: FAILED: the unit exited 0 although a rank was killed" >&2
  exit 1
fi
if ((status == 124)); then
  echo "run_killed: FAILED: the unit was still running 90 s after a rank was killed" >&2
  exit 1
fi
if grep -q "came back from the collective" "$out"; then
  echo "run_killed: FAILED: the surviving rank came back from its collective instead of being ended" >&2
  exit 1
fi
if ! grep -q "signal 9" "$out"; then
  echo "run_killed: FAILED: mpirun did not report the rank killed by signal 9" >&2
  exit 1
fi
echo "run_killed: the unit ended within $took s of its rank's SIGKILL"
