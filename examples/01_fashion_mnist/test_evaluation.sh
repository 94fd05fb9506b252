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
[[ $? -eq 0 ]] || exit 1

# --snapshot-dir: the same hook saves the global model instead of evaluating
# it; `--evaluate` of the snapshot taken at the last outer update gives the
# final model's test accuracy (data parallel: one outer update per step).
"$program" --mode dp --learners 2 --steps 40 --transport sim --eval-every 20 --snapshot-dir "$work/snapshots/new" \
  --progress 0 >"$work/out" 2>"$work/err"
status=$?
if [[ $status -ne 0 ]]; then
  echo "FAIL: exit status $status with --snapshot-dir"; cat "$work/err"; exit 1
fi
"$program" --evaluate "$work/snapshots/new/update_40.f32" "$work/snapshots/new/update_20.f32" >"$work/evaluated" || exit 1
python3 - "$work/out" "$work/err" "$work/snapshots/new" "$work/evaluated" <<'PY'
import json, os, sys, time
out, err, folder, evaluated = sys.argv[1:]
failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
index = [json.loads(l) for l in open(os.path.join(folder, "snapshots.jsonl"))]
check([s["outer_update"] for s in index] == [20, 40], "snapshots at outer updates 20 and 40: %s" % index)
check(all(0 <= a["seconds"] <= b["seconds"] for a, b in zip(index, index[1:])), "seconds since the start, in order")
check(all(abs(s["unix_seconds"] - time.time()) < 600 for s in index), "unix_seconds is the wall time")
sizes = [os.path.getsize(os.path.join(folder, s["file"])) for s in index]
check(sizes == [269322 * 4] * 2, "each snapshot is the model in f32 (269322 x 4 bytes): %s" % sizes)
check("evaluation at outer update" not in open(err).read(), "no evaluation while training")
final = json.loads(open(out).read().splitlines()[-1])
lines = [json.loads(l) for l in open(evaluated).read().splitlines()]
check([os.path.basename(l["file"]) for l in lines] == ["update_40.f32", "update_20.f32"], "one line per file, in order")
check(lines[0]["test_accuracy"] == final["test_accuracy"],
      "the last snapshot is the final model: %s vs %s" % (lines[0]["test_accuracy"], final["test_accuracy"]))
check(lines[1]["test_accuracy"] != lines[0]["test_accuracy"], "the snapshots differ")
sys.exit(1 if failures else 0)
PY
