// A syncer's fragments and their open rounds: what an accepted contribution
// brings into its round (merge weights, norm, the work credited to it) and
// when a round is due to close (quorum, adaptive grace window).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/detail/ema.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/runtime/syncer/fragments.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/rounds.hpp"
#include "diloco/runtime/syncer/screening.hpp"

namespace diloco::detail {

/// The P fragments of a syncer, each with its open round. Reads the
/// learner table for who may still contribute and for the typical pace of
/// the work; counts in the syncer's `metrics`.
template <class T, class MergePolicy>
class open_rounds {
 public:
  /// The arguments are the syncer's and outlive this.
  open_rounds(const syncer_options& options, syncer_metrics& metrics, syncer_log& log, const syncer_learners& learners,
              const MergePolicy& merge)
      : options_(options),
        metrics_(metrics),
        log_(log),
        learners_(learners),
        merge_(merge),
        quorum_time_(options.ema_decay) {}

  /// Every fragment at revision 0 with its values from `initial` (flat, in
  /// layout order, split by `plan`) and no round open.
  void assign(const fragment_plan& plan, std::span<const T> initial) {
    fragments_.resize(options_.training.fragments);
    for (std::uint32_t p = 0; p < options_.training.fragments; ++p) {
      fragments_[p].global.resize(plan[p].size());
      plan.gather<T>(p, initial, fragments_[p].global);
      fragments_[p].paces = detail::value_ring(options_.screening.history);
    }
  }

  std::size_t size() const noexcept { return fragments_.size(); }
  fragment_state<T>& operator[](std::size_t p) noexcept { return fragments_[p]; }
  const fragment_state<T>& operator[](std::size_t p) const noexcept { return fragments_[p]; }
  auto begin() noexcept { return fragments_.begin(); }
  auto end() noexcept { return fragments_.end(); }
  auto begin() const noexcept { return fragments_.begin(); }
  auto end() const noexcept { return fragments_.end(); }
  const std::vector<fragment_state<T>>& all() const noexcept { return fragments_; }

  /// Whether learner `id` has a contribution in any open round.
  bool in_open_round(std::uint32_t id) const {
    return std::any_of(fragments_.begin(), fragments_.end(),
                       [&](const fragment_state<T>& f) { return contributed(f, id); });
  }

  /// Counters a learner cannot have (`steps` ≥ 1): more steps than its
  /// local step, carried in `revision` (0: not reported, as by clients of
  /// the protocol before it was), or more tokens than its steps could
  /// process. An overflowing counter would otherwise outweigh every other
  /// learner.
  bool impossible_counts(const message_header& h) const noexcept {
    const auto max_tokens = options_.screening.max_tokens_per_step;
    return (h.revision != 0 && h.steps > h.revision) || h.tokens / h.steps > max_tokens ||
           (h.tokens / h.steps == max_tokens && h.tokens % h.steps != 0);
  }

  /// The tokens and steps of accepted contribution `h` of learner `l` that
  /// count as work done — towards the end rules, the compute efficiency and
  /// the learner's say in the training loss: what it reports, within what
  /// its history allows (`credited_steps`, `credited_tokens`, with the
  /// typical step time and tokens per step of the other learners and
  /// `clip_factor` as the speed-up allowed). Counted (`counts_capped`) when
  /// cut. Records the contribution in the learner's history.
  std::pair<std::uint64_t, std::uint64_t> credit_of(const message_header& h, learner_entry& l, time_point now) {
    const double factor = options_.screening.clip_factor;
    std::optional<double> elapsed;
    if (h.fragment < l.last_work.size() && l.last_work[h.fragment])
      elapsed = double((now - *l.last_work[h.fragment]).count());
    const auto steps = credited_steps(h.steps, options_.training.sync_period, elapsed,
                                      learners_.reported(&learner_entry::step_ns, h.learner), factor);
    const auto tokens = credited_tokens(h.tokens, h.steps, steps,
                                        learners_.reported(&learner_entry::tokens_per_step, h.learner), factor);
    if (steps < h.steps || tokens < h.tokens) {
      ++metrics_.counts_capped;
      log_(syncer_log_category::rounds, [&] {
        return "learner " + std::to_string(h.learner) + " reported " + std::to_string(h.tokens) + " tokens in " +
               std::to_string(h.steps) + " steps to fragment " + std::to_string(h.fragment) + "; credited " +
               std::to_string(tokens) + " in " + std::to_string(steps);
      });
    }
    if (h.fragment < l.last_work.size()) l.last_work[h.fragment] = now;
    l.worked_at = now;
    l.tokens_per_step = double(h.tokens) / double(h.steps);
    return {tokens, steps};
  }

  /// Puts an accepted contribution into fragment f's open round, with its
  /// merge weights and norm (`squared`: ‖payload‖², checked finite).
  /// `credit`: the tokens and steps of it that count as work done (as
  /// reported, unless `credit_of` bounded them).
  void add(fragment_state<T>& f, const message_header& h, byte_buffer&& payload, double squared, time_point now,
           std::pair<std::uint64_t, std::uint64_t> credit = {}) {
    if (credit.second == 0) credit = {h.tokens, h.steps};
    // tokens ≤ steps · 2^64 and steps ≥ 1: both weights are finite in double.
    const double weight = merge_.weight(h.tokens, h.steps);
    const double period_weight = merge_.weight(rounds::period_tokens(h.tokens, h.steps, options_.training.sync_period),
                                               options_.training.sync_period);
    const double norm = std::sqrt(squared);
    ++metrics_.contributions_pending;
    if (f.round.empty()) f.opened = now;
    f.round.push_back(contribution_entry<T>{h.learner, h.incarnation, h.sequence, h.base_revision, weight,
                                            period_weight, norm, pace(norm, h.steps, options_.training.sync_period),
                                            (h.flags & final_contribution) != 0, h.tokens, h.steps, credit.first,
                                            credit.second, now, std::move(payload), h.codec, h.block});
  }

  /// Opens fragment p's grace window once the quorum is in; true when the
  /// round is due to close: the window has passed or no live learner is
  /// missing.
  bool due(std::uint32_t p, time_point now) {
    auto& f = fragments_[p];
    if (f.round.empty()) return false;
    // Learners that can still contribute: not departed, or already in the round.
    // With a world size: its members, where a dead one counts only for
    // `loss_wait` after it was declared dead, and the quorum is all of them.
    const auto& w = options_.world;
    std::size_t possible = 0;
    bool everyone_in = true;
    for (const auto& [id, l] : learners_) {
      const bool in = contributed(f, id);
      const bool may_come = w.size == 0 ? !l.left
                                        : learners_.in_world(id) && !l.left &&
                                              (l.live || !l.gone_since || now - *l.gone_since < w.loss_wait);
      if ((may_come && !l.quarantined) || in) ++possible;
      if (l.live && !l.quarantined && !in) everyone_in = false;
    }
    const std::uint32_t quorum = w.size > 0 ? w.size : options_.quorum;
    if (!f.quorum && contributors(f) >= rounds::required_contributors(quorum, possible)) {
      f.quorum = true;
      quorum_time_.add(double((now - f.opened).count()));
      f.deadline = now + grace();
    }
    return f.quorum && (everyone_in || now >= *f.deadline);
  }

  /// The grace window a round reaching quorum now would get.
  std::chrono::nanoseconds grace() const {
    return rounds::grace_window({.overlap = options_.training.overlap,
                                 .grace_factor = options_.grace_factor,
                                 .step_ns = learners_.step_time(),
                                 .quorum_ns = quorum_time_.value(),
                                 .transfer_ns = learners_.transfer_time(),
                                 .max_grace = options_.max_grace});
  }

 private:
  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_log& log_;
  const syncer_learners& learners_;
  const MergePolicy& merge_;
  std::vector<fragment_state<T>> fragments_;
  detail::ema quorum_time_;
};

}  // namespace diloco::detail
