#!/usr/bin/env python3
"""bench/compile/run as its README shows it, on one small docs sample, in a
build folder of its own (argument 1): the JSON names the file with positive
figures, and a pattern that matches nothing is an error.

    python3 bench/compile/check_run.py BUILD_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent / "run"
SAMPLE = "docs/samples/concept_inner_step.cpp"


def main():
    build = sys.argv[1]
    configure = [f"--cmake-arg={a}" for a in ("-DDILOCO_ENABLE_CUDA=OFF", "-DDILOCO_WITH_TORCH=OFF",
                                              "-DDILOCO_BUILD_TESTS=ON", "-DDILOCO_BUILD_TOOLS=OFF",
                                              "-DDILOCO_BUILD_EXAMPLES=OFF",
                                              "-DDILOCO_BUILD_BENCH=OFF", "-DDILOCO_FUZZ=OFF")]
    result = subprocess.run([sys.executable, str(RUN), "--build", build, "--configure", *configure, "--json", SAMPLE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"bench/compile/run failed:\n{result.stderr}")
    report = json.loads(result.stdout)
    figures = report["files"][SAMPLE]
    if set(report["files"]) != {SAMPLE}:
        sys.exit(f"expected only {SAMPLE}, got {sorted(report['files'])}")
    for key in ("wall_s", "cpu_s", "peak_mb"):
        if not figures[key] > 0:
            sys.exit(f"{key} of {SAMPLE} is {figures[key]}, not positive")
    if SAMPLE not in result.stderr:
        sys.exit(f"the table on stderr does not name {SAMPLE}:\n{result.stderr}")
    missing = subprocess.run([sys.executable, str(RUN), "--build", build, "docs/samples/no_such_sample.cpp"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if missing.returncode == 0 or "matches" not in missing.stderr:
        sys.exit(f"a pattern matching nothing was not refused:\n{missing.stderr}")
    print(f"{SAMPLE}: {figures}")


if __name__ == "__main__":
    main()
