// How a closing round becomes a fragment's next values: its contributions
// clipped against the typical pace and weight, the partial-round scale, the
// merge, and the outer step, checked before anything is published.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/runtime/syncer/fragments.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/rounds.hpp"
#include "diloco/runtime/syncer/screening.hpp"

namespace diloco::detail {

/// What `round_merger::merge` made of a round.
struct merged_round {
  double scale = 1.0;                  ///< share applied to the merged outer gradient
  std::uint64_t max_staleness = 0;     ///< largest (revision − base revision) merged
  std::optional<drop_reason> dropped;  ///< why nothing may be published; the fragment is unchanged
};

/// Merges closing rounds with the syncer's merge policy and applies its
/// outer optimizer. Updates the learners' expected weights and strikes
/// (`syncer_learners`) and counts clipping in the syncer's `metrics`. Keeps
/// the scratch space of a merge: two fragments' worth of values, plus the
/// decoded contributions of a round with compressed ones.
template <class T, class OuterOptimizer, class MergePolicy>
class round_merger {
 public:
  /// The arguments are the syncer's and outlive this.
  round_merger(const syncer_options& options, syncer_metrics& metrics, syncer_log& log, syncer_learners& learners,
               OuterOptimizer& outer, MergePolicy& merge, const fragment_plan& plan) noexcept
      : options_(options),
        metrics_(metrics),
        log_(log),
        learners_(learners),
        outer_(outer),
        merge_(merge),
        plan_(plan) {}

  /// Sizes the scratch space for the largest fragment of the plan.
  void size_for(const fragment_plan& plan) {
    std::size_t largest = 0;
    for (const auto& f : plan.fragments()) largest = std::max(largest, f.size());
    delta_.resize(largest);
    backup_.resize(largest);
  }

  /// Merges fragment p's round `f` (not empty) at `now` and applies the
  /// outer step to `f.global`, unless the result may not be published.
  /// Sorts the round and clips its contributions in place; on success the
  /// published paces join the fragment's history.
  merged_round merge(std::uint32_t p, fragment_state<T>& f, time_point now) {
    // Merge in a fixed order, not arrival order: floating-point sums depend
    // on order, and a reordering network must not change the result.
    std::sort(f.round.begin(), f.round.end(), [](const contribution_entry<T>& a, const contribution_entry<T>& b) {
      return std::tie(a.learner, a.sequence) < std::tie(b.learner, b.sequence);
    });

    // References for clipping: the lower median of the paces of the round
    // and of the fragment's recent ones — for each contribution, other
    // learners' paces only (`clip_reference_for`) — and of the weights, one
    // per learner: the contributors' and the live learners' expected ones.
    // An outlier (beyond clip_factor × the median) is cut to the median
    // itself, not to the outlier bound: a learner that overflows then weighs
    // like a typical one, and nothing pushes harder than clip_factor × it.
    round_paces_.clear();
    for (const auto& c : f.round) round_paces_.push_back({c.pace, c.learner});
    scratch_.clear();
    for (const auto& [id, l] : learners_) {
      if (contributed(f, id)) continue;
      if (l.live && !std::isnan(l.expected_weight[p])) scratch_.push_back(l.expected_weight[p]);
    }
    for (const auto& c : f.round) scratch_.push_back(c.period_weight);
    const clip_rule weights = weight_reference(scratch_, options_.screening);

    // The contributors' (capped) period weights; a regular (not final)
    // contribution also updates the learner's expected weight.
    std::map<std::uint32_t, double> present;
    bool any_clipped = false;
    clipped_paces_.clear();
    clip_factors_.assign(f.round.size(), T(1));
    for (std::size_t k = 0; k < f.round.size(); ++k) {
      auto& c = f.round[k];
      auto& l = learners_.at(c.learner);
      bool clipped = false;
      double pace = c.pace;
      const clip_rule paces =
          clip_reference_for(c.learner, f.paces.values(), round_paces_, options_.screening, pace_scratch_, scratch_);
      if (c.pace > paces.outlier) {
        const T factor = T(paces.reference / c.pace);
        if (c.compressed())
          clip_factors_[k] = factor;  // applied as it is decoded
        else
          for (T& v : c.payload.template as<T>()) v *= factor;
        pace = paces.reference;
        ++metrics_.contributions_clipped;
        clipped = true;
      }
      // A weight cut is no strike: a learner whose sends waited out an
      // outage honestly carries many periods of work, and the cut already
      // bounds its say to a typical learner's.
      if (c.weight > weights.outlier || c.period_weight > weights.outlier) {
        c.weight = std::min(c.weight, weights.reference);
        c.period_weight = std::min(c.period_weight, weights.reference);
        ++metrics_.weights_clipped;
        any_clipped = true;
      }
      clipped_paces_.push_back({pace, c.learner});
      present[c.learner] = c.period_weight;
      if (!c.final) l.expected_weight[p] = c.period_weight;
      if (clipped) {
        any_clipped = true;
        learners_.strike_for_work(c.learner, l, c.steps);
      } else {
        l.strikes -= std::min<std::uint32_t>(l.strikes, 1);
      }
    }
    if (any_clipped)
      log_(syncer_log_category::rounds,
           [&] { return "clipped contributions to fragment " + std::to_string(p) + describe_round(f); });
    merged_round result;
    result.scale = round_scale(p, present, weights, now);

    for (const auto& c : f.round) result.max_staleness = std::max(result.max_staleness, f.revision - c.base_revision);
    const std::span<T> delta(delta_.data(), f.global.size());
    merge_round(p, f, result.scale, delta);
    result.dropped = apply_outer_step(p, f, delta);
    if (!result.dropped)
      for (const auto& pace : clipped_paces_) f.paces.add(pace.value, pace.source);  // only what was published
    return result;
  }

 private:
  /// The scale of fragment p's closing round, whose contributors brought
  /// the (capped) period weights `present`. An absent learner counts with its
  /// expected weight — cut to the reference when beyond the outlier bound of
  /// `weights` or of the contributors' own weights, as a contribution's
  /// would be (`weights_clipped`) — times
  /// its presence: a departed one fades (`membership.absent_half_life`), and
  /// so does a live one that stopped contributing (`membership.silent_after`).
  double round_scale(std::uint32_t p, const std::map<std::uint32_t, double>& present, const clip_rule& weights,
                     time_point now) {
    if (options_.scaling == partial_rounds::full_step) return 1.0;
    const auto half = learners_.half_life();
    const auto period =
        rounds::absent_half_life(learners_.step_time(), options_.training.sync_period, options_.heartbeat_timeout, 1.0);
    const auto patience = period * options_.membership.silent_after;
    const auto silent_half = period * options_.membership.silent_half_life;
    // Absent learners are held to the learners doing the work now: one that
    // claimed a large weight once and fell silent cannot outweigh them, even
    // when several such ids outnumber the contributors.
    scratch_.clear();
    for (const auto& [id, w] : present) scratch_.push_back(w);
    clip_rule working = scratch_.empty() ? clip_rule{} : [&] {
      const double median = detail::lower_median(scratch_);
      return median > 0.0 && options_.screening.clip_factor > 0.0
                 ? clip_rule{median, options_.screening.clip_factor * median}
                 : clip_rule{};
    }();
    if (weights.outlier < working.outlier) working = weights;
    members_.clear();
    for (const auto& [id, l] : learners_) {
      const auto here = present.find(id);
      if (here != present.end()) {
        members_.push_back({.in_round = true, .weight = here->second, .live = l.live, .quarantined = l.quarantined});
        continue;
      }
      double weight = rounds::expected_weight(l.expected_weight, p);
      if (weight > working.outlier) {
        weight = working.reference;
        ++metrics_.weights_clipped;
      }
      const double presence = l.live ? rounds::activity(l.worked_at, now, patience, silent_half)
                                     : rounds::presence(l.live, l.gone_since, now, half);
      members_.push_back(
          {.in_round = false, .weight = weight, .live = l.live, .quarantined = l.quarantined, .presence = presence});
    }
    const double cap = std::isfinite(weights.outlier) ? weights.outlier : weights.reference;
    return rounds::partial_round_scale(options_.scaling, members_, cap);
  }

  /// The threads the merge policy merges on (its `threads`, if it has one).
  unsigned merge_threads() const noexcept {
    if constexpr (requires { unsigned(merge_.threads); })
      return unsigned(merge_.threads);
    else
      return 1;
  }

  /// Merges fragment p's round `f` into `delta`. A linear merge (a weighted
  /// mean) of compressed contributions decodes each one straight into the
  /// weighted sum, one pass over its bytes; any other merge gets every
  /// contribution decoded. Both give the bits a merge of the decoded values
  /// gives: the same products summed in the same order.
  void merge_round(std::uint32_t p, const fragment_state<T>& f, double scale, std::span<T> delta) {
    const auto& round = f.round;
    const bool any_compressed = std::any_of(round.begin(), round.end(), [](const auto& c) { return c.compressed(); });
    if constexpr (merge::linear<MergePolicy>) {
      if (any_compressed) {
        double total = 0.0;
        for (const auto& c : round) total += c.weight;
        std::fill(delta.begin(), delta.end(), T(0));
        if (!(total > 0)) return;  // all-zero weights merge to 0, as `weighted_mean` does
        for (std::size_t k = 0; k < round.size(); ++k) {
          const T c = T(scale * round[k].weight / total);
          if (clip_factors_[k] == T(1)) {
            accumulate(round[k], c, delta, merge_threads());
          } else {  // clipped: the weighted mean of the clipped values, as `merge` would compute it
            const auto values = values_of(round[k], decoded_.emplace_back(), delta.size());
            for (std::size_t i = 0; i < delta.size(); ++i) delta[i] += c * (values[i] * clip_factors_[k]);
            decoded_.clear();
          }
        }
        return;
      }
    }
    std::vector<weighted_delta<T>> in;
    in.reserve(round.size());
    decoded_.clear();
    for (std::size_t k = 0; k < round.size(); ++k) {
      const auto& c = round[k];
      if (!c.compressed()) {
        in.push_back({c.payload.template as<const T>(), c.weight});
        continue;
      }
      auto& values = decoded_.emplace_back();
      values_of(c, values, delta.size());
      if (clip_factors_[k] != T(1))
        for (T& v : values) v *= clip_factors_[k];
      in.push_back({std::span<const T>(values), c.weight});
    }
    merge_.merge(std::span<const weighted_delta<T>>(in), plan_[p].slices(), delta, scale);
    decoded_.clear();
  }

  /// Applies the outer step to fragment p if its result is publishable: the
  /// merged gradient and the new values finite, and the update within
  /// `max_update_ratio`. Otherwise the fragment keeps its values, the
  /// optimizer forgets its state for p (it absorbed the step), and the reason
  /// is returned. Cost beyond the step: a copy of the fragment and one pass
  /// over the result (two with `max_update_ratio`).
  std::optional<drop_reason> apply_outer_step(std::uint32_t p, fragment_state<T>& f, std::span<const T> delta) {
    auto& global = f.global;
    double ignored = 0.0;
    if (!detail::finite_squared_norm(delta, ignored)) return drop_reason::non_finite_merge;
    const std::span<T> before(backup_.data(), global.size());
    std::copy(global.begin(), global.end(), before.begin());
    outer_.step(p, global, delta);
    std::optional<drop_reason> why;
    double squared = 0.0;
    if (!detail::finite_squared_norm(std::span<const T>(global), squared))
      why = drop_reason::non_finite_result;
    else if (update_too_large(std::span<const T>(before), std::span<const T>(global), options_.screening))
      why = drop_reason::update_too_large;
    if (why) {
      std::copy(before.begin(), before.end(), global.begin());
      outer_.reset(p);
    }
    return why;
  }

  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_log& log_;
  syncer_learners& learners_;
  OuterOptimizer& outer_;
  MergePolicy& merge_;
  const fragment_plan& plan_;
  std::vector<T> delta_;                              ///< a round's merged outer gradient
  std::vector<T> backup_;                             ///< a fragment's values before its outer step
  std::vector<double> scratch_;                       ///< medians
  std::vector<detail::sourced_value> round_paces_;    ///< a closing round's paces as they arrived
  std::vector<detail::sourced_value> pace_scratch_;   ///< medians of paces per learner
  std::vector<detail::sourced_value> clipped_paces_;  ///< a closing round's paces after clipping
  std::vector<T> clip_factors_;         ///< a closing round's clipping factors of compressed contributions (1: none)
  std::deque<std::vector<T>> decoded_;  ///< a closing round's compressed contributions, decoded for a non-linear merge
  std::vector<rounds::round_member> members_;  ///< the learner table as a closing round's scale sees it
};

}  // namespace diloco::detail
