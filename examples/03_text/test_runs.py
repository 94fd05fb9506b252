#!/usr/bin/env python3
"""Short char_lm runs (CTest examples_char_lm_runs): each mode in one process,
the simulator, and 1 syncer + 2 learner processes over ZeroMQ; each must
complete, count every learner's steps and learn (the validation loss of a
model that knows nothing is ln V, 4.28 nats for the 72 characters of the
King James Bible). Bad command lines must be refused with exit status 2 and
a missing text with 1, each with a message naming the problem. With
diloco_keygen's path, a syncer and 2 learner processes also train with CURVE
keys (that a key off the allow-list is refused, the transport's tests show).

    python3 examples/03_text/test_runs.py build/examples/03_text/char_lm [build/tools/diloco_keygen]
"""
import json
import math
import os
import socket
import subprocess
import sys
import tempfile

# A small transformer, so that a run takes seconds.
SMALL = ["--width", "32", "--layers", "1", "--heads", "2", "--context", "32", "--batch", "8",
         "--validation-windows", "64", "--progress", "0"]
UNTRAINED = math.log(72)


def run(char_lm, *args, expect=0, timeout=300):
    p = subprocess.run([char_lm, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        sys.exit(f"char_lm {' '.join(args)}: exit status {p.returncode}, expected {expect}\n{p.stderr[-3000:]}")
    return p


def result(char_lm, *args):
    p = run(char_lm, *args)
    line = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"{' '.join(args)}\n  -> val_loss {line['val_loss']:.4f}, bits/char {line['bits_per_char']:.4f}, "
          f"outer updates {line['outer_updates']}, inner steps {line['inner_steps']}, {line['seconds']:.1f} s")
    return line


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curve_run(char_lm, keygen, work, learner_keys):
    """1 syncer and 2 learner processes with CURVE keys; `learner_keys[i]`
    names learner i's key pair. Returns the syncer's result line and every
    process's exit status and stderr."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    common = ["--mode", "decoupled", "--learners", "2", "--steps", "40", "--H", "10", "--endpoint", endpoint, *SMALL]
    syncer = subprocess.Popen([char_lm, "--role", "syncer", "--curve-secret", f"{work}/syncer.key",
                               "--curve-peer", f"{work}/allowed.pub", *common],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    learners = [subprocess.Popen([char_lm, "--role", "learner", "--learner-id", str(i),
                                  "--curve-secret", f"{work}/{key}.key", "--curve-peer", f"{work}/syncer.pub", *common],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i, key in enumerate(learner_keys)]
    done = []
    try:
        for p in [*learners, syncer]:
            out, err = p.communicate(timeout=120)
            done.append((p.returncode, out, err))
    finally:
        for p in [*learners, syncer]:
            p.kill()
    return done


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


def main():
    char_lm = sys.argv[1]
    steps, learners = 60, 3
    # The library's inner step with radial-directional merging runs on the simulator: what it checks is that
    # combination, and on threads its result hangs on the scheduling of a loaded machine (CI once saw 3.54
    # where an idle machine gives 3.14 to 3.21).
    for mode, extra in [("dp", []), ("diloco", ["--H", "10"]), ("decoupled", ["--H", "10", "--speeds", "1,0.7,0.5"]),
                        ("decoupled", ["--H", "10", "--inner", "library", "--merge", "rda", "--transport", "sim"])]:
        r = result(char_lm, "--mode", mode, "--learners", str(learners), "--steps", str(steps), *extra, *SMALL)
        check(r["completed"], f"{mode} run completed")
        check(r["inner_steps"] == learners * steps, f"{mode}: every learner took its {steps} steps")
        check(r["outer_updates"] > 0, f"{mode}: the global model was updated")
        check(r["val_loss"] < UNTRAINED - 0.8, f"{mode}: learned (validation loss {r['val_loss']} vs {UNTRAINED:.2f})")
        check(abs(r["bits_per_char"] - r["val_loss"] / math.log(2)) < 1e-4, "bits per character = loss / ln 2")
        if mode == "dp":
            check(r["outer_updates"] == steps, "data parallel: one outer update per step")
            check(r["partial_rounds"] == 0, "data parallel: no partial round")

    # The simulator is deterministic: the same run twice gives the same model.
    sim = ["--mode", "decoupled", "--learners", "2", "--steps", "40", "--H", "10", "--transport", "sim", *SMALL]
    a, b = result(char_lm, *sim), result(char_lm, *sim)
    check(a["val_loss"] == b["val_loss"] and a["outer_updates"] == b["outer_updates"], "simulator runs repeat exactly")

    # Processes over ZeroMQ, the path a multi-machine run takes. Twice the
    # steps of the runs above: processes start at their own pace, and on a
    # loaded machine 60 steps ended at 3.36 to 3.53 (CI once failed the bound
    # at 3.53), 120 steps at 2.86 to 2.91.
    process_steps = 2 * steps
    r = result(char_lm, "--role", "all", "--mode", "decoupled", "--learners", "2", "--steps", str(process_steps),
               "--H", "10", *SMALL)
    check(r["transport"] == "zmq" and r["completed"], "processes completed over ZeroMQ")
    check(r["inner_steps"] == 2 * process_steps, "every learner process took its steps")
    check(r["val_loss"] < UNTRAINED - 0.8, "processes learned")

    if len(sys.argv) > 2:
        keygen = os.path.abspath(sys.argv[2])
        with tempfile.TemporaryDirectory() as work:
            for args in (["syncer"], ["learner0", "--learners", "0"], ["learner1", "--learners", "1"]):
                subprocess.run([keygen, *args], cwd=work, check=True, capture_output=True, timeout=30)
            with open(f"{work}/allowed.pub", "w") as allowed:
                for name in ("learner0", "learner1"):
                    allowed.write(open(f"{work}/{name}.pub").read())
            (s0, _, e0), (s1, _, e1), (ss, out, es) = curve_run(char_lm, keygen, work, ["learner0", "learner1"])
            check(s0 == s1 == ss == 0, f"CURVE run: exit statuses {s0} {s1} {ss}\n{e0[-800:]}{e1[-800:]}{es[-800:]}")
            r = json.loads(out.strip().splitlines()[-1])
            check(r["completed"] and r["outer_updates"] > 0, "CURVE run: the syncer updated the model")
            check(r["val_loss"] < UNTRAINED - 0.3, f"CURVE run: learned (validation loss {r['val_loss']})")
            print(f"CURVE keys: 2 learner processes admitted, {r['outer_updates']} outer updates, "
                  f"val_loss {r['val_loss']:.4f}")

    # Bad input: exit status 2 (or 1 for a missing text) and a message naming it.
    for args, says, status in [(["--speeds", "1,1"], "--speeds needs one value per learner", 2),
                               (["--width", "30", "--heads", "4"], "multiple of --heads", 2),
                               (["--steps", "-1"], "--steps", 2),
                               (["--role", "learner"], "need --endpoint", 2),
                               (["--role", "syncer", "--endpoint", "tcp://0.0.0.0:5555"], "without CURVE keys", 2),
                               (["--curve-secret", "x.key"], "--curve-secret and --curve-peer go together", 2),
                               (["--ranks-per-unit", "2"], "--ranks-per-unit", 2),
                               (["--ranks-per-unit", "0"], "--ranks-per-unit", 2),
                               (["--text", "/nonexistent/text.txt"], "cannot read /nonexistent/text.txt", 1)]:
        p = run(char_lm, *args, "--progress", "0", expect=status)
        check(says in p.stderr, f"{args}: message names the problem ({p.stderr.strip()[:200]})")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as short:
        short.write("too short\n" * 100)
        short.flush()
        p = run(char_lm, "--text", short.name, "--progress", "0", expect=1)
        check("too short" in p.stderr, "a short text is refused")
    print("char_lm runs: all checks passed")


if __name__ == "__main__":
    main()
