// How the syncer screens what learners send and what it is about to publish,
// so that one faulty or hostile learner cannot poison, freeze or steer the
// global model.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "diloco/detail/bad_option.hpp"

namespace diloco {

/// Settings of the syncer's screening of contributions and of its own output.
///
/// Per contribution, on arrival: the payload must be finite; `tokens ≤ steps ×
/// max_tokens_per_step` and `steps ≤` the learner's local step (carried in the
/// contribution, unless 0) else `bad_counts`.
///
/// Per round, before merging (norm clipping, after Sun et al. 2019, "Can you
/// really backdoor federated learning?", arXiv 1911.07963, with a reference
/// taken from the data instead of a fixed bound): a contribution's **pace**
/// is its L2 norm per `min(steps, H)^(3/4)` — between the `∝ steps` growth of
/// a consistent gradient and the `∝ √steps` of noise, so that a contribution
/// cut short after a few steps by an adoption is not an outlier against full
/// periods (nor they against it). A contribution whose pace exceeds
/// `clip_factor ×` the reference pace is an outlier and is scaled down to the
/// reference pace itself. The reference is taken from the round's paces and
/// the fragment's last `history` published (clipped) ones, **other learners'
/// only** (`clip_reference_for`): no learner moves the bound it is held to.
/// A merge weight beyond `clip_factor ×` the reference weight — the lower
/// median of the round's contributors' and the live learners' expected
/// weights, one per learner, from two learners on (`weight_reference`) — is
/// cut to the reference weight; an absent learner's expected weight is also
/// held to the round's contributors. With fewer than `min_reference` paces
/// there is no pace reference and nothing is clipped. Cutting an outlier to
/// the median rather than to the bound means a learner that overflows pushes
/// like a typical learner, not like `clip_factor` of them; no contribution
/// pushes harder than `clip_factor` × the others' median.
///
/// What counts as work done (end rules, compute efficiency, a learner's say
/// in the training loss) is bounded by the learner's history: at most H
/// steps plus `clip_factor ×` what the other learners' typical step time
/// allows since its previous contribution to the fragment, at `clip_factor
/// ×` their typical tokens per step (`credited_steps`, `credited_tokens`).
///
/// Per outer step (the syncer validates what it produces): the step runs
/// against a copy of the fragment; a result with a NaN or an infinity, or an
/// update `‖Θ' − Θ‖₂ > max_update_ratio · max(‖Θ‖₂, update_floor · √n)`, is
/// not published: the fragment keeps its last good revision, the outer
/// optimizer's state for it is reset (it absorbed the refused step), the
/// round's contributions are counted as dropped and their learners told with
/// a resync. The ratio bound guards the first rounds of a fragment, before
/// there is a clipping reference; honest updates are far below it. The
/// floor guards fragments that start at zero: with 0.01 a toy model (a line
/// fit, AdamW at 0.05, H = 20, Nesterov η = 1, μ = 0.5) moved a zero fragment
/// by 1.35 per element in its first round, above the bound of 1, and a
/// loaded machine's first rounds were dropped; 0.1 leaves a margin of 7.
///
/// Each contribution whose norm is clipped or that is refused for its content
/// (`non_finite`, `bad_counts`, `bad_size`, or part of a dropped round) is a
/// strike against its learner: 2 points, a clean contribution takes 1 off. A
/// weight cut is none, nor is the clip or the dropped round of a
/// contribution of more than H steps: a learner whose sends waited out an
/// outage of the syncer or of its link, or that ran ahead of a syncer short
/// of CPU, honestly carries many periods of work (after a syncer's restart,
/// every learner does); the cut and the clip bound its say to a typical
/// learner's, and a dropped round has none. At 2 × `quarantine_after`
/// points — `quarantine_after` bad contributions in a row, or more than one
/// in three over a longer stretch — the learner is quarantined: everything
/// it sends but a leave is refused as `quarantined` until it joins with a
/// new incarnation.
struct screening_options {
  double clip_factor = 8.0;            ///< c ≥ 1; 0 turns clipping off
  std::uint32_t history = 32;          ///< published norms per fragment kept for the reference
  std::uint32_t min_reference = 3;     ///< values needed before anything is clipped
  std::uint32_t quarantine_after = 3;  ///< bad contributions in a row; 0: never quarantine
  double max_update_ratio = 100.0;     ///< bound on ‖Θ' − Θ‖ relative to the fragment; 0: no bound
  double update_floor = 1e-1;          ///< RMS per element below which ‖Θ‖ counts as this much
  std::uint64_t max_tokens_per_step = std::uint64_t{1} << 24;  ///< largest batch a step may claim

  /// Throws `std::invalid_argument` naming the first bad setting.
  void check() const {
    constexpr std::string_view self = "diloco::screening_options";
    if (!(clip_factor == 0.0 || (clip_factor >= 1.0 && std::isfinite(clip_factor))))
      detail::bad_option(self, "clip_factor", clip_factor, "must be 0 (off) or a finite value >= 1");
    if (min_reference == 0) detail::bad_option(self, "min_reference", min_reference, "must be at least 1");
    if (!(max_update_ratio >= 0.0)) detail::bad_option(self, "max_update_ratio", max_update_ratio, "must be >= 0");
    if (!(update_floor >= 0.0 && std::isfinite(update_floor)))
      detail::bad_option(self, "update_floor", update_floor, "must be finite and >= 0");
    if (max_tokens_per_step == 0)
      detail::bad_option(self, "max_tokens_per_step", max_tokens_per_step, "must be at least 1");
  }
};

/// How the expected weight of absent learners enters the partial-round scale
/// (docs/design.md, "Partial rounds").
///
/// The unit is the **period**: H inner steps at the learners' smoothed step
/// time ξ_step (until a step time is known, one heartbeat timeout), so that
/// the rule reads the same whatever the model's speed. Measured on
/// Fashion-MNIST (docs/design.md): with the learners that finish first fading
/// over 20 periods the slow learner left alone at the end keeps the quality
/// of counting them for ever; over 5 periods it loses about a point.
struct membership_options {
  /// A learner that left or was declared dead keeps counting with a weight
  /// that halves every `absent_half_life` periods; one back in time counts
  /// fully again. Learners that never contributed count for nothing.
  double absent_half_life = 20.0;
  /// A learner gone for `forget_after` half-lives (its weight below
  /// 2^−forget_after) is forgotten: its table place is freed. When the table
  /// is full, the longest-gone learner is forgotten at once to make room.
  double forget_after = 10.0;
  /// A live learner that has not had a contribution accepted for
  /// `silent_after` periods (since it joined, if it never had) counts with a
  /// weight that halves every `silent_half_life` periods from then on; its
  /// next contribution makes it count fully again. Honest learners
  /// contribute every fragment once per period of their own speed; 4 leaves
  /// room for one 4 times slower than the typical step time.
  double silent_after = 4.0;
  double silent_half_life = 2.0;

  void check() const {
    if (!(absent_half_life > 0.0 && absent_half_life <= 1e4))
      detail::bad_option("diloco::membership_options", "absent_half_life", absent_half_life,
                         "must be in (0, 10000] periods");
    if (!(forget_after > 0.0 && forget_after <= 64.0))
      detail::bad_option("diloco::membership_options", "forget_after", forget_after, "must be in (0, 64] half-lives");
    if (!(silent_after >= 0.0 && silent_after <= 1e4))
      detail::bad_option("diloco::membership_options", "silent_after", silent_after, "must be in [0, 10000] periods");
    if (!(silent_half_life > 0.0 && silent_half_life <= 1e4))
      detail::bad_option("diloco::membership_options", "silent_half_life", silent_half_life,
                         "must be in (0, 10000] periods");
  }
};

namespace detail {

/// Whether every value is finite, and Σ x² in double (+inf when it
/// overflows, which only double values beyond 1e154 can make): one pass.
template <class T>
bool finite_squared_norm(std::span<const T> x, double& squared) noexcept {
  double s = 0.0;
  bool finite = true;
  for (const T v : x) {
    finite &= std::isfinite(v);
    s += double(v) * double(v);
  }
  squared = s;
  return finite;
}

/// The lower median of `values` (the ⌈n/2⌉-th smallest); reorders them.
inline double lower_median(std::vector<double>& values) {
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

/// A value and the learner it came from.
struct sourced_value {
  double value;
  std::uint32_t source;
};

/// The last `capacity` values added, with their sources, oldest overwritten
/// first.
class value_ring {
 public:
  explicit value_ring(std::size_t capacity = 0) : capacity_(capacity) { values_.reserve(capacity); }

  void add(double v, std::uint32_t source) {
    if (capacity_ == 0) return;
    if (values_.size() < capacity_) {
      values_.push_back({v, source});
    } else {
      values_[next_] = {v, source};
      next_ = (next_ + 1) % capacity_;
    }
  }
  std::span<const sourced_value> values() const noexcept { return values_; }

 private:
  std::size_t capacity_;
  std::size_t next_ = 0;
  std::vector<sourced_value> values_;
};

/// The lower weighted median of `values` (value, weight ≥ 0): the smallest
/// value at which the weights of the values up to it reach half of the total;
/// with every weight 0, the lower median. Reorders them. Nothing when empty.
inline std::optional<double> weighted_lower_median(std::vector<std::pair<double, double>>& values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  double total = 0.0;
  for (const auto& v : values) total += v.second;
  if (!(total > 0.0)) return values[(values.size() - 1) / 2].first;
  double so_far = 0.0;
  for (const auto& v : values) {
    so_far += v.second;
    if (so_far >= 0.5 * total) return v.first;
  }
  return values.back().first;
}

}  // namespace detail

/// A contribution's pace: the L2 norm of its outer gradient per
/// `min(steps, H)^(3/4)`, what clipping compares. A norm grows with the
/// steps behind it between `steps` (a consistent gradient) and `√steps`
/// (noise); steps beyond H buy nothing.
inline double pace(double norm, std::uint64_t steps, std::uint32_t sync_period) noexcept {
  return norm / std::pow(double(std::min<std::uint64_t>(steps, sync_period)), 0.75);
}

/// A clipping reference: values beyond `outlier` are cut to `reference`.
/// Both infinite when there is no reference (nothing is clipped).
struct clip_rule {
  double reference = std::numeric_limits<double>::infinity();
  double outlier = std::numeric_limits<double>::infinity();
};

/// The clipping rule of `values` under `s`: their lower median as the
/// reference and `clip_factor ×` it as the outlier bound; none with clipping
/// off, fewer than `min_reference` values or a median that is not positive.
/// Reorders `values`.
inline clip_rule clip_reference(std::vector<double>& values, const screening_options& s) {
  if (s.clip_factor == 0.0 || values.size() < s.min_reference) return {};
  const double median = detail::lower_median(values);
  if (!(median > 0.0)) return {};
  return {median, s.clip_factor * median};
}

/// The clipping rule a contribution of learner `self` is judged by, from
/// `history` and `round` (paces, with the learners they came from): each
/// learner's values are reduced to their lower median, so that a learner
/// counts once however often it contributes, and the reference is the upper
/// median of the *other* learners' medians — no learner moves the bound it
/// is held to (one that raised its pace round after round just under the
/// bound would otherwise raise the bound with it), and one peer with small
/// paces among three or more learners does not lower anyone's bound. With
/// fewer than `min_reference` values from other learners (a learner alone in
/// the run), the reference is the lower median of every value, its own
/// included. Beside a single other learner, that learner's median is the
/// reference: with two learners, one of them hostile, nothing tells which
/// one is typical. `values` and `medians` are scratch space.
inline clip_rule clip_reference_for(std::uint32_t self, std::span<const detail::sourced_value> history,
                                    std::span<const detail::sourced_value> round, const screening_options& s,
                                    std::vector<detail::sourced_value>& values, std::vector<double>& medians) {
  values.assign(history.begin(), history.end());
  values.insert(values.end(), round.begin(), round.end());
  const auto own = static_cast<std::size_t>(
      std::count_if(values.begin(), values.end(), [self](const auto& v) { return v.source == self; }));
  medians.clear();
  if (values.size() - own < s.min_reference) {
    for (const auto& v : values) medians.push_back(v.value);
    return clip_reference(medians, s);
  }
  if (s.clip_factor == 0.0) return {};
  // Per other learner: the lower median of its values (sorted by source, then value).
  std::sort(values.begin(), values.end(), [](const auto& x, const auto& y) {
    return x.source != y.source ? x.source < y.source : x.value < y.value;
  });
  for (std::size_t begin = 0; begin < values.size();) {
    std::size_t end = begin;
    while (end < values.size() && values[end].source == values[begin].source) ++end;
    if (values[begin].source != self) medians.push_back(values[begin + (end - begin - 1) / 2].value);
    begin = end;
  }
  std::sort(medians.begin(), medians.end());
  const double reference = medians[medians.size() / 2];  // the upper median
  if (!(reference > 0.0)) return {};
  return {reference, s.clip_factor * reference};
}

/// The reference for merge weights: the lower median of `weights`, one per
/// learner (a contributor's period weight, a live learner's expected
/// weight), and `clip_factor ×` it as the outlier bound — from two learners
/// on, so that even a round of one honest learner and one with forged counts
/// has a reference: the lower of the two. None with clipping off or fewer
/// than two values. Reorders `weights`.
inline clip_rule weight_reference(std::vector<double>& weights, const screening_options& s) {
  screening_options two = s;
  two.min_reference = 2;
  return clip_reference(weights, two);
}

/// The inner steps of a contribution that count as work done (for the end
/// rules and the counters): the `steps` it reports, at most one period H
/// plus what `factor` × the typical speed allows in the time since the
/// learner's previous contribution to that fragment (or since it joined):
/// `H + factor · elapsed / step_ns`. All of them without a bound: no time
/// (`elapsed` unknown, e.g. the learner was restored from a checkpoint), no
/// step time of other learners (`step_ns`), or `factor` 0.
inline std::uint64_t credited_steps(std::uint64_t steps, std::uint32_t sync_period, std::optional<double> elapsed_ns,
                                    std::optional<double> step_ns, double factor) noexcept {
  if (!elapsed_ns || !step_ns || !(*step_ns > 0.0) || !(factor > 0.0)) return steps;
  const double bound = double(sync_period) + std::ceil(factor * std::max(0.0, *elapsed_ns) / *step_ns);
  return bound >= double(steps) ? steps : static_cast<std::uint64_t>(bound);
}

/// The tokens of `steps` credited steps of a contribution that reports
/// `tokens` in `reported_steps` (≥ 1): its tokens per step, at most `factor`
/// × the typical tokens per step of other learners (`typical`, when known
/// and `factor` > 0). Saturates at 2^64 − 1.
inline std::uint64_t credited_tokens(std::uint64_t tokens, std::uint64_t reported_steps, std::uint64_t steps,
                                     std::optional<double> typical, double factor) noexcept {
  const bool capped =
      typical && *typical > 0.0 && factor > 0.0 && double(tokens) > factor * *typical * double(reported_steps);
  if (!capped && steps == reported_steps) return tokens;
  const double per_step = capped ? factor * *typical : double(tokens) / double(reported_steps);
  const double t = per_step * double(steps);
  return t >= 0x1p64 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(t);
}

/// Whether an outer step from `before` to `after` (same size n) moves
/// further than the bound `max_update_ratio · max(‖before‖₂, update_floor ·
/// √n)`; never with the bound off (`max_update_ratio` 0). One pass, in
/// double.
template <class T>
bool update_too_large(std::span<const T> before, std::span<const T> after, const screening_options& s) noexcept {
  const double ratio = s.max_update_ratio;
  if (!(ratio > 0.0)) return false;
  double change = 0.0, size = 0.0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const double d = double(after[i]) - double(before[i]);
    change += d * d;
    size += double(before[i]) * double(before[i]);
  }
  const double floor = s.update_floor * s.update_floor * double(after.size());
  return std::sqrt(change) > ratio * std::sqrt(std::max(size, floor));
}

}  // namespace diloco
