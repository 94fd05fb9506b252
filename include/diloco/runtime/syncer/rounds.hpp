// The syncer's round decisions as pure functions of what it has measured:
// when a round has its quorum, how long its grace window lasts, and how much
// of a full outer step a partial round takes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace diloco {

/// How a round with only some learners' contributions is sized.
///
/// Letting every partial round take a full outer step loses quality (the
/// number of outer steps per unit of work grows with asynchrony): see
/// docs/design.md, "Partial rounds", for the measurements.
enum class partial_rounds {
  /// Normalize over the contributors only: every round is a full step.
  full_step,
  /// Scale by the contributors' share of the live learners' expected weight.
  live_share,
  /// Scale by the contributors' share of the expected weight of every learner
  /// in the run: absent and finished ones count as a zero outer gradient,
  /// exactly DiLoCo's average. A learner counts fully while it is live; once
  /// it has left or been declared dead its weight decays
  /// (`membership_options`); one that never contributed counts for nothing.
  /// The default.
  all_share,
};

namespace rounds {

/// Distinct learners a round needs before its grace window opens: the quorum
/// K, lowered to the learners that can still contribute (`possible`), so that
/// departures never block a round for ever, and at least 1.
constexpr std::size_t required_contributors(std::uint32_t quorum, std::size_t possible) noexcept {
  return std::max<std::size_t>(1, std::min<std::size_t>(quorum, possible));
}

/// What the grace window is sized from. Times are smoothed measurements in
/// nanoseconds.
struct grace_inputs {
  std::uint32_t overlap = 0;             ///< τ, inner steps between a send and the use of its answer
  double grace_factor = 0.0;             ///< γ in [0, 1)
  std::optional<double> step_ns;         ///< ξ_step, an inner step; unknown until a learner reports one
  double quorum_ns = 0.0;                ///< ξ_quorum, a round's first contribution to its quorum (0 until known)
  double transfer_ns = 0.0;              ///< ξ_sync, a fragment's transfer (0 until known)
  std::chrono::nanoseconds max_grace{};  ///< upper bound of the window
};

/// The grace window a round that reaches its quorum now waits for more
/// learners: `γ·max(τ·ξ_step − ξ_quorum − ξ_sync, ξ_step)`, the share γ of
/// the slack a learner has before it needs the answer, but of at least one
/// inner step, held within [0, max_grace]; none while no step time is
/// known, with τ = 0 or with γ = 0.
///
/// The floor is for links slower than τ steps: the answer is late whatever
/// the syncer does, and without a window learners in phase, whose
/// contributions arrive within a step of each other, were merged one by one,
/// each against a base up to M − 1 revisions old (docs/design.md, "Grace
/// window").
inline std::chrono::nanoseconds grace_window(const grace_inputs& in) noexcept {
  if (!in.step_ns || in.overlap == 0 || in.grace_factor == 0.0) return {};
  const double slack = std::max(in.overlap * *in.step_ns - (in.quorum_ns + in.transfer_ns), *in.step_ns);
  const double g = std::clamp(in.grace_factor * slack, 0.0, double(in.max_grace.count()));
  return std::chrono::nanoseconds(static_cast<std::int64_t>(g));
}

/// How long an absent learner's weight takes to halve: `half_life_periods`
/// periods of H inner steps at ξ_step (`step_ns`), or of one heartbeat
/// timeout while no step time is known. Step times are what learners report,
/// so the period is held within [1 ms, 1 h].
inline std::chrono::duration<double> absent_half_life(std::optional<double> step_ns, std::uint32_t sync_period,
                                                      std::chrono::nanoseconds heartbeat_timeout,
                                                      double half_life_periods) noexcept {
  const double period =
      step_ns ? 1e-9 * *step_ns * sync_period : std::chrono::duration<double>(heartbeat_timeout).count();
  return std::chrono::duration<double>(std::clamp(period, 1e-3, 3600.0) * half_life_periods);
}

/// How much a learner counts at `now`: 1 while it is live or was never
/// gone, else `2^(−time gone / half_life)` (1 for a departure in the future).
template <class Clock, class Duration>
double presence(bool live, std::optional<std::chrono::time_point<Clock, Duration>> gone_since,
                std::chrono::time_point<Clock, Duration> now, std::chrono::duration<double> half_life) noexcept {
  if (live || !gone_since) return 1.0;
  const double gone = std::chrono::duration<double>(now - *gone_since).count();
  return std::exp2(-std::max(0.0, gone) / half_life.count());
}

/// How much a live learner counts at `now`: 1 until `patience` has passed
/// since its latest accepted contribution (or its join), `worked_at`, then
/// halving every `half_life`; 1 when `worked_at` is unknown. A live learner
/// that stopped contributing — stuck, or a peer that contributed once with
/// forged counts and only heartbeats since — then stops holding the scale
/// of the others' rounds down.
template <class Clock, class Duration>
double activity(std::optional<std::chrono::time_point<Clock, Duration>> worked_at,
                std::chrono::time_point<Clock, Duration> now, std::chrono::duration<double> patience,
                std::chrono::duration<double> half_life) noexcept {
  if (!worked_at) return 1.0;
  const double idle = std::chrono::duration<double>(now - *worked_at).count() - patience.count();
  if (idle <= 0.0) return 1.0;
  return std::exp2(-idle / std::max(half_life.count(), 1e-9));
}

/// A learner's expected weight on fragment `p` from its per-fragment
/// expectations (NaN where it has none): the value for `p` if known, else the
/// mean of the known ones, else 0 (it never contributed).
inline double expected_weight(std::span<const double> per_fragment, std::size_t p) noexcept {
  if (!std::isnan(per_fragment[p])) return per_fragment[p];
  double sum = 0.0;
  std::size_t known = 0;
  for (const double w : per_fragment)
    if (!std::isnan(w)) sum += w, ++known;
  return known ? sum / double(known) : 0.0;
}

/// The tokens a full period (H inner steps) would bring at a contribution's
/// tokens per step, held at 2^63 so that any count converts. `steps` ≥ 1.
inline std::uint64_t period_tokens(std::uint64_t tokens, std::uint64_t steps, std::uint32_t sync_period) noexcept {
  const double t = double(tokens) / double(steps) * double(sync_period);
  return static_cast<std::uint64_t>(std::min(t, 0x1p63));
}

/// One learner of the table as the partial-round scale sees it.
struct round_member {
  bool in_round = false;  ///< it contributed to the round
  double weight = 0.0;    ///< in the round: its period weight; absent: its `expected_weight`
  bool live = true;
  bool quarantined = false;
  double presence = 1.0;  ///< absent: how much it still counts (`presence`)
};

/// The share of the expected total weight that a round's contributors bring
/// (docs/design.md, "Partial rounds"), at most 1: the scale the merged outer
/// gradient is multiplied by. Every weight is capped at `cap`. Contributors
/// count with their weight; an absent learner with its weight × presence,
/// except a quarantined one and, under `live_share`, one that is not live.
/// 1 under `full_step` or when nothing is expected. Sums run in `members`
/// order, so that a fixed order gives a reproducible result.
inline double partial_round_scale(partial_rounds rule, std::span<const round_member> members, double cap) noexcept {
  if (rule == partial_rounds::full_step) return 1.0;
  double expected = 0.0, in_round = 0.0;
  for (const auto& m : members) {
    if (m.in_round) {
      in_round += std::min(m.weight, cap);
      expected += std::min(m.weight, cap);
      continue;
    }
    if (m.quarantined || (rule == partial_rounds::live_share && !m.live)) continue;
    expected += std::min(m.weight, cap) * m.presence;
  }
  if (!(expected > 0.0)) return 1.0;
  return std::min(1.0, in_round / expected);
}

}  // namespace rounds
}  // namespace diloco
