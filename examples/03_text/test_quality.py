#!/usr/bin/env python3
"""char_lm's quality on text (docs/text.md; CTest examples_char_lm_quality,
label `quality`).

1. Decoupled DiLoCo with char_lm's defaults (4 learners at speeds 1, 1,
   0.7, 0.5 unless --speeds says otherwise) against synchronous data
   parallel, 4 learners, equal inner steps, on 3 seeds: the mean validation
   loss of Decoupled DiLoCo must be within 2 % of data parallel's.
   --diloco adds synchronous DiLoCo with its defaults (reported).
2. Radial-directional against token-weighted averaging at M = 4 and M = 8:
   reported, not asserted (the paper found RDA better as M grows).

Every run is on the deterministic simulator, so that a figure is a function
of its command line; runs go --jobs at a time (each uses one core).
`--reuse SUMMARY` takes the runs whose command line is in a summary this
script wrote before, by the same char_lm, instead of running them again.

    python3 examples/03_text/test_quality.py build/examples/03_text/char_lm [--summary quality.json]
"""
import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys


def speeds(pattern, m):
    base = pattern.split(",")
    return ",".join(base[i % len(base)] for i in range(m))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("char_lm")
    ap.add_argument("--steps", type=int, default=1500, help="inner steps per learner (1500)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--merge-seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--speeds", default="1,1,0.7,0.5", help="learner speeds, repeated for M = 8 (1,1,0.7,0.5)")
    ap.add_argument("--diloco", action="store_true", help="also run synchronous DiLoCo with its defaults")
    ap.add_argument("--extra", default="", help="more char_lm options for DiLoCo and Decoupled DiLoCo, "
                                                "e.g. '--H 20' (none: the defaults)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.02, help="allowed relative gap to data parallel (0.02)")
    ap.add_argument("--summary", help="write every run and the verdict here as JSON")
    ap.add_argument("--reuse", help="a summary written before by the same char_lm: its runs are not run again")
    a = ap.parse_args()

    runs = []
    for seed in a.seeds:
        runs.append(("dp", 4, "average", seed))
        runs.append(("decoupled", 4, "tokens", seed))
        if a.diloco:
            runs.append(("diloco", 4, "tokens", seed))
    for m in (4, 8):
        for merge in ("tokens", "rda"):
            for seed in a.merge_seeds:
                if (("decoupled", m, merge, seed)) not in runs:
                    runs.append(("decoupled", m, merge, seed))

    done = {}
    if a.reuse:
        with open(a.reuse) as f:
            done = {r["command"]: r for r in json.load(f)["runs"]}

    def one(run):
        mode, m, merge, seed = run
        cmd = [a.char_lm, "--mode", mode, "--learners", str(m), "--steps", str(a.steps),
               "--speeds", speeds(a.speeds, m), "--seed", str(seed), "--transport", "sim", "--progress", "0"]
        if mode != "dp":
            cmd += ["--merge", merge, *a.extra.split()]
        command = " ".join(cmd[1:])
        if command in done:
            line, how = done[command], "reused"
        else:
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: exit status {p.returncode}\n{p.stderr[-2000:]}")
            line = json.loads(p.stdout.strip().splitlines()[-1])
            how = f"{line['seconds']:.0f} s"
        print(f"{mode:9} M={m} {merge:6} seed {seed}: val_loss {line['val_loss']:.4f} "
              f"({line['bits_per_char']:.4f} bits/char), {line['outer_updates']} outer updates, {how}", flush=True)
        return {**line, "command": command}

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(one, runs))

    def mean(mode, m, merge, seeds):
        return statistics.mean(r["val_loss"] for r in results if r["mode"] == mode and r["learners"] == m
                               and r["merge"] == merge and r["seed"] in seeds)

    dp = mean("dp", 4, "average", a.seeds)
    dec = mean("decoupled", 4, "tokens", a.seeds)
    gap = dec / dp - 1
    print(f"\nmean of seeds {a.seeds}, M = 4, {a.steps} inner steps each:")
    print(f"  data parallel      {dp:.4f}")
    print(f"  Decoupled DiLoCo   {dec:.4f}  ({gap:+.2%} vs data parallel; within {a.tolerance:.0%}: "
          f"{'yes' if gap <= a.tolerance else 'NO'})")
    dil = None
    if a.diloco:
        dil = mean("diloco", 4, "tokens", a.seeds)
        print(f"  DiLoCo             {dil:.4f}  ({dil / dp - 1:+.2%} vs data parallel)")
    merges = {}
    print(f"\nmerge rules, Decoupled DiLoCo, seeds {a.merge_seeds}:")
    for m in (4, 8):
        tw, rda = mean("decoupled", m, "tokens", a.merge_seeds), mean("decoupled", m, "rda", a.merge_seeds)
        merges[m] = {"tokens": tw, "rda": rda}
        print(f"  M = {m}: token-weighted {tw:.4f}, radial-directional {rda:.4f} ({rda / tw - 1:+.2%})")
    passed = gap <= a.tolerance
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"steps": a.steps, "seeds": a.seeds, "speeds": a.speeds, "extra": a.extra, "data_parallel": dp,
                       "decoupled": dec, "diloco": dil, "gap": gap, "tolerance": a.tolerance, "passed": passed,
                       "merges": merges, "runs": results}, f, indent=1)
    if not passed:
        sys.exit(f"FAILED: Decoupled DiLoCo is {gap:+.2%} from data parallel, more than {a.tolerance:.0%}")


if __name__ == "__main__":
    main()
