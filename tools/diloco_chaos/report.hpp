#pragma once
// What the analysis of a chaos run's trace finds (analyze.hpp computes it, report_json.hpp writes it): goodput and
// where the learners' work went, global downtime, the accounting of every contribution, revision monotonicity per
// learner, and the lanes and revision points that plot_timeline.py draws.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace diloco_chaos {

/// What a process is doing at a time, as its timeline lane shows it.
/// `finished`: a learner that ended by itself after its step budget (diloco_chaos --until-learners-finish); its
/// resources are given back, so that time is neither downtime nor allocated.
enum class lane_state { up, down, paused, waiting, restarting, finished };

inline const char* state_name(lane_state s) noexcept {
  constexpr const char* names[] = {"up", "down", "paused", "waiting", "restarting", "finished"};
  return names[static_cast<int>(s)];
}

/// A lane is in `state` for begin_s <= t < end_s (seconds since the run began).
struct lane_span {
  double begin_s, end_s;
  lane_state state;
};

/// Fragment `fragment` reached global revision `revision` at t_s; it holds until the fragment's next point.
struct revision_point {
  double t_s;
  std::uint32_t fragment;
  std::uint64_t revision;
};

struct report_options {
  double downtime_bound_s = 5.0;  ///< a gap between revision advances up to this long is normal cadence, seconds
};

/// A contribution: learner id, incarnation, sequence.
using contribution_key = std::tuple<std::int64_t, std::int64_t, std::int64_t>;

/// Where learners' inner steps went, in fragment-steps: each inner step counts once per fragment, P per step (the
/// learners' `work` and `overwritten` counters). Over the whole trace, not cut to the run window.
struct work_account {
  std::uint64_t computed = 0;        ///< P x N per incarnation: N inner steps it computed, P fragments
  std::uint64_t merged = 0;          ///< carried by sent contributions some syncer "merged" holds
  std::uint64_t overwritten = 0;     ///< unsent work that adoptions threw away ("adopted" overwritten)
  std::uint64_t refused = 0;         ///< carried by contributions the syncer rejected
  std::uint64_t dropped = 0;         ///< carried by contributions in a round the syncer dropped
  std::uint64_t lost_in_flight = 0;  ///< carried by contributions accepted but never merged, or never answered
  std::uint64_t unsent = 0;          ///< computed - all the above, at least 0, per incarnation: never sent
  /// Incarnations whose "sent" events carry no `work` (traces from before it was recorded): left out of the
  /// fields above, their busy time counted good iff the contribution ending it was merged.
  std::uint64_t unmeasured_incarnations = 0;

  work_account& operator+=(const work_account& o) {
    computed += o.computed, merged += o.merged, overwritten += o.overwritten, refused += o.refused;
    dropped += o.dropped, lost_in_flight += o.lost_in_flight, unsent += o.unsent;
    unmeasured_incarnations += o.unmeasured_incarnations;
    return *this;
  }
};

/// One learner id over all its incarnations; times in seconds.
struct learner_report {
  std::int64_t learner = 0;
  std::uint64_t incarnations = 0, sent = 0, merged = 0;  ///< spawns; "sent" events; those of them merged
  /// busy = good + lost; good = busy x the share of the incarnation's computed work that was merged
  double busy_s = 0, good_s = 0, lost_s = 0;
  double wait_deducted_s = 0;  ///< wait_us growth deducted from the sent windows
  double up_s = 0, waiting_s = 0, down_s = 0, paused_s = 0, restarting_s = 0;  ///< lane states; sum = window
  double finished_s = 0;         ///< after the learner finished its steps (a lane state too)
  std::vector<lane_span> spans;  ///< the lane, seconds since the run began
  work_account work;             ///< summed over its incarnations
};

/// All times in seconds since the run began.
struct downtime_gap {
  double begin_s, end_s, alive_s;  ///< a gap over the bound; alive_s of it is downtime
};
struct syncer_restart {
  double kill_s, recovered_s;
  bool recovered;  ///< merged after the respawn
};
struct revision_violation {
  std::int64_t learner, incarnation;
  std::uint32_t fragment;
  std::int64_t from, to;  ///< highest revision seen before, the lower one seen at t_s
  double t_s;
};
struct fragment_report {
  std::uint32_t fragment;
  std::uint64_t merges;
  std::int64_t final_revision;
  double staleness_mean, staleness_max;
};

struct accounting {
  std::uint64_t sent = 0, accepted = 0, merged = 0, rejected = 0, lost_in_syncer_restart = 0, unanswered = 0,
                unaccounted = 0;
  /// Contributions in more than one traced merge: a syncer killed between tracing a merge and making it durable
  /// (or replicated) merges its journal again, and learners get one of the two.
  std::uint64_t merged_again = 0;
  std::map<std::string, std::uint64_t> rejected_by_reason;
  std::vector<std::string> unaccounted_keys;  ///< the first 10, each with why
};

/// A leadership of a syncer shard: it began (its syncer "start") at t_s.
struct leadership_epoch {
  std::uint32_t shard;
  std::uint64_t epoch;
  double t_s;
};
/// A fault of a leading syncer and what followed; -1: never.
struct failover {
  std::uint32_t shard;
  std::string fault;   ///< "kill" (SIGKILL), "pause" (SIGSTOP) or "cut" (off the network)
  double fault_s;      ///< the runner's kill or pause
  double led_s;        ///< a syncer of a newer epoch started
  double published_s;  ///< that leadership merged one of the shard's fragments
};
/// What analyze() finds; times in seconds (since the run began where a point in time).
struct report {
  std::string mode;
  std::int64_t seed = 0, begin_us = 0;   ///< begin_us: the run's start, wall microseconds
  std::uint32_t learners = 0;            ///< M
  double window_s = 0, allocated_s = 0;  ///< run window; M x window less the learners' finished time
  double goodput = 0, busy_s = 0, good_s = 0, lost_s = 0;
  work_account work;                        ///< summed over the learners
  std::vector<learner_report> per_learner;  ///< by learner id
  std::vector<lane_span> syncer_spans;
  std::vector<double> syncer_kills_s;
  double downtime_bound_s = 0, global_downtime_s = 0, longest_gap_s = 0, median_gap_s = 0, syncer_restart_s = 0;
  std::uint64_t advances = 0;  ///< "merged" events inside the run window
  std::vector<downtime_gap> gaps;
  std::vector<syncer_restart> syncer_restarts;
  accounting counts;
  std::uint32_t fragments = 0;
  std::vector<revision_point> revisions;  ///< from "merged", a restored syncer's "start", the first "joined"
  std::vector<fragment_report> per_fragment;
  double staleness_mean = 0, staleness_max = 0;
  std::vector<revision_violation> violations;
  /// Fragment revisions learners adopted with different contents (the CRCs of their updates' payloads): a revision
  /// published twice, differently.
  std::uint64_t revisions_with_two_contents = 0;
  bool standby = false;                  ///< the run had standby syncers (runner "begin")
  std::vector<leadership_epoch> epochs;  ///< in trace order
  std::vector<failover> failovers;       ///< one per syncer fault
  std::uint64_t split_brain = 0;         ///< revisions a replaced leader merged after its successor began
  std::uint64_t epoch_regressions = 0;   ///< adoptions from a replaced leader after its successor was heard
  std::size_t malformed_lines = 0;
  bool ok = true;
  std::vector<std::string> failures, warnings;
};

}  // namespace diloco_chaos
