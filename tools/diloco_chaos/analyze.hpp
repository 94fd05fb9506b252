#pragma once
// Turns a chaos run's trace into its report, one pass per concern: the run window, the process lanes, the syncer's
// records, goodput, the accounting of contributions, revisions, global downtime, then the run's invariants.

#include <cstddef>
#include <string>
#include <vector>

#include "accounting.hpp"
#include "downtime.hpp"
#include "failover.hpp"
#include "goodput.hpp"
#include "lanes.hpp"
#include "records.hpp"
#include "report.hpp"
#include "revisions.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// Sets ok, failures and warnings from what the passes found. Failures: downtime > 0, no advance at all while a
/// learner was alive, unaccounted > 0, violations, a revision adopted with two contents. Unanswered contributions
/// are a warning.
inline void judge(report& r, bool anyone_alive) {
  if (r.global_downtime_s > 0)
    r.failures.push_back("global downtime " + std::to_string(r.global_downtime_s) +
                         " s: no revision advanced for longer than the bound while a learner was alive");
  if (r.advances == 0 && anyone_alive)
    r.failures.push_back("no fragment revision advanced in the run window although a learner was alive");
  if (r.counts.unaccounted > 0)
    r.failures.push_back(std::to_string(r.counts.unaccounted) + " unaccounted contribution(s)");
  if (!r.violations.empty())
    r.failures.push_back(std::to_string(r.violations.size()) + " revision(s) seen going backwards by a learner");
  if (r.revisions_with_two_contents > 0)
    r.failures.push_back(std::to_string(r.revisions_with_two_contents) +
                         " revision(s) adopted with two different contents: published twice, differently");
  if (r.split_brain > 0)
    r.failures.push_back(std::to_string(r.split_brain) +
                         " split-brain publication(s): a replaced leader merged while its successor led");
  if (r.epoch_regressions > 0)
    r.failures.push_back(std::to_string(r.epoch_regressions) +
                         " adoption(s) from a replaced leader after a learner had heard its successor");
  if (r.standby && r.counts.lost_in_syncer_restart > 0)
    r.failures.push_back(std::to_string(r.counts.lost_in_syncer_restart) +
                         " acknowledged contribution(s) lost although a standby held them");
  for (const failover& f : r.failovers)
    if (r.standby && f.published_s < 0)
      r.failures.push_back("no new leader published after the syncer fault at " + std::to_string(f.fault_s) + " s");
  if (r.counts.unanswered > 0)
    r.warnings.push_back(std::to_string(r.counts.unanswered) + " sent contribution(s) never answered by the syncer");
  r.ok = r.failures.empty();
}

/// Analyzes a trace (the definitions are each pass's and docs/chaos.md's). The run window is the runner's "begin"
/// to its "stopping"; allocated learner time = M x window, M from "begin" (else the number of learner ids seen), less
/// the time learners spent finished (their step budget done, their resources given back).
/// Malformed lines are a warning: they cost the report data, and every other check still runs on the rest.
inline report analyze(const trace& tr, const report_options& options) {
  report r;
  r.downtime_bound_s = options.downtime_bound_s;
  r.malformed_lines = tr.malformed_lines;
  if (r.malformed_lines > 0) r.warnings.push_back(std::to_string(r.malformed_lines) + " malformed line(s) skipped");
  const std::vector<event>& evs = tr.events;
  if (evs.empty()) return r.ok = false, r.failures.push_back("the trace holds no events"), r;

  const run_window w = find_window(evs);
  if (!w.begin) r.warnings.push_back("no runner \"begin\": the run window starts at the first event");
  if (!w.stop) r.warnings.push_back("no runner \"stopping\" or \"end\": the run window ends at the last event");
  r.begin_us = w.lo, r.window_s = seconds(w.hi - w.lo);
  if (w.begin) r.mode = w.begin->text("mode"), r.seed = w.begin->integer("seed").value_or(0);
  if (w.begin) r.standby = w.begin->flag("standby");

  lanes lanes = trace_lanes(evs, w);
  r.learners = lanes.learners;
  r.allocated_s = r.learners * r.window_s;
  for (const learner_report& l : lanes.per_learner) r.allocated_s -= l.finished_s;
  r.per_learner = std::move(lanes.per_learner);
  r.syncer_spans = std::move(lanes.syncer_spans);

  const syncer_records records = index_syncer_records(evs);
  const std::size_t fragments = count_fragments(evs);
  measure_goodput(evs, w, lanes, records, fragments, r);
  r.counts = account_contributions(evs, records);
  trace_revisions(evs, w, fragments, r);
  measure_downtime(evs, w, records, lanes.alive, options.downtime_bound_s, r);
  trace_failovers(evs, w, r);
  judge(r, covered(lanes.alive, w.lo, w.hi) > 0);
  return r;
}

}  // namespace diloco_chaos
