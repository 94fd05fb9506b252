#pragma once
// The run window of a trace and the interval arithmetic the analysis passes share: times are wall microseconds,
// intervals half-open.

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "trace.hpp"

namespace diloco_chaos {

/// Whether `e` is event `ev` from `src`.
inline bool is(const event& e, std::string_view src, std::string_view ev) { return e.src == src && e.ev == ev; }

/// Whether the learner event `e` is about fragment `f` of the learner's own: any fragment of a one-process learner;
/// of rank r of a learner unit of R ranks (its events carry "rank" and "ranks"), the fragments f mod R = r, the
/// ones it speaks for (docs/units.md). A rank's "joined" lists every fragment, the others as it last heard of them.
inline bool speaks_for(const event& e, std::int64_t f) {
  const std::int64_t ranks = e.integer("ranks").value_or(1), rank = e.integer("rank").value_or(0);
  return ranks <= 1 || (f >= 0 && f % ranks == rank);
}

/// Whether the learner event `e` measures its learner's time: every event of a one-process learner; of a unit, rank
/// 0's only (its ranks step together, so one rank's clock is the unit's; every rank's sends carry work).
inline bool keeps_time(const event& e) { return e.integer("rank").value_or(0) == 0; }

/// Microseconds as seconds.
inline double seconds(std::int64_t us) { return static_cast<double>(us) * 1e-6; }

/// Runner "begin" (else the first event) to runner "stopping" (else "end", else the last event).
struct run_window {
  const event* begin = nullptr;  ///< the runner's "begin", if any
  const event* stop = nullptr;   ///< the runner's "stopping" or "end", if any
  std::int64_t lo = 0, hi = 0;   ///< wall microseconds, lo <= hi

  /// A wall time as seconds since the run began.
  double at(std::int64_t us) const { return seconds(us - lo); }
};

/// The window of a non-empty event list.
inline run_window find_window(const std::vector<event>& evs) {
  const auto runner = [&](std::string_view ev) -> const event* {
    const auto it = std::find_if(evs.begin(), evs.end(), [&](const event& e) { return is(e, "runner", ev); });
    return it == evs.end() ? nullptr : &*it;
  };
  run_window w;
  w.begin = runner("begin");
  w.stop = runner("stopping") ? runner("stopping") : runner("end");
  w.lo = w.begin ? w.begin->t : evs.front().t;
  w.hi = std::max(w.lo, w.stop ? w.stop->t : evs.back().t);
  return w;
}

using interval = std::pair<std::int64_t, std::int64_t>;  ///< [first, second), microseconds

/// Sorted, disjoint, non-empty.
inline std::vector<interval> unite(std::vector<interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<interval> out;
  for (const interval& x : v)
    if (x.second <= x.first)
      continue;
    else if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  return out;
}

/// Length of [a, b) covered by sorted disjoint intervals.
inline std::int64_t covered(const std::vector<interval>& v, std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  for (const interval& x : v) sum += std::max<std::int64_t>(0, std::min(b, x.second) - std::max(a, x.first));
  return sum;
}

/// The pieces of [a, b) outside sorted disjoint intervals.
inline std::vector<interval> outside(const std::vector<interval>& v, std::int64_t a, std::int64_t b) {
  std::vector<interval> out;
  for (const interval& x : v) {
    if (x.second <= a || x.first >= b) continue;
    if (x.first > a) out.push_back({a, x.first});
    a = std::max(a, x.second);
  }
  if (a < b) out.push_back({a, b});
  return out;
}

}  // namespace diloco_chaos
