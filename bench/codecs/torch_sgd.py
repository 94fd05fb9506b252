#!/usr/bin/env python3
"""PyTorch's outer step, for comparison with bench_codecs' `nesterov`.

Times `torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True,
foreach=True).step()` on one fp32 parameter tensor of N values whose
gradient is set once, with torch.set_num_threads(1) and then with every
core, each after its own untimed warm-ups (the first of which allocates the
momentum buffer). Prints one JSON object
per size: median, min and max milliseconds a step and the GB/s that the
same step would show counted as bench_codecs counts the fused step
(20 bytes a parameter).

    python3 bench/codecs/torch_sgd.py [--sizes 16M] [--repeat 10] [--warmup 2]
"""
import argparse
import json
import os
import statistics
import time

import torch


def size(text):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    value = int(text[:-1] if shift else text) << shift
    if value < 1:
        raise argparse.ArgumentTypeError("a count >= 1")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [size(x) for x in s.split(",")], default=[16 << 20])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    for n in args.sizes:
        param = torch.nn.Parameter(torch.ones(n, dtype=torch.float32))
        param.grad = torch.full((n,), 1e-3, dtype=torch.float32)
        opt = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True, foreach=True)
        times = {1: [], cores: []}
        # One thread count after the other, each with its own warm-ups:
        # changing torch's thread count between steps restarts its OpenMP
        # pool and costs tens of milliseconds.
        for threads in times:
            torch.set_num_threads(threads)
            for r in range(args.warmup + args.repeat):
                t0 = time.perf_counter()
                opt.step()
                t1 = time.perf_counter()
                if r >= args.warmup:
                    times[threads].append((t1 - t0) * 1e3)
        result = {"n": n, "torch": torch.__version__, "repeat": args.repeat, "warmup": args.warmup, "runs": []}
        for threads, ms in times.items():
            med = statistics.median(ms)
            result["runs"].append({"threads": threads, "median_ms": round(med, 4), "min_ms": round(min(ms), 4),
                                   "max_ms": round(max(ms), 4),
                                   "gbps_counted_as_fused": round(20 * n / (med / 1e3) / 1e9, 3)})
        print(json.dumps(result))


if __name__ == "__main__":
    main()
