#!/usr/bin/env python3
"""Draws a chaos run's timeline from its report.json (the "timeline" section
that diloco_chaos writes, docs/chaos.md) as a PNG: one state bar per lane
(learners, then the syncer) above a step plot of each fragment's global
revision against time, both on the same time axis, with a dashed line at
every syncer kill.

  plot_timeline.py REPORT_JSON OUT_PNG [--title TEXT]

Exit status 0 when the PNG is written, 2 when the report cannot be drawn
(its message says why), 3 when matplotlib is missing.
"""
import argparse
import json
import math
import sys

# Lane colors: up green, down red, paused orange, waiting yellow, restarting
# blue, finished (its steps done) dark grey; time no span covers is light
# grey. Documented in docs/chaos.md.
STATE_COLORS = {
    "up": "#46aa50",
    "down": "#d7322d",
    "paused": "#f58c1e",
    "waiting": "#f0d232",
    "restarting": "#3c6ed7",
    "finished": "#787878",
}
UNKNOWN_COLOR = "#e8e8e8"
MARK_COLOR = "#960096"
# One color per fragment; the palette repeats every 10 fragments.
FRAGMENT_COLORS = ["#1e5ac8", "#e67814", "#1e963c", "#c81e28", "#8246b4",
                   "#8c5a32", "#dc50aa", "#5a5a5a", "#a0a014", "#14aabe"]
LEGEND_FRAGMENTS = 12  # fragments named in the legend; the rest are counted

WIDTH_IN = 12.0
DPI = 100
LANE_IN = 0.3        # height of one lane's row
REVISIONS_IN = 3.0   # height of the revision plot
MARGINS_IN = 2.2     # title, axis labels and legend


class BadReport(Exception):
    """The report cannot be drawn."""


def timeline_of(report):
    """The report's "timeline" section, checked: what draw() may rely on."""
    t = report.get("timeline") if isinstance(report, dict) else None
    if not isinstance(t, dict):
        raise BadReport('no "timeline" section (written by diloco_chaos)')
    duration = t.get("duration_s")
    if not isinstance(duration, (int, float)) or not math.isfinite(duration) or duration <= 0:
        raise BadReport(f"duration_s must be finite and > 0, got {duration!r}")
    fragments = t.get("fragments", 0)
    for t_s, fragment, revision in t.get("revisions", []):
        if not 0 <= fragment < fragments:
            raise BadReport(f"revision point fragment {fragment} >= fragments {fragments}")
    for lane in t.get("lanes", []):
        for begin, end, state in lane["spans"]:
            if state not in STATE_COLORS:
                raise BadReport(f"lane {lane['label']!r}: unknown state {state!r}")
    return t


def draw(report, title):
    """The timeline as a matplotlib figure of WIDTH_IN x (a height for the lanes) inches at DPI."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    t = timeline_of(report)
    duration, fragments = t["duration_s"], t.get("fragments", 0)
    lanes = t.get("lanes", [])
    lanes_in = max(1, len(lanes)) * LANE_IN + 0.4
    fig = Figure(figsize=(WIDTH_IN, lanes_in + REVISIONS_IN + MARGINS_IN), dpi=DPI, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[lanes_in, REVISIONS_IN])
    fig.suptitle(title)

    # Lanes, top to bottom: grey where nothing is known, then each span.
    for i, lane in enumerate(lanes):
        y = len(lanes) - 1 - i
        top.broken_barh([(0, duration)], (y - 0.4, 0.8), color=UNKNOWN_COLOR)
        spans = [(max(0.0, b), min(e, duration) - max(0.0, b), s) for b, e, s in lane["spans"]]
        for state, color in STATE_COLORS.items():
            bars = [(b, w) for b, w, s in spans if s == state and w > 0]
            if bars:
                top.broken_barh(bars, (y - 0.4, 0.8), color=color)
    top.set_yticks(range(len(lanes)), [lane["label"] for lane in reversed(lanes)])
    top.set_ylim(-0.6, max(1, len(lanes)) - 0.4)
    top.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        top.spines[side].set_visible(False)

    # Each fragment's revision as a step function, held until the run's end.
    points = {}
    for t_s, fragment, revision in t.get("revisions", []):
        points.setdefault(fragment, []).append((t_s, revision))
    for fragment, series in sorted(points.items()):
        series.sort(key=lambda p: p[0])
        xs = [p[0] for p in series] + [duration]
        ys = [p[1] for p in series] + [series[-1][1]]
        bottom.step(xs, ys, where="post", color=FRAGMENT_COLORS[fragment % 10], linewidth=2.5)
    bottom.set_ylim(bottom=0)
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))  # revisions are whole numbers
    bottom.set_xlim(0, duration)
    bottom.set_xlabel("time (s)")
    bottom.set_ylabel("global revision")
    bottom.grid(True, color="#e1e1e1")
    bottom.set_axisbelow(True)

    marks = t.get("marks_s", [])
    for m in marks:
        for ax in (top, bottom):
            ax.axvline(m, color=MARK_COLOR, linestyle=(0, (4, 3)), linewidth=1.5)

    handles = [Patch(color=c, label=s) for s, c in STATE_COLORS.items()]
    handles.append(Patch(color=UNKNOWN_COLOR, label="unknown"))
    if marks:
        handles.append(Line2D([], [], color=MARK_COLOR, linestyle=(0, (4, 3)), label="syncer kill"))
    for f in range(min(fragments, LEGEND_FRAGMENTS)):
        handles.append(Line2D([], [], color=FRAGMENT_COLORS[f % 10], linewidth=2.5, label=f"fragment {f}"))
    if fragments > LEGEND_FRAGMENTS:
        handles.append(Patch(color="none", label=f"+{fragments - LEGEND_FRAGMENTS} more"))
    bottom.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=7, frameon=False)
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draws a chaos run's timeline from its report.json.")
    parser.add_argument("report", help="report.json written by diloco_chaos")
    parser.add_argument("png", help="where to write the PNG")
    parser.add_argument("--title", default=None, help="the title (default: the report's mode)")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (only to say clearly what is missing)
    except ImportError as e:
        print(f"plot_timeline.py: needs matplotlib, which {sys.executable} cannot import ({e}); "
              "install it (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 3
    try:
        with open(args.report) as f:
            report = json.load(f)
        fig = draw(report, args.title if args.title is not None else report.get("mode", ""))
    except (OSError, ValueError, KeyError, TypeError, BadReport) as e:
        print(f"plot_timeline.py: cannot draw {args.report}: {e}", file=sys.stderr)
        return 2
    fig.savefig(args.png, dpi=DPI, facecolor="white")
    return 0


if __name__ == "__main__":
    sys.exit(main())
