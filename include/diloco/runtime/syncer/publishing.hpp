// What a merged round becomes: a published revision (its counters, events
// and hooks, and the update sent to the learners), or, when its result may
// not be published, a dropped round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/runtime/syncer/fragments.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/merging.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/outbox.hpp"

namespace diloco::detail {

/// Ends a fragment's round after `round_merger::merge`: counts it in the
/// syncer's `metrics`, calls the syncer's hooks, and sends the learners the
/// fragment through the syncer's `outbox`. Either way the round is empty
/// afterwards.
template <class T>
class round_publisher {
 public:
  /// The arguments are the syncer's and outlive this.
  round_publisher(const syncer_options& options, syncer_metrics& metrics, syncer_log& log, syncer_learners& learners,
                  syncer_outbox<T>& outbox) noexcept
      : options_(options), metrics_(metrics), log_(log), learners_(learners), outbox_(outbox) {}

  /// Fragment p's round `f`, merged at `now` into its new values as
  /// `merged` says, becomes its next revision: counted, reported
  /// (`before_publish`, then `on_update` once the learners have been sent
  /// it), and sent to every live learner (`update_recipients`), each update
  /// answering the learner's latest merged contribution.
  void publish(std::uint32_t p, fragment_state<T>& f, const merged_round& merged, time_point now) {
    ++f.revision;
    ++metrics_.outer_updates;
    metrics_.contributions_merged += f.round.size();
    metrics_.contributions_pending -= f.round.size();
    metrics_.staleness_max = std::max(metrics_.staleness_max, merged.max_staleness);
    for (const auto& c : f.round) {
      metrics_.staleness_sum += f.revision - 1 - c.base_revision;
      metrics_.tokens_merged = detail::saturating_add(metrics_.tokens_merged, c.credited_tokens);
      metrics_.steps_merged = detail::saturating_add(metrics_.steps_merged, c.credited_steps);
      if (auto it = learners_.find(c.learner); it != learners_.end() && it->second.incarnation == c.incarnation)
        it->second.steps_merged = detail::saturating_add(it->second.steps_merged, c.credited_steps);
    }

    if (contributors(f) < learners_.whole_round()) ++metrics_.partial_rounds;
    const auto contributors_merged = static_cast<std::uint32_t>(f.round.size());
    update_event event{p, f.revision, contributors_merged, merged.max_staleness, merged.scale, now, {}};
    event.training_loss = learners_.training_loss();
    if (options_.on_contribution)
      for (const auto& c : f.round)
        event.contributions.push_back({c.learner, c.incarnation, c.sequence, f.revision - 1 - c.base_revision});
    // Keys older than S revisions can never be accepted again: forget them.
    std::erase_if(f.seen,
                  [&](const auto& entry) { return std::get<2>(entry.first) + options_.max_staleness < f.revision; });

    // The merged round leaves the fragment before anything is published: a
    // checkpoint that `before_publish` writes must not keep it as open.
    const std::vector<contribution_entry<T>> round = std::move(f.round);
    f.round.clear();
    f.quorum = false;
    f.deadline.reset();
    if (options_.before_publish) options_.before_publish(event);
    for (const auto& [id, l] : learners_) {
      if (!l.live) continue;
      std::uint64_t answers = 0;
      std::int64_t hold = 0;
      for (const auto& c : round)
        if (c.learner == id && c.sequence > answers) {
          answers = c.sequence;
          hold = (now - c.arrived).count();
        }
      if (answers != 0 || options_.recipients == update_recipients::live_learners)
        outbox_.fragment(id, l, p, f, answers, update_status::merged, hold);
    }
    if (options_.on_update) options_.on_update(event);
  }

  /// Publishes nothing for fragment p: its contributions count as dropped,
  /// their learners a strike each (`strike_for_work`) and the current
  /// fragment as a resync (so that lock-step learners stop waiting), and their idempotency keys
  /// are forgotten (their work was not merged: a new contribution against
  /// the same base is no duplicate).
  void drop(std::uint32_t p, fragment_state<T>& f, drop_reason why, time_point now) {
    ++metrics_.rounds_dropped;
    metrics_.contributions_dropped += f.round.size();
    metrics_.contributions_pending -= f.round.size();
    log_(syncer_log_category::rounds, [&] {
      return "dropped a round of fragment " + std::to_string(p) + " at revision " + std::to_string(f.revision) + " (" +
             std::string(to_string(why)) + ")" + describe_round(f);
    });
    drop_event event{p, f.revision, why, now, {}};
    for (const auto& c : f.round)
      event.contributions.push_back({{c.learner, c.incarnation, c.sequence, f.revision - c.base_revision}, c.norm});
    for (const auto& c : f.round) {
      f.seen.erase({c.learner, c.incarnation, c.base_revision});
      auto& l = learners_.at(c.learner);
      learners_.strike_for_work(c.learner, l, c.steps);
      if (l.live) outbox_.fragment(c.learner, l, p, f, c.sequence, update_status::resync, 0);
    }
    f.round.clear();
    f.quorum = false;
    f.deadline.reset();
    if (options_.on_drop) options_.on_drop(event);
  }

 private:
  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_log& log_;
  syncer_learners& learners_;
  syncer_outbox<T>& outbox_;
};

}  // namespace diloco::detail
