#pragma once
// Analysis pass: goodput, the share of allocated learner time spent on inner steps whose work reached the global
// model (docs/chaos.md, "Definitions").

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "lanes.hpp"
#include "records.hpp"
#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// Fills each learner's sent, merged, busy, good, lost and wait_deducted, and the report's totals and goodput.
/// The window of a "sent" is (the previous "sent" of its incarnation, or its "joined", else its spawn; this "sent"],
/// cut to the run window; busy = its length - the wait_us growth over it (pro rata when cut) - the time the runner
/// had the learner paused in it. Busy is good iff (L, I, sequence) is in some syncer "merged" (at any time), else
/// lost. goodput = sum of good / allocated time.
inline void measure_goodput(const std::vector<event>& evs, const run_window& w, const lanes& lanes,
                            const syncer_records& records, report& r) {
  struct cursor {
    std::int64_t t, wait_us;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, cursor> cursors;  // (learner, incarnation) -> previous sent or joined
  for (const event& e : evs) {
    const std::int64_t learner = e.integer("learner").value_or(-1), inc = e.integer("incarnation").value_or(-1);
    if (e.src != "learner" || learner < 0) continue;
    if (e.ev == "joined") cursors[{learner, inc}] = {e.t, e.integer("wait_us").value_or(0)};
    if (e.ev != "sent") continue;
    learner_report& lr = *find_learner(r.per_learner, learner);
    ++lr.sent;
    const bool good = records.last_merge.count(key_of(e)) > 0;
    lr.merged += good;
    const auto spawn = lanes.spawned_at.find({learner, inc});
    const auto c = cursors.find({learner, inc});
    const cursor prev = c != cursors.end() ? c->second : cursor{spawn != lanes.spawned_at.end() ? spawn->second : e.t, 0};
    const std::int64_t wait_us = e.integer("wait_us").value_or(prev.wait_us);
    cursors[{learner, inc}] = {e.t, wait_us};
    const std::int64_t b = std::max(prev.t, w.lo), end = std::min(e.t, w.hi);
    if (end <= b) continue;
    const double wait = seconds(std::max<std::int64_t>(0, wait_us - prev.wait_us)) * static_cast<double>(end - b) /
                        static_cast<double>(e.t - prev.t);
    const double busy = std::max(0.0, seconds(end - b - covered(lanes.paused.at(learner), b, end)) - wait);
    lr.wait_deducted_s += wait, lr.busy_s += busy;
    (good ? lr.good_s : lr.lost_s) += busy;
  }
  for (const learner_report& lr : r.per_learner) r.busy_s += lr.busy_s, r.good_s += lr.good_s, r.lost_s += lr.lost_s;
  r.goodput = r.allocated_s > 0 ? r.good_s / r.allocated_s : 0;
}

}  // namespace diloco_chaos
