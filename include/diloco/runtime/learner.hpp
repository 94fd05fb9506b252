// A learner unit: trains its own replica and exchanges fragments with the syncer
// without ever waiting for other learners. The public entry header of the
// learner: the class drives the components in runtime/learner/ (membership,
// fragments, adoption, contributions, outbox, reports).
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/concepts/check.hpp"
#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/inner_step.hpp"
#include "diloco/concepts/model.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/host_memory.hpp"
#include "diloco/runtime/learner/adoption.hpp"
#include "diloco/runtime/learner/contributions.hpp"
#include "diloco/runtime/learner/epochs.hpp"
#include "diloco/runtime/learner/fragments.hpp"
#include "diloco/runtime/learner/membership.hpp"
#include "diloco/runtime/learner/options.hpp"
#include "diloco/runtime/learner/outbox.hpp"
#include "diloco/runtime/learner/reports.hpp"
#include "diloco/runtime/learner/state.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// A learner unit (docs/design.md, "Learner"). Per inner step it computes gradients, applies
/// the inner optimizer and counts tokens and steps per fragment; when fragment
/// p falls due it sends `Δ_p = base_p − θ_p` to the syncer and keeps
/// training. A global fragment that arrives is taken in at a step boundary,
/// no earlier than τ steps after the send it answers, as the options'
/// `adoption_rule` says: by default every step's work is kept (the send
/// moves the base to θ_p, the adoption rebases θ_p onto the new global
/// value); lock-step runs mix, `θ_p ← α·θ_p + (1−α)·Θ_p`, the base becomes
/// Θ_p and the counters restart. The first state overwrites.
/// Inner-optimizer state is kept. With a checkpointable inner step, `save`
/// and `load` let a restarted learner resume (docs/design.md, "Learner
/// checkpoints").
///
/// The model's parameters may live outside host memory (a GPU): the model
/// then names its memory space (requirement 7 of `model`), and the learner
/// keeps each fragment's base and residual there and does every pass over
/// θ through it (`memory_space`); only the bytes of the wire, and of
/// checkpoints, cross to the host.
///
/// Two ways to drive it:
/// - `step(batch)` (blocking transports): one call per inner step; joins,
///   waits where the configuration says so (lock-step modes only), trains.
/// - `poll(now)` then, if it returned true, `train_step(batch, now)`: never
///   blocks, for event loops and the simulator.
///
/// Not thread-safe: one thread drives a learner.
///
/// Constrained by the concepts; each is preceded by its check, so that a type
/// that misses a requirement gets an error naming the missing member rather
/// than an unsatisfied constraint.
template <class Model, class InnerStep, class Transport>
requires(check_model<Model>() && model<Model> && check_inner_step<InnerStep>() && inner_step<InnerStep> &&
         check_transport<Transport>() && transport<Transport>) class learner {
 public:
  using scalar_type = typename Model::scalar_type;
  using batch_type = typename Model::batch_type;
  using T = scalar_type;
  /// Where the model's parameters live: `host_memory` unless the model says otherwise.
  using memory_type = memory_space_of<Model>;
  static_assert(same_scalar_type<Model, InnerStep>,
                "diloco::learner: the model and the inner step must use the same scalar_type");

  learner(Model& model, Transport& transport, learner_options options = {}, InnerStep inner = InnerStep{})
      : model_(model), transport_(transport), options_(options), inner_(std::move(inner)) {
    if (options_.id == syncer_peer) throw std::invalid_argument("diloco::learner: id is reserved for the syncer");
    if (model_.parameters().size() != model_.layout().size())
      throw std::invalid_argument("diloco::learner: model parameters do not match its layout");
    if (options_.share.count == 0 || options_.share.index >= options_.share.count)
      throw std::invalid_argument("diloco::learner: share.index must be below share.count (at least 1)");
    // The learner's own timeouts in a consistent order (dead_after is the syncer's).
    timeouts{options_.heartbeat_interval, options_.join_retry, 3 * options_.heartbeat_interval, options_.rejoin_after,
             options_.answer_timeout}
        .check();
  }

  learner(const learner&) = delete;
  learner& operator=(const learner&) = delete;

  /// Handles what has arrived, adopts updates that are due, sends heartbeats
  /// and (until welcomed) joins. Returns true when the next inner step may run:
  /// the learner has the global state and, in lock-step mode, no answer is
  /// overdue. Never blocks.
  bool poll(time_point now) {
    if (error_) return false;
    reports_.wait_from(now);  // until `poll` says go, the learner waits
    outbox_.flush();
    while (auto e = transport_.try_receive()) receive(std::move(*e), now);
    if (error_) return false;  // what just arrived may have stopped it (superseded, quarantined)
    adoption_.apply_due(step_, finishing_, memory(), model_.parameters());
    if (!joined()) {
      if (members_.join_due(now)) send_join(now);
      return false;
    }
    if (members_.announce()) {
      reports_.end_wait(now);
      if (reports_.wants_events())
        reports_.emit({.what = learner_event::kind::joined, .revisions = fragments_.revisions()});
    }
    if (reports_.heartbeat_due(now)) send_heartbeat(now);
    bool rejoin = contributions_.verdict_overdue(now);
    if constexpr (requirements::transport::reconnections<Transport>) {
      // Moved to another syncer (a new leader): it learns of this learner's
      // connection and sends the current state at once.
      if (const std::uint64_t n = transport_.reconnections(); n != reconnections_) {
        reconnections_ = n;
        contributions_.chase_all();
        rejoin = true;
      }
    }
    if (adoption_.keeps_work() && contributions_.chase_answers(now, finishing_)) rejoin = true;
    if (rejoin) join_again(now);
    const auto wait = contributions_.lock_step_wait(now, step_);
    if (wait.rejoin) join_again(now);
    if (wait.waiting)
      reports_.waited();
    else
      reports_.end_wait(now);
    return !wait.waiting;
  }

  /// One inner step on `batch`, then sends the fragments that fall due.
  /// Precondition: the last `poll` returned true.
  step_stats train_step(const batch_type& batch, time_point now) {
    assert(joined() && !error_);
    reports_.step_began(now);
    const step_stats stats = model_.compute_gradients(batch);
    inner_.step(model_.parameters(), model_.gradients());
    ++step_;
    ++metrics_.steps;
    ++metrics_.steps_computed;
    metrics_.tokens += stats.tokens;
    reports_.add_loss(stats.loss);
    for (auto& f : fragments_) {
      f.tokens += stats.tokens;
      ++f.steps;
    }
    for (std::uint32_t p = 0; p < fragments_.size(); ++p)
      if (fragments_.owns(p) && (fragments_.schedule().due(p, step_) || fragments_[p].send_owed))
        send_contribution(p, now, 0);
    return stats;
  }

  /// `poll` and `train_step` for blocking transports: waits (sleeping on the
  /// transport, heartbeating) until the learner may step, then steps. Fails
  /// with `errc::timed_out` if not welcomed within `join_timeout`, with
  /// `errc::cancelled` within 100 ms of a stop requested on `stop` (the wait
  /// is then abandoned and nothing trained; the learner stays usable), or
  /// with the error that stopped the learner (e.g. `errc::layout_mismatch`,
  /// `errc::ended`). A lock-step wait is otherwise bounded by
  /// `answer_timeout`.
  result<step_stats> step(const batch_type& batch, std::stop_token stop = {}) requires blocking_transport<Transport> {
    const time_point started = clock::now();
    for (;;) {
      if (stop.stop_requested()) return errc::cancelled;
      const time_point now = clock::now();
      if (poll(now)) break;
      if (error_) return error_;
      if (!joined() && now - started > options_.join_timeout) return errc::timed_out;
      auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(100));
      if (auto wake = next_deadline()) wait = std::clamp<std::chrono::nanoseconds>(*wake - now, {}, wait);
      if (auto e = transport_.receive_for(wait)) receive(std::move(*e), clock::now());
    }
    return train_step(batch, clock::now());
  }

  /// Sends every fragment's unsent work as a final contribution, then
  /// `leave`. Never blocks: a fragment whose contribution is still in flight
  /// against the same base is skipped (the syncer would count a second one
  /// as a duplicate), and its work since that send counts as unsent
  /// (`learner_metrics::steps_unsent`); the blocking `finish()` waits for
  /// those answers first.
  void finish(time_point now) {
    if (!joined() || ended()) return;  // after the end the syncer takes nothing more
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) {
      if (!fragments_.owns(p)) continue;
      send_contribution(p, now, final_contribution);
      auto& f = fragments_[p];
      if (f.steps > f.steps_sent) metrics_.steps_unsent += f.steps - f.steps_sent;
      f.send_owed = false;
    }
    message m = outbox_.make(message_kind::leave);
    m.header.steps = metrics_.steps_computed;
    m.header.tokens = metrics_.tokens;
    members_.left(m.header.sequence);
    outbox_.send(m);
    outbox_.flush();
  }

  /// Whether every syncer shard answered the leave (an ack, or a refusal:
  /// either way it has read everything this learner sent before).
  bool leave_answered() const noexcept { return members_.leave_answered(); }

  /// Training is over: from now on `poll` adopts what arrives at once,
  /// without the τ steps it holds answers in training, so that `drained()`
  /// comes true once no fragment's unsent work waits behind a contribution
  /// in flight; `finish(now)` then leaves no work behind. Event loops call
  /// `drain`, `poll` on arrivals and deadlines until `drained()`, then
  /// `finish(now)`; the blocking `finish()` does all of it.
  void drain() noexcept { finishing_ = true; }

  /// Every fragment's unsent work can go out now: none waits behind a
  /// contribution in flight against its current base (which the syncer
  /// would take a second one against as a duplicate). True once the
  /// learner has stopped.
  bool drained() const noexcept { return error_ || !fragments_.any_blocked(); }

  /// `finish(now)` for blocking transports, with nothing left behind:
  /// `drain`, wait (heartbeating, adopting what arrives) until `drained()`,
  /// then send the final contributions and leave, and wait until the
  /// transport has taken them all. The wait is bounded by
  /// `answer_timeout` (a fragment still waiting after `rejoin_after` asks
  /// for its current state again, as in training); it ends early, and the
  /// learner leaves anyway, within 100 ms of a stop requested on `stop`, or
  /// when the syncer ends the run.
  void finish(std::stop_token stop = {}) requires blocking_transport<Transport> {
    if (!joined() || error_) return;
    drain();
    const time_point started = clock::now();
    for (;;) {
      const time_point now = clock::now();
      poll(now);
      if (error_) return;
      if (drained() || stop.stop_requested() || now - started >= options_.answer_timeout) break;
      auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(100));
      if (auto wake = next_deadline()) wait = std::clamp<std::chrono::nanoseconds>(*wake - now, {}, wait);
      if (auto e = transport_.receive_for(wait)) receive(std::move(*e), clock::now());
    }
    finish(clock::now());
    // Returns once the syncer has answered the leave: a process that exits
    // next closes its connection, and what the connection still carried (or
    // the outbox still held, beyond the transport's byte budget) would be
    // lost; the syncer would then wait for a learner that is gone. Bounded
    // as above, and by `rejoin_after` after the leave.
    const time_point left = clock::now();
    while (!leave_answered() && !error_ && !stop.stop_requested()) {
      const time_point now = clock::now();
      if (now - started >= options_.answer_timeout || now - left >= options_.rejoin_after) break;
      if (auto e = transport_.receive_for(std::chrono::milliseconds(10))) receive(std::move(*e), clock::now());
      outbox_.flush();
    }
  }

  /// When `poll` next has timed work (a heartbeat, a join retry, an answer
  /// timeout); the simulator wakes a waiting learner then.
  std::optional<time_point> next_deadline() const {
    if (error_) return std::nullopt;
    if (!joined()) return members_.next_join();
    return contributions_.next_deadline(reports_.next_heartbeat(), finishing_);
  }

  /// True once the welcome and every fragment's global state have arrived.
  bool joined() const noexcept { return members_.welcomed() && fragments_.all_adopted(); }

  /// Whether the syncer ended the run (`error()` is then `errc::ended`).
  bool ended() const noexcept { return error_ == make_error_code(errc::ended); }

  /// The error that stopped this learner (empty while it works).
  std::error_code error() const noexcept { return error_; }

  const training_config& config() const noexcept { return fragments_.config(); }
  const fragment_plan& plan() const noexcept { return fragments_.plan(); }
  const learner_metrics& metrics() const noexcept { return metrics_; }
  const learner_options& options() const noexcept { return options_; }
  std::uint64_t local_step() const noexcept { return step_; }
  std::uint64_t revision(std::uint32_t p) const noexcept { return fragments_[p].revision; }

  /// Smoothed time of one inner step (ns), from steps not preceded by a wait.
  double step_time_ns() const noexcept { return reports_.step_time_ns(); }

  Model& model() noexcept { return model_; }
  InnerStep& inner() noexcept { return inner_; }
  Transport& transport() noexcept { return transport_; }

  /// Writes this learner's state (`write_learner_state`; docs/design.md,
  /// "Learner checkpoints"): θ, the inner step's state, the schedule, per
  /// fragment its revision, base, counters and error-feedback residual, the
  /// local step and the totals. Before the learner has joined: a state loaded and not used yet,
  /// else no fragments. Cost: θ, the bases and the inner state copied once
  /// in memory and checksummed; the writes to `out` block.
  /// (A template only so that an explicit instantiation of the learner for
  /// an inner step that is not checkpointable skips it: clang 14 instantiates
  /// a constrained non-template member anyway.)
  template <class Inner = InnerStep>
  requires checkpointable<Inner>
  void save(std::ostream& out) const {
    learner_state<T> s;
    s.learner = options_.id;
    s.incarnation = options_.incarnation;
    const std::span<const T> theta = model_.parameters();
    s.parameters.resize(theta.size());
    memory().read(theta, std::span<T>(s.parameters));
    if (joined())
      fragments_.save(s, memory());
    else if (!members_.welcomed())
      adoption_.save_restored(s);
    s.local_step = step_;
    s.tokens = metrics_.tokens;
    s.steps = metrics_.steps;
    std::ostringstream inner;
    inner_.save(inner);
    s.inner = std::move(inner).str();
    write_learner_state(out, s, model_.layout());
  }

  /// Restores a state `save` wrote, before the learner is welcomed: θ, the
  /// inner step's state, the local step and the totals at once; the
  /// fragments when it joins, where each one whose global revision has not
  /// moved since is resumed (docs/design.md, "Learner checkpoints").
  /// All or nothing: throws `corrupt_state` naming what is wrong (truncated,
  /// corrupt, another learner or model, wrong sizes, values not finite, an
  /// inner state the inner step refuses) and leaves the learner, its model
  /// and its inner step as they were. Throws `std::invalid_argument` when
  /// this learner's incarnation is not newer than the one that saved (the
  /// syncer has seen that one: a restarted process needs a new incarnation),
  /// and `std::logic_error` once the learner has been welcomed.
  template <class Inner = InnerStep>
  requires checkpointable<Inner>
  void load(std::istream& in) {
    if (members_.welcomed()) throw std::logic_error("diloco::learner::load: the learner has joined already");
    auto s = read_learner_state<T>(in, model_.layout(), options_.id);
    if (s.incarnation >= options_.incarnation)
      throw std::invalid_argument("diloco::learner::load: the state was saved by incarnation " +
                                  std::to_string(s.incarnation) + "; this learner's incarnation " +
                                  std::to_string(options_.incarnation) + " must be newer");
    std::istringstream inner(std::move(s.inner));
    inner_.load(inner);  // last: all or nothing by itself (Checkpointable), and nothing below can fail
    memory().write(std::span<const T>(s.parameters), model_.parameters());
    s.parameters = {};
    s.inner = {};
    step_ = s.local_step;
    metrics_.tokens = s.tokens;
    metrics_.steps = s.steps;
    adoption_.restore(std::move(s));
  }

  /// Handles one received envelope (what `poll` does for each arrival).
  void receive(envelope&& e, time_point now) {
    const auto& h = e.msg.header;
    if (e.error != wire_error::none || e.from != syncer_peer || h.learner != options_.id ||
        h.incarnation != options_.incarnation) {
      ++metrics_.updates_ignored;
      return;
    }
    if (!epochs_.admit(h)) {
      ++metrics_.stale_epochs;
      return;
    }
    if (const auto shard = epochs_.raised())
      metrics_.stale_epochs += adoption_.drop_older(*shard, epochs_.shards(), h.epoch);
    if (members_.answers_leave(h)) return;
    switch (h.kind) {
      case message_kind::welcome: on_welcome(h); break;
      case message_kind::update: adoption_.receive(std::move(e.msg), now); break;
      case message_kind::ack: contributions_.accepted(h); break;
      case message_kind::reject: on_reject(h, now); break;
      case message_kind::end: error_ = make_error_code(errc::ended); break;
      default: ++metrics_.updates_ignored; break;
    }
  }

 private:
  void send_join(time_point now) {
    message m = outbox_.make(message_kind::join);
    members_.join(m.header, model_.layout(), now);
    outbox_.send(m);
  }

  /// A join sent because answers went missing.
  void join_again(time_point now) {
    send_join(now);
    ++metrics_.rejoins_sent;
  }

  void send_heartbeat(time_point now) {
    message m = outbox_.make(message_kind::heartbeat);
    reports_.heartbeat(m.header, now, options_.heartbeat_interval);
    outbox_.send(m);
    ++metrics_.heartbeats_sent;
  }

  void send_contribution(std::uint32_t p, time_point now, std::uint8_t flags) {
    // NaN or infinite parameters: nothing is sent, and training stops here
    // rather than go on from a model that cannot recover.
    if (!contributions_.send(p, now, flags, step_, memory(), model_.parameters())) error_ = errc::non_finite;
  }

  /// The memory space of the model's parameters.
  memory_type& memory() const noexcept {
    if constexpr (requires { model_.memory(); })
      return model_.memory();
    else
      return host_memory_;
  }

  /// A welcome sets the schedule up (only the first: a repeated welcome
  /// answers a join retry), or asks for the model of a syncer that has none
  /// — also once welcomed: a shard's leader that started without the model
  /// while this learner was connected to another candidate of that shard
  /// never had the state sent at the start; it gets the current one.
  void on_welcome(const message_header& h) {
    if (members_.welcomed() && !(h.flags & state_wanted)) return;
    const auto terms = detail::read_welcome<T>(h, model_.layout());
    if (!terms) {
      error_ = terms.error();
      return;
    }
    if (h.flags & state_wanted)
      return members_.send_state(outbox_, memory(), std::span<const T>(model_.parameters()), model_.layout(),
                                 h.fragment_count);
    // One rank of a unit (`learner_options::share`): decoupled runs only,
    // against shards its share divides, connected to its own shards.
    const auto& share = options_.share;
    if (share.count > 1 && (terms->config.lock_step || terms->shards % share.count != 0 ||
                            (terms->shards > 1 && h.fragment % share.count != share.index))) {
      error_ = errc::bad_config;
      return;
    }
    members_.welcome(*terms, share.count);
    fragments_.setup(terms->config, terms->codec, terms->block, model_.layout(), memory(),
                     options_.error_feedback && terms->compressed, share);
  }

  /// A refusal of who the learner is (`learner_membership::refused`), or of
  /// a contribution (`learner_contributions::refused`).
  void on_reject(const message_header& h, time_point now) {
    const auto why = h.reason < reject_reason_count ? static_cast<reject_reason>(h.reason) : reject_reason::count_;
    switch (members_.refused(why, h, now, options_.incarnation)) {
      case detail::identity_reply::contribution: contributions_.refused(h, why); break;
      case detail::identity_reply::none: break;
      case detail::identity_reply::join: send_join(now); break;
      case detail::identity_reply::superseded: error_ = errc::superseded; break;
      case detail::identity_reply::quarantined: error_ = errc::quarantined; break;
    }
  }

  Model& model_;
  Transport& transport_;
  learner_options options_;
  InnerStep inner_;
  /// The memory space of a model that names none (stateless).
  [[no_unique_address]] mutable host_memory host_memory_;
  learner_metrics metrics_;
  std::error_code error_;
  std::uint64_t step_ = 0;
  bool finishing_ = false;  ///< draining: answers are adopted as they come
  detail::learner_reports reports_{options_.on_event, metrics_};
  detail::learner_outbox<Transport> outbox_{transport_, options_, metrics_};
  detail::learner_membership members_{options_, metrics_};
  detail::epoch_fence epochs_;
  std::uint64_t reconnections_ = 0;  ///< the transport's, as last seen
  detail::learner_fragments<T, memory_type> fragments_;
  detail::learner_adoption<T, memory_type> adoption_{fragments_, metrics_, reports_, options_.adopt};
  detail::learner_contributions<T, memory_type, detail::learner_outbox<Transport>> contributions_{
      fragments_, adoption_, outbox_, options_, metrics_, reports_};
};

}  // namespace diloco
