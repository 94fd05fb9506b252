"""Process helpers shared by the Python tests that start diloco processes
(tools/diloco_syncer/test_*.py, examples/02_python_learner/run_against_syncer.py).
Not installed; each script puts this directory on sys.path."""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys


def die_with_parent():
    """In the child, before exec: SIGKILL when the parent (the test) dies, e.g. killed by a CTest timeout."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (AttributeError, OSError):
        pass


def free_port():
    """A TCP port free on 127.0.0.1 now (the usual race: bind it soon)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def python_with_pyzmq(program, include_this=True):
    """A Python that imports zmq and numpy: $DILOCO_PYTHON, else /usr/bin/python3, else (with
    include_this) this one. Exits naming `program` and what it tried if there is none."""
    candidates = [os.environ.get("DILOCO_PYTHON"), "/usr/bin/python3"] + ([sys.executable] if include_this else [])
    tried = []
    for candidate in candidates:
        if not candidate or candidate in tried or not os.path.exists(candidate):
            continue
        tried.append(candidate)
        probe = subprocess.run([candidate, "-c", "import zmq, numpy"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)
        if probe.returncode == 0:
            return candidate
    sys.exit("%s: no Python with pyzmq and numpy among %s (install python3-zmq and python3-numpy, "
             "or set DILOCO_PYTHON)" % (program, tried or candidates))


def last_json(text):
    """The last line of `text` that is a JSON object (the programs' summaries), or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def conclude(failures, work, keep):
    """Prints the failures (and where the logs are) or "ok", removes the work directory unless it is
    to be kept or something failed, and returns the exit status: 1 on any failure, else 0."""
    if failures:
        print("FAILED:")
        for failure in failures:
            print("  - " + failure)
        print("  logs in %s" % work)
        return 1
    print("ok")
    if keep:
        print("  logs in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def stop(process, grace_s=5):
    """SIGTERM (a syncer then prints its counters), SIGKILL if that does not end it within `grace_s`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace_s)


def read_text(path):
    """The whole file, undecodable bytes replaced."""
    with open(path, "r", errors="replace") as handle:
        return handle.read()
