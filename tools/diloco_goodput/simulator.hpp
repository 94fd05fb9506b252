// A discrete-event model of goodput at the scale of millions of chips: data
// parallel, elastic data parallel and Decoupled DiLoCo under per-chip Poisson
// failures (docs/goodput.md has the model, its parameters and how they were
// calibrated against the figures of the Decoupled DiLoCo paper,
// arXiv:2604.21428). Tool code, not the library.
//
// Per-chip failures with mean time between interruptions Y aggregate to one
// Poisson process per unit (the job, a slice, a learner) of rate chips / Y, so
// a run costs the events it handles, never the chips: the horizon is set in
// expected failures (10^5 by default, whatever N is): about 2·10^5 events, a
// few hundredths of a second per cell (docs/goodput.md, "Cost").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace diloco_goodput {

/// Seconds in a year of 365.25 days: the unit of `chip_mtbi_years`.
inline constexpr double seconds_per_year = 365.25 * 86400.0;

enum class method {
  data_parallel,  ///< one synchronous job on every chip; a failure stops it and rolls it back to its checkpoint
  elastic,        ///< one synchronous job over slices; a failed slice is dropped and taken back once repaired
  decoupled,      ///< M independent learners and a syncer (Decoupled DiLoCo); a failure stops one learner
};

/// "dp", "elastic" or "decoupled", as the command line spells them.
inline const char* method_name(method m) {
  switch (m) {
    case method::data_parallel: return "dp";
    case method::elastic: return "elastic";
    case method::decoupled: return "decoupled";
  }
  return "?";
}

/// The model's free parameters, in seconds unless said otherwise. The
/// defaults are the one calibration used for every cell of the paper's table
/// (docs/goodput.md derives each from the paper's figures). Every time is of
/// wall clock.
struct model_options {
  double chip_mtbi_years = 1.0;  ///< Y: each chip's mean time between interruptions (the paper: 1 year)

  // Data parallel.
  double recovery_s = 72;            ///< R_dp: from a failure until the whole job computes again
  double checkpoint_interval_s = 2;  ///< C: computing time between two checkpoints (0: nothing is ever lost)

  // Elastic data parallel.
  std::uint64_t slice_chips = 1024;  ///< S: chips per slice, the unit that is dropped and taken back
  double downscale_s = 10;           ///< D: everyone paused while the job drops a failed slice
  double upscale_s = 9;              ///< U: everyone paused while the job takes a repaired slice back
  double repair_s = 1800;            ///< T_rep: from a slice's failure until it is back, repaired or replaced

  // Decoupled DiLoCo.
  double restart_s = 23;                ///< R_l: from a failure until the learner computes again
  double contribution_interval_s = 10;  ///< H: a learner's computing time between two contributions, at speed 1
  /// Standard deviation of a learner's speed s around 1 (normal, clamped to
  /// [0.5, 1.5], drawn once per learner): it contributes every H / s.
  double speed_spread = 0;
};

/// One cell: a method at a scale, for a seeded horizon.
struct run_options {
  method kind = method::decoupled;
  std::uint64_t chips = 0;         ///< N
  std::uint32_t learners = 1;      ///< M (decoupled; 1 otherwise)
  std::uint32_t quorum = 1;        ///< K: learners up for the global model to advance (decoupled; 1 otherwise)
  std::uint64_t seed = 1;          ///< seeds std::mt19937_64
  double expected_failures = 1e5;  ///< horizon: the time in which N chips see this many failures on average
  double horizon_days = 0;         ///< horizon in days instead, when > 0
  model_options model;

  /// Largest accepted horizon, in expected failures: bounds every loop.
  static constexpr double max_expected_failures = 1e8;
  /// Largest M (one heap entry each).
  static constexpr std::uint32_t max_learners = 1u << 20;

  /// Failures per second of all N chips: N / Y.
  double failure_rate() const { return double(chips) / (model.chip_mtbi_years * seconds_per_year); }

  /// The simulated time, s.
  double horizon_s() const { return horizon_days > 0 ? horizon_days * 86400.0 : expected_failures / failure_rate(); }

  /// Throws std::invalid_argument naming the first field that makes no sense:
  /// no chips; M or K zero, K > M, M > N or M > 2^20; a time or Y negative,
  /// infinite or NaN (Y, the slice and the horizon must also be positive); a
  /// speed spread outside [0, 0.5]; a horizon that holds more than 10^8
  /// expected failures.
  void check() const {
    auto fail = [](const std::string& why) { throw std::invalid_argument("diloco_goodput::run_options: " + why); };
    auto check_time = [&](double v, const char* name, bool positive) {
      if (!std::isfinite(v) || v < 0 || (positive && v == 0))
        fail(std::string(name) + " must be " + (positive ? "positive" : "non-negative") + " and finite, not " +
             std::to_string(v));
    };
    if (chips == 0) fail("chips must be at least 1");
    if (learners == 0) fail("learners must be at least 1");
    if (learners > max_learners) fail("learners must be at most 2^20, not " + std::to_string(learners));
    if (learners > chips) fail("learners (" + std::to_string(learners) + ") must be at most chips");
    if (quorum == 0) fail("quorum must be at least 1");
    if (quorum > learners)
      fail("quorum (" + std::to_string(quorum) + ") must be at most learners (" + std::to_string(learners) + ")");
    if (kind != method::decoupled && (learners != 1 || quorum != 1))
      fail("learners and quorum are 1 for data parallel and elastic data parallel");
    check_time(model.chip_mtbi_years, "chip_mtbi_years", true);
    check_time(model.recovery_s, "recovery_s", false);
    check_time(model.checkpoint_interval_s, "checkpoint_interval_s", false);
    if (model.slice_chips == 0) fail("slice_chips must be at least 1");
    check_time(model.downscale_s, "downscale_s", false);
    check_time(model.upscale_s, "upscale_s", false);
    check_time(model.repair_s, "repair_s", false);
    check_time(model.restart_s, "restart_s", false);
    check_time(model.contribution_interval_s, "contribution_interval_s", true);
    if (!(model.speed_spread >= 0 && model.speed_spread <= 0.5))
      fail("speed_spread must be in [0, 0.5], not " + std::to_string(model.speed_spread));
    if (horizon_days > 0)
      check_time(horizon_days, "horizon_days", true);
    else
      check_time(expected_failures, "expected_failures", true);
    if (!(failure_rate() * horizon_s() <= max_expected_failures))
      fail("the horizon holds " + std::to_string(failure_rate() * horizon_s()) +
           " expected failures; at most 1e8 are simulated");
  }
};

/// What a cell measured.
struct result {
  double goodput = 0;          ///< chip-seconds spent on work that counted / (N · horizon)
  double goodput_se = 0;       ///< standard error of `goodput`, by batch means over `batches` equal spans of time
  double uptime = 0;           ///< share of the horizon in which the global model could advance
  double simulated_s = 0;      ///< the horizon
  std::uint64_t events = 0;    ///< events the simulator handled (failures, returns, ends of pauses and restarts)
  std::uint64_t failures = 0;  ///< failures that stopped work (a chip failing during a recovery joins that recovery)
  std::uint64_t slices = 0;    ///< elastic: the job's slices (the last one may be smaller); 0 otherwise

  static constexpr std::size_t batches = 32;
};

namespace detail {

/// Work credited over time, kept per batch of the horizon for the standard error.
class ledger {
 public:
  ledger(double horizon_s, double chips) : horizon_(horizon_s), chips_(chips), work_(result::batches, 0.0) {}

  /// `chip_seconds` of work that counted, credited at time `t` (s).
  void credit(double t, double chip_seconds) {
    const double at = std::clamp(t / horizon_ * double(result::batches), 0.0, double(result::batches) - 1.0);
    work_[static_cast<std::size_t>(at)] += chip_seconds;
  }

  /// Adds `seconds` to the time in which the global model could advance.
  void up(double seconds) { up_ += seconds; }

  result finish(std::uint64_t events, std::uint64_t failures) const {
    result r;
    const double per_batch = chips_ * horizon_ / double(result::batches);
    double sum = 0, sum2 = 0;
    for (double w : work_) sum += w / per_batch, sum2 += (w / per_batch) * (w / per_batch);
    const double b = double(result::batches), mean = sum / b;
    r.goodput = mean;
    r.goodput_se = std::sqrt(std::max(0.0, (sum2 / b - mean * mean) * b / (b - 1)) / b);
    r.uptime = up_ / horizon_;
    r.simulated_s = horizon_;
    r.events = events;
    r.failures = failures;
    return r;
  }

 private:
  double horizon_, chips_, up_ = 0;
  std::vector<double> work_;
};

/// Guards every event loop: far more events than the horizon can hold is a
/// bug, not a long run.
inline void count_event(std::uint64_t& events, double expected_failures) {
  if (double(++events) > 16 * expected_failures + 1e6)
    throw std::logic_error("diloco_goodput: event budget exceeded (a bug in the simulator)");
}

/// An exponential time with mean 1 / rate, s.
inline double exponential(std::mt19937_64& rng, double rate) {
  return std::exponential_distribution<double>(rate)(rng);
}

/// Data parallel: the job computes for an exponential time of rate N / Y, a
/// failure loses the work since its last checkpoint (taken every C of
/// computing), then the job recovers for R_dp. Failures during a recovery are
/// replaced within it.
inline result simulate_data_parallel(const run_options& o, std::mt19937_64& rng) {
  const double horizon = o.horizon_s(), rate = o.failure_rate(), chips = double(o.chips);
  const double checkpoint = o.model.checkpoint_interval_s;
  ledger books(horizon, chips);
  std::uint64_t events = 0, failures = 0;
  for (double t = 0; t < horizon;) {
    const double computing = exponential(rng, rate);
    if (t + computing >= horizon) {  // no failure before the end: the work in progress counts
      books.credit(horizon, chips * (horizon - t));
      books.up(horizon - t);
      break;
    }
    count_event(events, rate * horizon);
    ++failures;
    const double lost = checkpoint > 0 ? std::fmod(computing, checkpoint) : 0.0;
    books.credit(t + computing, chips * (computing - lost));
    books.up(computing);
    t += computing + o.model.recovery_s;
    if (t < horizon) count_event(events, rate * horizon);  // the recovery's end
  }
  return books.finish(events, failures);
}

/// Elastic data parallel: ⌈N / S⌉ slices (the last holds N mod S chips when S
/// does not divide N), each failing at rate chips / Y while it is in the job.
/// A failure takes its slice out for T_rep and pauses everyone for D; its
/// return pauses everyone for U. A failure or a return during a pause is
/// handled by that pause. While the job computes, every slice in it counts.
inline result simulate_elastic(const run_options& o, std::mt19937_64& rng) {
  const double horizon = o.horizon_s(), chip_rate = 1.0 / (o.model.chip_mtbi_years * seconds_per_year);
  const std::uint64_t slice = std::min(o.model.slice_chips, o.chips);
  const std::uint64_t full = o.chips / slice, rest = o.chips % slice;
  struct repair {
    double back_at;
    bool short_slice;  ///< the slice of N mod S chips
  };
  ledger books(horizon, double(o.chips));
  std::uint64_t events = 0, failures = 0, up_chips = o.chips;
  std::deque<repair> in_repair;  // in order of return: T_rep is the same for every slice
  bool rest_up = rest > 0, paused = false;
  double t = 0, pause_end = 0;
  constexpr double never = std::numeric_limits<double>::infinity();
  auto draw_failure = [&] { return up_chips > 0 ? t + exponential(rng, double(up_chips) * chip_rate) : never; };
  double next_failure = draw_failure();
  for (;;) {
    const double next_return = in_repair.empty() ? never : in_repair.front().back_at;
    const double next_resume = paused ? pause_end : never;
    const double next = std::min({next_failure, next_return, next_resume, horizon});
    if (!paused && up_chips > 0) {
      books.credit(next, double(up_chips) * (next - t));
      books.up(next - t);
    }
    t = next;
    if (t >= horizon) break;
    count_event(events, o.failure_rate() * horizon);
    if (t == next_resume) {
      paused = false;
    } else if (t == next_return) {
      const bool short_slice = in_repair.front().short_slice;
      in_repair.pop_front();
      up_chips += short_slice ? rest : slice;
      rest_up = rest_up || short_slice;
      if (!paused) paused = true, pause_end = t + o.model.upscale_s;
      next_failure = draw_failure();
    } else {
      ++failures;
      // The failed chip is any chip in the job: in the short slice with probability rest / up_chips.
      const bool short_slice = rest_up && std::uniform_int_distribution<std::uint64_t>(0, up_chips - 1)(rng) < rest;
      rest_up = rest_up && !short_slice;
      up_chips -= short_slice ? rest : slice;
      in_repair.push_back({t + o.model.repair_s, short_slice});
      if (!paused) paused = true, pause_end = t + o.model.downscale_s;
      next_failure = draw_failure();
    }
  }
  result r = books.finish(events, failures);
  r.slices = full + (rest > 0 ? 1 : 0);
  return r;
}

/// Decoupled DiLoCo: M learners of ⌊N / M⌋ or ⌈N / M⌉ chips, learner i failing
/// at rate chips_i / Y while it computes. A learner at speed s contributes
/// every H / s of wall time; a failure loses the time since its last
/// contribution and it restarts for R_l (failures during a restart are
/// replaced within it). The global model advances while at least K learners
/// are up; a contribution sent while fewer are up is not merged and does not
/// count. Learners never wait for each other.
inline result simulate_decoupled(const run_options& o, std::mt19937_64& rng) {
  const double horizon = o.horizon_s(), chip_rate = 1.0 / (o.model.chip_mtbi_years * seconds_per_year);
  const double h = o.model.contribution_interval_s;
  const std::uint32_t m = o.learners, k = o.quorum;
  struct learner {
    double rate;    ///< failures per second
    double period;  ///< wall seconds between two contributions: H / speed
    double chips;
    bool up = true;
    double since = 0;  ///< when it last started computing
  };
  std::vector<learner> learners;
  learners.reserve(m);
  std::normal_distribution<double> speed_of(1.0, o.model.speed_spread);
  for (std::uint32_t i = 0; i < m; ++i) {
    const double chips = double(o.chips / m + (i < o.chips % m ? 1 : 0));
    const double speed = o.model.speed_spread > 0 ? std::clamp(speed_of(rng), 0.5, 1.5) : 1.0;
    learners.push_back({chips * chip_rate, h / speed, chips});
  }
  using event = std::pair<double, std::uint32_t>;  // (time, learner): its failure if up, else its restart's end
  std::priority_queue<event, std::vector<event>, std::greater<>> queue;
  for (std::uint32_t i = 0; i < m; ++i) queue.emplace(exponential(rng, learners[i].rate), i);

  // Spans [begin, end) with fewer than K learners up, kept while a learner's
  // computing span may still overlap them (K > 1 only).
  std::deque<std::pair<double, double>> below_quorum;
  std::size_t prune_at = 1024;
  double below_since = 0;
  std::uint32_t up = m;
  // Contributions of `l` in (l.since, end] that were merged: those sent while K learners were up.
  auto merged = [&](const learner& l, double end) {
    const double sent = std::floor((end - l.since) / l.period);
    if (k == 1 || sent <= 0) return std::max(sent, 0.0);
    double lost = 0;
    auto subtract = [&](double b, double e) {  // contributions j in [1, sent] with b <= since + j·period < e
      const double first = std::max(1.0, std::ceil((b - l.since) / l.period));
      const double last = std::min(sent, std::ceil((e - l.since) / l.period) - 1);
      lost += std::max(0.0, last - first + 1);
    };
    for (const auto& [b, e] : below_quorum)
      if (e > l.since && b <= end) subtract(b, e);
    if (up < k) subtract(below_since, std::numeric_limits<double>::infinity());  // the span open now
    return sent - lost;
  };

  ledger books(horizon, double(o.chips));
  std::uint64_t events = 0, failures = 0;
  double t = 0;
  while (!queue.empty() && queue.top().first < horizon) {
    const auto [at, i] = queue.top();
    queue.pop();
    if (up >= k) books.up(at - t);
    t = at;
    count_event(events, o.failure_rate() * horizon);
    learner& l = learners[i];
    if (l.up) {
      ++failures;
      books.credit(t, merged(l, t) * l.period * l.chips);
      l.up = false;
      if (--up == k - 1) below_since = t;
      queue.emplace(t + o.model.restart_s, i);
    } else {
      l.up = true;
      l.since = t;
      if (++up == k && k > 1) below_quorum.emplace_back(below_since, t);
      queue.emplace(t + exponential(rng, l.rate), i);
    }
    if (below_quorum.size() > prune_at) {  // drop the spans that end before every computing learner began
      double oldest = t;
      for (const learner& x : learners)
        if (x.up) oldest = std::min(oldest, x.since);
      while (!below_quorum.empty() && below_quorum.front().second <= oldest) below_quorum.pop_front();
      prune_at = std::max<std::size_t>(1024, 2 * below_quorum.size());
    }
  }
  if (up >= k) books.up(horizon - t);
  // At the end, the contributions sent count as above, and the work since a
  // learner's last one counts while the quorum holds: nothing has lost it.
  for (const learner& l : learners) {
    if (!l.up) continue;
    const double sent = std::floor((horizon - l.since) / l.period);
    books.credit(horizon, merged(l, horizon) * l.period * l.chips);
    if (up >= k) books.credit(horizon, (horizon - l.since - sent * l.period) * l.chips);
  }
  return books.finish(events, failures);
}

}  // namespace detail

/// Simulates one cell. Throws std::invalid_argument as `run_options::check`
/// does. Deterministic for a seed (with one standard library: the
/// distributions are its own); cost proportional to the failures in the
/// horizon, not to N.
inline result simulate(const run_options& o) {
  o.check();
  std::mt19937_64 rng(o.seed);
  switch (o.kind) {
    case method::data_parallel: return detail::simulate_data_parallel(o, rng);
    case method::elastic: return detail::simulate_elastic(o, rng);
    case method::decoupled: return detail::simulate_decoupled(o, rng);
  }
  throw std::invalid_argument("diloco_goodput: unknown method");
}

}  // namespace diloco_goodput
