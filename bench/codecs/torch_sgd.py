#!/usr/bin/env python3
"""PyTorch's outer step, for comparison with bench_codecs' `nesterov_b2b`.

Times `torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True,
foreach=True).step()` on one fp32 parameter tensor of N values whose
gradient is set once, stepped back to back with torch.set_num_threads(1)
and then with every core, each after its own untimed warm-ups (the first of
which allocates the momentum buffer). Prints one JSON object per size:
median, min and max milliseconds a step and the GB/s that the same step
would show counted as bench_codecs counts the fused step (20 bytes a
parameter).

With --against BENCH_CODECS, runs --rounds rounds, each this measurement
in a process of its own followed by `BENCH_CODECS --json` with the same
sizes, repetitions and warm-ups, and prints per round and thread count
PyTorch's median over the library's: against `nesterov_b2b` (the step back
to back, like for like) and against `nesterov` (the step between the codec
passes, which evict its data).

    python3 bench/codecs/torch_sgd.py [--sizes 16M] [--repeat 10] [--warmup 2]
    python3 bench/codecs/torch_sgd.py --against build/bench/codecs/bench_codecs [--rounds 3] [--sizes 16M] ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def size(text):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    try:
        value = int(text[:-1] if shift else text) << shift
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("a count >= 1")
    return value


def at_least(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} < {low}")
        return value
    return parse


def measure(sizes, repeat, warmup):
    """One JSON line per size: PyTorch's step, back to back, on 1 thread and on every core."""
    import torch

    cores = os.cpu_count() or 1
    for n in sizes:
        param = torch.nn.Parameter(torch.ones(n, dtype=torch.float32))
        param.grad = torch.full((n,), 1e-3, dtype=torch.float32)
        opt = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True, foreach=True)
        times = {1: [], cores: []}
        # One thread count after the other, each with its own warm-ups:
        # changing torch's thread count between steps restarts its OpenMP
        # pool and costs tens of milliseconds.
        for threads in times:
            torch.set_num_threads(threads)
            for r in range(warmup + repeat):
                t0 = time.perf_counter()
                opt.step()
                t1 = time.perf_counter()
                if r >= warmup:
                    times[threads].append((t1 - t0) * 1e3)
        result = {"n": n, "torch": torch.__version__, "repeat": repeat, "warmup": warmup, "runs": []}
        for threads, ms in times.items():
            med = statistics.median(ms)
            result["runs"].append({"threads": threads, "median_ms": round(med, 4), "min_ms": round(min(ms), 4),
                                   "max_ms": round(max(ms), 4),
                                   "gbps_counted_as_fused": round(20 * n / (med / 1e3) / 1e9, 3)})
        print(json.dumps(result), flush=True)


def json_lines(command):
    """Runs `command` and returns the JSON objects it printed, one a line; exits on failure."""
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"torch_sgd.py: {command[0]} exited with {done.returncode}")
    try:
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        sys.exit(f"torch_sgd.py: {command[0]} printed something that is not JSON: {e}")


def compare(args):
    """Alternates PyTorch and bench_codecs, round after round, and prints PyTorch's time over the library's."""
    common = ["--sizes", ",".join(str(n) for n in args.sizes), "--repeat", str(args.repeat),
              "--warmup", str(args.warmup)]
    print(f"{'round':>5} {'N':>10} {'threads':>7} {'torch ms':>9} {'b2b ms':>8} {'torch/b2b':>9}"
          f" {'nesterov ms':>11} {'torch/nesterov':>14}")
    for r in range(1, args.rounds + 1):
        torch_runs = json_lines([sys.executable, os.path.abspath(__file__)] + common)
        ours = json_lines([args.against, "--json", "--threads", str(os.cpu_count() or 1)] + common)
        for theirs, mine in zip(torch_runs, ours):
            for run in theirs["runs"]:
                def ms(name):
                    found = [m["median_ms"] for m in mine["methods"]
                             if m["method"] == name and m["threads"] == run["threads"]]
                    if not found:
                        sys.exit(f"torch_sgd.py: {args.against} printed no {name!r} on {run['threads']} threads")
                    return found[0]
                b2b, cold = ms("nesterov_b2b"), ms("nesterov")
                print(f"{r:>5} {theirs['n']:>10} {run['threads']:>7} {run['median_ms']:>9.2f} {b2b:>8.2f}"
                      f" {run['median_ms'] / b2b:>9.2f} {cold:>11.2f} {run['median_ms'] / cold:>14.2f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [size(x) for x in s.split(",")], default=[16 << 20])
    parser.add_argument("--repeat", type=at_least(1), default=10)
    parser.add_argument("--warmup", type=at_least(0), default=2)
    parser.add_argument("--against", metavar="BENCH_CODECS",
                        help="a bench_codecs executable to alternate with, printing the ratios")
    parser.add_argument("--rounds", type=at_least(1), default=3, help="rounds with --against")
    args = parser.parse_args()
    if args.against:
        if not os.access(args.against, os.X_OK):
            parser.error(f"--against: {args.against} is not an executable file")
        compare(args)
    else:
        measure(args.sizes, args.repeat, args.warmup)


if __name__ == "__main__":
    main()
