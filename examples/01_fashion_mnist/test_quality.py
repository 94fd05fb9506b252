#!/usr/bin/env python3
"""Quality of Decoupled DiLoCo against synchronous data parallelism.

Runs `fashion_mnist` on the real Fashion-MNIST in the deterministic simulator
(4 learners, equal inner steps per learner, several seeds) for:

  dp                    synchronous data parallelism (gradients averaged every step)
  diloco                synchronous DiLoCo, H = 50
  decoupled             Decoupled DiLoCo, H = 50, P = 4, K = 1, learner speeds 1, 1, 0.7, 0.5,
                        partial rounds scaled by the share of all learners' expected weight
  decoupled_full_step   the same, but every partial round takes a full outer step
  decoupled_live_share  the same, but partial rounds scaled by the live learners' share

and checks that Decoupled DiLoCo reaches >= 85 % test accuracy on every seed
and, on average over the seeds, is within 1.0 point of data parallelism.
Prints a table and, with --summary, writes the measurements as JSON.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys

HETEROGENEOUS = ["--speeds", "1,1,0.7,0.5"]
DECOUPLED = ["--mode", "decoupled", "--H", "50", "--fragments", "4", "--quorum", "1"] + HETEROGENEOUS
CONFIGS = {
    "dp": ["--mode", "dp"],
    "diloco": ["--mode", "diloco", "--H", "50"],
    "decoupled": DECOUPLED + ["--partial-rounds", "all"],
    "decoupled_full_step": DECOUPLED + ["--partial-rounds", "full"],
    "decoupled_live_share": DECOUPLED + ["--partial-rounds", "live"],
}


def run(program, name, seed, steps):
    cmd = [program, *CONFIGS[name], "--learners", "4", "--steps", str(steps), "--seed", str(seed),
           "--transport", "sim", "--progress", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["command"] = " ".join(cmd)
    return name, seed, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program", help="path to the fashion_mnist executable")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=1000, help="inner steps per learner")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--summary", help="write the measurements to this JSON file")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    results = {name: {} for name in CONFIGS}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, args.program, name, seed, args.steps) for name in CONFIGS for seed in seeds]
        for future in concurrent.futures.as_completed(futures):
            name, seed, result = future.result()
            results[name][seed] = result
            print(f"  {name:22s} seed {seed}: accuracy {100 * result['test_accuracy']:.2f} %"
                  f"  ({result['seconds']:.1f} s)", flush=True)

    failures = []
    mean = {}
    print(f"\n{'configuration':22s} " + " ".join(f"seed {s:<3d}" for s in seeds) + "    mean   outer updates")
    for name in CONFIGS:
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
    for rule in ("decoupled_full_step", "decoupled_live_share"):
        print(f"{rule} vs data parallel: {mean['dp'] - mean[rule]:+.2f} points")

    if args.summary:
        with open(args.summary, "w") as f:
            json.dump({"seeds": seeds, "steps": args.steps, "mean_accuracy": mean, "runs": results}, f, indent=1)
    for failure in failures:
        print("FAIL:", failure)
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
