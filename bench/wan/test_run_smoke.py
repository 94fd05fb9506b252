#!/usr/bin/python3
"""CTest bench_wan_run_smoke: the headline scenario (`run --smoke`) end to end.

Runs `bench/wan/run --smoke` (the syncer and 4 learner processes of
fashion_mnist, each in its own network namespace, over fast emulated links,
data parallel and Decoupled DiLoCo) and checks:

- it exits 0 and its last line of stdout is JSON with `target` and, for every
  method of the smoke, `time_to_target_s` and `speedup_vs_dp`;
- summary.json lists the same methods, each with a final test accuracy above
  chance (> 10 %), the (low) target reached, bytes on the wire > 0 and, for
  a method not stopped at the target, payload bytes > 0;
- nothing is left behind: namespaces, veths, qdiscs, iptables rules and delay
  programs (wan.leftovers(), as `wan.py smoke` compares them), fashion_mnist
  processes of this build, and files in its temporary folder.

Exit 77 (skipped) when not root, without `ip netns`, iproute2, iptables or
ping, or without the delay program, as bench_wan_smoke.

    test_run_smoke.py --fashion BUILD/examples/01_fashion_mnist/fashion_mnist \\
                      [--delay-program BUILD/bench/wan/diloco_wan_delay]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import wan  # noqa: E402


def load_run():
    """bench/wan/run as a module (its SMOKE_* constants); main() is not run."""
    loader = importlib.machinery.SourceFileLoader("wan_run", str(HERE / "run"))
    spec = importlib.util.spec_from_loader("wan_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def processes_of(program: str) -> set[int]:
    """Pids of the processes running `program` (by /proc/PID/exe)."""
    target = os.path.realpath(program)
    pids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(d / "exe") == target:
                    pids.add(int(d.name))
    return pids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fashion", required=True, help="the fashion_mnist program")
    ap.add_argument("--delay-program", help=f"{wan.DELAY_PROGRAM} (default: as wan.py finds it)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds the run may take (180)")
    args = ap.parse_args()

    why = wan.unavailable()
    if not why:
        try:
            args.delay_program = wan.find_delay_program(args.delay_program)
        except (RuntimeError, subprocess.SubprocessError) as e:
            why = str(e)
    if why:
        print(f"SKIP: {why}")
        return 77
    run = load_run()
    expected = list(run.SMOKE_METHODS)

    before = wan.leftovers()
    trainers_before = processes_of(args.fashion)
    print("before:", json.dumps(before))
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    top = Path(tempfile.mkdtemp(prefix="wan-run-smoke."))
    try:
        # The run's own temporary files (its work folder) go under top/tmp,
        # so that what it leaves there can be seen.
        tmp, out = top / "tmp", top / "out"
        tmp.mkdir()
        env = dict(os.environ, TMPDIR=str(tmp))
        argv = [sys.executable, str(HERE / "run"), "--smoke", "--fashion", args.fashion,
                "--delay-program", args.delay_program, "--out", str(out)]
        print("run:", " ".join(argv), flush=True)
        started = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            stdout, stderr = p.communicate(timeout=args.timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            # SIGTERM first: the run then removes its namespaces and stops
            # what it started (SIGKILL would leave them).
            rc = None
            p.send_signal(signal.SIGTERM)
            try:
                stdout, stderr = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
        seconds = time.monotonic() - started
        sys.stdout.write(stderr)
        sys.stdout.write(stdout)
        print(f"run took {seconds:.1f} s")
        check(rc == 0, f"run exits 0 (got {'a timeout' if rc is None else rc})")

        # The last line of stdout: the run's JSON.
        last = None
        with contextlib.suppress(ValueError, IndexError):
            last = json.loads(stdout.strip().splitlines()[-1])
        check(isinstance(last, dict) and isinstance(last.get("methods"), dict) and "target" in last,
              "the last line of stdout is JSON with target and methods")
        if isinstance(last, dict) and isinstance(last.get("methods"), dict):
            check(sorted(last["methods"]) == sorted(expected),
                  f"the last line lists the methods {expected} (got {sorted(last['methods'])})")
            for name, m in last["methods"].items():
                check(isinstance(m, dict) and "time_to_target_s" in m and "speedup_vs_dp" in m,
                      f"{name}: time_to_target_s and speedup_vs_dp in the last line")

        # summary.json: every method ran, learned and moved bytes.
        summary = None
        with contextlib.suppress(OSError, ValueError):
            summary = json.loads((out / "summary.json").read_text())
        check(isinstance(summary, dict) and isinstance(summary.get("methods"), dict), "summary.json is written")
        if isinstance(summary, dict) and isinstance(summary.get("methods"), dict):
            check(summary.get("smoke") is True, "summary.json says smoke")
            methods = summary["methods"]
            check(sorted(methods) == sorted(expected), f"summary.json lists the methods {expected}")
            for name in expected:
                m = methods.get(name) or {}
                accuracy = m.get("final_accuracy")
                check(isinstance(accuracy, (int, float)) and accuracy > 0.1,
                      f"{name}: final test accuracy {accuracy} above chance (0.1)")
                t = m.get("time_to_target_s")
                check(isinstance(t, (int, float)) and t > 0,
                      f"{name}: target {summary.get('target')} reached ({t} s)")
                check((m.get("wire_bytes") or 0) > 0, f"{name}: {m.get('wire_bytes')} bytes on the wire")
                if not m.get("stopped_at_target"):
                    check((m.get("payload_bytes") or 0) > 0, f"{name}: {m.get('payload_bytes')} payload bytes")
            dp = methods.get("dp") or {}
            if "dp" in expected:
                check(dp.get("speedup_vs_dp") == 1.0, f"dp: speedup_vs_dp 1.0 (got {dp.get('speedup_vs_dp')})")

        # Nothing left behind.
        after = wan.leftovers()
        print("after: ", json.dumps(after))
        for what in wan.left_behind(before, after):
            check(False, what)
        new = processes_of(args.fashion) - trainers_before
        check(not new, f"no fashion_mnist process left ({sorted(new)})")
        kept = sorted(p.name for p in tmp.iterdir())
        check(not kept, f"no temporary files left by the run ({kept})")
        if kept:  # a failed run keeps its logs there: show their ends
            for f in sorted(tmp.rglob("*.err")):
                print(f"--- {f.relative_to(tmp)} (last lines)")
                print("\n".join(f.read_text(errors="replace").splitlines()[-10:]))
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("ok" if not failures else f"FAILED ({len(failures)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
