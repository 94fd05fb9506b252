// What a syncer is told: its settings and their checks, the hooks it reports
// through and the sink its log lines go to.
#pragma once

#include <cassert>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "diloco/detail/bad_option.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/syncer/rounds.hpp"
#include "diloco/runtime/syncer/screening.hpp"

namespace diloco {

/// Who receives a fragment's new revision.
enum class update_recipients {
  /// Every live learner. Learners keep adopting fresh revisions, so their
  /// outer gradients are computed against recent bases. The default.
  live_learners,
  /// Only the live learners whose contributions it merged: one download per
  /// upload, but each learner's base then lags by the other learners' merges
  /// (3 revisions with 4 learners), and Nesterov momentum with that delay
  /// oscillates (a 4-learner line fit swings to 9× its error before settling);
  /// pair it with `outer::delayed_nesterov`.
  contributors,
};

/// What a lock-step run with a world size does when one of its learners is
/// declared dead (docs/design.md, "World size").
enum class lost_learner {
  /// Rounds keep waiting for it for `world_options::loss_wait` after it is
  /// declared dead, then close with the learners that are left; it takes
  /// part again when it rejoins. The default.
  continue_without,
  /// The run fails once a learner has been dead for `loss_wait`: the syncer
  /// stops and `syncer::failure()` names the learner.
  fail,
};

/// A run with a fixed set of learners, as synchronous data parallelism and
/// DiLoCo need (docs/design.md, "World size").
struct world_options {
  /// M. 0: open membership (Decoupled DiLoCo's default): learners come and go
  /// and a round needs the quorum K. Otherwise the learners are ids 0 … M−1;
  /// nobody is welcomed until all M have joined (the rendezvous, so that all
  /// start from the same global model at the same step), and every round
  /// waits for every live one of them.
  std::uint32_t size = 0;
  /// The rendezvous fails (`syncer::failure()`, naming the missing ids) if
  /// the M learners have not all joined this long after the first message.
  std::chrono::nanoseconds rendezvous_timeout = std::chrono::seconds(60);
  lost_learner on_loss = lost_learner::continue_without;
  /// How long a dead learner still holds the rounds (after the heartbeat
  /// timeout that declared it dead), or, with `lost_learner::fail`, how long
  /// it may stay dead before the run fails.
  std::chrono::nanoseconds loss_wait = std::chrono::seconds(0);

  /// Throws `std::invalid_argument` naming the first bad setting.
  void check() const {
    if (size > 0 && rendezvous_timeout <= std::chrono::nanoseconds::zero())
      detail::bad_option("diloco::world_options", "rendezvous_timeout", rendezvous_timeout, "must be positive");
    if (loss_wait < std::chrono::nanoseconds::zero())
      detail::bad_option("diloco::world_options", "loss_wait", loss_wait, "must not be negative");
  }
};

/// One shard of a sharded syncer (docs/design.md, "Sharded syncer"): S
/// syncer processes share the fragments, shard s owning those p with
/// p mod S = s. A shard merges, checkpoints and serves only its own
/// fragments, refuses contributions to the others (`bad_fragment`) and names
/// itself in its welcome, so that a learner's `sharded` transport routes
/// each contribution to its owner. S = 1 (the default) is an unsharded
/// syncer.
struct shard_options {
  std::uint32_t index = 0;  ///< s, in [0, S)
  std::uint32_t count = 1;  ///< S, at least 1 and at most P (a shard without a fragment has nothing to do)

  bool owns(std::uint32_t fragment) const noexcept { return fragment % count == index; }

  /// Throws `std::invalid_argument` naming the first bad setting.
  void check(std::uint32_t fragments) const {
    if (count == 0) detail::bad_option("diloco::shard_options", "count", count, "must be at least 1");
    if (index >= count)
      detail::bad_option("diloco::shard_options", "index", index,
                         "must be below count (" + std::to_string(count) + ")");
    if (count > fragments)
      detail::bad_option("diloco::shard_options", "count", count,
                         "must not exceed the fragments P (" + std::to_string(fragments) + ")");
  }
};

/// When the syncer ends a run by itself (docs/design.md, "The end of a
/// run"): at the first limit reached. Every limit is off (0 or empty) by
/// default. At the end the syncer merges the open rounds, tells every live
/// learner (`message_kind::end`; `learner::step` then returns `errc::ended`),
/// and `run` returns; `syncer::ended()` says why.
struct end_options {
  std::uint64_t max_outer_updates = 0;   ///< revisions created, all fragments together
  std::uint64_t max_tokens = 0;          ///< tokens trained into the global model (merged, per fragment)
  std::uint64_t max_steps = 0;           ///< inner steps trained into the global model (merged, per fragment)
  std::chrono::nanoseconds deadline{0};  ///< wall time since the syncer's first message
  /// Once a learner has joined: when every learner has left or has been
  /// dead (silent past the heartbeat timeout) this much longer. Empty: never.
  std::optional<std::chrono::nanoseconds> when_all_gone{};
  /// With `when_all_gone`: not before this many distinct learners have
  /// joined (0 or 1: the first is enough). A run whose learners start at
  /// different times sets it to their number, so that those that finish
  /// early do not end it before the late ones are in.
  std::uint32_t expected_learners = 0;

  /// Throws `std::invalid_argument` naming the first bad setting.
  void check() const {
    if (deadline < std::chrono::nanoseconds::zero())
      detail::bad_option("diloco::end_options", "deadline", deadline, "must not be negative");
    if (when_all_gone && *when_all_gone < std::chrono::nanoseconds::zero())
      detail::bad_option("diloco::end_options", "when_all_gone", *when_all_gone, "must not be negative");
  }
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
  /// The training loss as of this outer update: `syncer::training_loss()`
  /// when the revision was created (none while no live learner reports one).
  std::optional<double> training_loss{};
};

/// What `syncer_options::on_evaluate` is given: the global model after an
/// outer update, and where the run stands.
struct evaluation_context {
  /// The global parameters, flat in the layout's order, in the syncer's
  /// scalar type (`parameters_as<T>()`). Valid during the call only.
  std::variant<std::span<const float>, std::span<const double>> parameters;
  std::uint64_t outer_updates = 0;  ///< revisions created so far, all fragments: a multiple of `evaluate_every`
  std::span<const std::uint64_t> revisions;  ///< each fragment's revision (valid during the call only)
  std::optional<double> training_loss{};     ///< `syncer::training_loss()` now
  time_point at{};

  /// The parameters as `T`s; `T` must be the syncer's scalar type.
  template <class T>
  std::span<const T> parameters_as() const noexcept {
    assert(std::holds_alternative<std::span<const T>>(parameters) && "diloco: not the syncer's scalar type");
    const auto* p = std::get_if<std::span<const T>>(&parameters);
    return p ? *p : std::span<const T>{};
  }
};

/// Settings of the syncer (docs/design.md, "Syncer"). `training` is sent to
/// every learner.
struct syncer_options {
  training_config training;
  world_options world{};  ///< a fixed set of M learners (synchronous modes); off by default
  end_options end{};      ///< when the run is over; no limit by default
  shard_options shard{};  ///< which fragments this syncer owns (all, unless sharded)
  /// The epoch of this syncer's leadership of its shard, stamped on every
  /// message it sends (docs/protocol.md, "Epochs"): a learner drops what
  /// comes stamped with an older epoch than it heard from the shard before.
  /// A standby that takes over leads with a larger one
  /// (`etcd::leader_lease::epoch`). 0: no leadership (a syncer alone).
  std::uint64_t epoch = 0;
  std::uint32_t quorum = 1;   ///< K, distinct learners before a round may close (with a world: all of them)
  double grace_factor = 0.5;  ///< γ in [0, 1): share of the slack spent waiting for more learners
  std::chrono::nanoseconds max_grace = std::chrono::seconds(1);  ///< upper bound of one grace window
  std::uint32_t max_staleness = 16;                              ///< S: refuse a base more than S revisions old
  std::uint32_t max_learners = 4096;  ///< learners it keeps track of at once (every round visits them all)
  std::chrono::nanoseconds heartbeat_timeout = std::chrono::seconds(10);  ///< silence before a learner is dead
  partial_rounds scaling = partial_rounds::all_share;
  membership_options membership{};  ///< how absent learners count in partial rounds
  screening_options screening{};    ///< clipping, bounds and quarantine (robustness to bad learners)
  update_recipients recipients = update_recipients::live_learners;
  double ema_decay = 0.8;  ///< smoothing of step, quorum and transfer times
  /// The sink of the syncer's log lines: every refused message and liveness
  /// change, at most a few lines per reason every 10 s with a summary of
  /// what was held back. None by default: the syncer writes nothing
  /// anywhere. Called on the syncer's thread; a sink that may block should
  /// queue the line.
  std::function<void(const std::string&)> log{};
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
  /// Called when a round is dropped instead of published (its contributions
  /// then count as `contributions_dropped`).
  std::function<void(const drop_event&)> on_drop{};
  /// Called with every contribution the syncer accepts, before anything of
  /// it is recorded and before its acknowledgement leaves: the place to make
  /// it durable (`contribution_journal::append`), so that an acknowledged
  /// contribution survives a crash of the syncer (`syncer::replay` takes it
  /// back). If it throws, the contribution is neither recorded nor
  /// acknowledged and the exception leaves `handle`.
  std::function<void(const message&)> before_ack{};
  /// `on_evaluate` is called after every `evaluate_every`-th outer update
  /// (revisions created, all fragments together: N, 2N, …; 0: never).
  std::uint64_t evaluate_every = 0;
  /// Evaluates the global model (test accuracy, a validation loss), on the
  /// syncer's thread, after the revision is published and `on_update` has
  /// run. Cost: one pass over the parameters to gather the fragments into a
  /// flat buffer the syncer keeps (the model's size in memory), then the
  /// hook's own work, during which the syncer handles no message: learners
  /// keep training, but rounds wait. A hook slower than the time between N
  /// outer updates should copy the parameters and evaluate elsewhere.
  std::function<void(const evaluation_context&)> on_evaluate{};
};

namespace detail {

/// Throws `std::invalid_argument` naming the first bad setting of `o`, as
/// the syncer's constructor does (which then checks `o.shard` against the
/// fragments).
inline void check_syncer_options(const syncer_options& o) {
  const auto& c = o.training;
  constexpr std::string_view self = "diloco::syncer";
  if (c.sync_period == 0) detail::bad_option(self, "sync period H", c.sync_period, "must be at least 1");
  if (c.overlap >= c.sync_period)
    detail::bad_option(self, "overlap tau", c.overlap,
                       "must be smaller than the sync period H = " + std::to_string(c.sync_period));
  if (!(c.mixing >= 0.0 && c.mixing < 1.0)) detail::bad_option(self, "mixing alpha", c.mixing, "must be in [0, 1)");
  if (o.quorum == 0) detail::bad_option(self, "quorum K", o.quorum, "must be at least 1");
  if (!(o.grace_factor >= 0.0 && o.grace_factor < 1.0))
    detail::bad_option(self, "grace factor gamma", o.grace_factor, "must be in [0, 1)");
  if (o.heartbeat_timeout <= std::chrono::nanoseconds::zero())
    detail::bad_option(self, "heartbeat_timeout", o.heartbeat_timeout, "must be positive");
  if (o.max_grace >= o.heartbeat_timeout)
    detail::bad_option(self, "max_grace", o.max_grace,
                       "must be shorter than the heartbeat timeout (" + detail::show_option(o.heartbeat_timeout) + ")");
  if (o.max_learners == 0) detail::bad_option(self, "max_learners", o.max_learners, "must be at least 1");
  c.codecs.check();
  o.world.check();
  o.end.check();
  if (o.world.size > o.max_learners)
    throw std::invalid_argument("diloco::syncer: world size M (" + std::to_string(o.world.size) +
                                ") exceeds max_learners (" + std::to_string(o.max_learners) + ")");
  o.screening.check();
  o.membership.check();
}

}  // namespace detail

}  // namespace diloco
