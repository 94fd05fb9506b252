// The syncer: validates learners' fragment contributions, closes rounds,
// merges them, applies the outer optimizer and publishes each new revision.
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <istream>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "diloco/codec/kernels.hpp"
#include "diloco/detail/bad_option.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/detail/ema.hpp"
#include "diloco/detail/log_limiter.hpp"
#include "diloco/error.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/runtime/rounds.hpp"
#include "diloco/runtime/screening.hpp"
#include "diloco/runtime/syncer_options.hpp"
#include "diloco/runtime/syncer_state.hpp"
#include "diloco/serialize.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco {

/// The syncer (docs/design.md, "Syncer"). For each fragment it collects
/// contributions; when K distinct learners have contributed it opens the
/// adaptive grace window (`rounds::grace_window`), closing early once every
/// live learner is in; then it clips outlying contributions, merges, scales
/// partial rounds (`rounds::partial_round_scale`), applies the outer
/// optimizer to a copy of the fragment, validates the result, bumps the
/// revision and sends the new fragment to every live learner (see
/// `update_recipients`).
///
/// Like the learner it is driven from outside: `handle` each received
/// envelope, and call `poll` by the deadline it returns. `run` does both for
/// blocking transports. Not thread-safe: one thread drives a syncer.
///
/// Constrained by the concepts; each is preceded by its diagnostic, so that a
/// type that misses a requirement gets an error naming the missing member
/// rather than an unsatisfied constraint.
template <class OuterOptimizer, class MergePolicy, class Transport>
  requires(check_outer_optimizer<OuterOptimizer>() && outer_optimizer<OuterOptimizer> &&
           check_transport<Transport>() && transport<Transport> &&
           check_merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>() &&
           merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>)
class syncer {
 public:
  using scalar_type = typename OuterOptimizer::scalar_type;
  using T = scalar_type;

  /// Starts from `initial` parameters (flat, in `layout` order) at revision 0.
  /// Throws `std::invalid_argument` for inconsistent settings or initial
  /// parameters that are not all finite.
  syncer(const parameter_layout& layout, std::span<const T> initial, Transport& transport,
         syncer_options options = {}, OuterOptimizer outer = OuterOptimizer{}, MergePolicy merge = MergePolicy{})
      : layout_(layout),
        transport_(transport),
        options_(std::move(options)),
        outer_(std::move(outer)),
        merge_(std::move(merge)),
        quorum_time_(options_.ema_decay),
        log_limit_(log_categories) {
    const auto& c = options_.training;
    if (initial.size() != layout.size())
      throw std::invalid_argument("diloco::syncer: initial parameters (" + std::to_string(initial.size()) +
                                  ") do not match the layout (" + std::to_string(layout.size()) + ")");
    if (const auto bad = std::find_if(initial.begin(), initial.end(), [](T v) { return !std::isfinite(v); });
        bad != initial.end())
      throw std::invalid_argument("diloco::syncer: initial parameter " + std::to_string(bad - initial.begin()) +
                                  " is not finite");
    constexpr std::string_view self = "diloco::syncer";
    if (c.sync_period == 0) detail::bad_option(self, "sync period H", c.sync_period, "must be at least 1");
    if (c.overlap >= c.sync_period)
      detail::bad_option(self, "overlap tau", c.overlap,
                         "must be smaller than the sync period H = " + std::to_string(c.sync_period));
    if (!(c.mixing >= 0.0 && c.mixing < 1.0)) detail::bad_option(self, "mixing alpha", c.mixing, "must be in [0, 1)");
    if (options_.quorum == 0) detail::bad_option(self, "quorum K", options_.quorum, "must be at least 1");
    if (!(options_.grace_factor >= 0.0 && options_.grace_factor < 1.0))
      detail::bad_option(self, "grace factor gamma", options_.grace_factor, "must be in [0, 1)");
    if (options_.heartbeat_timeout <= std::chrono::nanoseconds::zero())
      detail::bad_option(self, "heartbeat_timeout", options_.heartbeat_timeout, "must be positive");
    if (options_.max_grace >= options_.heartbeat_timeout)
      detail::bad_option(self, "max_grace", options_.max_grace,
                         "must be shorter than the heartbeat timeout (" +
                             detail::show_option(options_.heartbeat_timeout) + ")");
    if (options_.max_learners == 0) detail::bad_option(self, "max_learners", options_.max_learners, "must be at least 1");
    c.codecs.check();
    options_.world.check();
    options_.end.check();
    if (options_.world.size > options_.max_learners)
      throw std::invalid_argument("diloco::syncer: world size M (" + std::to_string(options_.world.size) +
                                  ") exceeds max_learners (" + std::to_string(options_.max_learners) + ")");
    started_ = options_.world.size == 0;
    options_.screening.check();
    options_.membership.check();
    plan_ = fragment_plan::balanced(layout, c.fragments);  // validates P
    options_.shard.check(c.fragments);
    fragments_.resize(c.fragments);
    for (std::uint32_t p = 0; p < c.fragments; ++p) {
      fragments_[p].global.resize(plan_[p].size());
      plan_.gather<T>(p, initial, fragments_[p].global);
      fragments_[p].paces = detail::value_ring(options_.screening.history);
    }
    std::size_t largest = 0;
    for (const auto& f : plan_.fragments()) largest = std::max(largest, f.size());
    delta_.resize(largest);
    backup_.resize(largest);
  }

  syncer(const syncer&) = delete;
  syncer& operator=(const syncer&) = delete;

  /// Validates and applies one message. Never throws for bad input: a refused
  /// message is counted by reason and logged (rate-limited), and changes
  /// nothing else — except that a contribution refused for its content counts
  /// against its learner's quarantine.
  void handle(envelope&& e, time_point now) {
    if (!first_message_) first_message_ = now;
    if (ended_ || failure_) return tell_ended(e);
    if (e.error == wire_error::unauthorized) return reject(reject_reason::unauthorized, e.msg.header);
    if (e.error != wire_error::none) return reject_undecodable(e.from, e.error);
    auto& h = e.msg.header;
    if (h.kind == message_kind::join) return on_join(e.from, h, now);
    if (h.kind != message_kind::contribution && h.kind != message_kind::heartbeat && h.kind != message_kind::leave)
      return reject_sender(reject_reason::unexpected_kind, e.from, h);
    auto it = learners_.find(h.learner);
    // Identity refusals are answered to the sending connection, which need
    // not be the learner's: a reject changes nothing, and tells a learner that
    // was forgotten, moved to a new connection or superseded what to do.
    if (it == learners_.end()) return reject_sender(reject_reason::unknown_learner, e.from, h);
    auto& l = it->second;
    // Incarnation first: a late message of a restarted learner comes from its
    // old connection, and "dead incarnation" says more than "wrong peer".
    if (h.incarnation < l.incarnation || (h.incarnation == l.incarnation && l.left))
      return reject_sender(reject_reason::dead_incarnation, e.from, h, l.incarnation);
    if (h.incarnation > l.incarnation) return reject_sender(reject_reason::unknown_incarnation, e.from, h);
    if (!l.bound) {
      // Restored from a checkpoint: the learner's connection is new.
      l.peer = e.from;
      l.bound = true;
      ++metrics_.reconnects;
    }
    if (e.from != l.peer) return reject_sender(reject_reason::wrong_peer, e.from, h);
    if (l.quarantined) return reject(reject_reason::quarantined, h, &l);
    // A contribution counts (liveness, timing) only once it is accepted: a
    // refusal changes nothing but counters.
    if (h.kind == message_kind::contribution) return on_contribution(h.learner, std::move(e.msg), now);
    accept_from(h, l, now);
    l.steps_reported = std::max(l.steps_reported, h.steps);
    switch (h.kind) {
      case message_kind::heartbeat:
        note_loss(h, l);
        break;
      default:  // leave
        l.left = true;
        l.live = false;
        l.gone_since = now;
        ++metrics_.leaves;
        // Answered, so that the learner closes its connection only once
        // everything it sent before has been read here.
        send_ack(l, h);
        for (std::uint32_t p = 0; p < fragments_.size(); ++p) advance_round(p, now);
        break;
    }
  }

  /// Declares silent learners dead, forgets learners gone for longer than
  /// `membership.forget_after`, closes rounds whose grace window ended (or
  /// whose quorum became reachable) and writes the log's summary of held-back
  /// lines. Returns when it next needs a call.
  std::optional<time_point> poll(time_point now) {
    for (auto& entry : learners_) {
      const std::uint32_t id = entry.first;
      auto& l = entry.second;
      if (l.live && now - l.last_seen >= options_.heartbeat_timeout) {
        l.live = false;
        l.gone_since = now;
        ++metrics_.declared_dead;
        log(log_category::liveness,
            [&] { return "learner " + std::to_string(id) + " silent for " + seconds(now - l.last_seen) + ", declared dead"; });
      }
      if (!l.live && !l.gone_since) l.gone_since = now;  // restored from a checkpoint
    }
    check_world(now);
    const auto forget_after = std::chrono::duration_cast<std::chrono::nanoseconds>(
        half_life() * options_.membership.forget_after);
    std::erase_if(learners_, [&](const auto& entry) {
      const auto& l = entry.second;
      if (!l.gone_since || now - *l.gone_since < forget_after || in_open_round(entry.first) ||
          in_world(entry.first))
        return false;
      ++metrics_.learners_forgotten;
      retire_report(l);
      return true;
    });
    std::optional<time_point> next;
    auto earliest = [&next](time_point t) {
      if (!next || t < *next) next = t;
    };
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) {
      advance_round(p, now);
      if (fragments_[p].deadline) earliest(*fragments_[p].deadline);
    }
    for (const auto& [id, l] : learners_) {
      if (l.live) earliest(l.last_seen + options_.heartbeat_timeout);
      if (l.gone_since && !in_open_round(id) && !in_world(id)) earliest(*l.gone_since + forget_after);
      if (in_world(id) && !l.live && !l.left && l.gone_since) earliest(*l.gone_since + options_.world.loss_wait);
    }
    if (!started_ && first_message_) earliest(*first_message_ + options_.world.rendezvous_timeout);
    const auto& end = options_.end;
    if (first_message_ && end.deadline > std::chrono::nanoseconds::zero()) earliest(*first_message_ + end.deadline);
    if (all_gone_may_end())
      for (const auto& [id, l] : learners_)
        if (!l.live && !l.left && l.gone_since) earliest(*l.gone_since + *end.when_all_gone);
    check_end(now);
    if (options_.log)
      if (auto line = log_limit_.summary(clock::now(), [](std::size_t c) { return category_name(c); }); !line.empty())
        options_.log(line);
    return next;
  }

  /// Merges every open round now, whatever its quorum (at shutdown, so that
  /// no accepted contribution is lost).
  void flush(time_point now) {
    for (std::uint32_t p = 0; p < fragments_.size(); ++p)
      if (!fragments_[p].round.empty()) close_round(p, now);
  }

  /// Serves a blocking transport until `stop` is requested or `done()`
  /// returns true (checked after every message and timer); then handles what
  /// has already arrived and flushes. Sleeps in the transport when nothing is
  /// due; never busy-waits.
  template <class Done>
  void run_until(std::stop_token stop, Done&& done)
    requires blocking_transport<Transport>
  {
    constexpr auto idle = std::chrono::milliseconds(50);
    while (!stop.stop_requested() && !failure_ && !ended_ && !done()) {
      const time_point now = clock::now();
      auto wait = std::chrono::nanoseconds(idle);
      if (auto next = poll(now)) wait = std::clamp<std::chrono::nanoseconds>(*next - now, {}, wait);
      if (auto e = transport_.receive_for(wait)) {
        handle(std::move(*e), clock::now());
        while (auto more = transport_.try_receive()) handle(std::move(*more), clock::now());
      }
    }
    while (auto rest = transport_.try_receive()) handle(std::move(*rest), clock::now());
    flush(clock::now());
  }

  /// `run_until(stop, never)`.
  void run(std::stop_token stop)
    requires blocking_transport<Transport>
  {
    run_until(stop, [] { return false; });
  }

  /// The global parameters, flat in layout order.
  void copy_parameters(std::span<T> flat) const {
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) plan_.scatter<T>(p, fragments_[p].global, flat);
  }
  std::vector<T> parameters() const {
    std::vector<T> flat(layout_.size());
    copy_parameters(flat);
    return flat;
  }

  std::span<const T> fragment_values(std::uint32_t p) const noexcept { return fragments_[p].global; }
  std::uint64_t revision(std::uint32_t p) const noexcept { return fragments_[p].revision; }
  /// Σ of all fragments' revisions.
  std::uint64_t total_revisions() const noexcept { return metrics_.outer_updates; }

  const fragment_plan& plan() const noexcept { return plan_; }
  const parameter_layout& layout() const noexcept { return layout_; }
  const syncer_options& options() const noexcept { return options_; }
  const syncer_metrics& metrics() const noexcept { return metrics_; }
  OuterOptimizer& outer() noexcept { return outer_; }
  Transport& transport() noexcept { return transport_; }

  /// Writes everything a restarted syncer needs: the global fragments and
  /// their revisions, the idempotency keys, each learner's incarnation,
  /// expected weights and quarantine, the counters, the open rounds (the
  /// contributions accepted and not merged yet) and the outer optimizer's
  /// state. What it cannot know are contributions accepted after it: a
  /// journal (`before_ack`, `replay`) keeps those. Cost: one pass over the
  /// parameters, the open rounds and the optimizer state.
  void save(std::ostream& out) const {
    std::vector<std::vector<saved_contribution<std::span<const T>>>> rounds(fragments_.size());
    std::deque<std::vector<T>> decoded;  // compressed contributions are saved decoded
    for (std::size_t p = 0; p < fragments_.size(); ++p)
      for (const auto& c : fragments_[p].round)
        rounds[p].push_back({c.learner, c.incarnation, c.sequence, c.base_revision, c.tokens, c.steps, c.final,
                             values_of(c, decoded.emplace_back(), fragments_[p].global.size())});
    write_syncer_state<T>(out, layout_.fingerprint(), layout_.size(), fragments_, learners_, metrics_, rounds);
    outer_.save(out);
  }

  /// Restores what `save` wrote, for the same layout and fragment count;
  /// `now` is when the restored open rounds count as opened.
  /// All or nothing: throws `corrupt_state` (naming what is wrong) and
  /// leaves the syncer unchanged on a truncated, corrupt or foreign state, or
  /// one whose parameters are not all finite. Every restored learner starts
  /// as not live: it is welcomed again when it rejoins (learners do so by
  /// themselves when their contributions go unanswered). A state written
  /// before open rounds were kept (version 4 or 3) counts what was pending
  /// in `contributions_lost`.
  void load(std::istream& in, time_point now = clock::now()) {
    syncer_state_shape shape{layout_.fingerprint(), layout_.size(), {}, options_.max_learners};
    for (const auto& f : fragments_) shape.fragment_sizes.push_back(f.global.size());
    auto state = read_syncer_state<T>(in, shape);
    // Last, because it is all or nothing by itself (the OuterOptimizer
    // contract): once it succeeds nothing below can fail.
    outer_.load(in);
    std::size_t restored = 0;
    for (std::size_t p = 0; p < fragments_.size(); ++p) {
      auto& f = fragments_[p];
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
        byte_buffer payload = pool_.acquire(c.values.size() * sizeof(T));
        std::copy(c.values.begin(), c.values.end(), payload.template as<T>().begin());
        double squared = 0.0;
        detail::finite_squared_norm(payload.template as<const T>(), squared);
        add_to_round(f, h, std::move(payload), squared, now);
        ++restored;
      }
    }
    learners_.clear();
    for (auto& [id, record] : state.learners) {
      auto& l = learners_[id];
      static_cast<learner_record&>(l) = std::move(record);
      l.live = false;
      l.bound = false;
    }
    metrics_ = state.metrics;
    started_ = true;  // a saved run was past its rendezvous: learners rejoin one by one
    if (restored != metrics_.contributions_pending) {
      // Only a state without open rounds (before version 5) gets here.
      metrics_.contributions_lost += metrics_.contributions_pending - std::min<std::uint64_t>(restored, metrics_.contributions_pending);
      metrics_.contributions_pending = restored;
    }
  }

  /// Takes back a contribution that a syncer of this run accepted and
  /// acknowledged after its last checkpoint (what `before_ack` journaled),
  /// into its fragment's open round, as if it had just arrived — without
  /// answering anyone and without counting its learner alive. Call it after
  /// `load`, for each journaled message in order. Exactly once: a
  /// contribution the restored state already has (merged, or in an open
  /// round) is recognized by its idempotency key and skipped, as is one that
  /// is malformed, stale or of an incarnation the table has retired. Returns
  /// whether it was taken.
  bool replay(message&& m, time_point now) {
    const auto& h = m.header;
    if (h.kind != message_kind::contribution || h.learner == syncer_peer || h.fragment >= fragments_.size() ||
        !payload::readable<T>(h.codec, h.block))
      return false;
    if (options_.world.size > 0 && !in_world(h.learner)) return false;
    auto& f = fragments_[h.fragment];
    double squared = 0.0;
    if (h.element_count != f.global.size() || m.payload.size() != payload::size(h.codec, f.global.size(), h.block) ||
        h.steps == 0 || impossible_counts(h) || h.base_revision > f.revision ||
        f.revision - h.base_revision > options_.max_staleness ||
        f.seen.contains({h.learner, h.incarnation, h.base_revision}) || !payload_norm(m, squared))
      return false;
    auto it = learners_.find(h.learner);
    if (it != learners_.end() && (h.incarnation < it->second.incarnation || it->second.quarantined)) return false;
    if (it == learners_.end()) {
      if (learners_.size() >= options_.max_learners && !make_room(now)) return false;
      it = learners_.try_emplace(h.learner).first;
      it->second.expected_weight.assign(fragments_.size(), std::nan(""));
      it->second.gone_since = now;
    }
    auto& l = it->second;
    if (h.incarnation > l.incarnation) {  // it restarted after the checkpoint: it rejoins as that incarnation
      l.incarnation = h.incarnation;
      l.left = false;
    }
    l.live = false;
    l.bound = false;
    f.seen.emplace(idempotency_key{h.learner, h.incarnation, h.base_revision}, h.sequence);
    ++metrics_.contributions_accepted;
    ++metrics_.contributions_replayed;
    add_to_round(f, h, std::move(m.payload), squared, now);
    return true;
  }

  /// Why the run failed, or nothing: the rendezvous timed out, or (with
  /// `lost_learner::fail`) a learner of the world stayed dead. A failed
  /// syncer tells its live learners `end`, answers every later message with
  /// `end`, and `run` returns.
  const std::optional<std::string>& failure() const noexcept { return failure_; }

  /// Why the syncer ended the run (`end_options`), or nothing while it goes
  /// on. An ended syncer has merged every open round and answers every
  /// learner's message with `message_kind::end`.
  const std::optional<std::string>& ended() const noexcept { return ended_; }

  /// Ends the run now (as an end rule would): merges the open rounds, tells
  /// every live learner, and `run` returns. `why` is what `ended()` reads.
  void end_run(std::string why, time_point now) {
    if (ended_) return;
    flush(now);
    for (const auto& [id, l] : learners_)
      if (l.live) send_end(l.peer, id, l.incarnation);
    ended_ = std::move(why);
    if (options_.log) options_.log("run ended: " + *ended_);
  }

  /// With a world size: whether all M learners have joined and been welcomed.
  bool started() const noexcept { return started_; }

  /// Learners currently considered alive (joined, not left, heard from recently).
  std::size_t live_learners() const noexcept {
    return static_cast<std::size_t>(std::count_if(learners_.begin(), learners_.end(),
                                                  [](const auto& kv) { return kv.second.live; }));
  }

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
  std::optional<double> training_loss() const {
    const bool any_work = std::any_of(learners_.begin(), learners_.end(),
                                      [](const auto& kv) { return kv.second.live && kv.second.steps_merged > 0; });
    loss_scratch_.clear();
    for (const auto& [id, l] : learners_)
      if (l.live && l.loss && (l.steps_merged > 0 || !any_work))
        loss_scratch_.emplace_back(*l.loss, double(l.steps_merged));
    return detail::weighted_lower_median(loss_scratch_);
  }

  /// Inner steps the learners computed, as they reported them: every
  /// incarnation's last report (heartbeats carry the steps an incarnation
  /// computed, `leave` its total), incarnations that are over included.
  /// Saturates at 2^64 − 1 (a report is the learner's word, and only
  /// measures). Cost: one pass over the learner table.
  std::uint64_t steps_computed() const noexcept {
    std::uint64_t n = metrics_.steps_reported_earlier;
    for (const auto& [id, l] : learners_) n = detail::saturating_add(n, l.steps_reported);
    return n;
  }

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
  bool quarantined(std::uint32_t id) const noexcept {
    const auto it = learners_.find(id);
    return it != learners_.end() && it->second.quarantined;
  }

  /// The grace window a round reaching quorum now would get.
  std::chrono::nanoseconds grace() const {
    return rounds::grace_window({.overlap = options_.training.overlap,
                                 .grace_factor = options_.grace_factor,
                                 .step_ns = step_time(),
                                 .quorum_ns = quorum_time_.value(),
                                 .transfer_ns = transfer_time(),
                                 .max_grace = options_.max_grace});
  }

 private:
  /// A learner: what a checkpoint keeps of it, and its connection and liveness.
  struct learner_entry : learner_record {
    peer_id peer = 0;
    bool bound = true;  ///< false after a restore: the first message of its incarnation names its peer
    bool live = false;
    time_point last_seen{};
    std::optional<time_point> gone_since;  ///< when it left or was declared dead
    std::optional<time_point> unreachable_since;  ///< a send to its connection failed (a claim is pending)
    std::optional<double> loss;  ///< the latest finite training loss it reported
    // What it reports of its timing, each the latest (0: none): the syncer
    // takes the lower median over learners, so that one liar cannot stretch
    // the grace window or the periods.
    double step_ns = 0.0;
    double transfer_ns = 0.0;
    double tokens_per_step = 0.0;  ///< of its latest accepted contribution (0: none)
    std::uint64_t steps_merged = 0;  ///< credited steps of its merged work, this incarnation: its say in the loss
    /// When its latest contribution was accepted, or it first joined: a live
    /// learner that stops contributing stops weighing on rounds.
    std::optional<time_point> worked_at;
    /// Per fragment: when its previous contribution to it was accepted, or
    /// its incarnation joined; what its claimed steps are bounded by.
    std::vector<std::optional<time_point>> last_work;
  };

  struct contribution_entry {
    std::uint32_t learner;
    std::uint32_t incarnation;
    std::uint64_t sequence;
    std::uint64_t base_revision;
    double weight;         ///< the merge weight of this contribution's own work
    double period_weight;  ///< the weight of a full period at its tokens per step
    double norm;           ///< ‖Δ‖₂ as it arrived
    double pace;           ///< `norm` per step^(3/4) of its work (steps capped at H): what clipping compares
    bool final;
    std::uint64_t tokens;  ///< of the work behind it, as the learner reported
    std::uint64_t steps;
    std::uint64_t credited_tokens;  ///< what of it counts as work done (`credit_of`)
    std::uint64_t credited_steps;
    time_point arrived;
    /// Δ as it arrived: `T`s at full precision, else the encoded bytes
    /// (`codec`, `block`), decoded when the round is merged.
    byte_buffer payload;
    codec_id codec = codec_of<T>;
    std::uint32_t block = 0;

    bool compressed() const noexcept { return codec != codec_of<T>; }
  };

  /// A fragment: what a checkpoint keeps of it (values, revision,
  /// idempotency keys), and its open round.
  struct fragment_state : fragment_record<T> {
    std::vector<contribution_entry> round;
    time_point opened{};
    bool quorum = false;
    std::optional<time_point> deadline;
    detail::value_ring paces;  ///< recent published (clipped) paces: outer-gradient norms per step^(3/4)
  };

  /// ξ_step: the lower median of the live learners' latest reports of their
  /// step time (of every learner's in the table while none is live); none
  /// before any report. One liar among honest learners can only pick a
  /// value at or below the honest median.
  std::optional<double> step_time() const { return reported(&learner_entry::step_ns); }

  /// ξ_sync, the same way from the learners' transfer times; 0 before any report.
  double transfer_time() const { return reported(&learner_entry::transfer_ns).value_or(0.0); }

  /// The lower median of the positive `field`s of the live learners, else of
  /// every learner's, other than `except`; none if there is none.
  std::optional<double> reported(double learner_entry::*field,
                                 std::optional<std::uint32_t> except = std::nullopt) const {
    for (const bool live_only : {true, false}) {
      report_scratch_.clear();
      for (const auto& [id, l] : learners_)
        if ((l.live || !live_only) && l.*field > 0.0 && id != except) report_scratch_.push_back(l.*field);
      if (!report_scratch_.empty()) return detail::lower_median(report_scratch_);
    }
    return std::nullopt;
  }

  /// How long a learner's connection must stay unreachable before a second
  /// connection may take its place.
  static constexpr std::chrono::milliseconds confirm_gone{100};

  /// Log lines are rate-limited per category: one per refusal reason, then these.
  enum class log_category : std::size_t { liveness = reject_reason_count, membership, rounds, undecodable, count_ };
  static constexpr std::size_t log_categories = static_cast<std::size_t>(log_category::count_);

  static std::string category_name(std::size_t c) {
    if (c < reject_reason_count) return std::string(to_string(static_cast<reject_reason>(c)));
    switch (static_cast<log_category>(c)) {
      case log_category::liveness: return "liveness";
      case log_category::membership: return "membership";
      case log_category::rounds: return "rounds";
      default: return "undecodable";
    }
  }

  /// Writes `line()` unless its category is over its rate (real time, not
  /// the clock the syncer is driven with: log volume is a real-time matter).
  template <class Line>
  void log(std::size_t category, Line&& line) {
    if (options_.log && log_limit_.admit(category, clock::now())) options_.log(line());
  }
  template <class Line>
  void log(log_category category, Line&& line) {
    log(static_cast<std::size_t>(category), std::forward<Line>(line));
  }

  /// `d` as "12.3 s" (to the tenth of a second).
  static std::string seconds(std::chrono::nanoseconds d) {
    const auto tenths = std::llround(std::chrono::duration<double>(d).count() * 10);
    return std::to_string(tenths / 10) + "." + std::to_string(std::abs(tenths % 10)) + " s";
  }

  static std::string describe(const message_header& h) {
    return "kind " + std::to_string(int(h.kind)) + " from learner " + std::to_string(h.learner) + "/" +
           std::to_string(h.incarnation);
  }

  /// Counts and logs a refused message; answers it with a `reject` when it
  /// came from learner `to`, authenticated by its peer and incarnation.
  void reject(reject_reason why, const message_header& h, const learner_entry* to = nullptr) {
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    if (options_.on_contribution && to && h.kind == message_kind::contribution)
      options_.on_contribution(contribution_event{h.learner, h.incarnation, h.sequence, h.fragment, h.base_revision,
                                                  false, why});
    log(static_cast<std::size_t>(why),
        [&] { return "refused message " + describe(h) + ": " + std::string(to_string(why)); });
    if (to) send_reject(to->peer, h, why);
  }

  /// Counts and logs a message refused for who sent it, and answers the
  /// connection it came from; `current` is the learner's live incarnation
  /// (sent back in a `dead_incarnation` reject's `revision`).
  void reject_sender(reject_reason why, peer_id from, const message_header& h, std::uint32_t current = 0) {
    reject(why, h);
    send_reject(from, h, why, current);
  }

  void send_reject(peer_id to, const message_header& about, reject_reason why, std::uint64_t revision = 0) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::reject;
    h.learner = about.learner;
    h.incarnation = about.incarnation;
    h.fragment = about.kind == message_kind::contribution ? about.fragment : 0;
    h.base_revision = about.kind == message_kind::contribution ? about.base_revision : 0;
    h.answers = about.sequence;
    h.revision = revision;
    h.reason = static_cast<std::uint8_t>(why);
    if (transport_.try_send(to, m))
      ++metrics_.send_failures;
    else
      ++metrics_.verdicts_sent;
  }

  void send_ack(const learner_entry& to, const message_header& about) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::ack;
    h.learner = about.learner;
    h.incarnation = to.incarnation;
    h.fragment = about.fragment;
    h.base_revision = about.base_revision;
    h.answers = about.sequence;
    if (transport_.try_send(to.peer, m))
      ++metrics_.send_failures;
    else
      ++metrics_.verdicts_sent;
  }

  void reject_undecodable(peer_id from, wire_error error) {
    // `none` never comes here (`handle` takes those); counted as truncated
    // rather than left out of the counters if it did.
    reject_reason why = reject_reason::truncated;
    switch (error) {
      case wire_error::none:
      case wire_error::truncated: why = reject_reason::truncated; break;
      case wire_error::bad_magic: why = reject_reason::bad_magic; break;
      case wire_error::bad_version: why = reject_reason::bad_version; break;
      case wire_error::bad_checksum: why = reject_reason::bad_checksum; break;
      case wire_error::bad_header: why = reject_reason::bad_header; break;
      case wire_error::oversized: why = reject_reason::oversized; break;
      case wire_error::unauthorized: why = reject_reason::unauthorized; break;
      case wire_error::over_budget: why = reject_reason::over_budget; break;
    }
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    log(static_cast<std::size_t>(why), [&] {
      return "refused undecodable message from peer " + std::to_string(from) + ": " + std::string(to_string(why));
    });
  }

  /// A valid message from learner `h.learner`: it is alive, and heartbeats
  /// and contributions both report its timing, so the grace window is known
  /// from the first rounds on.
  void accept_from(const message_header& h, learner_entry& l, time_point now) {
    heard_from(h.learner, l, now);
    if (h.step_time_ns > 0) l.step_ns = double(h.step_time_ns);
    if (h.transfer_ns > 0) l.transfer_ns = double(h.transfer_ns);
  }

  /// An incarnation is over (replaced, or its learner forgotten): its last
  /// report of computed steps moves to the syncer's counters (the caller
  /// then forgets it).
  void retire_report(const learner_entry& l) noexcept {
    metrics_.steps_reported_earlier = detail::saturating_add(metrics_.steps_reported_earlier, l.steps_reported);
  }

  void heard_from(std::uint32_t id, learner_entry& l, time_point now) {
    l.last_seen = now;
    if (!l.live && !l.left) {
      l.live = true;
      l.gone_since.reset();
      ++metrics_.revived;
      log(log_category::liveness, [&] { return "learner " + std::to_string(id) + " is alive again"; });
    }
  }

  /// Frees the place of the learner gone longest (left or dead, in no open
  /// round) for a joining one; false if every learner is live.
  bool make_room(time_point now) {
    auto oldest = learners_.end();
    for (auto it = learners_.begin(); it != learners_.end(); ++it) {
      if (it->second.live || in_open_round(it->first)) continue;
      const time_point gone = it->second.gone_since.value_or(now);
      if (oldest == learners_.end() || gone < oldest->second.gone_since.value_or(now)) oldest = it;
    }
    if (oldest == learners_.end()) return false;
    retire_report(oldest->second);
    learners_.erase(oldest);
    ++metrics_.learners_forgotten;
    return true;
  }

  bool in_open_round(std::uint32_t id) const {
    return std::any_of(fragments_.begin(), fragments_.end(), [&](const fragment_state& f) { return contributed(f, id); });
  }

  void on_join(peer_id from, const message_header& h, time_point now) {
    if (h.learner == syncer_peer) return reject(reject_reason::unknown_learner, h);
    if (options_.world.size > 0 && h.learner >= options_.world.size) {
      log(log_category::membership, [&] {
        return "learner " + std::to_string(h.learner) + " refused: the world has learners 0.." +
               std::to_string(options_.world.size - 1);
      });
      return reject_sender(reject_reason::unknown_learner, from, h);
    }
    if (h.layout != layout_.fingerprint() || h.element_count != layout_.size()) {
      // Answer anyway, so that the learner learns why it cannot take part.
      send_welcome(from, h.learner, h.incarnation);
      return reject(reject_reason::layout_mismatch, h);
    }
    auto it = learners_.find(h.learner);
    if (it != learners_.end()) {
      auto& l = it->second;
      if (h.incarnation < l.incarnation || (h.incarnation == l.incarnation && l.left))
        return reject_sender(reject_reason::dead_incarnation, from, h, l.incarnation);
      if (h.incarnation == l.incarnation && l.bound && from != l.peer && l.live) {
        // A second connection for a live learner. The learner's own reconnect
        // (its old connection is gone) takes over; anyone else is refused and
        // the learner on the first connection is told, until that one is
        // gone or declared dead. "Gone" takes two failed sends at least
        // `confirm_gone` apart: libzmq can refuse one send to a live
        // connection whose queue is just draining (EHOSTUNREACH); the learner
        // retries its join every `join_retry` anyway.
        if (transport_reachable(l.peer, h)) {
          l.unreachable_since.reset();
          return reject_sender(reject_reason::peer_conflict, from, h);
        }
        if (!l.unreachable_since || now - *l.unreachable_since < confirm_gone) {
          if (!l.unreachable_since) l.unreachable_since = now;
          return reject_sender(reject_reason::peer_conflict, from, h);
        }
        ++metrics_.reconnects;
        log(log_category::membership,
            [&] { return "learner " + std::to_string(h.learner) + " reconnected from a new peer"; });
      } else if (h.incarnation == l.incarnation && from != l.peer) {
        ++metrics_.reconnects;
      } else if (h.incarnation > l.incarnation) {
        ++metrics_.rejoins;
        l.quarantined = false;  // a new incarnation starts clean
        l.strikes = 0;
        retire_report(l);
        l.steps_reported = 0;
        l.steps_merged = 0;
        l.last_work.assign(fragments_.size(), now);  // a new process: its steps start now
      }
    } else {
      if (learners_.size() >= options_.max_learners && !make_room(now))
        return reject_sender(reject_reason::too_many_learners, from, h);
      it = learners_.try_emplace(h.learner).first;
      it->second.expected_weight.assign(fragments_.size(), std::nan(""));
      it->second.last_work.assign(fragments_.size(), now);
      it->second.worked_at = now;
      ++metrics_.joins;
    }
    auto& l = it->second;
    l.peer = from;
    l.bound = true;
    l.unreachable_since.reset();
    l.incarnation = h.incarnation;
    l.left = false;
    l.live = true;
    l.gone_since.reset();
    l.last_seen = now;
    if (!l.worked_at) l.worked_at = now;  // restored from a checkpoint: silent from now on
    if (joined_.size() < options_.end.expected_learners) joined_.insert(h.learner);
    if (!started_) return start_if_complete(now);  // welcomed with everyone else at the rendezvous
    welcome(h.learner, l);
  }

  /// The welcome and the global state of every fragment this syncer owns.
  void welcome(std::uint32_t id, const learner_entry& l) {
    send_welcome(l.peer, id, l.incarnation);
    for (std::uint32_t p = 0; p < fragments_.size(); ++p)
      if (options_.shard.owns(p)) send_fragment(id, l, p, 0, update_status::resync, 0);
  }

  bool in_world(std::uint32_t id) const noexcept { return id < options_.world.size; }

  /// The fragments this syncer merges: all of them, or its shard's.
  std::uint64_t owned_fragments() const noexcept {
    const auto& s = options_.shard;
    return fragments_.size() / s.count + (s.index < fragments_.size() % s.count ? 1 : 0);
  }

  /// The rendezvous: once all M learners of the world are live, welcomes
  /// them all at once, so that they start together from revision 0.
  void start_if_complete(time_point now) {
    const auto present = std::count_if(learners_.begin(), learners_.end(),
                                       [this](const auto& kv) { return in_world(kv.first) && kv.second.live; });
    if (std::size_t(present) < options_.world.size) return;
    started_ = true;
    log(log_category::membership, [&] {
      return "all " + std::to_string(options_.world.size) + " learners joined after " +
             seconds(now - first_message_.value_or(now)) + ": training starts";
    });
    for (const auto& [id, l] : learners_)
      if (l.live) welcome(id, l);
  }

  /// Whether `end_options::when_all_gone` applies yet: past the rendezvous,
  /// with learners, and as many as `expected_learners` having joined.
  bool all_gone_may_end() const noexcept {
    return options_.end.when_all_gone && started_ && !learners_.empty() &&
           joined_.size() >= options_.end.expected_learners;
  }

  /// Applies `end_options`: ends the run at the first limit reached.
  void check_end(time_point now) {
    if (ended_ || failure_) return;
    const auto& e = options_.end;
    const std::uint64_t p = owned_fragments();
    if (e.max_outer_updates && metrics_.outer_updates >= e.max_outer_updates)
      return end_run(std::to_string(metrics_.outer_updates) + " outer updates (max_outer_updates)", now);
    if (e.max_tokens && metrics_.tokens_merged / p >= e.max_tokens)
      return end_run(std::to_string(metrics_.tokens_merged / p) + " tokens trained (max_tokens)", now);
    if (e.max_steps && metrics_.steps_merged / p >= e.max_steps)
      return end_run(std::to_string(metrics_.steps_merged / p) + " inner steps trained (max_steps)", now);
    if (first_message_ && e.deadline > std::chrono::nanoseconds::zero() && now - *first_message_ >= e.deadline)
      return end_run("deadline of " + seconds(e.deadline) + " reached", now);
    if (all_gone_may_end()) {
      std::size_t left = 0;
      for (const auto& [id, l] : learners_) {
        if (l.live || (!l.left && (!l.gone_since || now - *l.gone_since < *e.when_all_gone))) return;
        left += l.left;
      }
      return end_run("every learner is gone (" + std::to_string(left) + " left, " +
                         std::to_string(learners_.size() - left) + " dead for " + seconds(*e.when_all_gone) +
                         " or more)",
                     now);
    }
  }

  void send_end(peer_id to, std::uint32_t learner, std::uint32_t incarnation) {
    message m;
    m.header.kind = message_kind::end;
    m.header.learner = learner;
    m.header.incarnation = incarnation;
    if (transport_.try_send(to, m)) ++metrics_.send_failures;
  }

  /// After the end: a learner's message is answered with `end` and changes
  /// nothing (a learner that restarts or rejoins then learns it is over).
  void tell_ended(const envelope& e) {
    const auto& h = e.msg.header;
    if (e.error != wire_error::none || h.learner == syncer_peer) return;
    if (h.kind == message_kind::join || h.kind == message_kind::contribution || h.kind == message_kind::heartbeat)
      send_end(e.from, h.learner, h.incarnation);
  }

  /// Fails the run when the rendezvous has timed out, or when a learner of
  /// the world stayed dead past `loss_wait` under `lost_learner::fail`.
  void check_world(time_point now) {
    if (options_.world.size == 0 || failure_) return;
    const auto& w = options_.world;
    if (!started_) {
      if (!first_message_ || now - *first_message_ < w.rendezvous_timeout) return;
      std::string missing;
      std::size_t joined = 0;
      for (std::uint32_t id = 0; id < w.size; ++id) {
        const auto it = learners_.find(id);
        if (it != learners_.end() && it->second.live) ++joined;
        else missing += (missing.empty() ? "" : ", ") + std::to_string(id);
      }
      failure_ = "rendezvous timed out after " + seconds(now - *first_message_) + ": " + std::to_string(joined) +
                 " of " + std::to_string(w.size) + " learners joined; missing learner ids: " + missing;
    } else if (w.on_loss == lost_learner::fail) {
      for (const auto& [id, l] : learners_)
        if (in_world(id) && !l.live && !l.left && l.gone_since && now - *l.gone_since >= w.loss_wait) {
          failure_ = "learner " + std::to_string(id) + " has been dead for " + seconds(now - *l.gone_since) +
                     " (world option on_loss = fail, loss_wait " + seconds(w.loss_wait) + ")";
          break;
        }
    }
    if (!failure_) return;
    // The learners stop too: a failed run is over for them as well.
    for (const auto& [id, l] : learners_)
      if (l.live) send_end(l.peer, id, l.incarnation);
    if (options_.log) options_.log("run failed: " + *failure_);
  }

  /// Whether `peer` is still connected: a `peer_conflict` reject about the
  /// claiming message is sent to it, and a transport that knows the peer is
  /// gone refuses the send (`errc::unknown_peer`, `errc::closed`).
  bool transport_reachable(peer_id peer, const message_header& claim) {
    message m;
    m.header.kind = message_kind::reject;
    m.header.learner = claim.learner;
    m.header.incarnation = claim.incarnation;
    m.header.answers = 0;  // not an answer to anything the learner sent
    m.header.reason = static_cast<std::uint8_t>(reject_reason::peer_conflict);
    const auto e = transport_.try_send(peer, m);
    return !e || e == make_error_code(errc::queue_full);
  }

  void send_welcome(peer_id to, std::uint32_t learner, std::uint32_t incarnation) {
    message m =
        welcome_message<T>(learner, incarnation, layout_.fingerprint(), layout_.size(), options_.training);
    if (options_.shard.count > 1) {
      // Which shard this is, for the learner's `sharded` transport (docs/protocol.md, "Sharded syncers").
      m.header.fragment = options_.shard.index;
      m.header.steps = options_.shard.count;
    }
    if (transport_.try_send(to, m)) ++metrics_.send_failures;
  }

  void send_fragment(std::uint32_t id, const learner_entry& l, std::uint32_t p, std::uint64_t answers,
                     update_status status, std::int64_t hold_ns) {
    const auto& f = fragments_[p];
    message m;
    auto& h = m.header;
    h.kind = message_kind::update;
    h.status = status;
    h.learner = id;
    h.incarnation = l.incarnation;
    h.fragment = p;
    h.revision = f.revision;
    h.answers = answers;
    h.hold_ns = hold_ns;
    h.element_count = f.global.size();
    h.codec = update_codec_;
    h.block = block_scaled(h.codec) ? options_.training.codecs.block : 0;
    m.payload = pool_.acquire(payload::size(h.codec, f.global.size(), h.block));
    // The global values are finite (every outer step is checked), and a
    // compressed codec saturates rather than overflow: this cannot fail.
    [[maybe_unused]] const bool encoded =
        payload::encode<T>(h.codec, h.block, f.global.size(), [&](std::size_t i) { return f.global[i]; }, m.payload.bytes());
    assert(encoded);
    const std::size_t bytes = m.payload.size();  // the transport may take the payload
    if (transport_.try_send(l.peer, m)) {
      ++metrics_.send_failures;
    } else {
      ++metrics_.updates_sent;
      metrics_.payload_bytes_sent += bytes;
    }
  }

  /// A strike against learner `id`: its count goes up by 2 (a clean
  /// contribution takes 1 off), and at 2 × `quarantine_after` it is
  /// quarantined — after `quarantine_after` bad contributions in a row, or
  /// more than one in three over a longer stretch.
  void strike(std::uint32_t id, learner_entry& l) {
    const auto limit = options_.screening.quarantine_after;
    if (limit == 0 || l.quarantined) return;
    l.strikes += 2;
    if (l.strikes < 2 * limit) return;
    l.quarantined = true;
    ++metrics_.quarantines;
    log(log_category::membership, [&] {
      return "learner " + std::to_string(id) + "/" + std::to_string(l.incarnation) +
             " quarantined: too many of its contributions were clipped or refused; refused until it rejoins";
    });
  }

  /// Refuses a contribution for its content: counted against the learner.
  void reject_content(reject_reason why, const message_header& h, learner_entry& l) {
    reject(why, h, &l);
    strike(h.learner, l);
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

  void on_contribution(std::uint32_t id, message&& m, time_point now) {
    const auto& h = m.header;
    auto& l = learners_.at(id);
    // Another shard's fragment is as foreign to this syncer as one past P.
    if (h.fragment >= fragments_.size() || !options_.shard.owns(h.fragment))
      return reject(reject_reason::bad_fragment, h, &l);
    auto& f = fragments_[h.fragment];
    if (!payload::readable<T>(h.codec, h.block)) return reject(reject_reason::bad_codec, h, &l);
    if (h.element_count != f.global.size() || m.payload.size() != payload::size(h.codec, f.global.size(), h.block))
      return reject_content(reject_reason::bad_size, h, l);
    if (h.steps == 0) return reject(reject_reason::no_work, h, &l);
    if (impossible_counts(h)) return reject_content(reject_reason::bad_counts, h, l);
    // A NaN or an infinity would poison the global model and every learner
    // that adopts it, for good. (Before the idempotency key is recorded.)
    double squared = 0.0;
    if (!payload_norm(m, squared)) return reject_content(reject_reason::non_finite, h, l);
    // Future, stale and duplicate contributions come from learners out of
    // step with this syncer (behind it, or ahead of a syncer restored from an
    // older checkpoint): the current fragment goes with the refusal.
    if (h.base_revision > f.revision) {
      reject(reject_reason::future_base, h, &l);
      return send_fragment(id, l, h.fragment, h.sequence, update_status::resync, 0);
    }
    if (f.revision - h.base_revision > options_.max_staleness) {
      reject(reject_reason::stale, h, &l);
      return send_fragment(id, l, h.fragment, h.sequence, update_status::resync, 0);
    }
    if (const auto key = f.seen.find({id, h.incarnation, h.base_revision}); key != f.seen.end()) {
      // The very contribution again (a network duplicate or a replay): the
      // original was answered, answering its copy would read as a refusal of
      // the original. Another one against the same base: refused with a
      // resync, since it repeats work the first one carried.
      if (key->second == h.sequence) return reject(reject_reason::duplicate, h);
      reject(reject_reason::duplicate, h, &l);
      return send_fragment(id, l, h.fragment, h.sequence, update_status::resync, 0);
    }
    if (options_.before_ack) options_.before_ack(m);  // durable first; may throw, nothing recorded yet
    f.seen.emplace(idempotency_key{id, h.incarnation, h.base_revision}, h.sequence);
    accept_from(h, l, now);
    ++metrics_.contributions_accepted;
    if (options_.on_contribution)
      options_.on_contribution(contribution_event{id, h.incarnation, h.sequence, h.fragment, h.base_revision, true,
                                                  reject_reason::none});
    send_ack(l, h);
    metrics_.payload_bytes_received += m.payload.size();
    const auto credit = credit_of(h, l, now);
    add_to_round(f, h, std::move(m.payload), squared, now, credit);
    advance_round(h.fragment, now);
  }

  /// Checks the outer gradient of contribution `m` (whose codec is
  /// `readable` and size right) and sets `squared` to ‖Δ‖²; false if a value
  /// is not finite or a compressed payload is malformed. A compressed one is
  /// decoded for that without being kept: it stays compressed until its round
  /// is merged. Cost: one pass over the payload.
  static bool payload_norm(const message& m, double& squared) {
    const auto& h = m.header;
    if (h.codec == codec_of<T>) return detail::finite_squared_norm(m.payload.template as<const T>(), squared);
    const auto f = *format_of(h.codec);
    const auto n = static_cast<std::size_t>(h.element_count);
    if (!codec::valid(f, n, h.block, m.payload.bytes())) return false;
    double sum = 0.0;
    codec::decode(f, n, h.block, m.payload.bytes(), [&sum](std::size_t, float v) { sum += double(v) * double(v); });
    squared = sum;
    return std::isfinite(sum);
  }

  /// Adds `c ·` contribution `e`'s outer gradient to `out`, in one pass over
  /// its payload (decoding it on the way when it is compressed). For a
  /// `float` model, the fused pass of codec/kernels.hpp on `threads` threads
  /// (the merge policy's; the result does not depend on them).
  static void accumulate(const contribution_entry& e, T c, std::span<T> out, unsigned threads) {
    if constexpr (std::is_same_v<T, float>) {
      if (const auto f = format_of(e.codec))
        return codec::decode_accumulate(*f, e.block, e.payload.bytes(), c, out, threads);
    }
    if (!e.compressed()) {
      const T* d = e.payload.template as<const T>().data();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] += c * d[i];
      return;
    }
    T* o = out.data();
    codec::decode(*format_of(e.codec), out.size(), e.block, e.payload.bytes(),
                  [o, c](std::size_t i, float v) { o[i] += c * T(v); });
  }

  /// Contribution `e`'s outer gradient as `T`s: its payload, or the payload
  /// decoded into `scratch`.
  static std::span<const T> values_of(const contribution_entry& e, std::vector<T>& scratch, std::size_t n) {
    if (!e.compressed()) return e.payload.template as<const T>();
    scratch.resize(n);
    codec::decode(*format_of(e.codec), n, e.block, e.payload.bytes(),
                  [&scratch](std::size_t i, float v) { scratch[i] = T(v); });
    return scratch;
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
                                      reported(&learner_entry::step_ns, h.learner), factor);
    const auto tokens =
        credited_tokens(h.tokens, h.steps, steps, reported(&learner_entry::tokens_per_step, h.learner), factor);
    if (steps < h.steps || tokens < h.tokens) {
      ++metrics_.counts_capped;
      log(log_category::rounds, [&] {
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
  void add_to_round(fragment_state& f, const message_header& h, byte_buffer&& payload, double squared,
                    time_point now, std::pair<std::uint64_t, std::uint64_t> credit = {}) {
    if (credit.second == 0) credit = {h.tokens, h.steps};
    // tokens ≤ steps · 2^64 and steps ≥ 1: both weights are finite in double.
    const double weight = merge_.weight(h.tokens, h.steps);
    const double period_weight = merge_.weight(rounds::period_tokens(h.tokens, h.steps, options_.training.sync_period),
                                               options_.training.sync_period);
    const double norm = std::sqrt(squared);
    ++metrics_.contributions_pending;
    if (f.round.empty()) f.opened = now;
    f.round.push_back(contribution_entry{h.learner, h.incarnation, h.sequence, h.base_revision, weight, period_weight,
                                         norm, pace(norm, h.steps, options_.training.sync_period),
                                         (h.flags & final_contribution) != 0, h.tokens, h.steps, credit.first,
                                         credit.second, now, std::move(payload), h.codec, h.block});
  }

  /// Distinct learners in fragment p's open round.
  std::size_t contributors(const fragment_state& f) const {
    std::set<std::uint32_t> ids;
    for (const auto& c : f.round) ids.insert(c.learner);
    return ids.size();
  }

  bool contributed(const fragment_state& f, std::uint32_t id) const {
    return std::any_of(f.round.begin(), f.round.end(), [id](const auto& c) { return c.learner == id; });
  }

  /// Distinct contributors a round without anyone missing has: M with a
  /// world size, else the live learners that are not quarantined.
  std::size_t whole_round() const {
    if (options_.world.size > 0) return options_.world.size;
    return static_cast<std::size_t>(std::count_if(learners_.begin(), learners_.end(), [](const auto& kv) {
      return kv.second.live && !kv.second.quarantined;
    }));
  }

  /// Opens the grace window once the quorum is in, and closes the round when
  /// the window has passed or no live learner is missing.
  void advance_round(std::uint32_t p, time_point now) {
    auto& f = fragments_[p];
    if (f.round.empty()) return;
    // Learners that can still contribute: not departed, or already in the round.
    // With a world size: its members, where a dead one counts only for
    // `loss_wait` after it was declared dead, and the quorum is all of them.
    const auto& w = options_.world;
    std::size_t possible = 0;
    bool everyone_in = true;
    for (const auto& [id, l] : learners_) {
      const bool in = contributed(f, id);
      const bool may_come = w.size == 0 ? !l.left : in_world(id) && !l.left &&
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
    if (f.quorum && (everyone_in || now >= *f.deadline)) close_round(p, now);
  }

  /// How long an absent learner's weight takes to halve now.
  std::chrono::duration<double> half_life() const {
    return rounds::absent_half_life(step_time(), options_.training.sync_period, options_.heartbeat_timeout,
                                    options_.membership.absent_half_life);
  }

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
    const auto half = half_life();
    const auto period = rounds::absent_half_life(step_time(), options_.training.sync_period,
                                                 options_.heartbeat_timeout, 1.0);
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
      members_.push_back({.in_round = false,
                          .weight = weight,
                          .live = l.live,
                          .quarantined = l.quarantined,
                          .presence = presence});
    }
    const double cap = std::isfinite(weights.outlier) ? weights.outlier : weights.reference;
    return rounds::partial_round_scale(options_.scaling, members_, cap);
  }

  void close_round(std::uint32_t p, time_point now) {
    auto& f = fragments_[p];
    // Merge in a fixed order, not arrival order: floating-point sums depend
    // on order, and a reordering network must not change the result.
    std::sort(f.round.begin(), f.round.end(), [](const contribution_entry& a, const contribution_entry& b) {
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
        strike(c.learner, l);
      } else {
        l.strikes -= std::min<std::uint32_t>(l.strikes, 1);
      }
    }
    if (any_clipped)
      log(log_category::rounds, [&] { return "clipped contributions to fragment " + std::to_string(p) + describe_round(f); });
    const double scale = round_scale(p, present, weights, now);

    std::uint64_t max_staleness = 0;
    for (const auto& c : f.round) max_staleness = std::max(max_staleness, f.revision - c.base_revision);
    const std::span<T> delta(delta_.data(), f.global.size());
    merge_round(p, scale, delta);
    if (auto why = apply_outer_step(p, delta)) return drop_round(p, *why, now);
    for (const auto& pace : clipped_paces_) f.paces.add(pace.value, pace.source);  // only what was published

    ++f.revision;
    ++metrics_.outer_updates;
    metrics_.contributions_merged += f.round.size();
    metrics_.contributions_pending -= f.round.size();
    metrics_.staleness_max = std::max(metrics_.staleness_max, max_staleness);
    for (const auto& c : f.round) {
      metrics_.staleness_sum += f.revision - 1 - c.base_revision;
      metrics_.tokens_merged = detail::saturating_add(metrics_.tokens_merged, c.credited_tokens);
      metrics_.steps_merged = detail::saturating_add(metrics_.steps_merged, c.credited_steps);
      if (auto it = learners_.find(c.learner); it != learners_.end() && it->second.incarnation == c.incarnation)
        it->second.steps_merged = detail::saturating_add(it->second.steps_merged, c.credited_steps);
    }

    if (contributors(f) < whole_round()) ++metrics_.partial_rounds;
    const auto contributors_merged = static_cast<std::uint32_t>(f.round.size());
    update_event event{p, f.revision, contributors_merged, max_staleness, scale, now, {}};
    event.training_loss = training_loss();
    if (options_.on_contribution)
      for (const auto& c : f.round)
        event.contributions.push_back({c.learner, c.incarnation, c.sequence, f.revision - 1 - c.base_revision});
    // Keys older than S revisions can never be accepted again: forget them.
    std::erase_if(f.seen, [&](const auto& entry) { return std::get<2>(entry.first) + options_.max_staleness < f.revision; });

    // The merged round leaves the fragment before anything is published: a
    // checkpoint that `before_publish` writes must not keep it as open.
    const std::vector<contribution_entry> merged = std::move(f.round);
    f.round.clear();
    f.quorum = false;
    f.deadline.reset();
    if (options_.before_publish) options_.before_publish(event);
    for (const auto& [id, l] : learners_) {
      if (!l.live) continue;
      std::uint64_t answers = 0;
      std::int64_t hold = 0;
      for (const auto& c : merged)
        if (c.learner == id && c.sequence > answers) {
          answers = c.sequence;
          hold = (now - c.arrived).count();
        }
      if (answers != 0 || options_.recipients == update_recipients::live_learners)
        send_fragment(id, l, p, answers, update_status::merged, hold);
    }
    if (options_.on_update) options_.on_update(event);
    if (options_.evaluate_every && metrics_.outer_updates % options_.evaluate_every == 0) evaluate(now);
  }

  /// The threads the merge policy merges on (its `threads`, if it has one).
  unsigned merge_threads() const noexcept {
    if constexpr (requires { unsigned(merge_.threads); }) return unsigned(merge_.threads);
    else return 1;
  }

  /// Merges fragment p's round into `delta`. A linear merge (a weighted
  /// mean) of compressed contributions decodes each one straight into the
  /// weighted sum, one pass over its bytes; any other merge gets every
  /// contribution decoded. Both give the bits a merge of the decoded values
  /// gives: the same products summed in the same order.
  void merge_round(std::uint32_t p, double scale, std::span<T> delta) {
    const auto& round = fragments_[p].round;
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
  std::optional<drop_reason> apply_outer_step(std::uint32_t p, std::span<const T> delta) {
    auto& global = fragments_[p].global;
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

  /// Publishes nothing for fragment p: its contributions count as dropped,
  /// their learners get a strike each and the current fragment as a resync
  /// (so that lock-step learners stop waiting), and their idempotency keys
  /// are forgotten (their work was not merged: a new contribution against
  /// the same base is no duplicate).
  void drop_round(std::uint32_t p, drop_reason why, time_point now) {
    auto& f = fragments_[p];
    ++metrics_.rounds_dropped;
    metrics_.contributions_dropped += f.round.size();
    metrics_.contributions_pending -= f.round.size();
    log(log_category::rounds, [&] {
      return "dropped a round of fragment " + std::to_string(p) + " at revision " + std::to_string(f.revision) +
             " (" + std::string(to_string(why)) + ")" + describe_round(f);
    });
    drop_event event{p, f.revision, why, now, {}};
    for (const auto& c : f.round)
      event.contributions.push_back({{c.learner, c.incarnation, c.sequence, f.revision - c.base_revision}, c.norm});
    for (const auto& c : f.round) {
      f.seen.erase({c.learner, c.incarnation, c.base_revision});
      auto& l = learners_.at(c.learner);
      strike(c.learner, l);
      if (l.live) send_fragment(c.learner, l, p, c.sequence, update_status::resync, 0);
    }
    f.round.clear();
    f.quorum = false;
    f.deadline.reset();
    if (options_.on_drop) options_.on_drop(event);
  }

  /// A heartbeat's loss becomes the learner's latest unless it is NaN or
  /// infinite (counted). A finite value can still be a lie: `training_loss`
  /// bounds what it can do.
  void note_loss(const message_header& h, learner_entry& l) {
    if (!h.loss) return;
    if (!std::isfinite(*h.loss)) {
      ++metrics_.losses_ignored;
      return;
    }
    l.loss = *h.loss;
  }

  /// Calls `on_evaluate` with the global parameters gathered into `flat_`.
  void evaluate(time_point now) {
    if (!options_.on_evaluate) return;
    flat_.resize(layout_.size());
    copy_parameters(flat_);
    revisions_.clear();
    for (const auto& f : fragments_) revisions_.push_back(f.revision);
    options_.on_evaluate(evaluation_context{std::span<const T>(flat_), metrics_.outer_updates, revisions_,
                                            training_loss(), now});
  }

  /// ": learner 1/2 norm 0.5 weight 3, …" for a log line.
  std::string describe_round(const fragment_state& f) const {
    std::string s = ":";
    for (const auto& c : f.round)
      s += " learner " + std::to_string(c.learner) + "/" + std::to_string(c.incarnation) + " norm " +
           std::to_string(c.norm) + " weight " + std::to_string(c.weight) + ";";
    return s;
  }

  parameter_layout layout_;
  Transport& transport_;
  syncer_options options_;
  OuterOptimizer outer_;
  MergePolicy merge_;
  fragment_plan plan_;
  std::vector<fragment_state> fragments_;
  std::vector<T> delta_;
  codec_id update_codec_ = codec_id_of<T>(options_.training.codecs.updates);
  std::vector<T> backup_;         ///< a fragment's values before its outer step
  std::vector<double> scratch_;   ///< medians
  mutable std::vector<double> report_scratch_;  ///< medians of the learners' reports
  mutable std::vector<std::pair<double, double>> loss_scratch_;  ///< (loss, merged steps) per learner
  std::vector<detail::sourced_value> round_paces_;    ///< a closing round's paces as they arrived
  std::vector<detail::sourced_value> pace_scratch_;   ///< medians of paces per learner
  std::vector<detail::sourced_value> clipped_paces_;  ///< a closing round's paces after clipping
  std::vector<T> clip_factors_;        ///< a closing round's clipping factors of compressed contributions (1: none)
  std::deque<std::vector<T>> decoded_;  ///< a closing round's compressed contributions, decoded for a non-linear merge
  std::vector<rounds::round_member> members_;  ///< the learner table as a closing round's scale sees it
  std::vector<T> flat_;                        ///< the global parameters for `on_evaluate`
  std::vector<std::uint64_t> revisions_;       ///< each fragment's revision for `on_evaluate`
  std::map<std::uint32_t, learner_entry> learners_;
  buffer_pool pool_;
  detail::ema quorum_time_;
  detail::log_limiter log_limit_;
  syncer_metrics metrics_;
  bool started_ = true;                     ///< past the rendezvous (always, without a world size)
  std::set<std::uint32_t> joined_;  ///< learners that joined, up to `end_options::expected_learners`
  std::optional<time_point> first_message_;  ///< when the rendezvous began
  std::optional<std::string> failure_;
  std::optional<std::string> ended_;
};

}  // namespace diloco
