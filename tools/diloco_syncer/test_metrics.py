#!/usr/bin/env python3
"""diloco_syncer's counters for a scraper and as JSON lines, end to end.

usage: test_metrics.py PATH/TO/diloco_syncer PATH/TO/learner.py

Starts diloco_syncer with --metrics-port 0 (a free port, read from its log)
and --metrics-jsonl, scrapes http://127.0.0.1:PORT/metrics before any
learner joined, then runs one Python learner (which reports its training
loss in its heartbeats) and scrapes again while it trains. Checks: every
scrape answers 200 with the Prometheus text format, every sample line is
`name{labels} value`, a second request on /nothing gets 404; a client that
connects and sends nothing holds the server 2 s at most; during training
outer_updates grows and the training loss is a finite number; the JSON
lines file holds at least two valid lines with every counter, the last one
with the final outer updates; the final JSON line has a finite
training_loss. Every wait is bounded; the children die with this script.
"""

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "diloco_tools", "python"))
from diloco_processes import die_with_parent, free_port, python_with_pyzmq  # noqa: E402

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"\})? (NaN|[+-]Inf|-?[0-9.]+([eE][+-]?[0-9]+)?)$')


def scrape(port, path="/metrics"):
    """(status, content type, samples as {line name+labels: value}) of one GET, 5 s at most."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as answer:
            body = answer.read().decode()
            status, content_type = answer.status, answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, "", {}
    samples = {}
    for line in body.splitlines():
        if line.startswith("#"):
            if not (line.startswith("# HELP ") or line.startswith("# TYPE ")):
                raise AssertionError("bad comment line %r" % line)
            continue
        if not SAMPLE.match(line):
            raise AssertionError("not a sample line: %r" % line)
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    return status, content_type, samples


def main():
    syncer_path, learner_path = sys.argv[1], sys.argv[2]
    python = python_with_pyzmq("test_metrics")
    work = tempfile.mkdtemp(prefix="diloco_metrics.")
    jsonl = os.path.join(work, "counters.jsonl")
    failures = []

    def check(condition, what):
        print(("ok   " if condition else "FAIL ") + what)
        if not condition:
            failures.append(what)

    endpoint = "tcp://127.0.0.1:%d" % free_port()
    err_path = os.path.join(work, "syncer.err")
    with open(err_path, "wb") as err, open(os.path.join(work, "syncer.out"), "wb") as out:
        syncer = subprocess.Popen([syncer_path, "--endpoint", endpoint, "--fragments", "2", "--H", "10",
                                   "--learners", "1", "--metrics-port", "0", "--metrics-jsonl", jsonl,
                                   "--metrics-interval", "0.3", "--quiet"],
                                  stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    learner = None
    try:
        port = None
        deadline = time.monotonic() + 20
        while port is None and time.monotonic() < deadline and syncer.poll() is None:
            found = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", open(err_path).read())
            port = int(found.group(1)) if found else None
            time.sleep(0.05)
        check(port is not None, "the syncer logs its metrics port")
        if port is None:
            return 1

        status, content_type, before = scrape(port)
        check(status == 200 and "version=0.0.4" in content_type,
              "before any learner: 200, %s" % content_type)
        check(before.get("diloco_syncer_outer_updates_total") == 0.0, "before any learner: 0 outer updates")
        check(math.isnan(before.get("diloco_syncer_training_loss", 0.0)), "before any learner: the loss is NaN")
        check(scrape(port, "/nothing")[0] == 404, "another path: 404")

        # A client that connects and says nothing is cut off; scrapes go on.
        silent = socket.create_connection(("127.0.0.1", port), timeout=5)
        started = time.monotonic()
        status = scrape(port)[0]
        check(status == 200 and time.monotonic() - started < 4.0,
              "a silent client delays a scrape %.1f s (at most 2 s)" % (time.monotonic() - started))
        silent.close()

        learner = subprocess.Popen([python, learner_path, "--endpoint", endpoint, "--learner-id", "0",
                                    "--steps", "400", "--step-ms", "5", "--timeout", "30"],
                                   stdout=open(os.path.join(work, "learner.out"), "wb"),
                                   stderr=open(os.path.join(work, "learner.err"), "wb"),
                                   stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        during = {}
        deadline = time.monotonic() + 60
        while learner.poll() is None and time.monotonic() < deadline:
            status, _, samples = scrape(port)
            if status == 200 and samples.get("diloco_syncer_outer_updates_total", 0) > 0 and \
                    math.isfinite(samples.get("diloco_syncer_training_loss", float("nan"))):
                during = samples
                break
            time.sleep(0.2)
        check(bool(during), "while training: outer updates and a finite training loss (%s, %s)"
              % (during.get("diloco_syncer_outer_updates_total"), during.get("diloco_syncer_training_loss")))
        check(during.get('diloco_syncer_rejected_total{reason="bad_magic"}') == 0.0,
              "per-reason refusals are exported")
        check(during.get("diloco_syncer_live_learners") == 1.0, "one live learner")
        learner_status = learner.wait(timeout=max(1, deadline - time.monotonic()))
        check(learner_status == 0, "the learner exits 0")
        syncer_status = syncer.wait(timeout=30)
        check(syncer_status == 0, "the syncer exits 0 once the learner left")
    finally:
        for process in (learner, syncer):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    final = json.loads(open(os.path.join(work, "syncer.out")).read().splitlines()[-1])
    check(isinstance(final.get("training_loss"), float) and math.isfinite(final["training_loss"]),
          "the final JSON line has a finite training_loss (%s)" % final.get("training_loss"))
    check(final.get("losses_ignored") == 0, "no loss ignored")
    lines = [json.loads(line) for line in open(jsonl).read().splitlines()]
    check(len(lines) >= 2, "%d JSON lines" % len(lines))
    expected = {"time", "seconds", "outer_updates", "contributions_accepted", "contributions_merged", "staleness_max",
                "tokens_merged", "losses_ignored", "rejected", "live_learners", "known_learners", "training_loss",
                "revisions"}
    check(all(expected <= set(line) for line in lines), "every JSON line has every counter")
    check(len(lines[-1]["rejected"]) >= 25, "every refusal reason in each line")
    check(lines[-1]["outer_updates"] == final["outer_updates"],
          "the last JSON line has the final outer updates (%s)" % final["outer_updates"])
    check(all(a["outer_updates"] <= b["outer_updates"] for a, b in zip(lines, lines[1:])), "outer updates only grow")
    if failures:
        print("work directory kept: " + work)
        return 1
    shutil.rmtree(work)  # kept only for a failure: a passing run left its logs in /tmp every time
    return 0


if __name__ == "__main__":
    sys.exit(main())
