#pragma once
// Analysis pass: every process's lane (down, restarting, up, waiting, paused) from the runner's actions and the
// learners' "joined" and "wait" events, the time each learner spent in each state, and when learners were alive.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "report.hpp"
#include "trace.hpp"
#include "window.hpp"

namespace diloco_chaos {

/// A piece of a lane in wall microseconds.
struct lane_segment {
  std::int64_t begin, end;
  lane_state state;
};

/// One supervised process slot (a learner id or the syncer) as the runner's events describe it.
struct process_track {
  bool present = false, paused = false, joined = false, finished = false;
  std::int64_t incarnation = -1, pid = -1, since = 0;
  std::vector<lane_segment> segments;  ///< clipped to the run window

  lane_state state() const {
    return finished   ? lane_state::finished
           : !present ? lane_state::down
           : paused   ? lane_state::paused
           : joined   ? lane_state::up
                      : lane_state::restarting;
  }
  /// Applies `change` at time t; a state change closes the current segment (clipped to [lo, hi]).
  template <class Change>
  void at(std::int64_t t, std::int64_t lo, std::int64_t hi, Change change) {
    const lane_state before = state();
    change(*this);
    if (state() != before) close(t, lo, hi, before);
  }
  void close(std::int64_t t, std::int64_t lo, std::int64_t hi, lane_state s) {
    if (std::min(t, hi) > std::max(since, lo)) segments.push_back({std::max(since, lo), std::min(t, hi), s});
    since = std::max(since, t);
  }
  std::vector<interval> in(std::initializer_list<lane_state> states) const {
    std::vector<interval> out;
    for (const lane_segment& s : segments)
      if (std::find(states.begin(), states.end(), s.state) != states.end()) out.push_back({s.begin, s.end});
    return unite(out);
  }
};

/// What trace_lanes() finds.
struct lanes {
  std::uint32_t learners = 0;               ///< M: from the runner's "begin", else the learner ids seen
  std::vector<learner_report> per_learner;  ///< by id, with incarnations, state times and spans filled in
  std::vector<lane_span> syncer_spans;
  std::vector<interval> alive;                           ///< some learner spawned, not gone and not paused
  std::map<std::int64_t, std::vector<interval>> paused;  ///< per learner id
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> spawned_at;  ///< (learner, incarnation) -> t
};

/// The report of learner `id` in `per_learner` (sorted by id), or nullptr.
inline learner_report* find_learner(std::vector<learner_report>& per_learner, std::int64_t id) {
  const auto it = std::lower_bound(per_learner.begin(), per_learner.end(), id,
                                   [](const learner_report& l, std::int64_t x) { return l.learner < x; });
  return it != per_learner.end() && it->learner == id ? &*it : nullptr;
}

/// Merges consecutive segments of one state into spans in seconds since the run began.
inline std::vector<lane_span> to_spans(const std::vector<lane_segment>& segments, const run_window& w) {
  std::vector<lane_span> out;
  for (const lane_segment& s : segments)
    if (!out.empty() && out.back().state == s.state && out.back().end_s == w.at(s.begin))
      out.back().end_s = w.at(s.end);
    else
      out.push_back({w.at(s.begin), w.at(s.end), s.state});
  return out;
}

/// Lane states from runner events: down (no process: before "spawn", after "kill"/"exit" of its pid), finished
/// (after "finish" of its pid: it ended by itself, its steps done), paused
/// (between "pause" and "resume"), restarting (spawned, its incarnation has not logged "joined"), waiting (in a
/// learner "wait" span while otherwise up), up. A learner is alive when spawned, not gone and not paused.
inline lanes trace_lanes(const std::vector<event>& evs, const run_window& w) {
  const std::int64_t lo = w.lo, hi = w.hi;
  lanes out;
  std::map<std::int64_t, process_track> tracks;
  std::map<std::int64_t, std::vector<interval>> waits;
  process_track syncer;
  syncer.since = lo;
  const auto track = [&](std::int64_t learner) -> process_track& {
    auto [it, fresh] = tracks.try_emplace(learner);
    if (fresh) it->second.since = lo;
    return it->second;
  };
  const std::int64_t declared =
      w.begin ? std::clamp<std::int64_t>(w.begin->integer("learners").value_or(0), 0, 1 << 16) : 0;
  for (std::int64_t l = 0; l < declared; ++l) track(l);
  for (const event& e : evs) {
    const std::int64_t learner = e.integer("learner").value_or(-1), inc = e.integer("incarnation").value_or(-1);
    const bool to_syncer = e.text("target") == "syncer";
    if (e.src == "runner" && (to_syncer || (e.text("target") == "learner" && learner >= 0))) {
      process_track& p = to_syncer ? syncer : track(learner);
      const std::int64_t pid = e.integer("pid").value_or(-1);
      const bool same = pid < 0 || pid == p.pid;
      if (e.ev == "spawn") {
        p.at(e.t, lo, hi,
             [&](process_track& q) { q = {true, false, to_syncer, false, inc, pid, q.since, q.segments}; });
        if (!to_syncer) out.spawned_at[{learner, inc}] = e.t;
      }
      if ((e.ev == "kill" || e.ev == "exit") && same) p.at(e.t, lo, hi, [](process_track& q) { q.present = false; });
      if (e.ev == "finish" && same) p.at(e.t, lo, hi, [](process_track& q) { q.present = false, q.finished = true; });
      if ((e.ev == "pause" || e.ev == "resume") && same)
        p.at(e.t, lo, hi, [&](process_track& q) { q.paused = e.ev == "pause"; });
    } else if (e.src == "learner" && learner >= 0) {
      process_track& p = track(learner);
      if (e.ev == "joined" && p.present && inc == p.incarnation)
        p.at(e.t, lo, hi, [](process_track& q) { q.joined = true; });
      if (e.ev == "wait") waits[learner].push_back({e.integer("begin").value_or(0), e.integer("end").value_or(0)});
    }
  }
  out.learners = static_cast<std::uint32_t>(w.begin && w.begin->integer("learners") ? declared : std::ssize(tracks));
  syncer.close(hi, lo, hi, syncer.state());
  out.syncer_spans = to_spans(syncer.segments, w);

  // Learner lanes (waits laid over "up"), state times, alive time, pauses.
  out.per_learner.reserve(tracks.size());
  for (auto& [id, p] : tracks) {
    p.close(hi, lo, hi, p.state());
    for (const interval& a : p.in({lane_state::up, lane_state::restarting})) out.alive.push_back(a);
    out.paused[id] = p.in({lane_state::paused});
    learner_report& lr = out.per_learner.emplace_back();
    lr.learner = id;
    std::vector<lane_segment> segments;
    for (const lane_segment& s : p.segments) {
      std::int64_t cur = s.begin;
      for (const interval& x : s.state == lane_state::up ? unite(waits[id]) : std::vector<interval>{})
        if (x.second > cur && x.first < s.end) {
          if (x.first > cur) segments.push_back({cur, x.first, lane_state::up});
          segments.push_back({std::max(x.first, cur), std::min(x.second, s.end), lane_state::waiting});
          cur = std::min(x.second, s.end);
        }
      if (cur < s.end) segments.push_back({cur, s.end, s.state});
    }
    for (const lane_segment& s : segments) {
      double& in_state = s.state == lane_state::up         ? lr.up_s
                         : s.state == lane_state::waiting  ? lr.waiting_s
                         : s.state == lane_state::down     ? lr.down_s
                         : s.state == lane_state::paused   ? lr.paused_s
                         : s.state == lane_state::finished ? lr.finished_s
                                                           : lr.restarting_s;
      in_state += seconds(s.end - s.begin);
    }
    lr.spans = to_spans(segments, w);
  }
  out.alive = unite(out.alive);
  for (const auto& spawn : out.spawned_at) ++find_learner(out.per_learner, spawn.first.first)->incarnations;
  return out;
}

}  // namespace diloco_chaos
