#pragma once
// Writes a chaos report as JSON with nlohmann/json: stable keys in a fixed order, seconds throughout (points in time
// since the run began, begin_us wall microseconds), and a "timeline" section that plot_timeline.py draws.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "report.hpp"

namespace diloco_chaos {

/// `x` to 9 significant digits, so that sums of microseconds read as the seconds they are (0.285, not
/// 0.28500000000000003); NaN and infinities unchanged (written as null).
inline double significant(double x) {
  if (!std::isfinite(x)) return x;
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  return std::strtod(b, nullptr);
}

/// What plot_timeline.py draws: a lane per learner ("learner L") then "syncer", each a list of [begin_s, end_s,
/// state]; revision points [t_s, fragment, revision]; a mark per syncer kill. duration_s > 0 even for an empty run.
inline nlohmann::ordered_json timeline_json(const report& r) {
  using json = nlohmann::ordered_json;
  const auto lane = [](const std::string& label, const std::vector<lane_span>& spans) {
    json s = json::array();
    for (const lane_span& x : spans) s.push_back({significant(x.begin_s), significant(x.end_s), state_name(x.state)});
    return json{{"label", label}, {"spans", std::move(s)}};
  };
  json lanes = json::array(), revisions = json::array(), marks = json::array();
  for (const learner_report& l : r.per_learner) lanes.push_back(lane("learner " + std::to_string(l.learner), l.spans));
  lanes.push_back(lane("syncer", r.syncer_spans));
  for (const revision_point& p : r.revisions) revisions.push_back({significant(p.t_s), p.fragment, p.revision});
  for (const double t : r.syncer_kills_s) marks.push_back(significant(t));
  return {{"duration_s", significant(r.window_s > 0 ? r.window_s : 1e-3)},
          {"fragments", r.fragments},
          {"lanes", std::move(lanes)},
          {"revisions", std::move(revisions)},
          {"marks_s", std::move(marks)}};
}

/// Where the work went, in fragment-steps (see work_account).
inline nlohmann::ordered_json work_json(const work_account& a) {
  return {{"computed", a.computed},       {"merged", a.merged},
          {"overwritten", a.overwritten}, {"refused", a.refused},
          {"dropped", a.dropped},         {"lost_in_flight", a.lost_in_flight},
          {"unsent", a.unsent},           {"unmeasured_incarnations", a.unmeasured_incarnations}};
}

/// The report as one JSON object (see report.hpp for what each number is).
inline nlohmann::ordered_json report_json(const report& r) {
  using json = nlohmann::ordered_json;
  const auto s = significant;
  json per_learner = json::array();
  for (const learner_report& l : r.per_learner)
    per_learner.push_back({{"learner", l.learner},
                           {"incarnations", l.incarnations},
                           {"sent", l.sent},
                           {"merged", l.merged},
                           {"busy_s", s(l.busy_s)},
                           {"good_s", s(l.good_s)},
                           {"lost_s", s(l.lost_s)},
                           {"wait_deducted_s", s(l.wait_deducted_s)},
                           {"up_s", s(l.up_s)},
                           {"waiting_s", s(l.waiting_s)},
                           {"down_s", s(l.down_s)},
                           {"paused_s", s(l.paused_s)},
                           {"restarting_s", s(l.restarting_s)},
                           {"finished_s", s(l.finished_s)},
                           {"work", work_json(l.work)}});
  json gaps = json::array(), restarts = json::array(), per_fragment = json::array(), violations = json::array();
  for (const downtime_gap& g : r.gaps)
    gaps.push_back({{"begin_s", s(g.begin_s)}, {"end_s", s(g.end_s)}, {"alive_s", s(g.alive_s)}});
  for (const syncer_restart& x : r.syncer_restarts)
    restarts.push_back({{"kill_s", s(x.kill_s)}, {"recovered_s", s(x.recovered_s)}, {"recovered", x.recovered}});
  for (const fragment_report& f : r.per_fragment)
    per_fragment.push_back({{"fragment", f.fragment},
                            {"merges", f.merges},
                            {"final_revision", f.final_revision},
                            {"staleness_mean", s(f.staleness_mean)},
                            {"staleness_max", s(f.staleness_max)}});
  for (const revision_violation& v : r.violations)
    violations.push_back({{"learner", v.learner},
                          {"incarnation", v.incarnation},
                          {"fragment", v.fragment},
                          {"from", v.from},
                          {"to", v.to},
                          {"t_s", s(v.t_s)}});
  json epochs = json::array(), failovers = json::array();
  for (const leadership_epoch& e : r.epochs)
    epochs.push_back({{"shard", e.shard}, {"epoch", e.epoch}, {"t_s", s(e.t_s)}});
  for (const failover& f : r.failovers) {
    const auto since = [&](double t) { return t < 0 ? json(nullptr) : json(s(t - f.fault_s)); };
    failovers.push_back({{"shard", f.shard},
                         {"fault", f.fault},
                         {"fault_s", s(f.fault_s)},
                         {"led_after_s", since(f.led_s)},
                         {"published_after_s", since(f.published_s)}});
  }
  const accounting& a = r.counts;
  json by_reason = json::object();
  for (const auto& [reason, n] : a.rejected_by_reason) by_reason[reason] = n;
  return {
      {"mode", r.mode},
      {"seed", r.seed},
      {"begin_us", r.begin_us},
      {"learners", r.learners},
      {"window_s", s(r.window_s)},
      {"allocated_learner_s", s(r.allocated_s)},
      {"goodput", s(r.goodput)},
      {"busy_s", s(r.busy_s)},
      {"good_s", s(r.good_s)},
      {"lost_s", s(r.lost_s)},
      {"work", work_json(r.work)},
      {"per_learner", per_learner},
      {"downtime",
       {{"bound_s", s(r.downtime_bound_s)},
        {"global_downtime_s", s(r.global_downtime_s)},
        {"longest_gap_s", s(r.longest_gap_s)},
        {"median_gap_s", s(r.median_gap_s)},
        {"advances", r.advances},
        {"gaps", gaps},
        {"syncer_restart_s", s(r.syncer_restart_s)},
        {"syncer_restarts", restarts}}},
      {"accounting",
       {{"sent", a.sent},
        {"accepted", a.accepted},
        {"merged", a.merged},
        {"rejected", a.rejected},
        {"lost_in_syncer_restart", a.lost_in_syncer_restart},
        {"unanswered", a.unanswered},
        {"unaccounted", a.unaccounted},
        {"merged_again", a.merged_again},
        {"rejected_by_reason", by_reason},
        {"unaccounted_keys", a.unaccounted_keys}}},
      {"revisions",
       {{"fragments", r.fragments},
        {"staleness_mean", s(r.staleness_mean)},
        {"staleness_max", s(r.staleness_max)},
        {"per_fragment", per_fragment},
        {"violations", violations},
        {"with_two_contents", r.revisions_with_two_contents}}},
      {"syncers",
       {{"standby", r.standby},
        {"epochs", epochs},
        {"failovers", failovers},
        {"split_brain_publications", r.split_brain},
        {"epoch_regressions", r.epoch_regressions}}},
      {"malformed_lines", r.malformed_lines},
      {"invariants", {{"ok", r.ok}, {"failures", r.failures}, {"warnings", r.warnings}}},
      {"timeline", timeline_json(r)},
  };
}

/// report_json(r), indented by 2, with a final newline. Bytes that are not UTF-8 (from a trace's strings) are
/// replaced rather than thrown on.
inline std::string to_json(const report& r) {
  return report_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n';
}

}  // namespace diloco_chaos
