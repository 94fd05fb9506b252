#!/usr/bin/env python3
"""The Python learner (learner.py) through a failover of its syncer.

usage: run_failover.py PATH/TO/diloco_syncer PATH/TO/etcd [--steps N] [--timeout SEC] [--keep]

Starts etcd (as a user would: one member, on free loopback ports), a
diloco_syncer A that leads the shard and a standby B that follows A's
replication stream into a checkpoint directory of its own (lease 2 s,
synchronous replication), and one Python learner given both candidates,
--endpoint 'A|B'. The learner provides the initial model. Once A has
published revision 3, A is SIGKILLed and its checkpoint directory deleted;
B takes the lease, starts from its copy, and the learner, finding A silent,
probes both candidates, joins B and trains on to the end (docs/protocol.md,
"Failover"). Every wait is for an event and bounded.

Checks: the learner exits 0 having reconnected once, every contribution it
sent answered (an ack, or a refusal of a contribution A never acknowledged)
and no refusal other than staleness; B led with a larger epoch than A's,
merged contributions of the learner after the kill, saw its leave and
exited 0 with an empty `rejected`; the model B saved is well above chance.

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "diloco_tools", "python"))
from diloco_processes import (  # noqa: E402
    conclude, die_with_parent, free_port, last_json, python_with_pyzmq, read_text, stop)

HERE = os.path.dirname(os.path.abspath(__file__))
LEARNER = os.path.join(HERE, "learner.py")
MIN_ACCURACY = 0.6  # 4 classes: chance is 0.25


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("syncer", help="path of diloco_syncer")
    parser.add_argument("etcd", help="path of the etcd server")
    parser.add_argument("--steps", type=int, default=600, help="inner steps of the learner")
    parser.add_argument("--timeout", type=float, default=180.0, help="bound of the whole run, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work directory with the logs")
    args = parser.parse_args()
    for program in (args.syncer, args.etcd):
        if not os.access(program, os.X_OK):
            sys.exit("run_failover: %s is not an executable" % program)
    python = python_with_pyzmq("run_failover")
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit("run_failover: terminated"))
    work = tempfile.mkdtemp(prefix="diloco_python_failover.")
    started = time.monotonic()
    deadline = started + args.timeout
    processes, failures = [], []

    def start(name, command):
        with open(os.path.join(work, name + ".err"), "wb") as err, open(os.path.join(work, name + ".out"), "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                       preexec_fn=die_with_parent)
        process.name, process.out_path, process.err_path = name, out.name, err.name
        processes.append(process)
        return process

    def wait_for(process, pattern, what, limit=30):
        """The first match of `pattern` in the process's stderr, within `limit` seconds; None (a failure) if not."""
        end = min(deadline, time.monotonic() + limit)
        while time.monotonic() < end:
            found = re.search(pattern, read_text(process.err_path))
            if found:
                return found
            if process.poll() is not None:
                break
            time.sleep(0.05)
        failures.append("%s (waited %.0f s)" % (what, time.monotonic() - started))
        return None

    def wait(process):
        try:
            return process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            failures.append("%s still running after %.0f s; stopped" % (process.name, time.monotonic() - started))
            stop(process)
            return None

    key = "/diloco/shard-0/leader"
    try:
        client, peer = free_port(), free_port()
        url = "http://127.0.0.1:%d" % client
        start("etcd", [args.etcd, "--name", "failover", "--data-dir", os.path.join(work, "etcd"),
                       "--listen-client-urls", url, "--advertise-client-urls", url,
                       "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                       "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                       "--initial-cluster", "failover=http://127.0.0.1:%d" % peer])
        endpoints, syncers = {}, {}
        for name in ("A", "B"):
            endpoints[name] = "tcp://127.0.0.1:%d" % free_port()
            syncers[name] = start(name, [
                args.syncer, "--endpoint", endpoints[name], "--etcd", url, "--lease-ttl", "2",
                "--replication-endpoint", "tcp://127.0.0.1:%d" % free_port(),
                "--checkpoint-dir", os.path.join(work, "state-" + name), "--save", os.path.join(work, name + ".f32"),
                "--learners", "1", "--fragments", "3", "--H", "10", "--quorum", "1"])
            if name == "A":
                led_a = wait_for(syncers["A"], r"leading %s with epoch (\d+)" % key, "A did not lead")
            else:
                wait_for(syncers["B"], r"standby: %s is led by %s" % (key, re.escape(endpoints["A"])),
                         "B did not stand by naming A")
        learner = start("learner", [python, LEARNER, "--endpoint", endpoints["A"] + "|" + endpoints["B"],
                                    "--steps", str(args.steps), "--seed", "7", "--timeout", "30", "--progress", "100",
                                    "--learner-id", "1", "--incarnation", "1"])
        if failures:
            raise RuntimeError("the syncers did not start")
        wait_for(syncers["A"], r"revision=3\b", "A published no revision 3")
        syncers["A"].kill()
        syncers["A"].wait()
        shutil.rmtree(os.path.join(work, "state-" + "A"), ignore_errors=True)  # its disk is gone too
        killed_at = time.monotonic()
        led_b = wait_for(syncers["B"], r"leading %s with epoch (\d+)" % key, "B did not lead after A's kill")

        learner_status = wait(learner)
        result = last_json(read_text(learner.out_path)) or {}
        b_status = wait(syncers["B"])
        counters = last_json(read_text(syncers["B"].out_path)) or {}

        if learner_status != 0:
            failures.append("the learner exited with status %s: %s" % (learner_status,
                                                                       read_text(learner.err_path).strip()[-2000:]))
        if result.get("reconnections") != 1:
            failures.append("the learner reconnected %s times, expected once" % result.get("reconnections"))
        if not result.get("provided_state"):
            failures.append("the learner was not asked for the initial model")
        if set(result.get("reject_reasons", {})) - {"stale"}:
            failures.append("the learner's contributions were refused: %s" % result.get("reject_reasons"))
        if result.get("steps") != args.steps:
            failures.append("the learner trained %s of %d steps" % (result.get("steps"), args.steps))
        if led_a and led_b and not int(led_b.group(1)) > int(led_a.group(1)):
            failures.append("B's epoch %s is not above A's %s" % (led_b.group(1), led_a.group(1)))
        if b_status != 0:
            failures.append("B exited with status %s: %s" % (b_status, read_text(syncers["B"].err_path).strip()[-2000:]))
        if not counters.get("contributions_merged", 0) > 0 or counters.get("leaves") != 1:
            failures.append("B merged %s contributions and saw %s leaves (expected > 0 and 1)"
                            % (counters.get("contributions_merged"), counters.get("leaves")))
        if counters.get("rejected") != {}:
            failures.append("B refused messages: %s" % counters.get("rejected"))
        saved = os.path.join(work, "B.f32")
        model = None
        if os.path.exists(saved):
            evaluation = subprocess.run([python, LEARNER, "--seed", "7", "--evaluate", saved],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            model = last_json(evaluation.stdout.decode())
            if model is None or model["accuracy"] < MIN_ACCURACY:
                failures.append("B's final model did not learn: %s" % (model or evaluation.stderr.decode().strip()))
        else:
            failures.append("B saved no model")
        print("python learner through a failover (%d steps; A killed with its disk at revision 3): "
              "reconnected %s, %s contributions, %s acks, rejects %s, final accuracy %s; B led with epoch %s "
              "(A: %s), merged %s contributions; B's model accuracy %s; %.1f s after the kill the run ended"
              % (args.steps, result.get("reconnections"), result.get("contributions"), result.get("acks"),
                 result.get("reject_reasons"), result.get("final_accuracy"), led_b and led_b.group(1),
                 led_a and led_a.group(1), counters.get("contributions_merged"), model and model["accuracy"],
                 time.monotonic() - killed_at))
    except RuntimeError as error:
        failures.append(str(error))
    finally:
        for process in processes:
            stop(process)
    return conclude(failures, work, args.keep)


if __name__ == "__main__":
    sys.exit(main())
