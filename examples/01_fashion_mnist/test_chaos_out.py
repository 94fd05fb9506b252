#!/usr/bin/env python3
"""Checks what chaos.py and diloco_chaos do with a run's directory and a short
baseline, without training anything:

- a second run in the same --out starts from nothing the first one left: its
  syncer checkpoints (from which the syncer would resume: a second
  `chaos.py --out /tmp/run` used to resume at the first run's last revisions,
  send nothing and report the first run's accuracy), learner checkpoints,
  final models, metrics, logs and report are removed; anything else in the
  directory is left alone;
- diloco_chaos --no-faults accepts a run shorter than the default quiet
  windows (10 s at each end), which only a fault schedule needs, and still
  refuses that duration with faults, naming the windows;
- --learner-kill-at refuses a kill it cannot parse or cannot schedule;
- with --until-learners-finish a learner that exits 0 has finished: it is
  not started again, and the run ends once every learner has, long before
  --duration.

  test_chaos_out.py PATH/TO/diloco_chaos
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def load_chaos():
    spec = importlib.util.spec_from_file_location("chaos", os.path.join(HERE, "chaos.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("x")


def check_forget(chaos, top):
    out = os.path.join(top, "run")
    earlier = ["checkpoints/latest.ckpt", "checkpoints1/latest.ckpt", "learner0/step100.ckpt",
               "learner3/step200.ckpt", "logs/syncer.0.err", "final.f32", "final1.f32", "syncer.json",
               "syncer0.json", "events.jsonl", "report.json", "chaos.log", "timeline.png"]
    kept = ["notes.txt", "final.txt", "syncer.csv", "syncer_notes.json", "learners/a.txt", "mine/checkpoints/keep.ckpt",
            "results/report.json"]
    for name in earlier + kept:
        touch(os.path.join(out, name))
    chaos.forget_earlier_run(out)
    left = {os.path.relpath(os.path.join(d, f), out) for d, _, files in os.walk(out) for f in files}
    check(not (left & set(earlier)), "an earlier run's files are removed (left: %s)" % sorted(left & set(earlier)))
    check(left == set(kept), "everything else stays (%s)" % sorted(left))
    check(not any(os.path.isdir(os.path.join(out, d)) for d in ("checkpoints", "checkpoints1", "learner0", "logs")),
          "an earlier run's directories are removed")


def check_short_baseline(chaos_bin, top):
    # Processes that exit at once: the run fails its invariants (nothing
    # trained), but it runs and writes its report; a refused plan exits 2.
    common = ["--learners", "1", "--duration", "2", "--syncer", "sleep 1", "--learner", "sleep 1"]
    out = os.path.join(top, "baseline")
    r = subprocess.run([chaos_bin, "--out", out, "--no-faults"] + common, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    ran = r.returncode != 2 and os.path.exists(os.path.join(out, "report.json"))
    check(ran, "a 2 s baseline runs and writes its report (exit %d%s)"
          % (r.returncode, "" if ran else ": " + r.stderr.strip()[-300:]))
    out = os.path.join(top, "faults")
    r = subprocess.run([chaos_bin, "--out", out] + common, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    check(r.returncode == 2 and "quiet_start_seconds + quiet_end_seconds" in r.stderr
          and not os.path.exists(os.path.join(out, "report.json")),
          "the same 2 s with faults is refused, naming the quiet windows (exit %d)" % r.returncode)
    # Kills at set times: a malformed one or one of a learner that does not
    # exist is refused before anything starts.
    common = ["--learners", "2", "--duration", "60", "--syncer", "sleep 1", "--learner", "sleep 1"]
    for bad, says in (("1:x", '"1:x" is not ID:SEC'), ("20", '"20" is not ID:SEC'), ("-1:20", '"-1:20" is not'),
                      ("2:15", "learner 2 at 15: there are only 2 learners"),
                      ("0:12,0:14", "learner 0 at 14 falls while it is down")):
        out = os.path.join(top, "kill")
        r = subprocess.run([chaos_bin, "--out", out, "--learner-kill-at", bad] + common, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        check(r.returncode == 2 and says in r.stderr and not os.path.exists(os.path.join(out, "report.json")),
              "--learner-kill-at %s is refused, saying %r (exit %d: %s)" % (bad, says, r.returncode, r.stderr.strip()))


def check_learners_finish(chaos_bin, top):
    out = os.path.join(top, "finish")
    r = subprocess.run([chaos_bin, "--out", out, "--no-faults", "--until-learners-finish", "--learners", "2",
                        "--duration", "600", "--syncer", "sleep 600", "--learner", "sleep 1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    events = [json.loads(line) for line in open(os.path.join(out, "events.jsonl"))]
    runner = [e for e in events if e["src"] == "runner"]
    finished = sorted(e["learner"] for e in runner if e["ev"] == "finish")
    spawned = sorted(e["learner"] for e in runner if e["ev"] == "spawn" and e.get("target") == "learner")
    check(finished == [0, 1] and spawned == [0, 1],
          "--until-learners-finish: each learner finished once and was not started again (%s, %s)"
          % (finished, spawned))
    stop = [e["t"] for e in runner if e["ev"] == "stopping"]
    begin = [e["t"] for e in runner if e["ev"] == "begin"]
    # The syncer sleeps through the run: only the learners' finishing ends it before --duration.
    check(len(stop) == 1 and len(begin) == 1 and stop[0] - begin[0] < 300 * 10**6,
          "--until-learners-finish: the run stops once every learner has finished, not at --duration")
    report = json.load(open(os.path.join(out, "report.json")))
    # Down only for the moment between the run's start and its spawn.
    check(all(l["down_s"] < 0.5 and l["finished_s"] > 0 for l in report["per_learner"]),
          "--until-learners-finish: a finished learner's lane is finished, not down (%s)"
          % [(l["down_s"], l["finished_s"]) for l in report["per_learner"]])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_chaos_out.py PATH/TO/diloco_chaos")
    with tempfile.TemporaryDirectory(prefix="diloco_chaos_out.") as top:
        check_forget(load_chaos(), top)
        check_short_baseline(sys.argv[1], top)
        check_learners_finish(sys.argv[1], top)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
