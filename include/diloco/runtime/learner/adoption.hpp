// How a learner takes in the global fragments the syncer sends: which
// arrivals it keeps, when each falls due, and the adoption itself (rebase,
// mix, overwrite, or resume the state a restarted learner loaded).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/memory_space.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/runtime/learner/fragments.hpp"
#include "diloco/runtime/learner/options.hpp"
#include "diloco/runtime/learner/reports.hpp"
#include "diloco/runtime/learner/state.hpp"

namespace diloco::detail {

/// The adoption side of a learner (docs/design.md, "Keeping every step"):
/// keeps each fragment's newest global revision in its inbox and takes it
/// in at a step boundary as the options' `adoption_rule` and the run's
/// schedule say. Holds a loaded state (`learner::load`) until the join
/// completes, so that fragments whose global state has not moved resume it.
template <class T, class Memory>
class learner_adoption {
 public:
  /// `fragments`, `metrics` and `reports` are the learner's and outlive this.
  learner_adoption(learner_fragments<T, Memory>& fragments, learner_metrics& metrics, learner_reports& reports,
                   adoption_rule rule) noexcept
      : fragments_(fragments), metrics_(metrics), reports_(reports), rule_(rule) {}

  /// Whether adoptions keep the learner's work (`keeps_work`).
  bool keeps_work() const noexcept { return detail::keeps_work(fragments_.config(), rule_); }

  /// Keeps loaded state `s` (θ and the inner state already taken) for the join.
  void restore(learner_state<T>&& s) { restored_ = std::move(s); }

  /// Copies a loaded state's schedule and fragments, not used yet, into `s`.
  void save_restored(learner_state<T>& s) const {
    if (!restored_) return;
    s.config = restored_->config;
    s.fragments = restored_->fragments;
  }

  /// An update `m` arrived at `now`: its payload is checked (decoded where θ
  /// lives when adopted) and it waits in its fragment's inbox, replacing an
  /// older one, unless it is malformed, for a fragment the learner does not
  /// have (none before the welcome) or does not speak for, or not newer than
  /// what the fragment has (`updates_ignored`). A resync answering the
  /// learner's latest send of the fragment is the syncer's current state: kept even when older
  /// than the base (a syncer restored from an older checkpoint), once. So
  /// is the state a join asked for in place of an overdue answer, unless it
  /// is the very revision the accepted send in flight was made against, with
  /// a rule that keeps work (`holds_send`): then the learner waits on.
  void receive(message&& m, time_point now) {
    const auto& h = m.header;
    if (!fragments_.owns(h.fragment) || h.element_count != fragments_.plan()[h.fragment].size() ||
        payload::check<T>(h.codec, h.block, m.payload.bytes(), fragments_.plan()[h.fragment].size()) !=
            payload::verdict::ok) {
      ++metrics_.updates_ignored;
      return;
    }
    metrics_.bytes_received += m.payload.size();
    auto& f = fragments_[h.fragment];
    if (holds_send(f, h)) {
      ++metrics_.updates_ignored;
      return;
    }
    const bool answers_latest =
        h.status == update_status::resync &&
        ((h.answers != 0 && h.answers == f.last_sent && h.answers != f.resynced) || f.resync_wanted);
    if (answers_latest) f.resynced = h.answers;
    if (answers_latest && f.resync_wanted) {
      f.resync_wanted = false;
      f.in_flight.reset();  // the answer it waited for is replaced by this state
    }
    if (!answers_latest && ((f.adopted && h.revision <= f.revision) || (f.inbox && h.revision < f.inbox->revision))) {
      ++metrics_.updates_ignored;
      return;
    }
    ++metrics_.updates_received;
    if (f.in_flight && h.answers >= f.in_flight->sequence)
      reports_.round_trip(double((now - f.in_flight->at).count()), double(h.hold_ns));
    const std::uint64_t answers = std::max(h.answers, f.inbox ? f.inbox->answers : 0);
    // A resync (join, refused contribution) must overwrite even if a newer
    // merged revision replaces it before adoption.
    const update_status status = f.inbox && f.inbox->status == update_status::resync ? update_status::resync : h.status;
    f.inbox = received_update{h.revision, answers, status, h.codec, h.block, std::move(m.payload), h.epoch};
  }

  /// Adopts each waiting update unless it answers the latest contribution
  /// in flight and τ steps have not passed since that send (no wait once
  /// `finishing`). With a rule that keeps work, another learner's revision
  /// waits for those τ steps too (the answer, newer, would hold both; a lost
  /// answer delays nothing longer), and with the lazy rule until the
  /// fragment's next send. `step` is the local step (`adopt`).
  void apply_due(std::uint64_t& step, bool finishing, Memory& memory, std::span<T> theta) {
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) {
      auto& f = fragments_[p];
      if (!f.inbox) continue;
      const bool answer = f.inbox_answers();
      const bool held = f.in_flight && !finishing && step < f.in_flight->step + fragments_.config().overlap;
      if (answer && held) continue;
      if (!answer && f.adopted && keeps_work() &&
          (held || (rule_ == adoption_rule::lazy && f.inbox->status == update_status::merged && !finishing)))
        continue;
      adopt(p, answer, step, memory, theta);
    }
  }

  /// A newer leadership (`epoch`) of syncer shard `shard` of `shards` spoke:
  /// the updates of that shard's fragments still waiting, received from a
  /// replaced leader, are dropped unread (the new leader's state replaces
  /// them; docs/protocol.md, "Epochs"). Returns how many.
  std::uint64_t drop_older(std::uint32_t shard, std::uint32_t shards, std::uint64_t epoch) {
    std::uint64_t dropped = 0;
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) {
      auto& f = fragments_[p];
      if ((shards > 1 ? p % shards : 0) != shard || !f.inbox || f.inbox->epoch >= epoch) continue;
      f.inbox.reset();
      ++dropped;
    }
    return dropped;
  }

  /// Takes fragment p's waiting update into θ (in `memory`), `answer`: it
  /// answers the contribution in flight. A rule that keeps work rebases θ_p
  /// onto the new value, counters kept. Otherwise mixing blends a merged
  /// revision into local progress, and a resync after the learner fell
  /// behind overwrites. The first state overwrites; a restarted learner
  /// resuming keeps θ_p, the work done since this very base. Completing the
  /// join of a lock-step run under way moves the local `step` in phase.
  void adopt(std::uint32_t p, bool answer, std::uint64_t& step, Memory& memory, std::span<T> theta) {
    auto& f = fragments_[p];
    const auto& config = fragments_.config();
    const bool rebase = f.adopted && keeps_work();
    const bool mix = config.mixing != 0.0 && f.adopted && f.inbox->status == update_status::merged;
    const bool resume = !f.adopted && resumes(p);
    const adoption how = resume   ? adoption::keep
                         : rebase ? adoption::rebase
                         : mix    ? adoption::mix
                                  : adoption::overwrite;
    // Read before the adoption, for the trace: an update's bytes, whatever adopting does with them.
    const std::uint32_t payload_crc = reports_.wants_events() ? crc32c(f.inbox->payload.bytes()) : 0;
    memory.adopt(f.inbox->codec, f.inbox->block, f.inbox->payload.bytes(), fragments_.plan()[p].slices(), theta, f.base,
                 how, T(config.mixing));
    const bool completes_join = !f.adopted && fragments_.first_adoption();
    std::uint64_t overwritten = 0;
    if (!rebase) {
      if (f.adopted) overwritten = f.steps - f.steps_sent;
      metrics_.steps_overwritten += overwritten;
      f.tokens = resume ? restored_->fragments[p].tokens : 0;
      f.steps = resume ? restored_->fragments[p].steps : 0;
      f.steps_sent = 0;
    }
    f.adopted = true;
    f.revision = f.inbox->revision;
    const std::uint64_t epoch = f.inbox->epoch;
    f.resumed = resume;
    if (resume) ++metrics_.fragments_resumed;
    // What the codec rounded away before the save is sent with the next
    // contribution, as if the learner had not stopped. Only when resuming:
    // once the fragment has moved, a contribution of this learner sent after
    // the save (and lost with it) may have carried it already.
    if (resume && f.residual && restored_->fragments[p].residual.size() == f.residual->size())
      memory.write(std::span<const T>(restored_->fragments[p].residual),
                   std::span<T>(f.residual->data(), f.residual->size()));
    if (completes_join && config.lock_step &&
        (step == 0 || std::any_of(fragments_.begin(), fragments_.end(), [](const auto& t) { return !t.resumed; }))) {
      // Joining a lock-step run that is under way: every round needs every
      // learner, so start in phase with the others. Fragment 0 has completed
      // one round per revision, each H steps long. A loaded learner is in
      // phase already only if no fragment has moved since it saved; else it
      // starts afresh on every fragment.
      step = fragments_[0].revision * config.sync_period;
      for (std::uint32_t q = 0; q < fragments_.size(); ++q) {
        auto& t = fragments_[q];
        if (!t.resumed) continue;
        memory.scatter(fragments_.plan()[q].slices(), t.base, theta);
        t.tokens = t.steps = 0;
        t.resumed = false;
        --metrics_.fragments_resumed;
      }
    }
    if (completes_join) restored_.reset();
    if (answer) {
      f.in_flight.reset();
      f.resync_wanted = false;
    }
    f.inbox.reset();
    ++metrics_.updates_adopted;
    if (reports_.wants_events())
      reports_.emit({.what = learner_event::kind::adopted,
                     .fragment = p,
                     .revision = f.revision,
                     .work = overwritten,
                     .epoch = epoch,
                     .payload_crc = payload_crc});
  }

 private:
  /// Whether `h`, the state a join asked for in place of the overdue answer
  /// to f's send in flight, may still be followed by that answer: the
  /// syncer accepted the send (an ack came; it journals before it acks) and
  /// `h` is the revision the send was made against, so the syncer has not
  /// merged since: one restarted from its journal holds the send in an open
  /// round and answers it when the round closes. Taken as the answer, the
  /// learner would drop the work in flight from θ and send its later work
  /// against the same base, which that syncer refuses as a duplicate. A
  /// send without an ack may never have arrived: its state is taken, as is
  /// any state in lock-step rounds, which need every send. A syncer that
  /// lost an accepted send (no journal) leaves the wait to `answer_timeout`.
  bool holds_send(const fragment_track<T, Memory>& f, const message_header& h) const noexcept {
    return keeps_work() && h.status == update_status::resync && h.answers == 0 && f.resync_wanted && f.adopted &&
           f.in_flight && f.in_flight->acked && h.revision == f.in_flight->base_revision && h.revision == f.revision;
  }

  /// Whether fragment p, adopted for the first time from its inbox, resumes
  /// the loaded state: the same P and H, no contribution of it was in flight
  /// when it was saved (the syncer may still merge that one: its work would
  /// count twice), and the global state is the very base it saved (same
  /// revision, same bits; decoded on the host for the comparison, once per
  /// fragment after a restart).
  bool resumes(std::uint32_t p) const {
    const auto& config = fragments_.config();
    if (!restored_ || !restored_->config || restored_->config->fragments != config.fragments ||
        restored_->config->sync_period != config.sync_period)
      return false;
    const auto& r = restored_->fragments[p];
    const auto& inbox = *fragments_[p].inbox;
    const std::size_t n = fragments_.plan()[p].size();
    if (!r.resumable || r.revision != inbox.revision || r.base.size() != n) return false;
    std::vector<T> global(n);
    double ignored = 0.0;
    return payload::decode<T>(inbox.codec, inbox.block, inbox.payload.bytes(), std::span<T>(global), ignored) ==
               payload::verdict::ok &&
           std::memcmp(r.base.data(), global.data(), global.size() * sizeof(T)) == 0;
  }

  learner_fragments<T, Memory>& fragments_;
  learner_metrics& metrics_;
  learner_reports& reports_;
  adoption_rule rule_;
  std::optional<learner_state<T>> restored_;  ///< loaded, until the join completes
};

}  // namespace diloco::detail
