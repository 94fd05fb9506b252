#!/usr/bin/env bash
# The syncer's evaluation hook on Fashion-MNIST: with --eval-every N the
# trainer prints the test accuracy of the global model every N outer updates
# while it trains (stderr), the accuracy rises from the first such line to
# the last, the learners' training loss reported in their heartbeats is on
# the later lines, and the last line of stdout is still the result JSON, with
# the final training loss. Deterministic: the simulator.
set -u
program=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/fashion_evaluation.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$program" --mode decoupled --learners 2 --steps 200 --H 10 --transport sim --eval-every 20 --progress 0 \
  >"$work/out" 2>"$work/err"
status=$?
if [[ $status -ne 0 ]]; then
  echo "FAIL: exit status $status"; cat "$work/err"; exit 1
fi
grep "evaluation at outer update" "$work/err"
python3 - "$work/out" "$work/err" <<'PY'
import json, re, sys
out, err = open(sys.argv[1]).read(), open(sys.argv[2]).read()
line = re.compile(r"evaluation at outer update (\d+): test accuracy ([0-9.]+) \| test loss ([0-9.]+) \| train loss (n/a|[0-9.]+)$")
evaluations = [line.search(l) for l in err.splitlines() if "evaluation at outer update" in l]
failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
check(len(evaluations) >= 3 and all(evaluations), "%d evaluation lines, all well formed" % len(evaluations))
if evaluations and all(evaluations):
    updates = [int(m.group(1)) for m in evaluations]
    check(updates == list(range(20, 20 * len(updates) + 1, 20)), "at outer updates 20, 40, ...: %s" % updates)
    first, last = float(evaluations[0].group(2)), float(evaluations[-1].group(2))
    check(last > first + 0.05 and last > 0.6, "test accuracy rises: %.4f -> %.4f" % (first, last))
    check(evaluations[-1].group(4) != "n/a", "the training loss is known by the last evaluation: %s" % evaluations[-1].group(4))
result = json.loads(out.splitlines()[-1])
check(isinstance(result.get("train_loss"), float) and 0 < result["train_loss"] < 3, "train_loss %s" % result.get("train_loss"))
check(result.get("completed") is True, "completed")
sys.exit(1 if failures else 0)
PY
