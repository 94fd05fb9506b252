#!/usr/bin/env python3
"""Fashion-MNIST under chaos: diloco_syncer and M fashion_mnist learner
processes over ZeroMQ TCP on loopback, run by diloco_chaos with a seeded
fault schedule (SIGKILL, SIGSTOP/SIGCONT, restarts, syncer kills), then the
final global model evaluated on the test set.

  chaos.py BIN_DIR --check              the CI test: a run without faults and the same run
                                        with >= 10 learner faults and 3 syncer kills; checks
                                        the invariants, 0 acknowledged contributions lost,
                                        and accuracy within 2 points
  chaos.py BIN_DIR --compare            goodput of decoupled DiLoCo, synchronous DiLoCo and
                                        data parallel under one fault schedule (a table)
  chaos.py BIN_DIR --mode decoupled     one run (options below)

--learner-checkpoints N makes every learner save a checkpoint every N inner
steps in DIR/learnerL/, so that a learner restarted after a kill resumes from
it (docs/design.md, "Learner checkpoints").

BIN_DIR is the build directory (tools/ and examples/01_fashion_mnist/ below it).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

MODES = {
    # The syncer's flags per mode; learners take --mode. Data parallel is H=1
    # with the real optimizer (AdamW) at the syncer, learners send gradients.
    "decoupled": "--fragments 4 --H 50 --quorum 1",
    "diloco": "--lock-step --fragments 1 --H 50 --overlap 0 --quorum {M} --grace 0",
    "dp": "--lock-step --fragments 1 --H 1 --overlap 0 --quorum {M} --grace 0 --outer adamw --outer-lr 0.001 "
          "--merge average",
}


def run(bins, out, mode, args, faults=True):
    """One chaos run in `out`; returns its report with the test accuracy added."""
    os.makedirs(out, exist_ok=True)
    m = args.learners
    for i in range(m):  # a learner checkpoint of an earlier run in `out` is not this run's
        shutil.rmtree(os.path.join(out, f"learner{i}"), ignore_errors=True)
    syncer = (f"{bins}/tools/diloco_syncer --endpoint {{endpoint}} --trace {{trace}} --quiet "
              f"--checkpoint-dir {{dir}}/checkpoints --save {{dir}}/final.f32 --metrics {{dir}}/syncer.json "
              f"--heartbeat-timeout {args.heartbeat_timeout} "
              + MODES[mode].format(M=m))
    learner = (f"{bins}/examples/01_fashion_mnist/fashion_mnist --role learner --mode {mode} --learners {m} "
               f"--endpoint {{endpoint}} --learner-id {{id}} --incarnation {{incarnation}} --trace {{trace}} "
               f"--stop-at {{stop_at}} --steps 100000000 --progress 0 --seed {args.seed}")
    if args.learner_checkpoints > 0:
        learner += f" --checkpoint-dir {{dir}}/learner{{id}} --checkpoint-every {args.learner_checkpoints}"
    command = [f"{bins}/tools/diloco_chaos", "--out", out, "--learners", str(m), "--duration", str(args.duration),
               "--syncer", syncer, "--learner", learner, "--seed", str(args.seed),
               "--title", f"{mode}_{'faults' if faults else 'no_faults'}", "--downtime-bound", str(args.bound)]
    if faults:
        command += ["--mtbf", str(args.mtbf), "--recovery", str(args.recovery), "--pause-share", str(args.pause_share),
                    "--quiet-start", str(args.quiet), "--quiet-end", str(args.quiet)]
        for at in args.syncer_kill_at:
            command += ["--syncer-kill-at", str(at)]
    else:
        command += ["--no-faults"]
    print(f"chaos.py: {mode}, {'faults' if faults else 'no faults'}, {args.duration} s -> {out}", file=sys.stderr,
          flush=True)
    with open(os.path.join(out, "chaos.log"), "w") as log:
        status = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                timeout=args.duration + 180).returncode
    report = json.load(open(os.path.join(out, "report.json")))
    report["runner_status"] = status
    faults = {"learner_kills": 0, "learner_pauses": 0, "syncer_kills": 0}
    for line in open(os.path.join(out, "events.jsonl")):
        e = json.loads(line)
        if e["src"] == "runner" and e["ev"] in ("kill", "pause") and "learner" in e and e.get("pid") is not None:
            faults["learner_kills" if e["ev"] == "kill" else "learner_pauses"] += 1
        elif e["src"] == "runner" and e["ev"] == "kill" and e.get("target") == "syncer":
            faults["syncer_kills"] += 1
    report["faults"] = faults
    try:
        report["syncer"] = json.load(open(os.path.join(out, "syncer.json")))
    except (OSError, ValueError):
        report["syncer"] = None
    evaluation = subprocess.run([f"{bins}/examples/01_fashion_mnist/fashion_mnist", "--evaluate",
                                 os.path.join(out, "final.f32")], stdout=subprocess.PIPE, text=True, timeout=120)
    report["test_accuracy"] = json.loads(evaluation.stdout)["test_accuracy"] if evaluation.returncode == 0 else None
    json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)
    return report


def summary(mode, r):
    g = r["goodput"]
    accuracy = "-" if r["test_accuracy"] is None else "%.2f %%" % (100 * r["test_accuracy"])
    d = r["downtime"]
    return (f"| {mode} | {100 * g:.1f} % | {d['global_downtime_s']:.1f} s | {d['longest_gap_s']:.1f} s | "
            f"{r['faults']['learner_kills']} / {r['faults']['learner_pauses']} / {r['faults']['syncer_kills']} | "
            f"{r['accounting']['merged']} / {r['accounting']['accepted']} | "
            f"{accuracy} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bins")
    p.add_argument("--check", action="store_true")
    p.add_argument("--compare", action="store_true")
    p.add_argument("--mode", choices=MODES, default="decoupled")
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--learners", type=int, default=4)
    p.add_argument("--duration", type=float, default=75)
    p.add_argument("--mtbf", type=float, default=8)
    p.add_argument("--recovery", type=float, default=4)
    p.add_argument("--pause-share", type=float, default=0.5)
    p.add_argument("--quiet", type=float, default=10)
    p.add_argument("--syncer-kill-at", type=float, nargs="*", default=[25, 40, 55], metavar="SEC",
                   help="kill the syncer at these times (none: no syncer kill)")
    p.add_argument("--bound", type=float, default=5)
    p.add_argument("--heartbeat-timeout", type=float, default=3,
                   help="the syncer declares a silent learner dead after this (shorter than a pause)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--learner-checkpoints", type=int, default=0, metavar="N",
                   help="learners save a checkpoint every N inner steps and resume from it after a restart (0: off)")
    args = p.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="diloco_chaos.")

    if args.compare:
        rows = [summary(mode, run(args.bins, os.path.join(out, mode), mode, args)) for mode in MODES]
        print("| mode | goodput | global downtime | longest gap | kills / pauses / syncer kills | merged / accepted "
              "| test accuracy |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        return 0
    if not args.check:
        r = run(args.bins, out, args.mode, args, faults=not args.no_faults)
        print(json.dumps(r))
        return 0 if r["runner_status"] == 0 else 1

    clean = run(args.bins, os.path.join(out, "clean"), "decoupled", args, faults=False)
    chaos = run(args.bins, os.path.join(out, "chaos"), "decoupled", args, faults=True)
    failures = []
    if clean["runner_status"] != 0:
        failures.append(f"the run without faults failed: {clean['invariants']['failures']}")
    if chaos["runner_status"] != 0:
        failures.append(f"the chaos run failed its invariants: {chaos['invariants']['failures']} (see {out}/chaos)")
    f = chaos["faults"]
    if f["learner_kills"] + f["learner_pauses"] < 10 or f["syncer_kills"] < 3:
        failures.append(f"not enough faults (>= 10 learner faults, >= 3 syncer kills): {f}")
    if chaos["accounting"]["lost_in_syncer_restart"] != 0:
        failures.append(f"acknowledged contributions lost across syncer kills: {chaos['accounting']}")
    if chaos["downtime"]["global_downtime_s"] != 0:
        failures.append(f"global downtime {chaos['downtime']['global_downtime_s']} s outside the syncer's restart")
    if f["learner_pauses"] and (not chaos["syncer"] or chaos["syncer"]["declared_dead"] < 1
                                or chaos["syncer"]["revived"] < 1):
        failures.append(f"paused learners were not dropped from the live set and readmitted: {chaos['syncer']}")
    if chaos["accounting"]["unaccounted"] != 0:
        failures.append(f"unaccounted contributions: {chaos['accounting']}")
    if chaos["revisions"]["violations"]:
        failures.append(f"a learner saw a revision go backwards: {chaos['revisions']['violations']}")
    if clean["test_accuracy"] is None or chaos["test_accuracy"] is None:
        failures.append("no final model to evaluate")
    elif chaos["test_accuracy"] < clean["test_accuracy"] - 0.02:
        failures.append(f"accuracy {chaos['test_accuracy']} more than 2 points below {clean['test_accuracy']}")
    print("| run | goodput | global downtime | longest gap | kills / pauses / syncer kills | merged / accepted "
          "| test accuracy |")
    print(summary("decoupled, no faults", clean))
    print(summary("decoupled, faults", chaos))
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
