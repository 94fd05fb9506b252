#!/usr/bin/env bash
# fashion_mnist refuses a bad command line before it does anything: exit
# status 2, nothing on stdout, and a message on stderr that names the option
# at fault (and the value, where there is one). Numbers out of their option's
# range are refused, not wrapped or clamped: `--quorum -1` is not 4294967295.
# A good command line gets past the parse: pointed at a directory without the
# dataset it fails for that reason instead (status 1).
set -u
program=$1
failures=0

# refused <regex the message must match> -- args...
refused() {
  local pattern=$1
  shift 2
  local out err rc
  err=$("$program" --progress 0 "$@" 2>&1 >/dev/null)
  rc=$?
  out=$("$program" --progress 0 "$@" 2>/dev/null)
  if [[ $rc -ne 2 || -n $out ]] || ! grep -Eq -- "$pattern" <<<"$err"; then
    echo "FAIL $*: status $rc (want 2), stdout '$out', stderr: $err"
    failures=$((failures + 1))
  else
    echo "ok   $*: $(head -n 1 <<<"$err")"
  fi
}

refused "bad value '-1' for --quorum" -- --quorum -1
refused "bad value '0' for --quorum" -- --quorum 0
refused "bad value '0' for --learners" -- --learners 0
refused "bad value '1025' for --learners" -- --learners 1025
refused "bad value '4294967297' for --learners" -- --learners 4294967297
refused "bad value '-4' for --learners" -- --learners -4
refused "bad value '0' for --H" -- --H 0
refused "bad value '-50' for --H" -- --H -50
refused "bad value '0' for --steps" -- --steps 0
refused "bad value '2.5' for --steps" -- --steps 2.5
refused "bad value '0' for --batch" -- --batch 0
refused "bad value '0' for --fragments" -- --fragments 0
refused "bad value '-1' for --overlap" -- --overlap -1
refused "bad value '-1' for --seed" -- --seed -1
refused "bad value '0' for --speeds" -- --learners 2 --speeds 1,0
refused "bad value '-0.5' for --speeds" -- --learners 2 --speeds 1,-0.5
refused "bad value '1.5' for --speeds" -- --learners 2 --speeds 1.5,1
refused "bad value '' for --speeds" -- --learners 3 --speeds 1,,1
refused "bad value '1' for --alpha" -- --alpha 1
refused "bad value '-0.1' for --alpha" -- --alpha -0.1
refused "bad value 'nan' for --lr" -- --lr nan
refused "bad value '-0.001' for --lr" -- --lr -0.001
refused "bad value '-1' for --weight-decay" -- --weight-decay -1
refused "bad value 'inf' for --outer-lr" -- --outer-lr inf
refused "bad value '1' for --outer-momentum" -- --outer-momentum 1
refused "bad value '-2' for --clip" -- --clip -2
refused "--clip must be 0 \(off\) or at least 1" -- --clip 0.5
refused "bad value '-3' for --quarantine-after" -- --quarantine-after -3
refused "bad value '0' for --absent-half-life" -- --absent-half-life 0
refused "bad value '-1' for --progress" -- --progress -1
refused "bad value '-1' for --eval-every" -- --eval-every -1
refused "bad value '-5' for --stop-at" -- --stop-at -5
refused "bad value '-1' for --learner-id" -- --learner-id -1
refused "bad value '-1' for --incarnation" -- --incarnation -1
refused "bad value '0' for --checkpoint-every" -- --role learner --endpoint tcp://127.0.0.1:1 --checkpoint-dir d \
  --checkpoint-every 0
refused "bad value '-5' for --checkpoint-every" -- --role learner --endpoint tcp://127.0.0.1:1 --checkpoint-dir d \
  --checkpoint-every -5
refused "--checkpoint-every needs --checkpoint-dir" -- --role learner --endpoint tcp://127.0.0.1:1 --checkpoint-every 10
refused "--snapshot-dir needs --eval-every" -- --snapshot-dir /tmp --eval-every 0
refused "--snapshot-dir is for the syncer" -- --role learner --endpoint tcp://127.0.0.1:1 --snapshot-dir /tmp
refused "--checkpoint-dir is for --role learner" -- --checkpoint-dir d
refused "bad value 'x' for --stall" -- --stall x:1:1
refused "--stall takes LEARNER:AFTER:STEPS" -- --stall 1:1
refused "--stall names a learner that does not exist" -- --learners 2 --stall 2:1:1
refused "bad value '0' for --leave" -- --leave 1:0
refused "--leave takes COUNT:AFTER" -- --leave 1
refused "--leave needs fewer leavers than learners" -- --learners 2 --leave 2:10
refused "--learner-id must be below --learners" -- --role learner --endpoint tcp://127.0.0.1:1 --learners 2 --learner-id 2
refused "--role syncer and --role learner need --endpoint" -- --role syncer
refused "unknown role 'boss'" -- --role=boss
refused "unknown transport 'carrier-pigeon'" -- --transport carrier-pigeon
refused "unknown merge rule 'vote'" -- --merge vote
refused "unknown partial-round rule 'some'" -- --partial-rounds some
refused "--mode" -- --mode
refused "--curve-secret and --curve-peer go together" -- --curve-secret key
refused "unexpected argument 'stray'" -- stray
refused "bad value '-1' for --gpu-learners" -- --gpu-learners -1
refused "--gpu-learners must not exceed --learners" -- --learners 2 --gpu-learners 3
refused "--gpu-learners needs --mode diloco or decoupled" -- --mode dp --gpu-learners 1
refused "bad value '0' for --ranks-per-unit" -- --ranks-per-unit 0
refused "--ranks-per-unit (above 1 needs a build with MPI|is for --role learner)" -- --ranks-per-unit 2
refused "--evaluate-shards excludes --evaluate|--evaluate excludes --evaluate-shards" -- --evaluate a.f32 --evaluate-shards b.f32
refused "cannot read /nonexistent/final0.f32" -- --evaluate-shards /nonexistent/final0.f32
refused "2 shards of 1 fragments: a shard owns at least one fragment" -- --fragments 1 --evaluate-shards a.f32 b.f32
# Given an endpoint, a process never trains alone; the DILOCO_* variables
# stand for their flags (a learner id makes a learner).
refused "an endpoint is given .* but no role" -- --endpoint tcp://127.0.0.1:1
DILOCO_ENDPOINT=tcp://127.0.0.1:1 refused "an endpoint is given .* but no role" -- --learners 2
DILOCO_LEARNER_ID=0 refused "--role syncer and --role learner need --endpoint" -- --learners 2
DILOCO_LEARNER_ID=2 DILOCO_LEARNERS=2 refused "--learner-id must be below --learners" -- --endpoint tcp://127.0.0.1:1
DILOCO_LEARNERS=0 refused "bad value '0' for --learners" -- --role all

# A GPU learner where none can run (a build without CUDA, or no usable
# device): refused with the reason, status 2. Where one can, the command
# line is good and the run stops at the missing dataset (status 1).
err=$("$program" --progress 0 --learners 2 --gpu-learners 1 --data-dir /nonexistent 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 2 ]] && grep -Eq -- "--gpu-learners: (this fashion_mnist was built without CUDA|no usable CUDA device|no CUDA device)" <<<"$err"; then
  echo "ok   --gpu-learners 1 without a GPU: $(head -n 1 <<<"$err")"
elif [[ $rc -eq 1 ]] && grep -q "cannot open /nonexistent/" <<<"$err"; then
  echo "ok   --gpu-learners 1 with a GPU: $(head -n 1 <<<"$err")"
else
  echo "FAIL --gpu-learners 1: status $rc, stderr: $err"
  failures=$((failures + 1))
fi
# The syncer runs no learner: no device needed.
err=$("$program" --progress 0 --role syncer --endpoint tcp://127.0.0.1:1 --gpu-learners 1 --data-dir /nonexistent 2>&1 >/dev/null)
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "cannot open /nonexistent/" <<<"$err"; then
  echo "FAIL --role syncer --gpu-learners 1: status $rc (want 1, the dataset missing), stderr: $err"
  failures=$((failures + 1))
else
  echo "ok   --role syncer --gpu-learners 1: no device needed"
fi

# The same options, well formed (both spellings, repeated: the last counts),
# get past the parse and stop at the missing dataset.
err=$("$program" --progress 5 --progress=0 --mode=diloco --learners 2 --quorum 1 --H 10 --overlap 9 --fragments 2 \
  --speeds 1,0.5 --alpha 0.5 --stall 1:2:3 --leave 1:10 --clip 0 --lr 1e-4 --outer-momentum 0 --seed 18446744073709551615 \
  --merge median --partial-rounds live --transport sim --data-dir /nonexistent 2>&1 >/dev/null)
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "cannot open /nonexistent/" <<<"$err"; then
  echo "FAIL good command line: status $rc (want 1, the dataset missing), stderr: $err"
  failures=$((failures + 1))
else
  echo "ok   good command line: $(head -n 1 <<<"$err")"
fi

# --help lists the options on stdout and succeeds.
help=$("$program" --help 2>&1)
rc=$?
if [[ $rc -ne 0 ]] || ! grep -q -- "--quorum K" <<<"$help" || ! grep -q -- "--leave N:AFTER" <<<"$help"; then
  echo "FAIL --help: status $rc: $help"
  failures=$((failures + 1))
else
  echo "ok   --help"
fi

exit $((failures > 0))
