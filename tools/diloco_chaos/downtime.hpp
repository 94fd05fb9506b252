#pragma once
// Analysis pass: global downtime, wall time in which no fragment's revision advances although a learner is alive
// (docs/chaos.md, "Definitions"), with the syncer's restarts measured apart.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "records.hpp"
#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// Advances are the syncer "merged" events in the window; gaps run between consecutive advances and from the last
/// one to the window's end (start-up before the first advance is skipped). Syncer restart windows (a syncer "kill"
/// until the first "merged" after the next syncer "spawn", else the window's end) are cut out and summed as
/// syncer_restart_s. A remaining piece longer than the bound counts as downtime for the time in it during which at
/// least one learner was `alive`; a piece up to the bound is normal cadence.
inline void measure_downtime(const std::vector<event>& evs, const run_window& w, const syncer_records& records,
                             const std::vector<interval>& alive, double bound_s, report& r) {
  const std::int64_t lo = w.lo, hi = w.hi;
  std::vector<std::int64_t> advances, between;
  for (const std::size_t k : records.merges)
    if (evs[k].t >= lo && evs[k].t <= hi) advances.push_back(evs[k].t);
  r.advances = advances.size();
  std::vector<interval> restarts;
  for (const std::size_t kill : records.kills) {
    if (evs[kill].t >= hi) continue;
    std::size_t k = kill + 1;
    while (k < evs.size() && !(is(evs[k], "runner", "spawn") && evs[k].text("target") == "syncer")) ++k;
    const auto next = std::upper_bound(records.merges.begin(), records.merges.end(), k);
    const bool recovered = k < evs.size() && next != records.merges.end() && evs[*next].t <= hi;
    const std::int64_t until = recovered ? evs[*next].t : hi;
    r.syncer_kills_s.push_back(w.at(evs[kill].t));
    r.syncer_restarts.push_back({w.at(evs[kill].t), w.at(until), recovered});
    restarts.push_back({std::max(evs[kill].t, lo), until});
  }
  restarts = unite(restarts);
  r.syncer_restart_s = seconds(covered(restarts, lo, hi));
  for (std::size_t i = 0; i < advances.size(); ++i) {
    const std::int64_t gap_end = i + 1 < advances.size() ? advances[i + 1] : hi;
    if (i + 1 < advances.size()) between.push_back(gap_end - advances[i]);
    for (const auto& [b, end] : outside(restarts, advances[i], gap_end)) {
      r.longest_gap_s = std::max(r.longest_gap_s, seconds(end - b));
      if (seconds(end - b) <= bound_s) continue;
      r.gaps.push_back({w.at(b), w.at(end), seconds(covered(alive, b, end))});
      r.global_downtime_s += r.gaps.back().alive_s;
    }
  }
  std::sort(between.begin(), between.end());
  if (!between.empty()) r.median_gap_s = seconds(between[(between.size() - 1) / 2] + between[between.size() / 2]) / 2;
}

}  // namespace diloco_chaos
