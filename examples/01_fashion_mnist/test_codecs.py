#!/usr/bin/env python3
"""Compressed outer gradients on Fashion-MNIST: bytes saved and quality kept.

Runs `fashion_mnist` in the deterministic simulator, Decoupled DiLoCo with 4
learners (H = 50, P = 4, K = 1, speeds 1, 1, 0.7, 0.5), with the outer
gradients sent as fp32, bf16, int8, fp8 and int4, and int4 with error
feedback, on several seeds. Checks:

- sizes: the payload bytes learners send (`bytes_sent`), per contribution,
  are what the formats take at the default block of 256 (docs/protocol.md,
  "Codecs"): fp32 / int8 and fp32 / fp8 >= 3.9, fp32 / int4 >= 7.5, and
  bf16 exactly half of fp32; every run makes the same number of
  contributions, since the schedule does not depend on the codec;
- quality (`--full`: 3 seeds of 1000 steps): int4, with and without error
  feedback, within 0.5 points of fp32 in mean test accuracy over the seeds.

Without --full, one seed of 300 steps checks the sizes and that every codec
trains (test accuracy >= 75 %): a smoke test of seconds, for CI.
Prints a table; with --summary writes the measurements as JSON.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys

DECOUPLED = ["--mode", "decoupled", "--H", "50", "--fragments", "4", "--quorum", "1", "--speeds", "1,1,0.7,0.5",
             "--learners", "4"]
CONFIGS = {
    "fp32": ["--codec", "fp32"],
    "bf16": ["--codec", "bf16"],
    "int8": ["--codec", "int8"],
    "fp8": ["--codec", "fp8"],
    "int4": ["--codec", "int4"],
    "int4_ef": ["--codec", "int4", "--error-feedback"],
}


def run(program, name, seed, steps):
    cmd = [program, *DECOUPLED, *CONFIGS[name], "--steps", str(steps), "--seed", str(seed), "--transport", "sim",
           "--progress", "0", "--eval-every", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["command"] = " ".join(cmd)
    return name, seed, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program", help="path to the fashion_mnist executable")
    parser.add_argument("--full", action="store_true", help="3 seeds of 1000 steps and the quality check")
    parser.add_argument("--seeds", help="comma-separated seeds (default: 1,2,3 with --full, else 1)")
    parser.add_argument("--steps", type=int, help="inner steps per learner (default: 1000 with --full, else 300)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--summary", help="write the measurements to this JSON file")
    args = parser.parse_args()
    seeds = [int(s) for s in (args.seeds or ("1,2,3" if args.full else "1")).split(",")]
    steps = args.steps or (1000 if args.full else 300)

    results = {name: {} for name in CONFIGS}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, args.program, name, seed, steps) for name in CONFIGS for seed in seeds]
        for future in concurrent.futures.as_completed(futures):
            name, seed, result = future.result()
            results[name][seed] = result
            print(f"  {name:8s} seed {seed}: accuracy {100 * result['test_accuracy']:.2f} %"
                  f"  bytes sent {result['bytes_sent']}  ({result['seconds']:.1f} s)", flush=True)

    failures = []
    mean = {}
    fp32_bytes = results["fp32"][seeds[0]]["bytes_sent"]
    print(f"\n{'codec':8s} " + " ".join(f"seed {s:<3d}" for s in seeds) +
          "    mean   bytes sent   fp32/this   bytes received")
    for name in CONFIGS:
        accuracies = [100 * results[name][s]["test_accuracy"] for s in seeds]
        mean[name] = statistics.fmean(accuracies)
        sent = results[name][seeds[0]]["bytes_sent"]
        print(f"{name:8s} " + " ".join(f"{a:8.2f}" for a in accuracies) +
              f"  {mean[name]:6.2f}  {sent:11d}  {fp32_bytes / sent:10.2f}  {results[name][seeds[0]]['bytes_received']:15d}")
        for s in seeds:
            r = results[name][s]
            if not r["completed"] or r["inner_steps"] != 4 * steps:
                failures.append(f"{name} seed {s} did not complete its {4 * steps} inner steps")
            if r["codec"] != CONFIGS[name][1]:
                failures.append(f"{name} seed {s} ran with codec {r['codec']}")
            if not args.full and 100 * r["test_accuracy"] < 75.0:
                failures.append(f"{name} seed {s}: {100 * r['test_accuracy']:.2f} % < 75 %")

    # The same schedule under every codec: the byte counts compare one for one.
    # fp32 sends 4 bytes a value; per 256 values int8 and fp8 send 4 + 256,
    # int4 4 + 128 (a fragment's tail block is shorter, so the ratio is at
    # most 1024/260 and 1024/132).
    contributions = {name: results[name][seeds[0]]["contributions_merged"] for name in CONFIGS}
    for name, least in (("int8", 3.9), ("fp8", 3.9), ("int4", 7.5), ("int4_ef", 7.5), ("bf16", 2.0)):
        ratio = fp32_bytes / results[name][seeds[0]]["bytes_sent"]
        if ratio < least:
            failures.append(f"{name} sends {ratio:.3f}x fewer bytes than fp32 (required: >= {least})")
    for name in ("int8", "fp8", "int4", "int4_ef"):
        ratio = fp32_bytes / results[name][seeds[0]]["bytes_sent"]
        most = 1024 / 260 if name in ("int8", "fp8") else 1024 / 132
        if ratio > most + 1e-9:
            failures.append(f"{name} sends {ratio:.3f}x fewer bytes than fp32: more than its format allows ({most:.3f})")
    if len(set(contributions.values())) != 1:
        print(f"note: contributions merged differ between codecs: {contributions}")

    if args.full:
        for name in ("int4", "int4_ef"):
            gap = mean["fp32"] - mean[name]
            print(f"{name} vs fp32: {gap:+.2f} points (must be <= 0.50)")
            if gap > 0.5:
                failures.append(f"{name} is {gap:.2f} points below fp32 (allowed: 0.50)")
        for name in ("bf16", "int8", "fp8"):
            print(f"{name} vs fp32: {mean['fp32'] - mean[name]:+.2f} points")

    if args.summary:
        with open(args.summary, "w") as f:
            json.dump({"seeds": seeds, "steps": steps, "mean_accuracy": mean, "runs": results}, f, indent=1)
    for failure in failures:
        print("FAIL:", failure)
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
