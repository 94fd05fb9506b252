#pragma once
// Analysis pass: goodput, the share of allocated learner time spent on inner steps whose work reached the global
// model, and where each learner's work went (docs/chaos.md, "Definitions").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "lanes.hpp"
#include "records.hpp"
#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// The contributions of every round a syncer dropped instead of publishing (its "dropped" events).
inline std::set<contribution_key> dropped_contributions(const std::vector<event>& evs) {
  std::set<contribution_key> out;
  for (const event& e : evs)
    if (is(e, "syncer", "dropped"))
      for (const auto& c : e.rows("contributions"))
        if (c.size() == 3) out.insert({c[0], c[1], c[2]});
  return out;
}

/// What one learner incarnation's events say about its time and its work (fragment-steps).
struct incarnation_work {
  bool joined = false;                     ///< a "joined" of it was seen
  std::optional<std::int64_t> base_steps;  ///< `steps` of its first "joined", else of its first event with steps
  std::int64_t last_steps = 0;             ///< the largest `steps` of its events
  std::size_t fragments = 0;               ///< P: the size of its first "joined" `revisions`; 0 if none
  bool work_known = true;                  ///< every "sent" carries `work` (false: a trace from before it did)
  work_account account;                    ///< merged, overwritten, refused, dropped, lost_in_flight
  double busy_s = 0, busy_merged_s = 0;    ///< busy time; of it, windows ended by a merged contribution
};

/// A trace's count of fragment-steps; 0 when absent or negative.
inline std::uint64_t fragment_steps(std::optional<std::int64_t> n) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, n.value_or(0)));
}

/// Where the `work` of a sent contribution went: merged if some "merged" holds it, else dropped if a dropped round
/// held it, else lost in flight if the syncer accepted it, else refused if it rejected it, else lost in flight
/// (never answered: it died with a killed process or in a syncer restart).
inline std::uint64_t& destination(work_account& a, const contribution_key& key, const syncer_records& records,
                                  const std::set<contribution_key>& dropped) {
  if (records.last_merge.count(key)) return a.merged;
  if (dropped.count(key)) return a.dropped;
  if (records.accepted.count(key)) return a.lost_in_flight;
  if (records.answered.count(key)) return a.refused;
  return a.lost_in_flight;
}

/// Fills each learner's sent, merged, busy, good, lost, wait_deducted and work, and the report's totals and goodput.
/// The window of a "sent" is (the previous "sent" of its incarnation, or its "joined", else its spawn; this "sent"],
/// cut to the run window; busy = its length - the wait_us growth over it (pro rata when cut) - the time the runner
/// had the learner paused in it. Per incarnation, good = busy x min(1, W / (P x N)), with N its inner steps (its
/// largest `steps` - those of its "joined"), P its fragments (its "joined" `revisions`, else `fragments`) and W the
/// `work` of its contributions some syncer "merged" holds (at any time); 0 when N = 0. An incarnation with a "sent"
/// without `work` (a trace from before learners recorded it) keeps the window rule: a window is good iff its
/// contribution was merged, and its work stays out of the account. lost = busy - good; goodput = sum of good /
/// allocated time. `fragments` is the trace's fragment count (count_fragments). A learner unit's ranks each trace
/// their own sends: W sums the work of all of them, and the windows are rank 0's (keeps_time).
inline void measure_goodput(const std::vector<event>& evs, const run_window& w, const lanes& lanes,
                            const syncer_records& records, std::size_t fragments, report& r) {
  const std::set<contribution_key> dropped = dropped_contributions(evs);
  struct cursor {
    std::int64_t t, wait_us;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, cursor> cursors;  // (learner, incarnation) -> previous sent or joined
  std::map<std::pair<std::int64_t, std::int64_t>, incarnation_work> incarnations;
  for (const event& e : evs) {
    const std::int64_t learner = e.integer("learner").value_or(-1), inc = e.integer("incarnation").value_or(-1);
    if (e.src != "learner" || learner < 0) continue;
    incarnation_work& iw = incarnations[{learner, inc}];
    const std::optional<std::int64_t> steps = e.integer("steps");
    if (steps) iw.last_steps = std::max(iw.last_steps, *steps);
    if (steps && !iw.base_steps) iw.base_steps = steps;
    if (e.ev == "joined") {
      if (keeps_time(e)) cursors[{learner, inc}] = {e.t, e.integer("wait_us").value_or(0)};
      if (!iw.joined) {
        iw.joined = true, iw.fragments = e.integers("revisions").size();
        if (steps) iw.base_steps = steps;
      }
    }
    if (e.ev == "adopted") iw.account.overwritten += fragment_steps(e.integer("overwritten"));
    if (e.ev != "sent") continue;
    learner_report& lr = *find_learner(r.per_learner, learner);
    ++lr.sent;
    const contribution_key key = key_of(e);
    const bool merged = records.last_merge.count(key) > 0;
    lr.merged += merged;
    if (const std::optional<std::int64_t> work = e.integer("work"))
      destination(iw.account, key, records, dropped) += fragment_steps(work);
    else
      iw.work_known = false;
    if (!keeps_time(e)) continue;
    const auto spawn = lanes.spawned_at.find({learner, inc});
    const auto c = cursors.find({learner, inc});
    const cursor prev =
        c != cursors.end() ? c->second : cursor{spawn != lanes.spawned_at.end() ? spawn->second : e.t, 0};
    const std::int64_t wait_us = e.integer("wait_us").value_or(prev.wait_us);
    cursors[{learner, inc}] = {e.t, wait_us};
    const std::int64_t b = std::max(prev.t, w.lo), end = std::min(e.t, w.hi);
    if (end <= b) continue;
    const double wait = seconds(std::max<std::int64_t>(0, wait_us - prev.wait_us)) * static_cast<double>(end - b) /
                        static_cast<double>(e.t - prev.t);
    const double busy = std::max(0.0, seconds(end - b - covered(lanes.paused.at(learner), b, end)) - wait);
    lr.wait_deducted_s += wait, lr.busy_s += busy;
    iw.busy_s += busy;
    if (merged) iw.busy_merged_s += busy;
  }
  for (auto& [id, iw] : incarnations) {
    learner_report& lr = *find_learner(r.per_learner, id.first);
    work_account& a = iw.account;
    double good = iw.busy_merged_s;
    if (!iw.work_known) {
      a = work_account{};
      a.unmeasured_incarnations = 1;
    } else {
      const std::int64_t base = iw.base_steps.value_or(0);
      const auto n = static_cast<std::uint64_t>(std::max<std::int64_t>(0, iw.last_steps - base));
      a.computed = (iw.fragments > 0 ? iw.fragments : fragments) * n;
      good = a.computed > 0 ? iw.busy_s * std::min(1.0, static_cast<double>(a.merged) / static_cast<double>(a.computed))
                            : 0.0;
      const std::uint64_t gone = a.merged + a.overwritten + a.refused + a.dropped + a.lost_in_flight;
      a.unsent = a.computed > gone ? a.computed - gone : 0;
    }
    lr.good_s += good, lr.lost_s += iw.busy_s - good;
    lr.work += a;
  }
  for (const learner_report& lr : r.per_learner) {
    r.busy_s += lr.busy_s, r.good_s += lr.good_s, r.lost_s += lr.lost_s;
    r.work += lr.work;
  }
  r.goodput = r.allocated_s > 0 ? r.good_s / r.allocated_s : 0;
}

}  // namespace diloco_chaos
