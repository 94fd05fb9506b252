// A learner unit: trains its own replica and exchanges fragments with the syncer
// without ever waiting for other learners.
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stop_token>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/concepts/check.hpp"
#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/inner_step.hpp"
#include "diloco/concepts/model.hpp"
#include "diloco/scalar.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/detail/ema.hpp"
#include "diloco/error.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/host_memory.hpp"
#include "diloco/runtime/learner_options.hpp"
#include "diloco/runtime/learner_state.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"

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
           check_transport<Transport>() && transport<Transport>)
class learner {
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
    if (!wait_began_) wait_began_ = now;  // until `poll` says go, the learner waits
    flush_outbox();
    while (auto e = transport_.try_receive()) receive(std::move(*e), now);
    if (error_) return false;  // what just arrived may have stopped it (superseded, quarantined)
    if (!welcomed_) {
      if (!next_join_ || now >= *next_join_) send_join(now);
      return false;
    }
    apply_due_updates();
    if (!joined()) {
      if (now >= *next_join_) send_join(now);
      return false;
    }
    if (!announced_join_) {
      announced_join_ = true;
      end_wait(now);
      if (options_.on_event) {
        learner_event e{.what = learner_event::kind::joined};
        for (const auto& t : tracks_) e.revisions.push_back(t.revision);
        emit(std::move(e));
      }
    }
    if (now >= next_heartbeat_) send_heartbeat(now);
    bool rejoin = false;
    if (unanswered_since_ && now - *unanswered_since_ >= options_.rejoin_after) {
      unanswered_since_ = now;
      rejoin = true;
    }
    if (keeps_work() && chase_answers(now)) rejoin = true;
    if (rejoin) {
      send_join(now);
      ++metrics_.rejoins_sent;
    }
    const bool ready = !waiting_for_answer(now);
    if (ready)
      end_wait(now);
    else
      waited_ = true;
    return ready;
  }

  /// One inner step on `batch`, then sends the fragments that fall due.
  /// Precondition: the last `poll` returned true.
  step_stats train_step(const batch_type& batch, time_point now) {
    assert(joined() && !error_);
    if (last_step_at_ && !waited_) step_time_.add(double((now - *last_step_at_).count()));
    waited_ = false;
    last_step_at_ = now;

    const step_stats stats = model_.compute_gradients(batch);
    inner_.step(model_.parameters(), model_.gradients());
    ++step_;
    ++metrics_.steps;
    ++metrics_.steps_computed;
    metrics_.tokens += stats.tokens;
    loss_sum_ += stats.loss;
    ++loss_steps_;
    for (auto& f : tracks_) {
      f.tokens += stats.tokens;
      ++f.steps;
    }
    for (std::uint32_t p = 0; p < tracks_.size(); ++p)
      if (schedule_.due(p, step_) || tracks_[p].send_owed) send_contribution(p, now, 0);
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
  result<step_stats> step(const batch_type& batch, std::stop_token stop = {})
    requires blocking_transport<Transport>
  {
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
    for (std::uint32_t p = 0; p < tracks_.size(); ++p) {
      send_contribution(p, now, final_contribution);
      auto& f = tracks_[p];
      if (f.steps > f.steps_sent) metrics_.steps_unsent += f.steps - f.steps_sent;
      f.send_owed = false;
    }
    message m = make(message_kind::leave);
    m.header.steps = metrics_.steps_computed;
    m.header.tokens = metrics_.tokens;
    leave_sequence_ = m.header.sequence;
    send(m);
    flush_outbox();
  }

  /// Whether every syncer shard answered the leave (an ack, or a refusal:
  /// either way it has read everything this learner sent before).
  bool leave_answered() const noexcept { return leave_sequence_ && leave_answers_ >= shards_; }

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
  bool drained() const noexcept {
    return error_ || std::none_of(tracks_.begin(), tracks_.end(), [](const auto& f) { return blocked(f); });
  }

  /// `finish(now)` for blocking transports, with nothing left behind:
  /// `drain`, wait (heartbeating, adopting what arrives) until `drained()`,
  /// then send the final contributions and leave, and wait until the
  /// transport has taken them all. The wait is bounded by
  /// `answer_timeout` (a fragment still waiting after `rejoin_after` asks
  /// for its current state again, as in training); it ends early, and the
  /// learner leaves anyway, within 100 ms of a stop requested on `stop`, or
  /// when the syncer ends the run.
  void finish(std::stop_token stop = {})
    requires blocking_transport<Transport>
  {
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
      flush_outbox();
    }
  }

  /// When `poll` next has timed work (a heartbeat, a join retry, an answer
  /// timeout); the simulator wakes a waiting learner then.
  std::optional<time_point> next_deadline() const {
    if (error_) return std::nullopt;
    if (!joined()) return next_join_;
    std::optional<time_point> t = next_heartbeat_;
    if (unanswered_since_) t = std::min(*t, *unanswered_since_ + options_.rejoin_after);
    if (config_.lock_step)
      for (const auto& f : tracks_)
        if (f.in_flight) t = std::min(*t, f.in_flight->at + options_.answer_timeout);
    if (keeps_work())
      for (const auto& f : tracks_)
        if (waits(f))
          t = std::min(*t, f.in_flight->at + (f.resync_wanted ? options_.answer_timeout : options_.rejoin_after));
    return t;
  }

  /// True once the welcome and every fragment's global state have arrived.
  bool joined() const noexcept { return welcomed_ && adopted_ == tracks_.size(); }

  /// Whether the syncer ended the run (`error()` is then `errc::ended`).
  bool ended() const noexcept { return error_ == make_error_code(errc::ended); }

  /// The error that stopped this learner (empty while it works).
  std::error_code error() const noexcept { return error_; }

  const training_config& config() const noexcept { return config_; }
  const fragment_plan& plan() const noexcept { return plan_; }
  const learner_metrics& metrics() const noexcept { return metrics_; }
  const learner_options& options() const noexcept { return options_; }
  std::uint64_t local_step() const noexcept { return step_; }
  std::uint64_t revision(std::uint32_t p) const noexcept { return tracks_[p].revision; }

  /// Smoothed time of one inner step (ns), from steps not preceded by a wait.
  double step_time_ns() const noexcept { return step_time_.value(); }

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
    memory_type& space = memory();
    const std::span<const T> theta = model_.parameters();
    s.parameters.resize(theta.size());
    space.read(theta, std::span<T>(s.parameters));
    if (joined()) {
      s.config = config_;
      for (const auto& f : tracks_) {
        std::vector<T> base(f.base.size());
        space.read(std::span<const T>(f.base.data(), f.base.size()), std::span<T>(base));
        std::vector<T> residual(f.residual ? f.residual->size() : 0);
        if (f.residual) space.read(std::span<const T>(f.residual->data(), f.residual->size()), std::span<T>(residual));
        s.fragments.push_back({!f.in_flight, f.revision, std::move(base), f.tokens, f.steps, std::move(residual)});
      }
    } else if (restored_ && !welcomed_) {
      s.config = restored_->config;
      s.fragments = restored_->fragments;
    }
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
    if (welcomed_) throw std::logic_error("diloco::learner::load: the learner has joined already");
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
    restored_ = std::move(s);
  }

  /// Handles one received envelope (what `poll` does for each arrival).
  void receive(envelope&& e, time_point now) {
    const auto& h = e.msg.header;
    if (e.error != wire_error::none || e.from != syncer_peer || h.learner != options_.id ||
        h.incarnation != options_.incarnation) {
      ++metrics_.updates_ignored;
      return;
    }
    if (leave_sequence_ && h.answers == *leave_sequence_ &&
        (h.kind == message_kind::ack || h.kind == message_kind::reject)) {
      ++leave_answers_;
      return;
    }
    switch (h.kind) {
      case message_kind::welcome: on_welcome(h); break;
      case message_kind::update: on_update(std::move(e.msg), now); break;
      case message_kind::ack:
        ++metrics_.contributions_acked;
        unanswered_since_.reset();
        take_verdict(h.answers);
        if (options_.on_event) emit({.what = learner_event::kind::verdict, .fragment = h.fragment,
                                     .sequence = h.answers, .accepted = true});
        break;
      case message_kind::reject: on_reject(h, now); break;
      case message_kind::end: error_ = make_error_code(errc::ended); break;
      default: ++metrics_.updates_ignored; break;
    }
  }

 private:
  struct in_flight_send {
    std::uint64_t sequence;
    std::uint64_t base_revision;
    std::uint64_t step;
    time_point at;
  };
  struct received_update {
    std::uint64_t revision;
    std::uint64_t answers;
    update_status status;
    codec_id codec;
    std::uint32_t block;
    byte_buffer payload;  ///< as it arrived (checked), decoded where θ lives when adopted
  };
  struct fragment_track {
    bool adopted = false;
    std::uint64_t revision = 0;
    typename memory_type::template buffer<T> base;  ///< Θ_p at `revision`, packed
    /// Error feedback: what the codec rounded away from Δ_p, to send next time (packed).
    std::optional<typename memory_type::template buffer<T>> residual;
    std::uint64_t tokens = 0;
    std::uint64_t steps = 0;
    /// Of `steps`, those a contribution against this base carried already
    /// (`adoption_rule::overwrite` and lock-step runs, whose counters
    /// restart at adoption, not at a send).
    std::uint64_t steps_sent = 0;
    /// The fragment fell due while a contribution of it was in flight against
    /// the same base: it is sent as soon as a new revision is taken in.
    bool send_owed = false;
    std::optional<in_flight_send> in_flight;
    std::optional<received_update> inbox;
    std::uint64_t last_sent = 0;  ///< sequence of the latest contribution of this fragment
    std::uint64_t resynced = 0;   ///< the send whose resync was taken even though older
    bool resync_wanted = false;   ///< lock-step: asked for the current state in place of an overdue answer
    bool resumed = false;         ///< θ_p and the counters were kept from a loaded state at the join
  };

  message make(message_kind kind) {
    message m;
    m.header.kind = kind;
    m.header.learner = options_.id;
    m.header.incarnation = options_.incarnation;
    m.header.sequence = next_sequence_++;
    return m;
  }

  void send_join(time_point now) {
    message m = make(message_kind::join);
    m.header.layout = model_.layout().fingerprint();
    m.header.element_count = model_.layout().size();
    send(m);
    ++metrics_.joins_sent;
    next_join_ = now + options_.join_retry;
  }

  void send_heartbeat(time_point now) {
    message m = make(message_kind::heartbeat);
    m.header.steps = metrics_.steps_computed;
    m.header.tokens = metrics_.tokens;
    m.header.step_time_ns = static_cast<std::int64_t>(step_time_.value());
    m.header.transfer_ns = static_cast<std::int64_t>(transfer_time_.value());
    if (loss_steps_ > 0) m.header.loss = loss_sum_ / double(loss_steps_);
    loss_sum_ = 0.0;
    loss_steps_ = 0;
    send(m);
    ++metrics_.heartbeats_sent;
    next_heartbeat_ = now + options_.heartbeat_interval;
  }

  void send_contribution(std::uint32_t p, time_point now, std::uint8_t flags) {
    auto& f = tracks_[p];
    if (f.steps == f.steps_sent) return;
    if (keeps_work()) {
      // A revision another learner's round made waits, with the lazy rule,
      // until now: taken in first, so that Δ is computed against it.
      if (f.inbox) adopt(p, f.in_flight && f.inbox->answers >= f.in_flight->sequence);
      // The syncer keys contributions by their base revision: a second one
      // against the same revision would be refused as a duplicate, although
      // it holds only later work. It goes out once a new revision is in.
      if (blocked(f)) {
        f.send_owed = true;
        return;
      }
    } else if (f.in_flight && f.in_flight->base_revision == f.revision) {
      // The syncer dedups by (learner, incarnation, fragment, base): a second,
      // cumulative contribution against the same base would be refused. Wait
      // for the answer — unless it is overdue, then ask anyway: the refusal
      // carries the current fragment back (a resync).
      if (now - f.in_flight->at < options_.answer_timeout) return;
    }
    const fragment& frag = plan_[p];
    message m = make(message_kind::contribution);
    auto& h = m.header;
    h.codec = contribution_codec_;
    h.block = block_;
    h.fragment = p;
    h.base_revision = f.revision;
    h.revision = step_;  // the local step, which `steps` cannot exceed
    h.tokens = f.tokens;
    h.steps = f.steps;
    h.element_count = frag.size();
    h.flags = flags;
    h.step_time_ns = static_cast<std::int64_t>(step_time_.value());
    h.transfer_ns = static_cast<std::int64_t>(transfer_time_.value());
    // One pass where θ lives reads θ_p and the base and writes the encoded
    // outer gradient (and, with error feedback, the new residual).
    m.payload = pool_.acquire(payload::size(h.codec, frag.size(), h.block));
    if (!memory().encode_delta(h.codec, h.block, frag.slices(), std::span<const T>(model_.parameters()), f.base,
                               f.residual ? &*f.residual : nullptr, m.payload.bytes())) {
      // NaN or infinite parameters: nothing is sent, and training stops here
      // rather than go on from a model that cannot recover.
      error_ = errc::non_finite;
      return;
    }
    metrics_.bytes_sent += m.payload.size();
    metrics_.steps_sent += f.steps - f.steps_sent;
    f.in_flight = in_flight_send{h.sequence, f.revision, step_, now};
    unverdicted_.push_back({h.sequence, f.steps - f.steps_sent});
    if (unverdicted_.size() > max_unverdicted) unverdicted_.pop_front();
    f.last_sent = h.sequence;
    f.send_owed = false;
    if (keeps_work()) {
      // What was sent leaves the learner's account: the base moves to θ_p,
      // so the next Δ holds only later work, and the answer is applied
      // against this point.
      memory().pack(frag.slices(), std::span<const T>(model_.parameters()), f.base);
      f.tokens = f.steps = 0;
    } else {
      f.steps_sent = f.steps;
    }
    if (!unanswered_since_) unanswered_since_ = now;
    ++metrics_.contributions_sent;
    if (options_.on_event)
      emit({.what = learner_event::kind::sent, .fragment = p, .sequence = h.sequence, .revision = h.base_revision,
            .work = h.steps});
    send(m);
  }

  /// The memory space of the model's parameters.
  memory_type& memory() const noexcept {
    if constexpr (requires { model_.memory(); })
      return model_.memory();
    else
      return host_memory_;
  }

  /// Sends in order: while older messages wait in the outbox, new ones queue
  /// behind them. The oldest are dropped beyond `max_outbox`.
  void send(message& m) {
    if (outbox_.empty() && !transport_.try_send(syncer_peer, m)) return;
    ++metrics_.sends_deferred;
    outbox_.push_back(std::move(m));
    for (; outbox_.size() > options_.max_outbox; ++metrics_.sends_dropped) outbox_.pop_front();
  }

  void flush_outbox() {
    while (!outbox_.empty() && !transport_.try_send(syncer_peer, outbox_.front())) outbox_.pop_front();
  }

  void on_welcome(const message_header& h) {
    if (welcomed_) return;  // a repeated welcome answers a join retry
    const auto& layout = model_.layout();
    if (h.layout != layout.fingerprint() || h.element_count != layout.size()) {
      error_ = errc::layout_mismatch;
      return;
    }
    // The codec contributions use: this model's own full precision (or none
    // from a syncer that predates codecs), or a compressed one it can encode.
    const bool full_precision = h.codec == codec_id::none || h.codec == codec_of<T>;
    const bool compressed = h.codec >= codec_id::bf16 && payload::readable<T>(h.codec, h.block);
    if ((!full_precision && !compressed) || h.fragment_count == 0 ||
        h.fragment_count > layout.size() || h.sync_period == 0 ||
        h.overlap >= h.sync_period || !(h.mixing >= 0.0 && h.mixing < 1.0)) {
      error_ = errc::bad_config;
      return;
    }
    if (h.flags & state_wanted) return send_state(h.fragment_count);
    config_ = training_config{h.fragment_count, h.sync_period, h.overlap, h.mixing, h.lock_step != 0};
    shards_ = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(h.steps, 1, max_shards));
    contribution_codec_ = compressed ? h.codec : codec_of<T>;
    block_ = compressed ? h.block : 0;
    config_.codecs.contributions = compressed ? *format_of(h.codec) : codec::format::fp32;
    if (block_scaled(h.codec)) config_.codecs.block = h.block;
    plan_ = fragment_plan::balanced(layout, config_.fragments);
    schedule_ = fragment_schedule(config_.sync_period, config_.fragments);
    tracks_.clear();
    tracks_.resize(config_.fragments);
    for (std::uint32_t p = 0; p < config_.fragments; ++p) {
      tracks_[p].base = memory().template allocate<T>(plan_[p].size());
      if (options_.error_feedback && compressed) tracks_[p].residual = memory().template allocate<T>(plan_[p].size());
    }
    welcomed_ = true;
  }

  /// A syncer that starts without a model asks its first learner for one:
  /// the layout, then every fragment of the current parameters. The real
  /// welcome follows once the syncer has them.
  void send_state(std::uint32_t fragments) {
    const auto& layout = model_.layout();
    message l = make(message_kind::layout);
    const auto description = wire::encode_layout(layout);
    l.header.codec = codec_id::bytes;
    l.header.element_count = description.size();
    l.header.layout = layout.fingerprint();
    l.payload = byte_buffer(description.size());
    std::copy(description.begin(), description.end(), l.payload.data());
    send(l);
    const auto plan = fragment_plan::balanced(layout, fragments);
    for (std::uint32_t p = 0; p < fragments; ++p) {
      message m = make(message_kind::state);
      m.header.codec = codec_of<T>;
      m.header.fragment = p;
      m.header.element_count = plan[p].size();
      m.payload = pool_.acquire(plan[p].size() * sizeof(T));
      memory().gather(plan[p].slices(), std::span<const T>(model_.parameters()), m.payload.template as<T>());
      metrics_.bytes_sent += m.payload.size();
      send(m);
    }
    ++metrics_.states_sent;
  }

  void on_update(message&& m, time_point now) {
    const auto& h = m.header;
    if (!welcomed_ || h.fragment >= tracks_.size() || h.element_count != plan_[h.fragment].size()) {
      ++metrics_.updates_ignored;
      return;
    }
    // The global fragment: the syncer's values, or at a compressed codec
    // bytes whose decoding is the same bits on every learner. Checked here,
    // decoded where θ lives when adopted.
    if (payload::check<T>(h.codec, h.block, m.payload.bytes(), plan_[h.fragment].size()) != payload::verdict::ok) {
      ++metrics_.updates_ignored;
      return;
    }
    metrics_.bytes_received += m.payload.size();
    auto& f = tracks_[h.fragment];
    // A resync answering this learner's latest send of the fragment is the
    // syncer's current state: adopted even when older than the base (a syncer
    // restored from an older checkpoint), once. Anything else — a duplicate,
    // a late copy of the initial state — only if newer.
    const bool answers_latest =
        h.status == update_status::resync &&
        ((h.answers != 0 && h.answers == f.last_sent && h.answers != f.resynced) || f.resync_wanted);
    if (answers_latest) f.resynced = h.answers;
    if (answers_latest && f.resync_wanted) {
      f.resync_wanted = false;
      f.in_flight.reset();  // the answer it waited for is replaced by this state
    }
    if (!answers_latest &&
        ((f.adopted && h.revision <= f.revision) || (f.inbox && h.revision < f.inbox->revision))) {
      ++metrics_.updates_ignored;
      return;
    }
    ++metrics_.updates_received;
    if (f.in_flight && h.answers >= f.in_flight->sequence) {
      const double rtt = double((now - f.in_flight->at).count());
      transfer_time_.add(std::max(0.0, rtt - double(h.hold_ns)));
    }
    const std::uint64_t answers = std::max(h.answers, f.inbox ? f.inbox->answers : 0);
    // A resync (join, refused contribution) must overwrite even if a newer
    // merged revision replaces it before adoption.
    const update_status status =
        f.inbox && f.inbox->status == update_status::resync ? update_status::resync : h.status;
    f.inbox = received_update{h.revision, answers, status, h.codec, h.block, std::move(m.payload)};
  }

  /// A refused contribution is no longer awaited (a stale or duplicate one
  /// also brings a resync update). A refusal of who it is: joins again when
  /// the syncer does not know it here (forgotten, or a new connection);
  /// takes the next incarnation when it has not started yet and its
  /// incarnation is over, and otherwise stops (`errc::superseded`,
  /// `errc::quarantined`).
  void on_reject(const message_header& h, time_point now) {
    const auto why = h.reason < reject_reason_count ? static_cast<reject_reason>(h.reason) : reject_reason::count_;
    switch (why) {
      case reject_reason::peer_conflict:
        ++metrics_.identity_conflicts;  // ours, or someone claiming us: the join retry goes on
        return;
      case reject_reason::unknown_learner:
      case reject_reason::wrong_peer:
        if (welcomed_ && (!last_rejoin_ || now - *last_rejoin_ >= options_.join_retry)) {
          last_rejoin_ = now;
          send_join(now);
          ++metrics_.rejoins_sent;
        }
        return;
      case reject_reason::dead_incarnation:
        if (!welcomed_ && h.revision >= options_.incarnation && h.revision < std::numeric_limits<std::uint32_t>::max()) {
          options_.incarnation = static_cast<std::uint32_t>(h.revision) + 1;
          ++metrics_.incarnations_skipped;
          send_join(now);
        } else if (welcomed_) {
          error_ = errc::superseded;
        }
        return;
      case reject_reason::quarantined:
        error_ = errc::quarantined;
        return;
      case reject_reason::too_many_learners:
        ++metrics_.joins_refused;  // the join retry goes on: a place frees when a learner leaves or dies
        return;
      case reject_reason::unexpected_kind:
      case reject_reason::unknown_incarnation:
        ++metrics_.messages_refused;  // not about a contribution
        return;
      default: break;
    }
    unanswered_since_.reset();
    ++metrics_.contributions_refused;
    metrics_.steps_refused += take_verdict(h.answers);
    if (options_.on_event)
      emit({.what = learner_event::kind::verdict, .fragment = h.fragment, .sequence = h.answers, .accepted = false,
            .reason = h.reason < reject_reason_count ? static_cast<reject_reason>(h.reason) : reject_reason::count_});
    if (h.fragment < tracks_.size()) {
      auto& f = tracks_[h.fragment];
      if (f.in_flight && f.in_flight->sequence == h.answers) f.in_flight.reset();
    }
  }

  /// Whether adoptions keep the learner's work: a run that is not lock-step,
  /// with the `rebase` or `lazy` rule.
  bool keeps_work() const noexcept { return !config_.lock_step && options_.adopt != adoption_rule::overwrite; }

  /// Adopts each waiting update unless it answers the latest contribution
  /// in flight and τ steps have not passed since that send (no wait once
  /// finishing). With a rule that keeps work, another learner's revision
  /// waits for those τ steps too (the answer, newer, would hold both; a lost
  /// answer delays nothing longer), and with the lazy rule until the
  /// fragment's next send.
  void apply_due_updates() {
    for (std::uint32_t p = 0; p < tracks_.size(); ++p) {
      auto& f = tracks_[p];
      if (!f.inbox) continue;
      const bool answer = f.in_flight && f.inbox->answers >= f.in_flight->sequence;
      const bool held = f.in_flight && !finishing_ && step_ < f.in_flight->step + config_.overlap;
      if (answer && held) continue;
      if (!answer && f.adopted && keeps_work() &&
          (held || (options_.adopt == adoption_rule::lazy && f.inbox->status == update_status::merged && !finishing_)))
        continue;
      adopt(p, answer);
    }
  }

  /// The fragment-steps contribution `sequence` carried, now that its
  /// verdict came (0 for one not sent, or no longer remembered).
  std::uint64_t take_verdict(std::uint64_t sequence) {
    const auto it = std::find_if(unverdicted_.begin(), unverdicted_.end(),
                                 [sequence](const auto& u) { return u.first == sequence; });
    if (it == unverdicted_.end()) return 0;
    const std::uint64_t steps = it->second;
    unverdicted_.erase(it);
    return steps;
  }

  /// Fragment f's unsent work cannot go out yet: a contribution of it is in
  /// flight against its current base revision.
  static bool blocked(const fragment_track& f) noexcept {
    return f.in_flight && f.in_flight->base_revision == f.revision && f.steps > f.steps_sent;
  }

  /// Fragment f waits for a revision to send (due, or finishing): what
  /// `chase_answers` looks after.
  bool waits(const fragment_track& f) const noexcept { return blocked(f) && (f.send_owed || finishing_); }

  void adopt(std::uint32_t p, bool answer) {
    auto& f = tracks_[p];
    const std::span<T> theta = model_.parameters();
    // A rule that keeps work rebases θ_p onto the new value, counters kept.
    // Otherwise mixing blends a merged revision into local progress, and a
    // resync after the learner fell behind overwrites. The first state
    // overwrites; a restarted learner resuming keeps θ_p, the work done
    // since this very base.
    const bool rebase = f.adopted && keeps_work();
    const bool mix = config_.mixing != 0.0 && f.adopted && f.inbox->status == update_status::merged;
    const bool resume = !f.adopted && resumes(p);
    const adoption how = resume ? adoption::keep : rebase ? adoption::rebase : mix ? adoption::mix : adoption::overwrite;
    memory().adopt(f.inbox->codec, f.inbox->block, f.inbox->payload.bytes(), plan_[p].slices(), theta, f.base, how,
                   T(config_.mixing));
    const bool completes_join = !f.adopted && ++adopted_ == tracks_.size();
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
    f.resumed = resume;
    if (resume) ++metrics_.fragments_resumed;
    // What the codec rounded away before the save is sent with the next
    // contribution, as if the learner had not stopped. Only when resuming:
    // once the fragment has moved, a contribution of this learner sent after
    // the save (and lost with it) may have carried it already.
    if (resume && f.residual && restored_->fragments[p].residual.size() == f.residual->size())
      memory().write(std::span<const T>(restored_->fragments[p].residual),
                     std::span<T>(f.residual->data(), f.residual->size()));
    if (completes_join && config_.lock_step &&
        (step_ == 0 || std::any_of(tracks_.begin(), tracks_.end(), [](const auto& t) { return !t.resumed; }))) {
      // Joining a lock-step run that is under way: every round needs every
      // learner, so start in phase with the others. Fragment 0 has completed
      // one round per revision, each H steps long. A loaded learner is in
      // phase already only if no fragment has moved since it saved; else it
      // starts afresh on every fragment.
      step_ = tracks_[0].revision * config_.sync_period;
      for (std::uint32_t q = 0; q < tracks_.size(); ++q) {
        auto& t = tracks_[q];
        if (!t.resumed) continue;
        memory().scatter(plan_[q].slices(), t.base, theta);
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
    if (options_.on_event)
      emit({.what = learner_event::kind::adopted, .fragment = p, .revision = f.revision, .work = overwritten});
  }

  /// Whether fragment p, adopted for the first time from its inbox, resumes
  /// the loaded state: the same P and H, no contribution of it was in flight
  /// when it was saved (the syncer may still merge that one: its work would
  /// count twice), and the global state is the very base it saved (same
  /// revision, same bits; decoded on the host for the comparison, once per
  /// fragment after a restart).
  bool resumes(std::uint32_t p) const {
    if (!restored_ || !restored_->config || restored_->config->fragments != config_.fragments ||
        restored_->config->sync_period != config_.sync_period)
      return false;
    const auto& r = restored_->fragments[p];
    const auto& inbox = *tracks_[p].inbox;
    if (!r.resumable || r.revision != inbox.revision || r.base.size() != plan_[p].size()) return false;
    std::vector<T> global(plan_[p].size());
    double ignored = 0.0;
    return payload::decode<T>(inbox.codec, inbox.block, inbox.payload.bytes(), std::span<T>(global), ignored) ==
               payload::verdict::ok &&
           std::memcmp(r.base.data(), global.data(), global.size() * sizeof(T)) == 0;
  }

  /// Ends the wait under way, if any: its time counts as waiting, not work.
  void end_wait(time_point now) {
    if (!wait_began_) return;
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(now - *wait_began_);
    wait_began_.reset();
    metrics_.wait_ns += static_cast<std::uint64_t>(std::max<std::int64_t>(0, wait.count()));
    if (options_.on_event && wait >= std::chrono::milliseconds(20))
      emit({.what = learner_event::kind::waited, .wait = wait});
  }

  void emit(learner_event e) {
    e.steps = metrics_.steps;
    e.waited_total = std::chrono::nanoseconds(metrics_.wait_ns);
    options_.on_event(e);
  }

  /// Rules that keep work, not lock-step: a fragment that waits to send
  /// (`waits`) because no revision came since its last send — the answer
  /// lost, or the syncer restarted and lost the round — asks for its current
  /// state `rejoin_after` after that send: the learner joins again and takes
  /// the state in place of the answer (rebased: the work since the send is
  /// kept; the work in flight is in that state if it was merged, and is lost
  /// otherwise). After `answer_timeout` it gives the answer up. Returns
  /// whether to join again.
  bool chase_answers(time_point now) {
    bool resync = false;
    for (auto& f : tracks_) {
      if (!waits(f)) continue;
      if (!f.resync_wanted && now - f.in_flight->at >= options_.rejoin_after) {
        resync = f.resync_wanted = true;
      } else if (now - f.in_flight->at >= options_.answer_timeout) {
        f.in_flight.reset();
        f.resync_wanted = false;
        ++metrics_.answers_timed_out;
      }
    }
    return resync;
  }

  /// Lock-step only: an answer is due (τ steps after its send) and missing.
  /// An answer overdue by `rejoin_after` may never come (a syncer restarted
  /// from a checkpoint has lost the round): the learner joins again and takes
  /// the fragment's current state in place of the answer (its work in flight
  /// is then lost, or merged later and adopted as a newer revision).
  bool waiting_for_answer(time_point now) {
    if (!config_.lock_step) return false;
    bool waiting = false, resync = false;
    for (auto& f : tracks_) {
      if (!f.in_flight || step_ < f.in_flight->step + config_.overlap) continue;
      if (now - f.in_flight->at >= options_.answer_timeout) {
        f.in_flight.reset();
        ++metrics_.answers_timed_out;
        continue;
      }
      if (now - f.in_flight->at >= options_.rejoin_after && !f.resync_wanted) resync = f.resync_wanted = true;
      waiting = true;
    }
    if (resync) {
      send_join(now);
      ++metrics_.rejoins_sent;
    }
    return waiting;
  }

  Model& model_;
  Transport& transport_;
  learner_options options_;
  InnerStep inner_;
  /// The memory space of a model that names none (stateless).
  [[no_unique_address]] mutable host_memory host_memory_;
  buffer_pool pool_;

  training_config config_;
  fragment_plan plan_;
  fragment_schedule schedule_;
  std::vector<fragment_track> tracks_;
  codec_id contribution_codec_ = codec_of<T>;  ///< the welcome's
  std::uint32_t block_ = 0;                    ///< the welcome's, for a block-scaled codec
  std::size_t adopted_ = 0;
  bool welcomed_ = false;
  std::error_code error_;

  std::uint64_t step_ = 0;
  std::uint64_t next_sequence_ = 1;
  std::optional<std::uint64_t> leave_sequence_;  ///< the leave's, once sent
  std::uint32_t leave_answers_ = 0;              ///< shards that answered it
  std::uint32_t shards_ = 1;                     ///< syncer shards, from the welcome (each answers the leave)
  static constexpr std::uint64_t max_shards = 1 << 16;
  std::optional<time_point> next_join_;
  std::optional<time_point> unanswered_since_;  ///< oldest contribution still without a verdict
  std::optional<time_point> last_rejoin_;       ///< the last join sent because the syncer did not know us here
  time_point next_heartbeat_{};
  std::optional<time_point> last_step_at_;
  bool waited_ = false;
  bool announced_join_ = false;
  bool finishing_ = false;  ///< in the blocking `finish`: answers are adopted as they come
  std::optional<time_point> wait_began_;  ///< since when `poll` has said "not yet"
  detail::ema step_time_;
  detail::ema transfer_time_;
  double loss_sum_ = 0.0;        ///< Σ `step_stats::loss` since the last heartbeat, which sends their mean
  std::uint64_t loss_steps_ = 0;
  std::deque<message> outbox_;
  /// Contributions without a verdict yet, (sequence, fragment-steps it
  /// carried), oldest first: a refusal counts its steps as refused. At most
  /// `max_unverdicted`; older ones are forgotten (verdicts come within a
  /// round trip).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> unverdicted_;
  static constexpr std::size_t max_unverdicted = 256;
  learner_metrics metrics_;
  std::optional<learner_state<T>> restored_;  ///< loaded, until the join completes (θ and inner state taken at once)
};

}  // namespace diloco
