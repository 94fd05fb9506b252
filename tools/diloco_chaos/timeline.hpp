#pragma once
// Renders a chaos-test timeline as an image: one state bar per lane (learners, then the syncer) above a step
// plot of each fragment's global revision against time, both on the same time axis.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "png.hpp"

namespace diloco_chaos {

enum class lane_state { up, down, paused, waiting, restarting };

/// A lane is in `state` for begin_s <= t < end_s (seconds since the run started).
struct lane_span { double begin_s, end_s; lane_state state; };

/// One process; times not covered by a span draw as "unknown" (light grey).
struct lane { std::string label; std::vector<lane_span> spans; };

/// Fragment `fragment` reached global revision `revision` at t_s; it holds until the fragment's next point.
struct revision_point { double t_s; std::uint32_t fragment; std::uint64_t revision; };

/// Everything render() draws.
struct timeline {
  std::string title;
  double duration_s;                       ///< time axis spans [0, duration_s]; must be > 0
  std::vector<lane> lanes;                 ///< learners, then the syncer, drawn top to bottom
  std::vector<revision_point> revisions;   ///< any order; every fragment must be < fragments
  std::uint32_t fragments;                 ///< number of fragments, one polyline each
  std::vector<double> marks_s;             ///< vertical event marks (e.g. syncer kill), seconds
};

inline const char* state_name(lane_state s) noexcept {
  return std::array{"up", "down", "paused", "waiting", "restarting"}[static_cast<std::size_t>(s)];
}

/// Bar color: up green, down red, paused orange, waiting yellow, restarting blue.
inline rgb state_color(lane_state s) noexcept {
  return std::array<rgb, 5>{{{70, 170, 80}, {215, 50, 45}, {245, 140, 30}, {240, 210, 50}, {60, 110, 215}}}
      [static_cast<std::size_t>(s)];
}

/// Polyline color of a fragment; the palette repeats every 10 fragments.
inline rgb fragment_color(std::uint32_t fragment) noexcept {
  constexpr rgb palette[] = {{30, 90, 200},   {230, 120, 20}, {30, 150, 60},  {200, 30, 40},   {130, 70, 180},
                             {140, 90, 50},   {220, 80, 170}, {90, 90, 90},   {160, 160, 20},  {20, 170, 190}};
  return palette[fragment % 10];
}

/// Colors of uncovered lane time, event marks, text and axes, and grid lines.
inline constexpr rgb unknown_color{232, 232, 232}, mark_color{150, 0, 150}, ink{30, 30, 30}, grid_color{225, 225, 225};

/// Pixel layout of render(). Text is drawn at scale 2 (14 px tall), the title at scale 3.
struct timeline_geometry {
  static constexpr int margin = 16, lane_height = 22, lane_pitch = 30, legend_pitch = 22, legend_item_width = 170;

  int width, height;
  double duration_s;
  int plot_left, plot_right;             ///< x of t = 0 and of t = duration_s
  int lanes_top;                         ///< y of lane 0's top edge
  int revisions_top, revisions_bottom;   ///< y of revision axis_max and of revision 0
  std::uint64_t axis_max, revision_step; ///< top of the revision axis and its tick interval
  double time_step_s;                    ///< tick interval of the time axis
  int legend_top;

  /// Lane i's bar covers lane_top(i) <= y < lane_bottom(i).
  int lane_top(std::size_t i) const noexcept { return lanes_top + static_cast<int>(i) * lane_pitch; }
  int lane_bottom(std::size_t i) const noexcept { return lane_top(i) + lane_height; }
  /// plot_left + round(t / duration_s * (plot_right - plot_left)), t clamped into [0, duration_s].
  int x_of(double t_s) const noexcept {
    const double t = t_s > 0 ? std::min(t_s, duration_s) : 0.0;
    return plot_left + static_cast<int>(std::lround(t / duration_s * (plot_right - plot_left)));
  }
  /// revisions_bottom - round(r / axis_max * (revisions_bottom - revisions_top)), r clamped to axis_max.
  int y_of(std::uint64_t revision) const noexcept {
    const double f = static_cast<double>(std::min(revision, axis_max)) / static_cast<double>(axis_max);
    return revisions_bottom - static_cast<int>(std::lround(f * (revisions_bottom - revisions_top)));
  }
};

namespace detail {

/// The smallest of 1, 2, 5 x 10^k that is >= range / ticks.
inline double nice_step(double range, int ticks) {
  const double raw = range / ticks, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  return 10 * magnitude;
}

struct legend_entry { std::string text; rgb color; enum { box, line, dashed, plain } swatch; };

inline std::vector<legend_entry> legend_entries(const timeline& t) {
  std::vector<legend_entry> out;
  for (int s = 0; s < 5; ++s)
    out.push_back({state_name(lane_state(s)), state_color(lane_state(s)), legend_entry::box});
  out.push_back({"unknown", unknown_color, legend_entry::box});
  if (!t.marks_s.empty()) out.push_back({"event", mark_color, legend_entry::dashed});
  constexpr std::uint32_t shown = 12;
  for (std::uint32_t f = 0; f < std::min(t.fragments, shown); ++f)
    out.push_back({"fragment " + std::to_string(f), fragment_color(f), legend_entry::line});
  if (t.fragments > shown)
    out.push_back({"+" + std::to_string(t.fragments - shown) + " more", ink, legend_entry::plain});
  return out;
}

}  // namespace detail

/// Layout of render(t, width). Throws std::invalid_argument if duration_s is not a finite positive number,
/// width < 400, or a revision point names a fragment >= t.fragments.
inline timeline_geometry layout(const timeline& t, int width = 1200) {
  if (!(t.duration_s > 0) || !std::isfinite(t.duration_s))
    throw std::invalid_argument("diloco_chaos timeline: duration_s must be finite and > 0, got " +
                                std::to_string(t.duration_s));
  if (width < 400)
    throw std::invalid_argument("diloco_chaos timeline: width must be >= 400, got " + std::to_string(width));
  std::uint64_t max_revision = 1;
  for (const revision_point& p : t.revisions) {
    if (p.fragment >= t.fragments)
      throw std::invalid_argument("diloco_chaos timeline: revision point fragment " + std::to_string(p.fragment) +
                                  " >= fragments " + std::to_string(t.fragments));
    max_revision = std::max(max_revision, p.revision);
  }
  timeline_geometry g{};
  g.width = width;
  g.duration_s = t.duration_s;
  const double revision_step = std::ceil(detail::nice_step(static_cast<double>(max_revision), 5));
  g.revision_step = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(revision_step));
  g.axis_max = (max_revision + g.revision_step - 1) / g.revision_step * g.revision_step;
  int label_width = image::text_width(std::to_string(g.axis_max), 2);
  for (const lane& l : t.lanes) label_width = std::max(label_width, image::text_width(l.label, 2));
  g.plot_left = std::min(g.margin + label_width + 12, width / 3);
  g.plot_right = width - 40;
  g.time_step_s = detail::nice_step(t.duration_s, std::max(2, (g.plot_right - g.plot_left) / 110));
  g.lanes_top = g.margin + 21 + 14;
  const int lanes_bottom = g.lane_top(t.lanes.size()) - (t.lanes.empty() ? 0 : g.lane_pitch - g.lane_height);
  g.revisions_top = lanes_bottom + 40;
  g.revisions_bottom = g.revisions_top + 260;
  g.legend_top = g.revisions_bottom + 40;
  const int per_row = std::max(1, (width - 2 * g.margin) / g.legend_item_width);
  const int entries = static_cast<int>(detail::legend_entries(t).size());
  g.height = g.legend_top + (entries + per_row - 1) / per_row * g.legend_pitch + g.margin;
  return g;
}

/// Draws `t` (see timeline_geometry for where things go). Same exceptions as layout().
inline image render(const timeline& t, int width = 1200) {
  const timeline_geometry g = layout(t, width);
  image img(g.width, g.height, {255, 255, 255});
  img.text(g.margin, g.margin, t.title, ink, 3);
  const int bottom = g.revisions_bottom;

  for (int k = 0; k * g.time_step_s <= t.duration_s * (1 + 1e-9); ++k) {
    const int x = g.x_of(k * g.time_step_s);
    img.fill_rect(x, g.lanes_top, x + 1, bottom, grid_color);
    char label[32];
    std::snprintf(label, sizeof label, "%g", k * g.time_step_s);
    img.text(x - image::text_width(label, 2) / 2, bottom + 10, label, ink, 2);
  }
  for (std::uint64_t k = 0; k <= g.axis_max / g.revision_step; ++k) {
    const std::uint64_t r = k * g.revision_step;
    const int y = g.y_of(r);
    img.fill_rect(g.plot_left, y, g.plot_right + 1, y + 1, grid_color);
    const std::string label = std::to_string(r);
    img.text(g.plot_left - 8 - image::text_width(label, 2), y - 7, label, ink, 2);
  }
  img.fill_rect(g.plot_left, g.revisions_top, g.plot_left + 1, bottom + 1, ink);
  img.fill_rect(g.plot_left, bottom, g.plot_right + 1, bottom + 1, ink);
  const std::string caption = "global revision per fragment vs time (s)";
  const int caption_scale = image::text_width(caption, 2) <= g.plot_right - g.plot_left ? 2 : 1;
  img.text(g.plot_left, g.revisions_top - 24, caption, ink, caption_scale);

  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    const int top = g.lane_top(i), lane_bottom = g.lane_bottom(i);
    img.text(g.margin, top + 4, t.lanes[i].label, ink, 2);
    img.fill_rect(g.plot_left, top, g.plot_right, lane_bottom, unknown_color);
    for (const lane_span& s : t.lanes[i].spans)
      if (s.end_s > s.begin_s) {
        const int x0 = g.x_of(s.begin_s);
        const int x1 = std::min(std::max(g.x_of(s.end_s), x0 + 1), g.plot_right);
        img.fill_rect(x0, top, x1, lane_bottom, state_color(s.state));
      }
  }

  const auto thick_line = [&img](int x0, int y0, int x1, int y1, rgb c) {
    for (int d = 0; d < 4; ++d) img.line(x0 + d % 2, y0 + d / 2, x1 + d % 2, y1 + d / 2, c);
  };
  std::vector<revision_point> points = t.revisions;
  std::stable_sort(points.begin(), points.end(), [](const revision_point& a, const revision_point& b) {
    return a.fragment != b.fragment ? a.fragment < b.fragment : a.t_s < b.t_s;
  });
  for (std::size_t i = 0; i < points.size(); ++i) {
    const revision_point& p = points[i];
    const bool last = i + 1 == points.size() || points[i + 1].fragment != p.fragment;
    const int x0 = g.x_of(p.t_s), y0 = g.y_of(p.revision);
    const int x1 = g.x_of(last ? t.duration_s : points[i + 1].t_s);
    thick_line(x0, y0, x1, y0, fragment_color(p.fragment));
    if (!last) thick_line(x1, y0, x1, g.y_of(points[i + 1].revision), fragment_color(p.fragment));
  }

  for (double m : t.marks_s)
    for (int y = g.lanes_top - 6; y < bottom; y += 10) img.fill_rect(g.x_of(m), y, g.x_of(m) + 2, y + 6, mark_color);

  const std::vector<detail::legend_entry> entries = detail::legend_entries(t);
  const int per_row = std::max(1, (g.width - 2 * g.margin) / g.legend_item_width);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const int x = g.margin + static_cast<int>(i) % per_row * g.legend_item_width;
    const int y = g.legend_top + static_cast<int>(i) / per_row * g.legend_pitch;
    const detail::legend_entry& e = entries[i];
    if (e.swatch == detail::legend_entry::box) img.fill_rect(x, y, x + 22, y + 14, e.color);
    if (e.swatch == detail::legend_entry::line) img.fill_rect(x, y + 6, x + 22, y + 8, e.color);
    if (e.swatch == detail::legend_entry::dashed) img.fill_rect(x + 10, y, x + 12, y + 14, e.color);
    img.text(e.swatch == detail::legend_entry::plain ? x : x + 30, y, e.text, ink, 2);
  }
  return img;
}

}  // namespace diloco_chaos
