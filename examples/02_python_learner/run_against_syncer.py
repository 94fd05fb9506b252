#!/usr/bin/env python3
"""Runs two Python learners (learner.py) against a C++ diloco_syncer and checks the outcome.

usage: run_against_syncer.py PATH/TO/diloco_syncer [--steps N] [--timeout SEC] [--alpha A] [--quorum K]
                             [--lock-step] [--codec C] [--update-codec C] [--codec-block B]
                             [--chunk-bytes N] [--error-feedback] [--keep]

Starts the syncer on a free loopback port (--learners 2 --fragments 3 --H 10
--quorum 2) and learner 1, which provides the layout and the initial model;
once the syncer has published a few outer updates, learner 2 joins (learner 1
paused meanwhile) and must receive the model learned so far. Both train
concurrently, send their final work and leave; the syncer then stops and
prints its counters. Every wait is for an event and bounded, and every process
is stopped on every exit path (the children also get SIGKILL if this script
dies).

Checks: both learners exit 0; the syncer exits 0 with outer_updates > 0,
contributions_merged == contributions_accepted == contributions sent, an
empty `rejected` object and 2 leaves; some outer updates merge the work of
both learners; each learner got an ack for every contribution it sent, no
reject, and nothing it had to ignore; learner 2 joined a model better than
chance; the learners' final models and the syncer's saved global model are
well above chance (25 %, 4 classes).

With --codec / --update-codec (syncer options; fp32, bf16, int8, fp8, int4)
the learners must also be welcomed with that contribution codec and block,
receive every update in the update codec, and send payloads of exactly the
compressed size of their fragments; the syncer's payload_bytes_received must
equal the bytes of the contributions the learners sent, and its
payload_bytes_sent cover the update bytes they received.

Needs only the standard library itself; the learners need an interpreter with
pyzmq and numpy: $DILOCO_PYTHON, else /usr/bin/python3, else this one.
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import re
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
CHANCE = 0.25
MIN_ACCURACY = 0.6  # chance is 0.25; a trained model reaches about 0.85
CODECS = ("fp32", "bf16", "int8", "fp8", "int4")
DEFAULT_BLOCK = 256  # protocol.md, "Codecs": the default block


def codec_bytes(codec, count, block):
    """Payload bytes of `count` values (protocol.md, "Codecs"), written out again here: the runner
    checks learner.py's sizes, so it does not use them."""
    if codec == "fp32":
        return 4 * count
    if codec == "bf16":
        return 2 * count
    full, rest = divmod(count, block)
    codes = (lambda b: (b + 1) // 2) if codec == "int4" else (lambda b: b)
    return full * (4 + codes(block)) + (4 + codes(rest) if rest else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("syncer", help="path of diloco_syncer")
    parser.add_argument("--steps", type=int, default=200, help="inner steps per learner")
    parser.add_argument("--timeout", type=float, default=180.0, help="bound of the whole run, seconds")
    parser.add_argument("--alpha", type=float, default=0.0, help="mixing on adoption (syncer --alpha)")
    parser.add_argument("--quorum", type=int, default=2, help="distinct learners before a round may close (syncer --quorum)")
    parser.add_argument("--lock-step", action="store_true", help="synchronous DiLoCo (syncer --lock-step)")
    parser.add_argument("--codec", choices=CODECS, help="contribution codec (syncer --codec; its default: fp32)")
    parser.add_argument("--update-codec", choices=CODECS, help="update codec (syncer --update-codec; default fp32)")
    parser.add_argument("--codec-block", type=int, help="values per scaled block (syncer --codec-block; default 256)")
    parser.add_argument("--chunk-bytes", type=int,
                        help="the syncer sends payloads in parts of N bytes (syncer --chunk-bytes), which the "
                             "learners must reassemble")
    parser.add_argument("--error-feedback", action="store_true", help="learners carry codec error forward")
    parser.add_argument("--keep", action="store_true", help="keep the work directory with the logs")
    args = parser.parse_args()
    if not os.access(args.syncer, os.X_OK):
        sys.exit("run_against_syncer: %s is not an executable" % args.syncer)
    python = python_with_pyzmq("run_against_syncer")
    # SIGTERM (or a CTest timeout's kill of the process group) must still stop the children.
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit("run_against_syncer: terminated"))
    work = tempfile.mkdtemp(prefix="diloco_python_learner.")
    deadline = time.monotonic() + args.timeout
    processes = []
    failures = []

    def start(name, command):
        log = open(os.path.join(work, name + ".err"), "wb")
        out = open(os.path.join(work, name + ".out"), "wb")
        process = subprocess.Popen(command, stdout=out, stderr=log, stdin=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent)
        process.name, process.out_path, process.err_path = name, out.name, log.name
        log.close()
        out.close()
        processes.append(process)
        return process

    def wait(process, limit=None):
        """Waits for process until the deadline (or `limit` seconds); a process still running is stopped."""
        bound = deadline - time.monotonic() if limit is None else min(limit, deadline - time.monotonic())
        try:
            return process.wait(timeout=max(0.1, bound))
        except subprocess.TimeoutExpired:
            failures.append("%s still running after %.0fs; stopped" % (process.name, time.monotonic() - started))
            stop(process)
            return None

    started = time.monotonic()

    try:
        saved = os.path.join(work, "global.f32")
        endpoint = "tcp://127.0.0.1:%d" % free_port()
        command = [args.syncer, "--endpoint", endpoint, "--learners", "2", "--fragments", "3", "--H", "10",
                   "--alpha", repr(args.alpha), "--quorum", str(args.quorum), "--save", saved]
        if args.lock_step:
            command.append("--lock-step")
        for option, value in (("--codec", args.codec), ("--update-codec", args.update_codec),
                              ("--codec-block", args.codec_block), ("--chunk-bytes", args.chunk_bytes)):
            if value is not None:
                command += [option, str(value)]
        syncer = start("syncer", command)
        learner_command = [python, LEARNER, "--endpoint", endpoint, "--steps", str(args.steps), "--seed", "7",
                           "--timeout", "30", "--progress", "50"]
        if args.error_feedback:
            learner_command.append("--error-feedback")
        first = start("learner1", learner_command + ["--learner-id", "1", "--incarnation", "1"])
        # Learner 2 joins once the syncer has published a few outer updates, so that it must
        # receive the model learned so far rather than learner 1's initial one. Learner 1 is
        # paused (SIGSTOP) from then until learner 2 has joined: however long learner 2 takes to
        # start, both then train together, learner 1 with most of its steps to go.
        while re.search(r"revision=3\b", read_text(syncer.err_path)) is None:
            if syncer.poll() is not None or first.poll() is not None or time.monotonic() > started + 20:
                break
            time.sleep(0.05)
        paused = first.poll() is None
        if paused:
            first.send_signal(signal.SIGSTOP)
        second = start("learner2", learner_command + ["--learner-id", "2", "--incarnation", "1"])
        try:
            while paused and "] joined;" not in read_text(second.err_path):
                if syncer.poll() is not None or second.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            if paused:
                first.send_signal(signal.SIGCONT)

        results = {}
        for learner in (first, second):
            status = wait(learner)
            results[learner.name] = last_json(read_text(learner.out_path))
            if status != 0:
                failures.append("%s exited with status %s: %s" % (learner.name, status,
                                                                   read_text(learner.err_path).strip()[-2000:]))
        # The syncer stops by itself once both learners have left; if one failed, it never will.
        learners_ok = all(learner.returncode == 0 for learner in (first, second))
        status = wait(syncer, None if learners_ok else 3)
        counters = last_json(read_text(syncer.out_path))
        if status is not None and status != 0:
            failures.append("the syncer exited with status %s: %s" % (status, read_text(syncer.err_path).strip()[-2000:]))

        # The syncer's counters.
        if counters is None:
            failures.append("no JSON line from the syncer")
            counters = {}
        else:
            if not counters.get("outer_updates", 0) > 0:
                failures.append("no outer update: %s" % counters)
            if counters.get("contributions_merged") != counters.get("contributions_accepted"):
                failures.append("merged %s of %s accepted contributions" % (
                    counters.get("contributions_merged"), counters.get("contributions_accepted")))
            if counters.get("rejected") != {}:
                failures.append("the syncer refused messages (a protocol mismatch): %s" % counters.get("rejected"))
            if counters.get("leaves") != 2:
                failures.append("the syncer saw %s leaves, expected 2" % counters.get("leaves"))
        merged_by_two = len(re.findall(r"contributors=2\b", read_text(syncer.err_path)))
        if args.quorum >= 2 and merged_by_two == 0:
            failures.append("no outer update merged the work of both learners")

        # The learners' counters.
        sent = 0
        for name, result in sorted(results.items()):
            if result is None:
                failures.append("no JSON line from %s" % name)
                continue
            contributions, acks = result.get("contributions", 0), result.get("acks", 0)
            sent += contributions
            if contributions < 1 or acks != contributions:
                failures.append("%s: %d acks for %d contributions" % (name, acks, contributions))
            if result.get("rejects"):
                failures.append("%s: rejects %s" % (name, result.get("reject_reasons")))
            if result.get("ignored_messages"):
                failures.append("%s: ignored %d messages it could not use" % (name, result["ignored_messages"]))
            if (result.get("final_accuracy") or 0) < MIN_ACCURACY:
                failures.append("%s did not learn: final accuracy %s" % (name, result.get("final_accuracy")))
        if results.get("learner1") and not results["learner1"].get("provided_state"):
            failures.append("learner1 was not asked for the initial state")
        if results.get("learner2") and (results["learner2"].get("joined_accuracy") or 0) < CHANCE + 0.2:
            failures.append("learner2 did not join the model learned so far (accuracy %s)"
                            % results["learner2"].get("joined_accuracy"))
        if counters.get("contributions_accepted") is not None and counters["contributions_accepted"] != sent:
            failures.append("the syncer accepted %s contributions, the learners sent %d"
                            % (counters["contributions_accepted"], sent))

        # Codecs: what the learners were told, sent and received, against the sizes of protocol.md.
        codec = args.codec or "fp32"
        update_codec = args.update_codec or "fp32"
        block = args.codec_block or DEFAULT_BLOCK
        contribution_block = block if codec in ("int8", "fp8", "int4") else 0
        update_name = update_codec + ("/%d" % block if update_codec in ("int8", "fp8", "int4") else "")
        contribution_bytes = update_bytes = 0
        for name, result in sorted(results.items()):
            if not result or not result.get("config") or not result.get("fragment_sizes"):
                continue
            config, sizes = result["config"], result["fragment_sizes"]
            if (config.get("codec"), config.get("block")) != (codec, contribution_block):
                failures.append("%s was welcomed with codec %s block %s, expected %s block %d"
                                % (name, config.get("codec"), config.get("block"), codec, contribution_block))
            expected = sum(n * codec_bytes(codec, sizes[int(p)], block)
                           for p, n in result["contributions_by_fragment"].items())
            if result["contribution_bytes"] != expected:
                failures.append("%s sent %d contribution payload bytes; %s of its fragments take %d"
                                % (name, result["contribution_bytes"], codec, expected))
            if set(result["update_codecs"]) != {update_name}:
                failures.append("%s received updates in %s, expected %s only" % (name, result["update_codecs"],
                                                                                update_name))
            expected = sum(n * codec_bytes(update_codec, sizes[int(p)], block)
                           for p, n in result["updates_by_fragment"].items())
            if result["update_bytes"] != expected:
                failures.append("%s received %d update payload bytes; %s of its fragments take %d"
                                % (name, result["update_bytes"], update_codec, expected))
            if result.get("invalid_updates"):
                failures.append("%s received %d invalid updates" % (name, result["invalid_updates"]))
            contribution_bytes += result["contribution_bytes"]
            update_bytes += result["update_bytes"]
        if "payload_bytes_received" not in counters or "payload_bytes_sent" not in counters:
            failures.append("the syncer's counters have no payload_bytes_received/sent: %s" % sorted(counters))
        else:
            # Every contribution was accepted: the syncer received exactly what the learners sent. It may
            # have sent updates that a learner no longer read (after its leave), never fewer bytes.
            if counters["payload_bytes_received"] != contribution_bytes:
                failures.append("the syncer received %d contribution payload bytes, the learners sent %d"
                                % (counters["payload_bytes_received"], contribution_bytes))
            if counters["payload_bytes_sent"] < update_bytes:
                failures.append("the syncer sent %d update payload bytes, the learners received %d"
                                % (counters["payload_bytes_sent"], update_bytes))

        # The syncer's final global model, evaluated by the same model code.
        global_model = None
        if os.path.exists(saved):
            evaluation = subprocess.run([python, LEARNER, "--seed", "7", "--evaluate", saved],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            global_model = last_json(evaluation.stdout.decode())
            if evaluation.returncode != 0 or global_model is None:
                failures.append("cannot evaluate the saved global model: %s" % evaluation.stderr.decode().strip())
            elif global_model["accuracy"] < MIN_ACCURACY:
                failures.append("the syncer's final global model did not learn: accuracy %.3f" % global_model["accuracy"])
        else:
            failures.append("the syncer saved no global model")

        scaled = {"int8", "fp8", "int4"} & {codec, update_codec}
        print("python learners vs %s (%s, alpha %g, %d steps each; contributions %s, updates %s%s%s; python %s)" % (
            os.path.basename(args.syncer), "lock-step" if args.lock_step else "asynchronous", args.alpha, args.steps,
            codec, update_codec, ", block %d" % block if scaled else "", ", error feedback" if args.error_feedback
            else "", python))
        for name, result in sorted(results.items()):
            if result:
                print("  %s: accuracy %s initially, %s after joining, %s finally; %s contributions, %s acks, "
                      "%s rejects, %s updates adopted" % tuple([name] + [result.get(key) for key in (
                          "initial_accuracy", "joined_accuracy", "final_accuracy", "contributions", "acks", "rejects",
                          "updates_adopted")]))
        print("  syncer: %d outer updates (%d merging both learners), %s/%s contributions merged/accepted, rejected %s"
              % (counters.get("outer_updates", 0), merged_by_two, counters.get("contributions_merged"),
                 counters.get("contributions_accepted"), counters.get("rejected")))
        print("  payload bytes: syncer received %s (learners sent %d in contributions), sent %s (learners received "
              "%d in updates)" % (counters.get("payload_bytes_received"), contribution_bytes,
                                  counters.get("payload_bytes_sent"), update_bytes))
        if global_model:
            print("  final global model: loss %.4f accuracy %.3f" % (global_model["loss"], global_model["accuracy"]))
    finally:
        for process in processes:
            stop(process)
    return conclude(failures, work, args.keep)


if __name__ == "__main__":
    sys.exit(main())
