#!/usr/bin/env python3
"""diloco_syncer under a flood of hostile messages, with a log nobody reads.

usage: test_hostile_service.py PATH/TO/diloco_syncer PATH/TO/learner.py [--steps N] [--keep]

Starts the real diloco_syncer on a free loopback port with its stderr (its
log) connected to a pipe that this test never reads, shrunk to 4 KiB so that
it fills within the first few dozen log lines: a syncer whose logging blocked
on a full pipe would stall there. Runs an honest learner process
(examples/02_python_learner/learner.py) and, while it trains, sends the
syncer 30 000 hostile messages over a DEALER socket: 10 000 three-frame
messages of random bytes (refused as `truncated`), 10 000 two-frame messages
whose 144-byte header has a wrong magic (`bad_magic`), and 10 000 well-formed
contributions whose header CRC is off by one bit (`bad_checksum`).

Checks, each bound stated where it is checked and every figure printed:
  - the learner exits 0 within its bound, every contribution acknowledged;
  - the stderr pipe is full and a syncer thread is blocked writing to it
    (its wait channel, or write(2, ...)), during the flood and after the run:
    the syncer went on serving with its log output blocked;
  - SIGTERM ends the syncer within 5 s, with status 0 and its final JSON line
    on stdout, which counts exactly the refusals sent, per reason, and no log
    line dropped (the rate limit kept the log within the sink's queue);
  - while the flood lasts, the syncer's CPU time (utime + stime, all its
    threads) and its RSS growth stay under stated bounds, and once it is idle
    it sleeps.

Needs pyzmq (the flood) and numpy (the learner); re-runs itself under
$DILOCO_PYTHON or /usr/bin/python3 when this interpreter lacks them. Every
child is stopped on every exit path, and gets SIGKILL if this script dies.
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import fcntl
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "diloco_tools", "python"))
from diloco_processes import (  # noqa: E402
    conclude, die_with_parent, free_port, last_json, read_text, stop)

FLOOD_PER_KIND = 10000
PIPE_BYTES = 4096  # the stderr pipe's capacity (F_SETPIPE_SZ; the smallest Linux allows is a page)
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032

# Bounds, each with a margin of 5x or more over what a 2-core machine measures (printed with the checks):
# learner ~7 s, SIGTERM ~1.07 s, CPU while flooded ~15 %, RSS growth ~0.4 MiB, CPU when idle ~0 %.
LEARNER_BOUND_S = 120.0           # the learner process, start to exit
TERM_BOUND_S = 5.0                # SIGTERM to exit (the log sink lingers 1 s on a blocked output)
FLOOD_CPU_FRACTION = 0.75         # syncer CPU time / wall time while the flood lasts
FLOOD_RSS_GROWTH_KIB = 16 * 1024  # syncer RSS growth from before the flood to its peak (~0.5 KiB per message)
IDLE_CPU_FRACTION = 0.10          # syncer CPU time / wall time in a quiet second after the run


def reexec_with_pyzmq():
    try:
        import numpy  # noqa: F401
        import zmq  # noqa: F401
        return
    except ImportError:
        pass
    for candidate in (os.environ.get("DILOCO_PYTHON"), "/usr/bin/python3"):
        if not candidate or not os.path.exists(candidate):
            continue
        if os.path.realpath(candidate) == os.path.realpath(sys.executable):
            continue
        probe = subprocess.run([candidate, "-c", "import zmq, numpy"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)
        if probe.returncode == 0:
            os.execv(candidate, [candidate] + sys.argv)
    sys.exit("test_hostile_service: no Python with pyzmq and numpy (install python3-zmq and python3-numpy, "
             "or set DILOCO_PYTHON)")


def cpu_seconds(pid):
    """utime + stime of every thread of `pid`, in seconds."""
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def blocked_on_stderr(pid):
    """Threads of `pid` blocked writing to their stderr pipe: the kernel's wait channel names a pipe write, or
    (x86-64) the thread is in write(2, ...)."""
    threads = []
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "wchan") as handle:
                wchan = handle.read().strip()
            with open(base + "syscall") as handle:
                syscall = handle.read().split()
        except OSError:
            continue
        if "pipe_write" in wchan or (os.uname().machine == "x86_64" and syscall[:2] == ["1", "0x2"]):
            threads.append("%s (%s)" % (tid, wchan))
    return threads


# Wire format (docs/protocol.md): enough of it to write well-formed headers.
HEADER = struct.Struct("<4sH6B7I8Q3qd2I")
CONTRIBUTION = 3


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def contribution_header(learner, sequence, payload):
    """A well-formed contribution header (f32, fragment 0) carrying `payload`."""
    raw = bytearray(HEADER.pack(b"DLCO", 1, CONTRIBUTION, 1, 0, 0, 0, 0,
                                learner, 1, 0, 0, 0, 0, 0,
                                sequence, 0, 0, 10, 160, 10, len(payload) // 4, 0,
                                0, 0, 0, 0.0, crc32c(payload), 0))
    struct.pack_into("<I", raw, 140, crc32c(bytes(raw[:140])))
    return bytes(raw)


def main():
    reexec_with_pyzmq()
    import zmq

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("syncer", help="path of diloco_syncer")
    parser.add_argument("learner", help="path of examples/02_python_learner/learner.py")
    parser.add_argument("--steps", type=int, default=600, help="the learner's inner steps")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit("test_hostile_service: terminated"))
    work = tempfile.mkdtemp(prefix="diloco_hostile_service.")
    failures = []
    children = []
    figures = {}

    def check(ok, what):
        print("  %s %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            failures.append(what)

    def wait_for(condition, bound_s, step_s=0.05):
        end = time.monotonic() + bound_s
        while not condition():
            if time.monotonic() >= end:
                return condition()
            time.sleep(step_s)
        return True

    context = zmq.Context()
    flood = None
    log_read, log_write = os.pipe()
    try:
        fcntl.fcntl(log_write, F_SETPIPE_SZ, PIPE_BYTES)
        pipe_bytes = fcntl.fcntl(log_write, F_GETPIPE_SZ)
        endpoint = "tcp://127.0.0.1:%d" % free_port()
        syncer_out = os.path.join(work, "syncer.out")
        with open(syncer_out, "wb") as out:
            # A service that keeps serving after its learner left, until SIGTERM.
            syncer = subprocess.Popen([args.syncer, "--endpoint", endpoint, "--fragments", "2", "--H", "10",
                                       "--end-when-gone", "never"],
                                      stdout=out, stderr=log_write, stdin=subprocess.DEVNULL,
                                      preexec_fn=die_with_parent)
        children.append(syncer)
        os.close(log_write)  # the syncer holds the only write end; this test never reads log_read
        log_write = None

        learner_out, learner_err = os.path.join(work, "learner.out"), os.path.join(work, "learner.err")
        with open(learner_out, "wb") as out, open(learner_err, "wb") as err:
            learner_started = time.monotonic()
            learner = subprocess.Popen([sys.executable, args.learner, "--endpoint", endpoint, "--learner-id", "1",
                                        "--steps", str(args.steps), "--seed", "3", "--timeout", "30",
                                        "--progress", "50"],
                                       stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        children.append(learner)
        # The flood starts once the syncer has the model (the learner provides it and is welcomed).
        joined = wait_for(lambda: "joined;" in read_text(learner_err) or learner.poll() is not None, 30)
        if not joined or learner.poll() is not None:
            raise RuntimeError("the learner did not join within 30 s (status %s): %s"
                               % (learner.poll(), read_text(learner_err)[-2000:]))

        # ... and once its log output is blocked: the pipe fills with the per-update lines in a few seconds.
        if not wait_for(lambda: blocked_on_stderr(syncer.pid) or learner.poll() is not None, 30) \
                or learner.poll() is not None:
            raise RuntimeError("the syncer's log did not fill its %d-byte pipe while the learner trained (status %s)"
                               % (pipe_bytes, learner.poll()))
        figures["log_blocked_after_s"] = round(time.monotonic() - learner_started, 3)

        flood = context.socket(zmq.DEALER)
        flood.setsockopt(zmq.LINGER, 0)
        flood.setsockopt(zmq.SNDTIMEO, 5000)  # a blocked send gives up: no hang
        flood.setsockopt(zmq.SNDHWM, 100000)
        flood.connect(endpoint)
        rng = random.Random(8)
        payload = struct.pack("<9f", *([0.01] * 9))
        header = contribution_header(4242, 1, payload)
        bad_crc = header[:140] + struct.pack("<I", struct.unpack("<I", header[140:])[0] ^ 1)

        rss_before, cpu_before, flood_began = rss_kib(syncer.pid), cpu_seconds(syncer.pid), time.monotonic()
        rss_peak = rss_before
        sent = {"truncated": 0, "bad_magic": 0, "bad_checksum": 0}
        for i in range(3 * FLOOD_PER_KIND):
            kind = i % 3
            if kind == 0:  # three frames of random bytes
                flood.send_multipart([rng.randbytes(rng.randint(1, 200)) for _ in range(3)])
                sent["truncated"] += 1
            elif kind == 1:  # a 144-byte header with a wrong magic, and a payload
                flood.send_multipart([b"X" + rng.randbytes(143), rng.randbytes(36)])
                sent["bad_magic"] += 1
            else:  # a well-formed contribution whose header CRC is off by one bit
                flood.send_multipart([bad_crc, payload])
                sent["bad_checksum"] += 1
            if i == 3 * FLOOD_PER_KIND // 2:
                blocked_during = blocked_on_stderr(syncer.pid)
            if i % 1000 == 999:
                rss_peak = max(rss_peak, rss_kib(syncer.pid))
                time.sleep(0.02)  # spread over ~1 s of the learner's run
        flood_sent = time.monotonic()
        # The syncer has handled the flood when its CPU time stops growing (its socket queues are drained).
        settled = cpu_seconds(syncer.pid)
        for _ in range(40):
            time.sleep(0.05)
            rss_peak = max(rss_peak, rss_kib(syncer.pid))
            now_cpu = cpu_seconds(syncer.pid)
            if now_cpu == settled:
                break
            settled = now_cpu
        flood_ended = time.monotonic()
        flood_cpu = cpu_seconds(syncer.pid) - cpu_before
        flood_s = flood_ended - flood_began
        learner_running = learner.poll() is None
        figures.update(flood_send_s=round(flood_sent - flood_began, 3), flood_s=round(flood_s, 3),
                       flood_cpu_s=round(flood_cpu, 3), flood_cpu_fraction=round(flood_cpu / flood_s, 3),
                       rss_before_kib=rss_before, rss_peak_kib=rss_peak)

        status = None
        try:
            status = learner.wait(timeout=max(1.0, LEARNER_BOUND_S - (time.monotonic() - learner_started)))
        except subprocess.TimeoutExpired:
            pass
        learner_s = time.monotonic() - learner_started
        result = last_json(read_text(learner_out)) or {}
        figures.update(learner_s=round(learner_s, 3), learner_status=status,
                       learner_contributions=result.get("contributions"), learner_acks=result.get("acks"),
                       learner_rejects=result.get("rejects"), learner_updates_adopted=result.get("updates_adopted"),
                       learner_final_accuracy=result.get("final_accuracy"))

        # Idle: the learner has left, nothing arrives; the syncer must sleep.
        idle_cpu, idle_began = cpu_seconds(syncer.pid), time.monotonic()
        time.sleep(1.0)
        idle_fraction = (cpu_seconds(syncer.pid) - idle_cpu) / (time.monotonic() - idle_began)
        waiting = bytearray(4)
        fcntl.ioctl(log_read, termios.FIONREAD, waiting)
        pipe_waiting = struct.unpack("<i", waiting)[0]
        blocked_after = blocked_on_stderr(syncer.pid)
        figures.update(idle_cpu_fraction=round(idle_fraction, 4), pipe_capacity=pipe_bytes, pipe_waiting=pipe_waiting,
                       blocked_on_stderr_during_flood=blocked_during, blocked_on_stderr_after=blocked_after)

        term_sent = time.monotonic()
        syncer.send_signal(signal.SIGTERM)
        try:
            syncer_status = syncer.wait(timeout=TERM_BOUND_S)
        except subprocess.TimeoutExpired:
            syncer_status = None
        term_s = time.monotonic() - term_sent
        counters = last_json(read_text(syncer_out)) or {}
        rejected = counters.get("rejected", {})
        figures.update(term_s=round(term_s, 3), syncer_status=syncer_status, rejected=rejected,
                       log_lines_dropped=counters.get("log_lines_dropped"), outer_updates=counters.get("outer_updates"))

        print("diloco_syncer under %d hostile messages, its stderr a %d-byte pipe nobody reads:"
              % (sum(sent.values()), pipe_bytes))
        for key, value in figures.items():
            print("  %s: %s" % (key, value))
        check(learner_running, "the flood ended while the learner was still training")
        check(status == 0, "the learner exited 0 within %g s [%.1f s]" % (LEARNER_BOUND_S, learner_s))
        check(result.get("contributions", 0) > 0 and result.get("acks") == result.get("contributions")
              and result.get("rejects") == 0,
              "every contribution of the learner acknowledged, none refused (%s of %s)"
              % (result.get("acks"), result.get("contributions")))
        check(pipe_waiting > pipe_bytes - 512 and blocked_during and blocked_after,
              "the log pipe is full (%d of %d bytes waiting) and a syncer thread is blocked writing to it, during "
              "the flood and after the run" % (pipe_waiting, pipe_bytes))
        check(syncer_status == 0,
              "SIGTERM ended the syncer with status 0 within %g s [%.2f s]" % (TERM_BOUND_S, term_s))
        for reason, count in sorted(sent.items()):
            check(rejected.get(reason) == count, "%s: %s refused, %d sent" % (reason, rejected.get(reason), count))
        check(sum(rejected.values()) == sum(sent.values()),
              "no other refusal (%d refused in all)" % sum(rejected.values()))
        check(counters.get("log_lines_dropped") == 0,
              "no log line dropped: %s (the rate limit kept %d refusals within the log sink's queue)"
              % (counters.get("log_lines_dropped"), sum(sent.values())))
        check(flood_cpu / flood_s < FLOOD_CPU_FRACTION,
              "syncer CPU while flooded: %.2f s in %.2f s (%.0f %%, bound %.0f %%)"
              % (flood_cpu, flood_s, 100 * flood_cpu / flood_s, 100 * FLOOD_CPU_FRACTION))
        check(rss_peak - rss_before < FLOOD_RSS_GROWTH_KIB,
              "syncer RSS growth during the flood: %d KiB (bound %d KiB)"
              % (rss_peak - rss_before, FLOOD_RSS_GROWTH_KIB))
        check(idle_fraction < IDLE_CPU_FRACTION,
              "syncer CPU when idle: %.1f %% (bound %.0f %%)" % (100 * idle_fraction, 100 * IDLE_CPU_FRACTION))
    except Exception as error:  # a setup step failed: report it as a failure, after stopping everything
        failures.append("%s: %s" % (type(error).__name__, error))
    finally:
        for process in reversed(children):
            stop(process)
        if flood is not None:
            flood.close(0)
        context.term()
        if log_write is not None:
            os.close(log_write)
        os.close(log_read)
    return conclude(failures, work, args.keep)


if __name__ == "__main__":
    sys.exit(main())
