// The syncer: collects fragment contributions, merges them, applies the outer
// optimizer and sends the new global fragment back.
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <istream>
#include <ostream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/detail/ema.hpp"
#include "diloco/detail/serialize.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/transport/buffer.hpp"
#include "diloco/transport/message.hpp"

namespace diloco {

/// How a round with only some learners' contributions is sized.
///
/// DESIGN 2.3 reports (and `tests/runtime/partial_rounds.cpp` checks) that
/// letting every partial round take a full outer step diverges: the number of
/// outer steps per unit of work grows with asynchrony.
enum class partial_rounds {
  /// Normalize over the contributors only: every round is a full step.
  full_step,
  /// Scale by the contributors' share of the live learners' expected weight.
  live_share,
  /// Scale by the contributors' share of the expected weight of every learner
  /// that ever joined (absent and finished ones included): absent learners
  /// count as a zero outer gradient, exactly DiLoCo's average. The default.
  all_share,
};

/// Who receives a fragment's new revision.
enum class update_recipients {
  /// Every live learner (DESIGN 2.3). Learners keep adopting fresh revisions,
  /// so their outer gradients are computed against recent bases. The default.
  live_learners,
  /// Only the live learners whose contributions it merged: one download per
  /// upload, but each learner's base then lags by the other learners' merges
  /// (3 revisions with 4 learners), and Nesterov momentum with that delay
  /// oscillates (a 4-learner line fit swings to 9× its error before settling);
  /// pair it with `outer::delayed_nesterov`.
  contributors,
};

/// What the syncer reports after each outer update.
struct update_event {
  std::uint32_t fragment = 0;
  std::uint64_t revision = 0;       ///< the new revision
  std::uint32_t contributors = 0;   ///< contributions merged
  std::uint64_t max_staleness = 0;  ///< largest (revision before the merge − base revision) merged
  double scale = 1.0;               ///< share applied to the merged outer gradient
  time_point at{};
  /// Who was merged; filled only when `syncer_options::on_contribution` is
  /// set (accounting runs want it, others need not pay for it).
  std::vector<merged_contribution> contributions{};
};

/// Settings of the syncer (DESIGN 2.3). `training` is sent to every learner.
struct syncer_options {
  training_config training;
  std::uint32_t quorum = 1;          ///< K, distinct learners before a round may close
  double grace_factor = 0.5;         ///< γ in [0, 1): share of the slack spent waiting for more learners
  std::chrono::nanoseconds max_grace = std::chrono::seconds(1);  ///< upper bound of one grace window
  std::uint32_t max_staleness = 16;  ///< S: refuse a base more than S revisions old
  std::uint32_t max_learners = 4096; ///< distinct learner ids it keeps track of (every round visits them all)
  std::chrono::nanoseconds heartbeat_timeout = std::chrono::seconds(10);  ///< silence before a learner is dead
  partial_rounds scaling = partial_rounds::all_share;
  update_recipients recipients = update_recipients::live_learners;
  double ema_decay = 0.8;            ///< smoothing of step, quorum and transfer times
  /// Called for every refused message and liveness change; defaults to stderr.
  std::function<void(const std::string&)> log = [](const std::string& line) { std::cerr << "diloco syncer: " << line << '\n'; };
  /// These options with the syncer's timeouts taken from `t` (checked).
  syncer_options with(const timeouts& t) const {
    t.check();
    syncer_options o = *this;
    o.heartbeat_timeout = t.dead_after;
    return o;
  }

  /// Called after every outer update (on the syncer's thread).
  std::function<void(const update_event&)> on_update;
  /// Called after a new revision exists and before any learner is sent it:
  /// the place to make it durable (`save` the syncer), so that no learner
  /// ever sees a revision that a restarted syncer would not have.
  std::function<void(const update_event&)> before_publish;
  /// Called for every contribution from a known learner, accepted (before its
  /// acknowledgement is sent) or refused with a reason.
  std::function<void(const contribution_event&)> on_contribution{};
};

/// The syncer (DESIGN 2.3). For each fragment it collects contributions; when
/// K distinct learners have contributed it opens the adaptive grace window of
/// `γ·(τ·ξ_step − ξ_quorum − ξ_sync)` (never negative, at most `max_grace`),
/// closing early once every live learner is in; then it merges, scales partial
/// rounds, applies the outer optimizer, bumps the revision and sends the new
/// fragment to every live learner (see `update_recipients`).
///
/// Like the learner it is driven from outside: `handle` each received
/// envelope, and call `poll` by the deadline it returns. `run` does both for
/// blocking transports. Not thread-safe: one thread drives a syncer.
template <class OuterOptimizer, class MergePolicy, class Transport>
class syncer {
  static_assert(detail::check_outer_optimizer<OuterOptimizer>());
  static_assert(detail::check_transport<Transport>());

 public:
  using scalar_type = typename OuterOptimizer::scalar_type;
  using T = scalar_type;
  static_assert(detail::check_merge_policy<MergePolicy, T>());

  /// Starts from `initial` parameters (flat, in `layout` order) at revision 0.
  /// Throws `std::invalid_argument` for inconsistent settings.
  syncer(const parameter_layout& layout, std::span<const T> initial, Transport& transport,
         syncer_options options = {}, OuterOptimizer outer = OuterOptimizer{}, MergePolicy merge = MergePolicy{})
      : layout_(layout),
        transport_(transport),
        options_(std::move(options)),
        outer_(std::move(outer)),
        merge_(std::move(merge)),
        step_time_(options_.ema_decay),
        quorum_time_(options_.ema_decay),
        transfer_time_(options_.ema_decay) {
    const auto& c = options_.training;
    if (initial.size() != layout.size())
      throw std::invalid_argument("diloco::syncer: initial parameters (" + std::to_string(initial.size()) +
                                  ") do not match the layout (" + std::to_string(layout.size()) + ")");
    if (c.sync_period == 0) throw std::invalid_argument("diloco::syncer: sync period H must be at least 1");
    if (c.overlap >= c.sync_period)
      throw std::invalid_argument("diloco::syncer: overlap tau must be smaller than the sync period H");
    if (!(c.mixing >= 0.0 && c.mixing < 1.0)) throw std::invalid_argument("diloco::syncer: mixing alpha must be in [0, 1)");
    if (options_.quorum == 0) throw std::invalid_argument("diloco::syncer: quorum K must be at least 1");
    if (!(options_.grace_factor >= 0.0 && options_.grace_factor < 1.0))
      throw std::invalid_argument("diloco::syncer: grace factor gamma must be in [0, 1)");
    if (options_.heartbeat_timeout <= std::chrono::nanoseconds::zero())
      throw std::invalid_argument("diloco::syncer: heartbeat timeout must be positive");
    if (options_.max_grace >= options_.heartbeat_timeout)
      throw std::invalid_argument("diloco::syncer: max_grace must be shorter than the heartbeat timeout");
    plan_ = fragment_plan::balanced(layout, c.fragments);  // validates P
    fragments_.resize(c.fragments);
    for (std::uint32_t p = 0; p < c.fragments; ++p) {
      fragments_[p].global.resize(plan_[p].size());
      plan_.gather<T>(p, initial, fragments_[p].global);
    }
    delta_.resize(plan_.count() ? std::max_element(plan_.fragments().begin(), plan_.fragments().end(),
                                                   [](const fragment& a, const fragment& b) {
                                                     return a.size() < b.size();
                                                   })->size()
                                : 0);
  }

  syncer(const syncer&) = delete;
  syncer& operator=(const syncer&) = delete;

  /// Validates and applies one message. Never throws for bad input: a refused
  /// message is counted by reason and logged, and changes nothing else.
  void handle(envelope&& e, time_point now) {
    if (e.error != wire_error::none) return reject_undecodable(e.from, e.error);
    auto& h = e.msg.header;
    if (h.kind == message_kind::join) return on_join(e.from, h, now);
    if (h.kind != message_kind::contribution && h.kind != message_kind::heartbeat && h.kind != message_kind::leave)
      return reject(reject_reason::unexpected_kind, h);
    auto it = learners_.find(h.learner);
    if (it == learners_.end()) return reject(reject_reason::unknown_learner, h);
    auto& l = it->second;
    // Incarnation first: a late message of a restarted learner comes from its
    // old connection, and "dead incarnation" says more than "wrong peer".
    if (h.incarnation < l.incarnation || (h.incarnation == l.incarnation && l.left))
      return reject(reject_reason::dead_incarnation, h);
    if (h.incarnation > l.incarnation) return reject(reject_reason::unknown_incarnation, h);
    if (!l.bound) {
      // Restored from a checkpoint: the learner's connection is new.
      l.peer = e.from;
      l.bound = true;
      ++metrics_.reconnects;
    }
    if (e.from != l.peer) return reject(reject_reason::wrong_peer, h);
    // A contribution counts (liveness, timing) only once it is accepted: a
    // refusal changes nothing but counters.
    if (h.kind == message_kind::contribution) return on_contribution(h.learner, std::move(e.msg), now);
    accept_from(h, l, now);
    switch (h.kind) {
      case message_kind::heartbeat:
        break;
      default:  // leave
        l.left = true;
        l.live = false;
        ++metrics_.leaves;
        for (std::uint32_t p = 0; p < fragments_.size(); ++p) advance_round(p, now);
        break;
    }
  }

  /// Declares silent learners dead and closes rounds whose grace window ended
  /// (or whose quorum became reachable). Returns when it next needs a call.
  std::optional<time_point> poll(time_point now) {
    for (auto& [id, l] : learners_) {
      if (l.live && now - l.last_seen >= options_.heartbeat_timeout) {
        l.live = false;
        ++metrics_.declared_dead;
        options_.log("learner " + std::to_string(id) + " silent for " + seconds(now - l.last_seen) +
                     ", declared dead");
      }
    }
    std::optional<time_point> next;
    auto earliest = [&next](time_point t) {
      if (!next || t < *next) next = t;
    };
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) {
      advance_round(p, now);
      if (fragments_[p].deadline) earliest(*fragments_[p].deadline);
    }
    for (const auto& [id, l] : learners_)
      if (l.live) earliest(l.last_seen + options_.heartbeat_timeout);
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
    while (!stop.stop_requested() && !done()) {
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
  /// their revisions, the idempotency keys, each learner's incarnation and
  /// expected weights, the counters and the outer optimizer's state. Open
  /// rounds are not written: a contribution accepted but not yet merged is
  /// lost with the process, and `load` counts it in `contributions_lost`.
  /// Cost: one pass over the parameters and the optimizer state.
  void save(std::ostream& out) const {
    detail::write_tag(out, "SYNC", 2);
    detail::write_pod<std::uint64_t>(out, layout_.fingerprint());
    detail::write_pod<std::uint64_t>(out, layout_.size());
    const auto& c = options_.training;
    detail::write_pod(out, c.fragments);
    for (const auto& f : fragments_) {
      detail::write_pod(out, f.revision);
      detail::write_array(out, f.global);
      detail::write_pod<std::uint64_t>(out, f.seen.size());
      for (const auto& [key, sequence] : f.seen) {
        const auto& [learner, incarnation, base] = key;
        detail::write_pod(out, learner);
        detail::write_pod(out, incarnation);
        detail::write_pod(out, base);
        detail::write_pod(out, sequence);
      }
    }
    detail::write_pod<std::uint64_t>(out, learners_.size());
    for (const auto& [id, l] : learners_) {
      detail::write_pod(out, id);
      detail::write_pod(out, l.incarnation);
      detail::write_pod<std::uint8_t>(out, l.left ? 1 : 0);
      detail::write_array(out, l.expected_weight);
    }
    detail::write_pod(out, metrics_);
    outer_.save(out);
  }

  /// Restores what `save` wrote, for the same layout and fragment count.
  /// All or nothing: throws `detail::corrupt_state` (naming what is wrong) and
  /// leaves the syncer unchanged on a truncated, corrupt or foreign state.
  /// Every restored learner starts as not live: it is welcomed again when it
  /// rejoins (learners do so by themselves when their contributions go
  /// unanswered).
  void load(std::istream& in) {
    detail::expect_tag(in, "SYNC", 2);
    if (detail::read_pod<std::uint64_t>(in, "layout fingerprint") != layout_.fingerprint() ||
        detail::read_pod<std::uint64_t>(in, "parameter count") != layout_.size())
      throw detail::corrupt_state("diloco: the checkpoint is of another model");
    if (detail::read_pod<std::uint32_t>(in, "fragment count") != fragments_.size())
      throw detail::corrupt_state("diloco: the checkpoint has another fragment count");
    std::vector<fragment_state> fragments(fragments_.size());
    for (std::size_t p = 0; p < fragments.size(); ++p) {
      auto& f = fragments[p];
      f.revision = detail::read_pod<std::uint64_t>(in, "revision");
      f.global = detail::read_array<T>(in, fragments_[p].global.size(), "global fragment");
      if (f.global.size() != fragments_[p].global.size())
        throw detail::corrupt_state("diloco: a checkpointed fragment has the wrong size");
      const auto keys = detail::read_pod<std::uint64_t>(in, "idempotency key count");
      if (keys > (std::uint64_t{1} << 32)) throw detail::corrupt_state("diloco: implausible idempotency key count");
      for (std::uint64_t k = 0; k < keys; ++k) {
        const auto learner = detail::read_pod<std::uint32_t>(in, "key learner");
        const auto incarnation = detail::read_pod<std::uint32_t>(in, "key incarnation");
        const auto base = detail::read_pod<std::uint64_t>(in, "key base revision");
        const auto sequence = detail::read_pod<std::uint64_t>(in, "key sequence");
        f.seen.emplace(std::make_tuple(learner, incarnation, base), sequence);
      }
    }
    std::map<std::uint32_t, learner_entry> learners;
    const auto count = detail::read_pod<std::uint64_t>(in, "learner count");
    if (count > options_.max_learners) throw detail::corrupt_state("diloco: more learners than max_learners");
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto id = detail::read_pod<std::uint32_t>(in, "learner id");
      auto& l = learners[id];
      l.incarnation = detail::read_pod<std::uint32_t>(in, "learner incarnation");
      const auto left = detail::read_pod<std::uint8_t>(in, "learner left");
      if (left > 1) throw detail::corrupt_state("diloco: bad learner flag");
      l.left = left == 1;
      l.live = false;
      l.bound = false;
      l.expected_weight = detail::read_array<double>(in, fragments_.size(), "expected weights");
      if (l.expected_weight.size() != fragments_.size())
        throw detail::corrupt_state("diloco: expected weights of the wrong size");
    }
    auto metrics = detail::read_pod<syncer_metrics>(in, "counters");
    // Last, because it is all or nothing by itself (the OuterOptimizer
    // contract): once it succeeds nothing below can fail.
    outer_.load(in);
    for (std::size_t p = 0; p < fragments.size(); ++p) {
      fragments_[p].revision = fragments[p].revision;
      fragments_[p].global = std::move(fragments[p].global);
      fragments_[p].seen = std::move(fragments[p].seen);
      fragments_[p].round.clear();
      fragments_[p].quorum = false;
      fragments_[p].deadline.reset();
    }
    learners_ = std::move(learners);
    metrics.contributions_lost += metrics.contributions_pending;
    metrics.contributions_pending = 0;
    metrics_ = metrics;
  }

  /// Learners currently considered alive (joined, not left, heard from recently).
  std::size_t live_learners() const noexcept {
    return static_cast<std::size_t>(std::count_if(learners_.begin(), learners_.end(),
                                                  [](const auto& kv) { return kv.second.live; }));
  }

  /// The grace window a round reaching quorum now would get.
  std::chrono::nanoseconds grace() const noexcept {
    if (!step_time_.known() || options_.training.overlap == 0 || options_.grace_factor == 0.0) return {};
    const double slack =
        options_.training.overlap * step_time_.value() - (quorum_time_.value() + transfer_time_.value());
    const double g = std::clamp(options_.grace_factor * slack, 0.0, double(options_.max_grace.count()));
    return std::chrono::nanoseconds(static_cast<std::int64_t>(g));
  }

 private:
  struct learner_entry {
    peer_id peer = 0;
    bool bound = true;  ///< false after a restore: the first message of its incarnation names its peer
    std::uint32_t incarnation = 0;
    bool live = false;
    bool left = false;
    time_point last_seen{};
    /// Per fragment: the weight a full period (H steps) of this learner's work
    /// would have, at the tokens per step of its last regular contribution;
    /// NaN until then.
    std::vector<double> expected_weight;
  };

  struct contribution_entry {
    std::uint32_t learner;
    std::uint32_t incarnation;
    std::uint64_t sequence;
    std::uint64_t base_revision;
    double weight;         ///< the merge weight of this contribution's own work
    double period_weight;  ///< the weight of a full period at its tokens per step
    bool final;
    time_point arrived;
    byte_buffer payload;
  };

  struct fragment_state {
    std::vector<T> global;
    std::uint64_t revision = 0;
    std::vector<contribution_entry> round;
    time_point opened{};
    bool quorum = false;
    std::optional<time_point> deadline;
    /// Idempotency keys (learner, incarnation, base revision) not yet stale,
    /// with the sequence number of the contribution accepted under each.
    std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>, std::uint64_t> seen;
  };

  static std::string seconds(std::chrono::nanoseconds d) {
    return std::to_string(std::chrono::duration<double>(d).count()) + " s";
  }

  /// Counts and logs a refused message; answers it with a `reject` when it
  /// came from learner `to`, authenticated by its peer and incarnation.
  void reject(reject_reason why, const message_header& h, const learner_entry* to = nullptr) {
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    if (options_.on_contribution && to && h.kind == message_kind::contribution)
      options_.on_contribution(contribution_event{h.learner, h.incarnation, h.sequence, h.fragment, h.base_revision,
                                                  false, why});
    options_.log("refused message kind " + std::to_string(int(h.kind)) + " from learner " +
                 std::to_string(h.learner) + "/" + std::to_string(h.incarnation) + ": " +
                 std::string(to_string(why)));
    if (to) send_verdict(*to, h, message_kind::reject, why);
  }

  void send_verdict(const learner_entry& to, const message_header& about, message_kind kind, reject_reason why) {
    message m;
    auto& h = m.header;
    h.kind = kind;
    h.learner = about.learner;
    h.incarnation = to.incarnation;
    h.fragment = about.fragment;
    h.base_revision = about.base_revision;
    h.answers = about.sequence;
    h.reason = kind == message_kind::reject ? static_cast<std::uint8_t>(why) : 0;
    if (transport_.try_send(to.peer, m))
      ++metrics_.send_failures;
    else
      ++metrics_.verdicts_sent;
  }

  void reject_undecodable(peer_id from, wire_error error) {
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
    }
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    options_.log("refused undecodable message from peer " + std::to_string(from) + ": " + std::string(to_string(why)));
  }

  /// A valid message from learner `h.learner`: it is alive, and heartbeats
  /// and contributions both report its timing, so the grace window is known
  /// from the first rounds on.
  void accept_from(const message_header& h, learner_entry& l, time_point now) {
    heard_from(h.learner, l, now);
    if (h.step_time_ns > 0) step_time_.add(double(h.step_time_ns));
    if (h.transfer_ns > 0) transfer_time_.add(double(h.transfer_ns));
  }

  void heard_from(std::uint32_t id, learner_entry& l, time_point now) {
    l.last_seen = now;
    if (!l.live && !l.left) {
      l.live = true;
      ++metrics_.revived;
      options_.log("learner " + std::to_string(id) + " is alive again");
    }
  }

  void on_join(peer_id from, const message_header& h, time_point now) {
    if (h.learner == syncer_peer) return reject(reject_reason::unknown_learner, h);
    if (h.layout != layout_.fingerprint() || h.element_count != layout_.size()) {
      // Answer anyway, so that the learner learns why it cannot take part.
      send_welcome(from, h.learner, h.incarnation);
      return reject(reject_reason::layout_mismatch, h);
    }
    if (!learners_.contains(h.learner) && learners_.size() >= options_.max_learners)
      return reject(reject_reason::too_many_learners, h);
    auto [it, first] = learners_.try_emplace(h.learner);
    auto& l = it->second;
    if (first) {
      l.expected_weight.assign(fragments_.size(), std::nan(""));
      ++metrics_.joins;
    } else if (h.incarnation < l.incarnation) {
      return reject(reject_reason::dead_incarnation, h);
    } else if (h.incarnation == l.incarnation) {
      if (l.left) return reject(reject_reason::dead_incarnation, h);
      if (from != l.peer) {
        // The same learner process on a new connection (a TCP reconnect):
        // from now on only the new peer speaks for it.
        ++metrics_.reconnects;
        options_.log("learner " + std::to_string(h.learner) + " reconnected from a new peer");
      }
    } else {
      ++metrics_.rejoins;
    }
    l.peer = from;
    l.incarnation = h.incarnation;
    l.left = false;
    l.live = true;
    l.last_seen = now;
    send_welcome(from, h.learner, h.incarnation);
    for (std::uint32_t p = 0; p < fragments_.size(); ++p) send_fragment(h.learner, l, p, 0, update_status::resync, 0);
  }

  void send_welcome(peer_id to, std::uint32_t learner, std::uint32_t incarnation) {
    message m =
        welcome_message(learner, incarnation, layout_.fingerprint(), layout_.size(), codec_of<T>, options_.training);
    if (transport_.try_send(to, m)) ++metrics_.send_failures;
  }

  void send_fragment(std::uint32_t id, const learner_entry& l, std::uint32_t p, std::uint64_t answers,
                     update_status status, std::int64_t hold_ns) {
    const auto& f = fragments_[p];
    message m;
    auto& h = m.header;
    h.kind = message_kind::update;
    h.codec = codec_of<T>;
    h.status = status;
    h.learner = id;
    h.incarnation = l.incarnation;
    h.fragment = p;
    h.revision = f.revision;
    h.answers = answers;
    h.hold_ns = hold_ns;
    h.element_count = f.global.size();
    m.payload = pool_.acquire(f.global.size() * sizeof(T));
    std::copy(f.global.begin(), f.global.end(), m.payload.template as<T>().begin());
    if (transport_.try_send(l.peer, m))
      ++metrics_.send_failures;
    else
      ++metrics_.updates_sent;
  }

  void on_contribution(std::uint32_t id, message&& m, time_point now) {
    const auto& h = m.header;
    auto& l = learners_.at(id);
    if (h.fragment >= fragments_.size()) return reject(reject_reason::bad_fragment, h, &l);
    auto& f = fragments_[h.fragment];
    if (h.codec != codec_of<T>) return reject(reject_reason::bad_codec, h, &l);
    if (h.element_count != f.global.size() || m.payload.size() != f.global.size() * sizeof(T))
      return reject(reject_reason::bad_size, h, &l);
    if (h.steps == 0) return reject(reject_reason::no_work, h, &l);
    // A NaN or an infinity would poison the global model and every learner
    // that adopts it, for good. (Before the idempotency key is recorded.)
    const auto values = m.payload.template as<const T>();
    if (!std::all_of(values.begin(), values.end(), [](T v) { return std::isfinite(v); }))
      return reject(reject_reason::non_finite, h, &l);
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
    if (const auto [key, fresh] = f.seen.try_emplace({id, h.incarnation, h.base_revision}, h.sequence); !fresh) {
      // The very contribution again (a network duplicate or a replay): the
      // original was answered, answering its copy would read as a refusal of
      // the original. Another one against the same base: refused with a
      // resync, since it repeats work the first one carried.
      if (key->second == h.sequence) return reject(reject_reason::duplicate, h);
      reject(reject_reason::duplicate, h, &l);
      return send_fragment(id, l, h.fragment, h.sequence, update_status::resync, 0);
    }
    const double weight = merge_.weight(h.tokens, h.steps);
    const double period_tokens =
        std::min(double(h.tokens) / double(h.steps) * options_.training.sync_period, 0x1p62);
    const double period_weight =
        merge_.weight(static_cast<std::uint64_t>(std::llround(period_tokens)), options_.training.sync_period);
    if (!(weight >= 0.0) || !std::isfinite(weight) || !(period_weight >= 0.0) || !std::isfinite(period_weight))
      return reject(reject_reason::no_work, h, &l);
    accept_from(h, l, now);
    ++metrics_.contributions_accepted;
    if (options_.on_contribution)
      options_.on_contribution(contribution_event{id, h.incarnation, h.sequence, h.fragment, h.base_revision, true,
                                                  reject_reason::truncated});
    send_verdict(l, h, message_kind::ack, reject_reason::truncated);
    ++metrics_.contributions_pending;
    if (f.round.empty()) f.opened = now;
    f.round.push_back(contribution_entry{id, h.incarnation, h.sequence, h.base_revision, weight, period_weight,
                                         (h.flags & final_contribution) != 0, now, std::move(m.payload)});
    advance_round(h.fragment, now);
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

  /// Opens the grace window once the quorum is in, and closes the round when
  /// the window has passed or no live learner is missing.
  void advance_round(std::uint32_t p, time_point now) {
    auto& f = fragments_[p];
    if (f.round.empty()) return;
    // Learners that can still contribute: not departed, or already in the round.
    std::size_t possible = 0;
    bool everyone_in = true;
    for (const auto& [id, l] : learners_) {
      const bool in = contributed(f, id);
      if (!l.left || in) ++possible;
      if (l.live && !in) everyone_in = false;
    }
    const std::size_t required = std::max<std::size_t>(1, std::min<std::size_t>(options_.quorum, possible));
    if (!f.quorum && contributors(f) >= required) {
      f.quorum = true;
      quorum_time_.add(double((now - f.opened).count()));
      f.deadline = now + grace();
    }
    if (f.quorum && (everyone_in || now >= *f.deadline)) close_round(p, now);
  }

  /// The share of the expected total weight that this round's contributors
  /// bring (DESIGN 2.3's partial-round rule), at most 1. Every learner counts
  /// with the weight of a full period of its work, so a contribution cut short
  /// (its fragment was overwritten by another learner's revision) brings its
  /// smaller outer gradient at the same share instead of a smaller one too.
  double round_scale(std::uint32_t p, const std::map<std::uint32_t, double>& present) const {
    if (options_.scaling == partial_rounds::full_step) return 1.0;
    double known = 0.0, in_round = 0.0;
    std::size_t known_count = 0;
    std::size_t unknown_count = 0;
    for (const auto& [id, l] : learners_) {
      const auto here = present.find(id);
      if (options_.scaling == partial_rounds::live_share && !l.live && here == present.end()) continue;
      const double w = here != present.end() ? here->second : l.expected_weight[p];
      if (here != present.end()) in_round += w;
      if (std::isnan(w)) {
        ++unknown_count;
      } else {
        known += w;
        ++known_count;
      }
    }
    // A learner not yet heard from on this fragment is expected to weigh what
    // the others weigh on average.
    const double expected = known + (known_count ? double(unknown_count) * known / double(known_count) : 0.0);
    if (!(expected > 0.0)) return 1.0;
    return std::min(1.0, in_round / expected);
  }

  void close_round(std::uint32_t p, time_point now) {
    auto& f = fragments_[p];
    // Merge in a fixed order, not arrival order: floating-point sums depend
    // on order, and a reordering network must not change the result.
    std::sort(f.round.begin(), f.round.end(), [](const contribution_entry& a, const contribution_entry& b) {
      return std::tie(a.learner, a.sequence) < std::tie(b.learner, b.sequence);
    });
    // The contributors' period weights; a regular (not final) contribution
    // also updates the learner's expected weight.
    std::map<std::uint32_t, double> present;
    for (const auto& c : f.round) {
      present[c.learner] = c.period_weight;
      if (!c.final) learners_.at(c.learner).expected_weight[p] = c.period_weight;
    }
    const double scale = round_scale(p, present);

    std::vector<weighted_delta<T>> in;
    in.reserve(f.round.size());
    std::uint64_t max_staleness = 0;
    for (const auto& c : f.round) {
      in.push_back({c.payload.template as<const T>(), c.weight});
      const std::uint64_t staleness = f.revision - c.base_revision;
      max_staleness = std::max(max_staleness, staleness);
      metrics_.staleness_sum += staleness;
    }
    const std::span<T> delta(delta_.data(), f.global.size());
    merge_.merge(std::span<const weighted_delta<T>>(in), plan_[p].slices(), delta, scale);
    outer_.step(p, f.global, std::span<const T>(delta));
    ++f.revision;
    ++metrics_.outer_updates;
    metrics_.contributions_merged += f.round.size();
    metrics_.contributions_pending -= f.round.size();
    metrics_.staleness_max = std::max(metrics_.staleness_max, max_staleness);

    const auto contributors_merged = static_cast<std::uint32_t>(f.round.size());
    update_event event{p, f.revision, contributors_merged, max_staleness, scale, now, {}};
    if (options_.on_contribution)
      for (const auto& c : f.round)
        event.contributions.push_back({c.learner, c.incarnation, c.sequence, f.revision - 1 - c.base_revision});
    // Keys older than S revisions can never be accepted again: forget them.
    std::erase_if(f.seen, [&](const auto& entry) { return std::get<2>(entry.first) + options_.max_staleness < f.revision; });

    if (options_.before_publish) options_.before_publish(event);
    for (const auto& [id, l] : learners_) {
      if (!l.live) continue;
      std::uint64_t answers = 0;
      std::int64_t hold = 0;
      for (const auto& c : f.round)
        if (c.learner == id && c.sequence > answers) {
          answers = c.sequence;
          hold = (now - c.arrived).count();
        }
      if (answers != 0 || options_.recipients == update_recipients::live_learners)
        send_fragment(id, l, p, answers, update_status::merged, hold);
    }

    f.round.clear();
    f.quorum = false;
    f.deadline.reset();
    if (options_.on_update) options_.on_update(event);
  }

  parameter_layout layout_;
  Transport& transport_;
  syncer_options options_;
  OuterOptimizer outer_;
  MergePolicy merge_;
  fragment_plan plan_;
  std::vector<fragment_state> fragments_;
  std::vector<T> delta_;
  std::map<std::uint32_t, learner_entry> learners_;
  buffer_pool pool_;
  detail::ema step_time_;
  detail::ema quorum_time_;
  detail::ema transfer_time_;
  syncer_metrics metrics_;
};

}  // namespace diloco
