#!/usr/bin/env python3
"""Checks plot_timeline.py: it is run as diloco_chaos runs it on a small
report.json built here, and its PNG is read back: the header's size, then the
colors at the places where lanes, revision steps and the syncer kill must be,
computed from the figure's own axes (the same layout the script saves). Also:
reports it must refuse, a Python without matplotlib, and, when given the
diloco_chaos binary, `diloco_chaos --report` on a small trace end to end.

  test_plot_timeline.py [PATH/TO/diloco_chaos]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "plot_timeline.py")

# The colors docs/chaos.md documents, written out again rather than imported.
UP, DOWN, PAUSED = (70, 170, 80), (215, 50, 45), (245, 140, 30)
WAITING, RESTARTING, UNKNOWN = (240, 210, 50), (60, 110, 215), (232, 232, 232)
FINISHED = (120, 120, 120)
MARK, FRAGMENT0, FRAGMENT1 = (150, 0, 150), (30, 90, 200), (230, 120, 20)
WHITE = (255, 255, 255)

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def sample_report():
    """Two learners and the syncer over 100 s, 2 fragments, a syncer kill at 60 s."""
    lanes = [
        {"label": "learner 0", "spans": [[0, 40, "up"], [40, 50, "down"], [50, 55, "restarting"], [55, 100, "up"]]},
        # Nothing is known about learner 1 after 95 s: drawn as "unknown".
        {"label": "learner 1",
         "spans": [[0, 60, "up"], [60, 80, "waiting"], [80, 90, "up"], [90, 95, "finished"]]},
        {"label": "syncer",
         "spans": [[0, 60, "up"], [60, 62, "down"], [62, 70, "restarting"], [70, 80, "paused"], [80, 100, "up"]]},
    ]
    revisions = []
    for k in range(10):
        t0 = 10.0 * k
        if 60 <= t0 < 80:
            continue  # no outer updates while the syncer is away
        revisions.append([t0, 0, k])
        revisions.append([t0 + 5, 1, 2 * k + 1])
    return {"mode": "sample", "timeline": {"duration_s": 100, "fragments": 2, "lanes": lanes,
                                           "revisions": revisions, "marks_s": [60]}}


def run_script(report, png, env=None, title="chaos: a syncer kill at t=60 s"):
    path = png + ".json"
    with open(path, "w") as f:
        json.dump(report, f)
    return subprocess.run([sys.executable, SCRIPT, path, png, "--title", title], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=env)


def png_size(path):
    """(width, height) from the PNG signature and IHDR chunk, read without any imaging library."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def test_sample(work):
    import matplotlib.image
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    sys.path.insert(0, HERE)
    import plot_timeline

    report = sample_report()
    png = os.path.join(work, "timeline.png")
    result = run_script(report, png)
    check(result.returncode == 0, f"the sample draws (status {result.returncode}: {result.stderr.strip()})")
    if result.returncode != 0:
        return
    size = png_size(png)
    check(size is not None, "timeline.png starts with a PNG signature and IHDR")
    if size is None:
        return
    width, height = size
    check(width == 1200 and 500 <= height <= 1500, f"a plausible size: {width}x{height}")

    # The same figure, laid out here: where data coordinates fall in the PNG.
    fig = plot_timeline.draw(report, "chaos: a syncer kill at t=60 s")
    FigureCanvasAgg(fig).draw()
    check(fig.canvas.get_width_height() == (width, height), "the figure laid out here is the saved one's size")
    lanes_ax, revisions_ax = fig.axes[0], fig.axes[1]
    pixels = (matplotlib.image.imread(png)[:, :, :3] * 255).round().astype(int)

    def at(ax, x, y):
        dx, dy = ax.transData.transform((x, y))
        return int(dx), int(height - dy)

    def near_color(ax, x, y, want, what, reach=1, tolerance=6):
        px, py = at(ax, x, y)
        found = [tuple(pixels[j][i]) for j in range(py - reach, py + reach + 1)
                 for i in range(px - reach, px + reach + 1)]
        ok = any(all(abs(a - b) <= tolerance for a, b in zip(c, want)) for c in found)
        check(ok, f"{what} at ({x}, {y}) -> pixel ({px}, {py}): want {want}, got {found[len(found) // 2]}")

    # Lanes are drawn top to bottom: learner 0 at y=2, learner 1 at 1, the syncer at 0.
    near_color(lanes_ax, 20, 2, UP, "learner 0 up")
    near_color(lanes_ax, 45, 2, DOWN, "learner 0 down")
    near_color(lanes_ax, 52.5, 2, RESTARTING, "learner 0 restarting")
    near_color(lanes_ax, 70, 1, WAITING, "learner 1 waiting")
    near_color(lanes_ax, 92.5, 1, FINISHED, "learner 1 finished its steps")
    near_color(lanes_ax, 97.5, 1, UNKNOWN, "learner 1 after its last span: unknown")
    near_color(lanes_ax, 75, 0.3, PAUSED, "syncer paused, near the bar's top")
    near_color(lanes_ax, 75, -0.3, PAUSED, "syncer paused, near the bar's bottom")
    near_color(lanes_ax, 75, -0.55, WHITE, "below the syncer's bar")
    near_color(lanes_ax, 90, 0, UP, "syncer up again")

    # Fragment 0 holds revision 2 over [20, 30) and 5 over [50, 80); fragment 1 holds 3 over [15, 25), 7 over [35, 45).
    near_color(revisions_ax, 22, 2, FRAGMENT0, "fragment 0 at revision 2")
    near_color(revisions_ax, 70, 5, FRAGMENT0, "fragment 0 holds revision 5 while the syncer is away")
    near_color(revisions_ax, 22, 3, FRAGMENT1, "fragment 1 at revision 3")
    near_color(revisions_ax, 40, 7, FRAGMENT1, "fragment 1 at revision 7")
    near_color(revisions_ax, 30, 2.5, FRAGMENT0, "fragment 0's step from 2 to 3")
    px, py = at(revisions_ax, 22, 4.5)
    background = tuple(pixels[py][px])
    check(all(c >= 220 for c in background) and abs(background[0] - background[2]) <= 2,
          f"no line between the fragments at (22, 4.5): got {background}")

    # The syncer kill: a dashed line at t=60 through the lanes.
    px, top = at(lanes_ax, 60, 2.4)
    _, bottom = at(lanes_ax, 60, -0.4)
    mark = sum(1 for y in range(top, bottom) for x in range(px - 2, px + 3)
               if all(abs(a - b) <= 30 for a, b in zip(pixels[y][x], MARK)))
    check(mark >= (bottom - top) // 3, f"the syncer kill is marked at t=60 ({mark} mark pixels)")
    left, _ = at(lanes_ax, 20, 0)
    stray = sum(1 for y in range(top, bottom) if all(abs(a - b) <= 30 for a, b in zip(pixels[y][left], MARK)))
    check(stray == 0, f"no mark at t=20 ({stray} mark pixels)")

    # The title: dark pixels above the lanes.
    _, lanes_top = at(lanes_ax, 0, 2.6)
    check((pixels[:max(1, lanes_top - 5), :, :] < 80).all(axis=2).any(), "a title above the lanes")


def test_refused(work):
    empty = {"mode": "x", "timeline": {"duration_s": 0, "fragments": 0, "lanes": [], "revisions": [], "marks_s": []}}
    for duration in (0, -1):
        empty["timeline"]["duration_s"] = duration
        r = run_script(empty, os.path.join(work, "bad.png"))
        check(r.returncode == 2 and "duration_s must be finite and > 0" in r.stderr,
              f"duration {duration} refused: status {r.returncode}, '{r.stderr.strip()}'")
    stray = sample_report()
    stray["timeline"]["revisions"].append([1, 2, 1])
    r = run_script(stray, os.path.join(work, "stray.png"))
    check(r.returncode == 2 and "fragment 2 >= fragments 2" in r.stderr,
          f"a revision point of a fragment >= fragments refused: '{r.stderr.strip()}'")
    check(not os.path.exists(os.path.join(work, "stray.png")), "no PNG for a refused report")
    r = run_script({"mode": "x"}, os.path.join(work, "none.png"))
    check(r.returncode == 2 and "timeline" in r.stderr, f"a report without a timeline refused: '{r.stderr.strip()}'")
    one = {"mode": "x", "timeline": {"duration_s": 5, "fragments": 0, "lanes": [], "revisions": [], "marks_s": []}}
    r = run_script(one, os.path.join(work, "empty.png"))
    check(r.returncode == 0 and png_size(os.path.join(work, "empty.png")) is not None,
          f"an empty timeline draws: '{r.stderr.strip()}'")


def test_without_matplotlib(work):
    """A Python whose matplotlib cannot be imported: status 3 and a message that names it."""
    fake = os.path.join(work, "fake", "matplotlib")
    os.makedirs(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write("raise ImportError('matplotlib hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(fake))
    r = run_script(sample_report(), os.path.join(work, "hidden.png"), env=env)
    check(r.returncode == 3 and "needs matplotlib" in r.stderr and "python3-matplotlib" in r.stderr,
          f"no matplotlib: status {r.returncode}, '{r.stderr.strip()}'")


def test_diloco_chaos_report(work, binary):
    """diloco_chaos --report on a healthy one-learner trace: report.json with a timeline, and timeline.png."""
    run = os.path.join(work, "run")
    os.makedirs(run)
    t0 = 1_700_000_000_000_000
    lines = [
        {"t": t0, "src": "runner", "ev": "begin", "learners": 1, "mode": "tiny", "seed": 1},
        {"t": t0, "src": "runner", "ev": "spawn", "target": "syncer", "pid": 10},
        {"t": t0, "src": "runner", "ev": "spawn", "target": "learner", "learner": 0, "incarnation": 1, "pid": 20},
        {"t": t0 + 200_000, "src": "learner", "learner": 0, "incarnation": 1, "ev": "joined", "revisions": [0],
         "wait_us": 0},
        {"t": t0 + 1_000_000, "src": "learner", "learner": 0, "incarnation": 1, "ev": "sent", "fragment": 0,
         "sequence": 1, "wait_us": 0},
        {"t": t0 + 1_100_000, "src": "syncer", "ev": "accepted", "learner": 0, "incarnation": 1, "sequence": 1,
         "fragment": 0},
        {"t": t0 + 1_200_000, "src": "syncer", "ev": "merged", "fragment": 0, "revision": 1,
         "contributions": [[0, 1, 1]], "staleness": [0]},
        {"t": t0 + 2_000_000, "src": "runner", "ev": "stopping"},
    ]
    with open(os.path.join(run, "events.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    r = subprocess.run([binary, "--report", run, "--title", "tiny_run"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    check(r.returncode == 0, f"diloco_chaos --report: status {r.returncode}, '{r.stderr.strip()}'")
    try:
        report = json.load(open(os.path.join(run, "report.json")))
    except (OSError, ValueError) as e:
        check(False, f"report.json: {e}")
        return
    check(report["invariants"]["ok"] and report["timeline"]["lanes"][0]["label"] == "learner 0",
          "report.json: invariants hold, a lane for learner 0")
    size = png_size(os.path.join(run, "timeline.png"))
    check(size is not None and size[0] == 1200, f"timeline.png drawn by diloco_chaos: {size}")


def main():
    with tempfile.TemporaryDirectory(prefix="diloco_plot_test_") as work:
        test_sample(work)
        test_refused(work)
        test_without_matplotlib(work)
        if len(sys.argv) > 1:
            test_diloco_chaos_report(work, sys.argv[1])
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
