// A seeded, reproducible schedule of process faults for a chaos run: when
// each learner is killed or paused and for how long, and when the syncer is
// killed. Times are seconds from the start of the run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <diloco/random.hpp>

namespace diloco_chaos {

enum class fault_kind {
  kill,   ///< SIGKILL, then a restart `recovery_seconds` later
  pause,  ///< SIGSTOP, then SIGCONT `recovery_seconds` later
  cut,    ///< a syncer cut off from the network while it runs, joined again `recovery_seconds` later
};

/// One learner fault: at `at_seconds`, learner `learner` is killed or paused;
/// it is back `recovery_seconds` later.
struct fault {
  double at_seconds = 0;
  std::uint32_t learner = 0;
  fault_kind kind = fault_kind::kill;
  double recovery_seconds = 0;
  bool operator==(const fault&) const = default;
};

/// One syncer fault: at `at_seconds`, killed and restarted
/// `recovery_seconds` later, or paused and resumed then, or cut off from the
/// network and joined again then.
struct syncer_fault {
  double at_seconds = 0;
  double recovery_seconds = 0;
  fault_kind kind = fault_kind::kill;
  bool operator==(const syncer_fault&) const = default;
};

/// How often and how things fail. All times in seconds.
struct schedule_options {
  std::uint32_t learners = 0;
  double duration_seconds = 0;          ///< length of the run
  double mtbf_seconds = 60;             ///< mean up-time of a learner between its faults
  double recovery_seconds = 10;         ///< how long a learner stays down (killed) or paused
  double pause_share = 0.5;             ///< probability that a fault is a pause rather than a kill, in [0, 1]
  double quiet_start_seconds = 5;       ///< no fault starts before this
  double quiet_end_seconds = 5;         ///< every process is back this long before the end
  std::vector<double> syncer_kills_at;  ///< when the syncer is killed, in any order
  /// When the syncer is paused (SIGSTOP, SIGCONT `syncer_recovery_seconds`
  /// later), in any order.
  std::vector<double> syncer_pauses_at;
  /// When the syncer is cut off from the network (and joined again
  /// `syncer_recovery_seconds` later), in any order.
  std::vector<double> syncer_cuts_at;
  /// Learner kills at set times, in any order: when any is given, these are
  /// the learners' faults (each down for `recovery_seconds`), none is drawn.
  std::vector<fault> learner_kills_at;
  double syncer_recovery_seconds = 2;  ///< how long the syncer stays down
  std::uint64_t seed = 1;

  /// Throws `std::invalid_argument` naming the first field that makes no
  /// sense: no learners; a time that is negative, infinite or NaN; a zero
  /// `mtbf_seconds` or `duration_seconds`; `pause_share` outside [0, 1]; quiet
  /// windows longer than the run; more than 10^7 expected faults per learner;
  /// a syncer kill outside the window where faults may start
  /// ([quiet_start, duration − quiet_end − syncer_recovery]) or while the
  /// syncer is still down from the previous one; a learner kill of a learner
  /// beyond `learners`, outside [quiet_start, duration − quiet_end −
  /// recovery], or while that learner is still down from its previous one.
  void check() const {
    auto fail = [](const std::string& why) { throw std::invalid_argument("diloco_chaos::schedule_options: " + why); };
    auto number = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v);
      return std::string(b);
    };
    auto check_time = [&](double v, const char* name, bool positive) {
      if (!std::isfinite(v) || v < 0 || (positive && v == 0))
        fail(std::string(name) + " must be " + (positive ? "positive" : "non-negative") + " and finite, not " +
             number(v));
    };
    if (learners == 0) fail("learners must be at least 1");
    check_time(duration_seconds, "duration_seconds", true);
    check_time(mtbf_seconds, "mtbf_seconds", true);
    check_time(recovery_seconds, "recovery_seconds", false);
    check_time(quiet_start_seconds, "quiet_start_seconds", false);
    check_time(quiet_end_seconds, "quiet_end_seconds", false);
    check_time(syncer_recovery_seconds, "syncer_recovery_seconds", false);
    if (!(pause_share >= 0 && pause_share <= 1)) fail("pause_share must lie in [0, 1], not " + number(pause_share));
    if (quiet_start_seconds + quiet_end_seconds > duration_seconds)
      fail("quiet_start_seconds + quiet_end_seconds exceed duration_seconds");
    if (duration_seconds / (mtbf_seconds + recovery_seconds) > 1e7)
      fail("mtbf_seconds + recovery_seconds is too short for duration_seconds (over 10^7 faults per learner)");
    std::vector<double> kills = syncer_kills_at;
    kills.insert(kills.end(), syncer_pauses_at.begin(), syncer_pauses_at.end());
    kills.insert(kills.end(), syncer_cuts_at.begin(), syncer_cuts_at.end());
    std::sort(kills.begin(), kills.end());
    const double last = duration_seconds - quiet_end_seconds - syncer_recovery_seconds;
    for (std::size_t i = 0; i < kills.size(); ++i) {
      if (!(kills[i] >= quiet_start_seconds && kills[i] <= last))
        fail("syncer fault at " + number(kills[i]) +
             " lies outside [quiet_start_seconds, duration_seconds - "
             "quiet_end_seconds - syncer_recovery_seconds]");
      if (i > 0 && kills[i] < kills[i - 1] + syncer_recovery_seconds)
        fail("syncer fault at " + number(kills[i]) + " falls while the syncer is down from the fault at " +
             number(kills[i - 1]));
    }
    std::vector<fault> planned = learner_kills_at;
    std::sort(planned.begin(), planned.end(), [](const fault& a, const fault& b) {
      return std::tie(a.learner, a.at_seconds) < std::tie(b.learner, b.at_seconds);
    });
    const double last_kill = duration_seconds - quiet_end_seconds - recovery_seconds;
    for (std::size_t i = 0; i < planned.size(); ++i) {
      const fault& k = planned[i];
      const std::string which =
          "learner_kills_at: learner " + std::to_string(k.learner) + " at " + number(k.at_seconds);
      if (k.learner >= learners) fail(which + ": there are only " + std::to_string(learners) + " learners");
      if (!(k.at_seconds >= quiet_start_seconds && k.at_seconds <= last_kill))
        fail(which + " lies outside [quiet_start_seconds, duration_seconds - quiet_end_seconds - recovery_seconds]");
      if (i > 0 && planned[i - 1].learner == k.learner && k.at_seconds < planned[i - 1].at_seconds + recovery_seconds)
        fail(which + " falls while it is down from its kill at " + number(planned[i - 1].at_seconds));
    }
  }
};

/// What happens to whom, and when.
struct schedule {
  std::vector<fault> learner_faults;        ///< by time, then learner
  std::vector<syncer_fault> syncer_faults;  ///< by time
};

/// Draws the schedule. Each learner fails on its own as a renewal process in
/// its up-time: its clock starts at `quiet_start_seconds`, and each time it is
/// up again the time to its next fault is exponential with mean
/// `mtbf_seconds` (inverse CDF, −mtbf·ln(1 − u)); it then stays down for
/// `recovery_seconds`. A fault is a pause with probability `pause_share`, else
/// a kill. Faults start no later than duration − quiet_end − recovery, so every
/// learner is back before the quiet end. Learner i draws from its own SplitMix64
/// stream, seeded with h(h(seed) xor i) (h: one SplitMix64 step), two draws per
/// fault (gap, kind): the same options give the same schedule, and adding
/// learners leaves the others' faults unchanged. Cost: O(faults · log faults).
/// With `learner_kills_at`, the learners' faults are those kills instead.
inline schedule make_schedule(const schedule_options& o) {
  o.check();
  schedule s;
  for (fault k : o.learner_kills_at) {
    k.kind = fault_kind::kill, k.recovery_seconds = o.recovery_seconds;
    s.learner_faults.push_back(k);
  }
  const double last_start = o.duration_seconds - o.quiet_end_seconds - o.recovery_seconds;
  const std::uint64_t base = diloco::splitmix64(o.seed).next();
  for (std::uint32_t learner = 0; learner < o.learners && o.learner_kills_at.empty(); ++learner) {
    diloco::splitmix64 rng(diloco::splitmix64(base ^ learner).next());
    double up_since = o.quiet_start_seconds;
    for (;;) {
      const double gap = -o.mtbf_seconds * std::log1p(-rng.uniform());
      const fault_kind kind = rng.uniform() < o.pause_share ? fault_kind::pause : fault_kind::kill;
      const double at = up_since + gap;
      if (at > last_start) break;
      s.learner_faults.push_back({at, learner, kind, o.recovery_seconds});
      up_since = at + o.recovery_seconds;
    }
  }
  std::sort(s.learner_faults.begin(), s.learner_faults.end(), [](const fault& a, const fault& b) {
    return std::tie(a.at_seconds, a.learner) < std::tie(b.at_seconds, b.learner);
  });
  for (double at : o.syncer_kills_at) s.syncer_faults.push_back({at, o.syncer_recovery_seconds, fault_kind::kill});
  for (double at : o.syncer_pauses_at) s.syncer_faults.push_back({at, o.syncer_recovery_seconds, fault_kind::pause});
  for (double at : o.syncer_cuts_at) s.syncer_faults.push_back({at, o.syncer_recovery_seconds, fault_kind::cut});
  std::sort(s.syncer_faults.begin(), s.syncer_faults.end(),
            [](const syncer_fault& a, const syncer_fault& b) { return a.at_seconds < b.at_seconds; });
  return s;
}

/// How many faults of each kind a schedule holds.
struct schedule_counts {
  std::size_t kills = 0, pauses = 0, syncer_kills = 0, syncer_pauses = 0, syncer_cuts = 0;
};

inline schedule_counts count_faults(const schedule& s) {
  schedule_counts c;
  for (const auto& f : s.learner_faults) ++(f.kind == fault_kind::pause ? c.pauses : c.kills);
  for (const auto& f : s.syncer_faults)
    ++(f.kind == fault_kind::pause ? c.syncer_pauses : f.kind == fault_kind::cut ? c.syncer_cuts : c.syncer_kills);
  return c;
}

inline const char* to_string(fault_kind k) noexcept {
  return k == fault_kind::pause ? "pause" : k == fault_kind::cut ? "cut" : "kill";
}

/// "12.345 s: learner 3 pause for 10.000 s".
inline std::string to_string(const fault& f) {
  char b[96];
  std::snprintf(b, sizeof b, "%.3f s: learner %u %s for %.3f s", f.at_seconds, static_cast<unsigned>(f.learner),
                to_string(f.kind), f.recovery_seconds);
  return b;
}

/// "40.000 s: syncer kill for 2.000 s".
inline std::string to_string(const syncer_fault& f) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f s: syncer %s for %.3f s", f.at_seconds, to_string(f.kind), f.recovery_seconds);
  return b;
}

}  // namespace diloco_chaos
