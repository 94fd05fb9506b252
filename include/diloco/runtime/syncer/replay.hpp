// A syncer's recovery from a crash: its state saved and restored, open
// rounds included, and the journaled contributions accepted after that
// state taken back exactly once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <istream>
#include <ostream>
#include <span>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/runtime/syncer/end.hpp"
#include "diloco/runtime/syncer/fragments.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/open_rounds.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/outbox.hpp"
#include "diloco/runtime/syncer/screening.hpp"
#include "diloco/runtime/syncer/state.hpp"

namespace diloco::detail {

/// `syncer::save`, `syncer::load` and `syncer::replay` over the syncer's
/// parts: its fragments and open rounds, learner table, counters, outer
/// optimizer and where the run stands.
template <class T, class OuterOptimizer, class MergePolicy>
class syncer_recovery {
 public:
  /// The arguments are the syncer's and outlive this.
  syncer_recovery(const parameter_layout& layout, const syncer_options& options, syncer_metrics& metrics,
                  syncer_learners& learners, open_rounds<T, MergePolicy>& rounds, OuterOptimizer& outer,
                  syncer_outbox<T>& outbox, end_rules& end) noexcept
      : layout_(layout),
        options_(options),
        metrics_(metrics),
        learners_(learners),
        rounds_(rounds),
        outer_(outer),
        outbox_(outbox),
        end_(end) {}

  /// `syncer::save`: the state (`write_syncer_state`), then the outer optimizer's.
  void save(std::ostream& out) const {
    std::vector<std::vector<saved_contribution<std::span<const T>>>> rounds(rounds_.size());
    std::deque<std::vector<T>> decoded;  // compressed contributions are saved decoded
    for (std::size_t p = 0; p < rounds_.size(); ++p)
      for (const auto& c : rounds_[p].round)
        rounds[p].push_back({c.learner, c.incarnation, c.sequence, c.base_revision, c.tokens, c.steps, c.final,
                             values_of(c, decoded.emplace_back(), rounds_[p].global.size())});
    write_syncer_state<T>(out, layout_.fingerprint(), layout_.size(), rounds_.all(), learners_.entries(), metrics_,
                          rounds);
    outer_.save(out);
  }

  /// `syncer::load`: all or nothing; the restored open rounds count as opened at `now`.
  void load(std::istream& in, time_point now) {
    syncer_state_shape shape{layout_.fingerprint(), layout_.size(), {}, options_.max_learners};
    for (const auto& f : rounds_) shape.fragment_sizes.push_back(f.global.size());
    auto state = read_syncer_state<T>(in, shape);
    // Last, because it is all or nothing by itself (the OuterOptimizer
    // contract): once it succeeds nothing below can fail.
    outer_.load(in);
    std::size_t restored = 0;
    for (std::size_t p = 0; p < rounds_.size(); ++p) {
      auto& f = rounds_[p];
      static_cast<fragment_record<T>&>(f) = std::move(state.fragments[p]);
      f.round.clear();
      f.quorum = false;
      f.deadline.reset();
      f.opened = now;
      for (auto& c : state.rounds[p]) {
        message_header h;
        h.learner = c.learner;
        h.incarnation = c.incarnation;
        h.sequence = c.sequence;
        h.base_revision = c.base_revision;
        h.tokens = c.tokens;
        h.steps = c.steps;
        h.flags = c.final ? final_contribution : 0;
        h.codec = codec_of<T>;  // kept decoded
        byte_buffer payload = outbox_.acquire(c.values.size() * sizeof(T));
        std::copy(c.values.begin(), c.values.end(), payload.template as<T>().begin());
        double squared = 0.0;
        detail::finite_squared_norm(payload.template as<const T>(), squared);
        rounds_.add(f, h, std::move(payload), squared, now);
        ++restored;
      }
    }
    learners_.restore(std::move(state.learners));
    metrics_ = state.metrics;
    end_.restored();
    if (restored != metrics_.contributions_pending) {
      // Only a state without open rounds (before version 5) gets here.
      metrics_.contributions_lost +=
          metrics_.contributions_pending - std::min<std::uint64_t>(restored, metrics_.contributions_pending);
      metrics_.contributions_pending = restored;
    }
  }

  /// `syncer::replay`: whether journaled contribution `m` was taken into its round.
  bool replay(message&& m, time_point now) {
    const auto& h = m.header;
    if (h.kind != message_kind::contribution || h.learner == syncer_peer || h.fragment >= rounds_.size() ||
        !payload::readable<T>(h.codec, h.block))
      return false;
    if (options_.world.size > 0 && !learners_.in_world(h.learner)) return false;
    auto& f = rounds_[h.fragment];
    double squared = 0.0;
    if (h.element_count != f.global.size() || m.payload.size() != payload::size(h.codec, f.global.size(), h.block) ||
        h.steps == 0 || rounds_.impossible_counts(h) || h.base_revision > f.revision ||
        f.revision - h.base_revision > options_.max_staleness ||
        f.seen.contains({h.learner, h.incarnation, h.base_revision}) || !payload_norm<T>(m, squared))
      return false;
    auto it = learners_.find(h.learner);
    if (it != learners_.end() && (h.incarnation < it->second.incarnation || it->second.quarantined)) return false;
    learner_entry* entry = it != learners_.end() ? &it->second : nullptr;
    if (!entry) {
      const auto busy = [this](std::uint32_t id) { return rounds_.in_open_round(id); };
      if (learners_.size() >= options_.max_learners && !learners_.make_room(now, busy)) return false;
      entry = &learners_.add(h.learner);
      entry->gone_since = now;
    }
    auto& l = *entry;
    if (h.incarnation > l.incarnation) {  // it restarted after the checkpoint: it rejoins as that incarnation
      l.incarnation = h.incarnation;
      l.left = false;
    }
    l.live = false;
    l.bound = false;
    f.seen.emplace(idempotency_key{h.learner, h.incarnation, h.base_revision}, h.sequence);
    ++metrics_.contributions_accepted;
    ++metrics_.contributions_replayed;
    rounds_.add(f, h, std::move(m.payload), squared, now);
    return true;
  }

 private:
  const parameter_layout& layout_;
  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_learners& learners_;
  open_rounds<T, MergePolicy>& rounds_;
  OuterOptimizer& outer_;
  syncer_outbox<T>& outbox_;
  end_rules& end_;
};

}  // namespace diloco::detail
