// The syncer's state machine apart from its transport, behind `syncer`: it
// drives this folder's parts (learners, rounds, merging, end, recovery, log).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/runtime/syncer/end.hpp"
#include "diloco/runtime/syncer/fragments.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/merging.hpp"
#include "diloco/runtime/syncer/open_rounds.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/outbox.hpp"
#include "diloco/runtime/syncer/publishing.hpp"
#include "diloco/runtime/syncer/replay.hpp"
#include "diloco/runtime/syncer/rounds.hpp"
#include "diloco/runtime/syncer/screening.hpp"
#include "diloco/runtime/syncer/state.hpp"

namespace diloco::detail {

/// The syncer's state machine, whatever transport carries its messages
/// (`syncer` adds the transport and its `run` loop, and says what it does).
/// It sends through a `message_sender`, so its code depends on the policies
/// only, and its entry points are defined after the class, not inline: a
/// program may compile it once for the presets' policies, and an explicit
/// instantiation declaration then keeps it out of every other translation
/// unit (diloco/separate_compilation.hpp).
template <class OuterOptimizer, class MergePolicy>
class syncer_core {
 public:
  using scalar_type = typename OuterOptimizer::scalar_type;
  using T = scalar_type;

  /// Starts from `initial` parameters (flat, in `layout` order) at revision 0.
  /// Throws `std::invalid_argument` for inconsistent settings or initial
  /// parameters that are not all finite.
  syncer_core(const parameter_layout& layout, std::span<const T> initial, message_sender transport,
              syncer_options options = {}, OuterOptimizer outer = OuterOptimizer{}, MergePolicy merge = MergePolicy{});

  ~syncer_core();
  syncer_core(const syncer_core&) = delete;
  syncer_core& operator=(const syncer_core&) = delete;

  /// Validates and applies one message. Never throws for bad input: a refused
  /// message is counted by reason and logged (rate-limited), and changes
  /// nothing else — except that a contribution refused for its content counts
  /// against its learner's quarantine.
  void handle(envelope&& e, time_point now);

  /// Declares silent learners dead, forgets learners gone for longer than
  /// `membership.forget_after`, closes rounds whose grace window ended (or
  /// whose quorum became reachable) and writes the log's summary of held-back
  /// lines. Returns when it next needs a call.
  std::optional<time_point> poll(time_point now);

  /// Merges every open round now, whatever its quorum (at shutdown, so that
  /// no accepted contribution is lost).
  void flush(time_point now);

  /// The global parameters, flat in layout order.
  void copy_parameters(std::span<T> flat) const {
    for (std::uint32_t p = 0; p < rounds_.size(); ++p) plan_.scatter<T>(p, rounds_[p].global, flat);
  }
  std::vector<T> parameters() const {
    std::vector<T> flat(layout_.size());
    copy_parameters(flat);
    return flat;
  }

  std::span<const T> fragment_values(std::uint32_t p) const noexcept { return rounds_[p].global; }
  std::uint64_t revision(std::uint32_t p) const noexcept { return rounds_[p].revision; }
  /// Σ of all fragments' revisions.
  std::uint64_t total_revisions() const noexcept { return metrics_.outer_updates; }

  const fragment_plan& plan() const noexcept { return plan_; }
  const parameter_layout& layout() const noexcept { return layout_; }
  const syncer_options& options() const noexcept { return options_; }
  const syncer_metrics& metrics() const noexcept { return metrics_; }
  OuterOptimizer& outer() noexcept { return outer_; }

  /// Writes everything a restarted syncer needs: the global fragments and
  /// their revisions, the idempotency keys, each learner's incarnation,
  /// expected weights and quarantine, the counters, the open rounds (the
  /// contributions accepted and not merged yet) and the outer optimizer's
  /// state. What it cannot know are contributions accepted after it: a
  /// journal (`before_ack`, `replay`) keeps those. Cost: one pass over the
  /// parameters, the open rounds and the optimizer state.
  void save(std::ostream& out) const;

  /// Restores what `save` wrote, for the same layout and fragment count;
  /// `now` is when the restored open rounds count as opened.
  /// All or nothing: throws `corrupt_state` (naming what is wrong) and
  /// leaves the syncer unchanged on a truncated, corrupt or foreign state, or
  /// one whose parameters are not all finite. Every restored learner starts
  /// as not live: it is welcomed again when it rejoins (learners do so by
  /// themselves when their contributions go unanswered). A state written
  /// before open rounds were kept (version 4 or 3) counts what was pending
  /// in `contributions_lost`.
  void load(std::istream& in, time_point now = clock::now());

  /// Takes back a contribution that a syncer of this run accepted and
  /// acknowledged after its last checkpoint (what `before_ack` journaled),
  /// into its fragment's open round, as if it had just arrived — without
  /// answering anyone and without counting its learner alive. Call it after
  /// `load`, for each journaled message in order. Exactly once: a
  /// contribution the restored state already has (merged, or in an open
  /// round) is recognized by its idempotency key and skipped, as is one that
  /// is malformed, stale or of an incarnation the table has retired. Returns
  /// whether it was taken.
  bool replay(message&& m, time_point now);

  /// Why the run failed, or nothing: the rendezvous timed out, or (with
  /// `lost_learner::fail`) a learner of the world stayed dead. A failed
  /// syncer tells its live learners `end`, answers every later message with
  /// `end`, and `run` returns.
  const std::optional<std::string>& failure() const noexcept { return end_.failure(); }

  /// Why the syncer ended the run (`end_options`), or nothing while it goes
  /// on. An ended syncer has merged every open round and answers every
  /// learner's message with `message_kind::end`.
  const std::optional<std::string>& ended() const noexcept { return end_.ended(); }

  /// Ends the run now (as an end rule would): merges the open rounds, tells
  /// every live learner, and `run` returns. `why` is what `ended()` reads.
  void end_run(std::string why, time_point now);

  /// With a world size: whether all M learners have joined and been welcomed.
  bool started() const noexcept { return end_.started(); }

  /// Learners currently considered alive (joined, not left, heard from recently).
  std::size_t live_learners() const noexcept { return learners_.live(); }

  /// The training loss now: the weighted lower median of the latest loss
  /// each live learner reported in its heartbeats, each weighing the inner
  /// steps of its work merged into the global model (credited, this
  /// incarnation): once a live learner has work merged, reports of learners
  /// without any have no say (none while no learner with work has reported
  /// yet); before, the plain lower median of every report. A
  /// report leaves it when its learner leaves or is declared dead. NaN and
  /// infinite reports are ignored (`losses_ignored`); a finite lie moves the
  /// result only as far as its learner's share of the merged work: it cannot
  /// pass the honest reports while honest learners merged more than half the
  /// work, and a learner that merged nothing has no say beside one that
  /// did. Cost: one pass over the learner table and a sort of the reports.
  std::optional<double> training_loss() const { return learners_.training_loss(); }

  /// Inner steps the learners computed, as they reported them: every
  /// incarnation's last report (heartbeats carry the steps an incarnation
  /// computed, `leave` its total), incarnations that are over included.
  /// Saturates at 2^64 − 1 (a report is the learner's word, and only
  /// measures). Cost: one pass over the learner table.
  std::uint64_t steps_computed() const noexcept { return learners_.steps_computed(); }

  /// Compute efficiency (docs/design.md, "Keeping every step"): the share of
  /// the learners' work that reached the global model, `steps_merged / (P ×
  /// steps_computed())` with P the fragments this syncer owns (each inner
  /// step counts once per fragment). Nothing before any step was reported.
  std::optional<double> compute_efficiency() const noexcept {
    const double computed = double(steps_computed()) * double(owned_fragments());
    if (!(computed > 0)) return std::nullopt;
    return double(metrics_.steps_merged) / computed;
  }

  /// Learners in the table: live, or gone for less than `membership.forget_after`.
  std::size_t known_learners() const noexcept { return learners_.size(); }

  /// Whether learner `id` is quarantined (refused until it rejoins).
  bool quarantined(std::uint32_t id) const noexcept { return learners_.quarantined(id); }

  /// The grace window a round reaching quorum now would get.
  std::chrono::nanoseconds grace() const;

 protected:
  /// Whether the run is over (ended or failed): `syncer::run` returns.
  bool over() const noexcept { return end_.over(); }

 private:
  /// A join: refused for an id outside the world or another model, else
  /// admitted by the learner table and welcomed (with a world, all at once
  /// at the rendezvous).
  void on_join(peer_id from, const message_header& h, time_point now);

  /// The welcome and the global state of every fragment this syncer owns.
  void welcome(std::uint32_t id, const learner_entry& l) {
    outbox_.welcome(l.peer, id, l.incarnation, layout_);
    for (std::uint32_t p = 0; p < rounds_.size(); ++p)
      if (options_.shard.owns(p)) outbox_.fragment(id, l, p, rounds_[p], 0, update_status::resync, 0);
  }

  /// The fragments this syncer merges: all of them, or its shard's.
  std::uint64_t owned_fragments() const noexcept {
    const auto& s = options_.shard;
    return rounds_.size() / s.count + (s.index < rounds_.size() % s.count ? 1 : 0);
  }

  /// Applies `end_options`: ends the run at the first limit reached.
  void check_end(time_point now) {
    if (end_.over()) return;
    if (auto why = end_.limit_reached(now, owned_fragments())) end_run(std::move(*why), now);
  }

  /// Tells every live learner that the run is over.
  void tell_live_learners_end() {
    for (const auto& [id, l] : learners_)
      if (l.live) outbox_.end(l.peer, id, l.incarnation);
  }

  /// Refuses a contribution for its content: counted against the learner.
  void reject_content(reject_reason why, const message_header& h, learner_entry& l) {
    outbox_.reject(why, h, &l);
    learners_.strike(h.learner, l);
  }

  /// Refuses a contribution from a learner out of step with this syncer,
  /// and sends it the current fragment.
  void reject_resync(reject_reason why, std::uint32_t id, const message_header& h, learner_entry& l) {
    outbox_.reject(why, h, &l);
    outbox_.fragment(id, l, h.fragment, rounds_[h.fragment], h.sequence, update_status::resync, 0);
  }

  void on_contribution(std::uint32_t id, message&& m, time_point now);

  /// Closes fragment p's round when it is due (`open_rounds::due`).
  void advance_round(std::uint32_t p, time_point now) {
    if (rounds_.due(p, now)) close_round(p, now);
  }

  /// Merges fragment p's round and publishes the new revision, or drops the
  /// round when its result may not be published.
  void close_round(std::uint32_t p, time_point now);

  /// Calls `on_evaluate` with the global parameters gathered into `flat_`.
  void evaluate(time_point now);

  parameter_layout layout_;
  syncer_options options_;
  OuterOptimizer outer_;
  MergePolicy merge_;
  fragment_plan plan_;
  syncer_metrics metrics_;
  syncer_log log_{options_.log};
  syncer_outbox<T> outbox_;
  syncer_learners learners_{options_, metrics_, log_};
  open_rounds<T, MergePolicy> rounds_{options_, metrics_, log_, learners_, merge_};
  round_merger<T, OuterOptimizer, MergePolicy> merger_{options_, metrics_, log_, learners_, outer_, merge_, plan_};
  round_publisher<T> publisher_{options_, metrics_, log_, learners_, outbox_};
  end_rules end_{options_, metrics_, log_, learners_};
  syncer_recovery<T, OuterOptimizer, MergePolicy> recovery_{layout_, options_, metrics_, learners_,
                                                            rounds_, outer_,   outbox_,  end_};
  std::vector<T> flat_;                   ///< the global parameters for `on_evaluate`
  std::vector<std::uint64_t> revisions_;  ///< each fragment's revision for `on_evaluate`
};

template <class OuterOptimizer, class MergePolicy>
syncer_core<OuterOptimizer, MergePolicy>::syncer_core(const parameter_layout& layout, std::span<const T> initial,
                                                      message_sender transport, syncer_options options,
                                                      OuterOptimizer outer, MergePolicy merge)
    : layout_(layout),
      options_(std::move(options)),
      outer_(std::move(outer)),
      merge_(std::move(merge)),
      outbox_(transport, options_, metrics_, log_) {
  if (initial.size() != layout.size())
    throw std::invalid_argument("diloco::syncer: initial parameters (" + std::to_string(initial.size()) +
                                ") do not match the layout (" + std::to_string(layout.size()) + ")");
  if (const auto bad = std::find_if(initial.begin(), initial.end(), [](T v) { return !std::isfinite(v); });
      bad != initial.end())
    throw std::invalid_argument("diloco::syncer: initial parameter " + std::to_string(bad - initial.begin()) +
                                " is not finite");
  check_syncer_options(options_);
  plan_ = fragment_plan::balanced(layout, options_.training.fragments);  // validates P
  options_.shard.check(options_.training.fragments);
  rounds_.assign(plan_, initial);
  merger_.size_for(plan_);
}

template <class OuterOptimizer, class MergePolicy>
syncer_core<OuterOptimizer, MergePolicy>::~syncer_core() = default;

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::handle(envelope&& e, time_point now) {
  end_.message_at(now);
  if (end_.over()) return outbox_.tell_ended(e);
  if (e.error == wire_error::unauthorized) return outbox_.reject(reject_reason::unauthorized, e.msg.header);
  if (e.error != wire_error::none) return outbox_.reject_undecodable(e.from, e.error);
  auto& h = e.msg.header;
  if (h.kind == message_kind::join) return on_join(e.from, h, now);
  if (h.kind != message_kind::contribution && h.kind != message_kind::heartbeat && h.kind != message_kind::leave)
    return outbox_.reject_sender(reject_reason::unexpected_kind, e.from, h);
  auto it = learners_.find(h.learner);
  // Identity refusals are answered to the sending connection, which need
  // not be the learner's: a reject changes nothing, and tells a learner that
  // was forgotten, moved to a new connection or superseded what to do.
  if (it == learners_.end()) return outbox_.reject_sender(reject_reason::unknown_learner, e.from, h);
  auto& l = it->second;
  // Incarnation first: a late message of a restarted learner comes from its
  // old connection, and "dead incarnation" says more than "wrong peer".
  if (h.incarnation < l.incarnation || (h.incarnation == l.incarnation && l.left))
    return outbox_.reject_sender(reject_reason::dead_incarnation, e.from, h, l.incarnation);
  if (h.incarnation > l.incarnation) return outbox_.reject_sender(reject_reason::unknown_incarnation, e.from, h);
  if (!l.bound) {
    // Restored from a checkpoint: the learner's connection is new.
    l.peer = e.from;
    l.bound = true;
    ++metrics_.reconnects;
  }
  if (e.from != l.peer) return outbox_.reject_sender(reject_reason::wrong_peer, e.from, h);
  // A quarantined learner may still leave, not keep the run waiting for its death.
  if (l.quarantined && h.kind != message_kind::leave) return outbox_.reject(reject_reason::quarantined, h, &l);
  // A contribution counts (liveness, timing) only once accepted; a refusal changes only counters.
  if (h.kind == message_kind::contribution) return on_contribution(h.learner, std::move(e.msg), now);
  learners_.accept_from(h, l, now);
  l.steps_reported = std::max(l.steps_reported, h.steps);
  if (h.kind == message_kind::heartbeat) return learners_.note_loss(h, l);
  learners_.left(l, now);  // a leave
  // Answered, so that the learner closes its connection only once
  // everything it sent before has been read here.
  outbox_.ack(l, h);
  for (std::uint32_t p = 0; p < rounds_.size(); ++p) advance_round(p, now);
}

template <class OuterOptimizer, class MergePolicy>
std::optional<time_point> syncer_core<OuterOptimizer, MergePolicy>::poll(time_point now) {
  learners_.declare_silent(now);
  if (end_.world_failed(now)) {
    // The learners stop too: a failed run is over for them as well.
    tell_live_learners_end();
    end_.log_failure();
  }
  const auto busy = [this](std::uint32_t id) { return rounds_.in_open_round(id) || learners_.in_world(id); };
  const auto forget_after = learners_.forget_after();
  learners_.forget(now, forget_after, busy);
  std::optional<time_point> next;
  auto earliest = [&next](time_point t) {
    if (!next || t < *next) next = t;
  };
  for (std::uint32_t p = 0; p < rounds_.size(); ++p) {
    advance_round(p, now);
    if (rounds_[p].deadline) earliest(*rounds_[p].deadline);
  }
  for (const auto& [id, l] : learners_) {
    if (l.live) earliest(l.last_seen + options_.heartbeat_timeout);
    if (l.gone_since && !busy(id)) earliest(*l.gone_since + forget_after);
    if (learners_.in_world(id) && !l.live && !l.left && l.gone_since)
      earliest(*l.gone_since + options_.world.loss_wait);
  }
  end_.deadlines(earliest);
  check_end(now);
  log_.summary();
  return next;
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::flush(time_point now) {
  for (std::uint32_t p = 0; p < rounds_.size(); ++p)
    if (!rounds_[p].round.empty()) close_round(p, now);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::save(std::ostream& out) const {
  recovery_.save(out);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::load(std::istream& in, time_point now) {
  recovery_.load(in, now);
}

template <class OuterOptimizer, class MergePolicy>
bool syncer_core<OuterOptimizer, MergePolicy>::replay(message&& m, time_point now) {
  return recovery_.replay(std::move(m), now);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::end_run(std::string why, time_point now) {
  if (end_.ended()) return;
  flush(now);
  tell_live_learners_end();
  end_.end(std::move(why));
}

template <class OuterOptimizer, class MergePolicy>
std::chrono::nanoseconds syncer_core<OuterOptimizer, MergePolicy>::grace() const {
  return rounds_.grace();
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::on_join(peer_id from, const message_header& h, time_point now) {
  if (h.learner == syncer_peer) return outbox_.reject(reject_reason::unknown_learner, h);
  if (options_.world.size > 0 && h.learner >= options_.world.size) {
    log_(syncer_log_category::membership, [&] {
      return "learner " + std::to_string(h.learner) + " refused: the world has learners 0.." +
             std::to_string(options_.world.size - 1);
    });
    return outbox_.reject_sender(reject_reason::unknown_learner, from, h);
  }
  if (h.layout != layout_.fingerprint() || h.element_count != layout_.size()) {
    // Answer anyway, so that the learner learns why it cannot take part.
    outbox_.welcome(from, h.learner, h.incarnation, layout_);
    return outbox_.reject(reject_reason::layout_mismatch, h);
  }
  const auto joined = learners_.join(
      from, h, now, [&](peer_id peer) { return outbox_.reachable(peer, h); },
      [this](std::uint32_t id) { return rounds_.in_open_round(id); });
  if (!joined.admitted) return outbox_.reject_sender(joined.refused, from, h, joined.current);
  end_.joined(h.learner);
  if (end_.started()) return welcome(h.learner, *joined.admitted);
  // Welcomed with everyone else at the rendezvous.
  if (end_.rendezvous(now))
    for (const auto& [id, l] : learners_)
      if (l.live) welcome(id, l);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::on_contribution(std::uint32_t id, message&& m, time_point now) {
  const auto& h = m.header;
  auto& l = learners_.at(id);
  // Another shard's fragment is as foreign to this syncer as one past P.
  if (h.fragment >= rounds_.size() || !options_.shard.owns(h.fragment))
    return outbox_.reject(reject_reason::bad_fragment, h, &l);
  auto& f = rounds_[h.fragment];
  if (!payload::readable<T>(h.codec, h.block)) return outbox_.reject(reject_reason::bad_codec, h, &l);
  if (h.element_count != f.global.size() || m.payload.size() != payload::size(h.codec, f.global.size(), h.block))
    return reject_content(reject_reason::bad_size, h, l);
  if (h.steps == 0) return outbox_.reject(reject_reason::no_work, h, &l);
  if (rounds_.impossible_counts(h)) return reject_content(reject_reason::bad_counts, h, l);
  // A NaN or an infinity would poison the global model and every learner
  // that adopts it, for good. (Before the idempotency key is recorded.)
  double squared = 0.0;
  if (!payload_norm<T>(m, squared)) return reject_content(reject_reason::non_finite, h, l);
  // Future, stale and duplicate contributions come from learners out of
  // step with this syncer (behind it, or ahead of a syncer restored from an
  // older checkpoint): the current fragment goes with the refusal.
  if (h.base_revision > f.revision) return reject_resync(reject_reason::future_base, id, h, l);
  if (f.revision - h.base_revision > options_.max_staleness) return reject_resync(reject_reason::stale, id, h, l);
  if (const auto key = f.seen.find({id, h.incarnation, h.base_revision}); key != f.seen.end()) {
    // The very contribution again (a network duplicate or a replay): the
    // original was answered, answering its copy would read as a refusal of
    // the original. Another one against the same base: refused with a
    // resync, since it repeats work the first one carried.
    if (key->second == h.sequence) return outbox_.reject(reject_reason::duplicate, h);
    return reject_resync(reject_reason::duplicate, id, h, l);
  }
  if (options_.before_ack) options_.before_ack(m);  // durable first; may throw, nothing recorded yet
  f.seen.emplace(idempotency_key{id, h.incarnation, h.base_revision}, h.sequence);
  learners_.accept_from(h, l, now);
  ++metrics_.contributions_accepted;
  if (options_.on_contribution)
    options_.on_contribution(
        contribution_event{id, h.incarnation, h.sequence, h.fragment, h.base_revision, true, reject_reason::none});
  outbox_.ack(l, h);
  metrics_.payload_bytes_received += m.payload.size();
  const auto credit = rounds_.credit_of(h, l, now);
  rounds_.add(f, h, std::move(m.payload), squared, now, credit);
  advance_round(h.fragment, now);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::close_round(std::uint32_t p, time_point now) {
  auto& f = rounds_[p];
  const auto merged = merger_.merge(p, f, now);
  if (merged.dropped) return publisher_.drop(p, f, *merged.dropped, now);
  publisher_.publish(p, f, merged, now);
  if (options_.evaluate_every && metrics_.outer_updates % options_.evaluate_every == 0) evaluate(now);
}

template <class OuterOptimizer, class MergePolicy>
void syncer_core<OuterOptimizer, MergePolicy>::evaluate(time_point now) {
  if (!options_.on_evaluate) return;
  flat_.resize(layout_.size());
  copy_parameters(flat_);
  revisions_.clear();
  for (const auto& f : rounds_) revisions_.push_back(f.revision);
  options_.on_evaluate(
      evaluation_context{std::span<const T>(flat_), metrics_.outer_updates, revisions_, training_loss(), now});
}

}  // namespace diloco::detail
