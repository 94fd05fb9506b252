#!/usr/bin/env python3
"""Quality of Decoupled DiLoCo against synchronous data parallelism.

Runs `fashion_mnist` on the real Fashion-MNIST in the deterministic simulator
(4 learners, equal inner steps per learner, several seeds) for:

  dp                    synchronous data parallelism (gradients averaged every step)
  diloco                synchronous DiLoCo, H = 50
  decoupled             Decoupled DiLoCo with the trainer's defaults (H = 50, P = 8, K = 1,
                        every step kept, outer η = 0.7, μ = 0.9), learner speeds 1, 1, 0.7, 0.5,
                        partial rounds scaled by the share of all learners' expected weight
  decoupled_full_step   the same, but every partial round takes a full outer step
  decoupled_live_share  the same, but partial rounds scaled by the live learners' share
  diloco_trimmed        synchronous DiLoCo merged by a coordinate-wise 25 % trimmed mean
                        (robust to one outlying learner of four)

and checks that Decoupled DiLoCo (with the syncer's default screening: norm
and weight clipping, quarantine) reaches >= 85 % test accuracy on every seed
and, on average over the seeds, is within 1.0 point of data parallelism.
Only `dp` and `decoupled` are checked, and only they run unless --all is
given (the CTest test runs without it: the other four rows are for the
README's table and take more than 40 % of the time).

Then a run that shrinks for good: 8 learners, 4 of which leave after a third
of the steps, against 4 learners throughout (equal speeds, seed 1, 3000
steps, Decoupled DiLoCo with the trainer's defaults). Checks that the shrunk run
ends within 1.0 point of the 4-learner run and keeps its step size: the
partial-round scale over the last quarter of its outer updates is at least
0.7 of the 4-learner run's (counting the departed learners for ever would
halve it).

Prints tables and, with --summary, writes the measurements as JSON.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys

from trainer_runs import SIMULATED, result_of

HETEROGENEOUS = ["--speeds", "1,1,0.7,0.5"]
DECOUPLED = ["--mode", "decoupled"] + HETEROGENEOUS
CHECKED = ("dp", "decoupled")
CONFIGS = {
    "dp": ["--mode", "dp"],
    "diloco": ["--mode", "diloco", "--H", "50"],
    "decoupled": DECOUPLED + ["--partial-rounds", "all"],
    "decoupled_full_step": DECOUPLED + ["--partial-rounds", "full"],
    "decoupled_live_share": DECOUPLED + ["--partial-rounds", "live"],
    "diloco_trimmed": ["--mode", "diloco", "--H", "50", "--merge", "trimmed"],
}
SHRINK_STEPS = 3000
SHRINKING = {
    "eight_shrink_to_four": ["--learners", "8", "--leave", "4:%d" % (SHRINK_STEPS // 3)],
    "four_throughout": ["--learners", "4"],
}
SHRINK_BASE = ["--mode", "decoupled"]


def run(program, name, seed, steps):
    if name in SHRINKING:
        cmd = [program, *SHRINK_BASE, *SHRINKING[name], "--steps", str(SHRINK_STEPS)]
    else:
        cmd = [program, *CONFIGS[name], "--learners", "4", "--steps", str(steps)]
    return name, seed, result_of(cmd + ["--seed", str(seed), *SIMULATED])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program", help="path to the fashion_mnist executable")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=1000, help="inner steps per learner")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--summary", help="write the measurements to this JSON file")
    parser.add_argument("--no-shrink", action="store_true", help="skip the shrinking-run check")
    parser.add_argument("--all", action="store_true",
                        help="also run the unchecked comparison rows (diloco, decoupled_full_step, "
                             "decoupled_live_share, diloco_trimmed)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = list(CONFIGS) if args.all else list(CHECKED)

    results = {name: {} for name in configs}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        # The shrinking runs first: each takes about three times as long as
        # a checked run, and started last they would finish alone.
        futures = [] if args.no_shrink else [pool.submit(run, args.program, name, 1, args.steps) for name in SHRINKING]
        futures += [pool.submit(run, args.program, name, seed, args.steps) for name in configs for seed in seeds]
        for future in concurrent.futures.as_completed(futures):
            name, seed, result = future.result()
            results.setdefault(name, {})[seed] = result
            print(f"  {name:22s} seed {seed}: accuracy {100 * result['test_accuracy']:.2f} %"
                  f"  ({result['seconds']:.1f} s)", flush=True)

    failures = []
    mean = {}
    print(f"\n{'configuration':22s} " + " ".join(f"seed {s:<3d}" for s in seeds) + "    mean   outer updates")
    for name in configs:
        accuracies = [100 * results[name][s]["test_accuracy"] for s in seeds]
        mean[name] = statistics.fmean(accuracies)
        updates = statistics.fmean(results[name][s]["outer_updates"] for s in seeds)
        print(f"{name:22s} " + " ".join(f"{a:8.2f}" for a in accuracies) + f"  {mean[name]:6.2f}  {updates:10.0f}")
        for s in seeds:
            r = results[name][s]
            if not r["completed"] or r["inner_steps"] != 4 * args.steps:
                failures.append(f"{name} seed {s} did not complete its {4 * args.steps} inner steps")

    gap = mean["dp"] - mean["decoupled"]
    print(f"\ndecoupled vs data parallel: {gap:+.2f} points (must be <= 1.00)")
    for s in seeds:
        accuracy = 100 * results["decoupled"][s]["test_accuracy"]
        if accuracy < 85.0:
            failures.append(f"decoupled seed {s}: {accuracy:.2f} % < 85 %")
    if gap > 1.0:
        failures.append(f"decoupled is {gap:.2f} points below data parallel (allowed: 1.00)")
    for rule in (r for r in ("decoupled_full_step", "decoupled_live_share", "diloco_trimmed") if r in configs):
        print(f"{rule} vs data parallel: {mean['dp'] - mean[rule]:+.2f} points")

    if not args.no_shrink:
        shrunk, four = results["eight_shrink_to_four"][1], results["four_throughout"][1]
        print(f"\nshrinking run (8 learners, 4 leave after {SHRINK_STEPS // 3} of {SHRINK_STEPS} steps) vs 4 throughout:")
        for name, r in (("eight_shrink_to_four", shrunk), ("four_throughout", four)):
            print(f"  {name:22s} accuracy {100 * r['test_accuracy']:.2f} %  end scale {r['end_scale']:.3f}"
                  f"  outer updates {r['outer_updates']}")
        gap = 100 * (four["test_accuracy"] - shrunk["test_accuracy"])
        ratio = shrunk["end_scale"] / four["end_scale"] if four["end_scale"] > 0 else 0.0
        print(f"  accuracy gap {gap:+.2f} points (must be <= 1.00), end scale ratio {ratio:.2f} (must be >= 0.70)")
        if abs(gap) > 1.0:
            failures.append(f"the shrunk run is {gap:.2f} points from 4 learners throughout (allowed: 1.00)")
        if ratio < 0.7:
            failures.append(f"the shrunk run's step size is {ratio:.2f} of 4 learners' (required: >= 0.70)")

    if args.summary:
        with open(args.summary, "w") as f:
            json.dump({"seeds": seeds, "steps": args.steps, "mean_accuracy": mean, "runs": results}, f, indent=1)
    for failure in failures:
        print("FAIL:", failure)
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
