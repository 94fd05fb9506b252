"""Runs of the fashion_mnist trainer for the measurement scripts
(test_quality.py, test_codecs.py): one command line, its final JSON line."""
import json
import subprocess

# Every measured run: the deterministic simulator, no progress lines, no
# evaluation during training (the final test accuracy is what is compared).
SIMULATED = ["--transport", "sim", "--progress", "0", "--eval-every", "0"]


def result_of(cmd, timeout=1200):
    """Runs `cmd` (a fashion_mnist command line) and returns its final JSON
    line as a dict, with the command under "command". Raises RuntimeError
    naming the command and its stderr if it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["command"] = " ".join(cmd)
    return result
