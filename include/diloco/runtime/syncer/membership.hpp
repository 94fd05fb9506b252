// A syncer's learner table: who takes part and on which connection, who is
// alive, gone or quarantined, and what each reports of itself (its timing,
// its loss, the steps it computed).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/rounds.hpp"
#include "diloco/runtime/syncer/screening.hpp"
#include "diloco/runtime/syncer/state.hpp"

namespace diloco::detail {

/// A learner: what a checkpoint keeps of it, and its connection and liveness.
struct learner_entry : learner_record {
  peer_id peer = 0;
  bool bound = true;  ///< false after a restore: the first message of its incarnation names its peer
  bool live = false;
  time_point last_seen{};
  std::optional<time_point> gone_since;         ///< when it left or was declared dead
  std::optional<time_point> unreachable_since;  ///< a send to its connection failed (a claim is pending)
  std::optional<double> loss;                   ///< the latest finite training loss it reported
  // What it reports of its timing, each the latest (0: none): the syncer
  // takes the lower median over learners, so that one liar cannot stretch
  // the grace window or the periods.
  double step_ns = 0.0;
  double transfer_ns = 0.0;
  double tokens_per_step = 0.0;    ///< of its latest accepted contribution (0: none)
  std::uint64_t steps_merged = 0;  ///< credited steps of its merged work, this incarnation: its say in the loss
  /// When its latest contribution was accepted, or it first joined: a live
  /// learner that stops contributing stops weighing on rounds.
  std::optional<time_point> worked_at;
  /// Per fragment: when its previous contribution to it was accepted, or
  /// its incarnation joined; what its claimed steps are bounded by.
  std::vector<std::optional<time_point>> last_work;
};

/// How a join ended (`syncer_learners::join`): its learner admitted, or the
/// reason it is refused.
struct join_result {
  learner_entry* admitted = nullptr;
  reject_reason refused = reject_reason::none;
  std::uint32_t current = 0;  ///< with `dead_incarnation`: the learner's live incarnation
};

/// The learners a syncer knows, by id, with at most
/// `syncer_options::max_learners` of them. Counts what happens to them in
/// the syncer's `metrics` and logs it. Every query visits the table once.
class syncer_learners {
 public:
  using table = std::map<std::uint32_t, learner_entry>;

  /// `options`, `metrics` and `log` are the syncer's and outlive this.
  syncer_learners(const syncer_options& options, syncer_metrics& metrics, syncer_log& log) noexcept
      : options_(options), metrics_(metrics), log_(log) {}

  table::iterator begin() noexcept { return learners_.begin(); }
  table::iterator end() noexcept { return learners_.end(); }
  table::const_iterator begin() const noexcept { return learners_.begin(); }
  table::const_iterator end() const noexcept { return learners_.end(); }
  table::iterator find(std::uint32_t id) { return learners_.find(id); }
  table::const_iterator find(std::uint32_t id) const { return learners_.find(id); }
  learner_entry& at(std::uint32_t id) { return learners_.at(id); }
  std::size_t size() const noexcept { return learners_.size(); }
  bool empty() const noexcept { return learners_.empty(); }
  const table& entries() const noexcept { return learners_; }

  /// A new entry for learner `id`, which is not in the table: no expected weight yet.
  learner_entry& add(std::uint32_t id) {
    auto& l = learners_.try_emplace(id).first->second;
    l.expected_weight.assign(options_.training.fragments, std::nan(""));
    return l;
  }

  /// Replaces the table with the `records` of a restored state; no learner
  /// is live or bound to a connection.
  void restore(std::map<std::uint32_t, learner_record>&& records) {
    learners_.clear();
    for (auto& [id, record] : records) {
      auto& l = learners_[id];
      static_cast<learner_record&>(l) = std::move(record);
      l.live = false;
      l.bound = false;
    }
  }

  bool in_world(std::uint32_t id) const noexcept { return id < options_.world.size; }

  /// Learners considered alive (joined, not left, heard from recently).
  std::size_t live() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(learners_.begin(), learners_.end(), [](const auto& kv) { return kv.second.live; }));
  }

  bool quarantined(std::uint32_t id) const noexcept {
    const auto it = learners_.find(id);
    return it != learners_.end() && it->second.quarantined;
  }

  /// Distinct contributors a round without anyone missing has: M with a
  /// world size, else the live learners that are not quarantined.
  std::size_t whole_round() const {
    if (options_.world.size > 0) return options_.world.size;
    return static_cast<std::size_t>(std::count_if(
        learners_.begin(), learners_.end(), [](const auto& kv) { return kv.second.live && !kv.second.quarantined; }));
  }

  /// Takes the join `h` (of the syncer's model) from connection `from` at
  /// `now`: a new learner, a reconnect or a new incarnation is admitted,
  /// live; anything else is refused. A second connection claiming a live
  /// learner takes over only once the first is gone: `reachable(peer)`
  /// says whether it still takes messages, and "gone" takes two failed
  /// sends at least `confirm_gone` apart. `busy(id)`: whether learner `id`
  /// is in an open round (its place cannot be freed).
  template <class Reachable, class Busy>
  join_result join(peer_id from, const message_header& h, time_point now, Reachable&& reachable, Busy&& busy) {
    auto it = learners_.find(h.learner);
    if (it != learners_.end()) {
      auto& l = it->second;
      if (h.incarnation < l.incarnation || (h.incarnation == l.incarnation && l.left))
        return {nullptr, reject_reason::dead_incarnation, l.incarnation};
      if (h.incarnation == l.incarnation && l.bound && from != l.peer && l.live) {
        // A second connection for a live learner. The learner's own reconnect
        // (its old connection is gone) takes over; anyone else is refused and
        // the learner on the first connection is told, until that one is
        // gone or declared dead. libzmq can refuse one send to a live
        // connection whose queue is just draining (EHOSTUNREACH); the learner
        // retries its join every `join_retry` anyway.
        if (reachable(l.peer)) {
          l.unreachable_since.reset();
          return {nullptr, reject_reason::peer_conflict, 0};
        }
        if (!l.unreachable_since || now - *l.unreachable_since < confirm_gone) {
          if (!l.unreachable_since) l.unreachable_since = now;
          return {nullptr, reject_reason::peer_conflict, 0};
        }
        ++metrics_.reconnects;
        log_(syncer_log_category::membership,
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
        l.last_work.assign(options_.training.fragments, now);  // a new process: its steps start now
      }
    } else {
      if (learners_.size() >= options_.max_learners && !make_room(now, busy))
        return {nullptr, reject_reason::too_many_learners, 0};
      auto& l = add(h.learner);
      l.last_work.assign(options_.training.fragments, now);
      l.worked_at = now;
      ++metrics_.joins;
      it = learners_.find(h.learner);
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
    return {&l, reject_reason::none, 0};
  }

  /// A valid message `h` from learner `l`: it is alive, and heartbeats and
  /// contributions both report its timing, so the grace window is known
  /// from the first rounds on.
  void accept_from(const message_header& h, learner_entry& l, time_point now) {
    heard_from(h.learner, l, now);
    if (h.step_time_ns > 0) l.step_ns = double(h.step_time_ns);
    if (h.transfer_ns > 0) l.transfer_ns = double(h.transfer_ns);
  }

  /// Learner `l` left at `now`.
  void left(learner_entry& l, time_point now) noexcept {
    l.left = true;
    l.live = false;
    l.gone_since = now;
    ++metrics_.leaves;
  }

  /// A heartbeat's loss becomes the learner's latest unless it is NaN or
  /// infinite (counted). A finite value can still be a lie: `training_loss`
  /// bounds what it can do.
  void note_loss(const message_header& h, learner_entry& l) noexcept {
    if (!h.loss) return;
    if (!std::isfinite(*h.loss)) {
      ++metrics_.losses_ignored;
      return;
    }
    l.loss = *h.loss;
  }

  /// A strike against learner `id`: its count goes up by 2 (a clean
  /// contribution takes 1 off), and at 2 × `quarantine_after` it is
  /// quarantined — after `quarantine_after` bad contributions in a row, or
  /// more than one in three over a longer stretch.
  /// A clipped contribution of `steps` steps, or one in a dropped round: a
  /// strike if it carries at most a period (H steps). One of more is none:
  /// a learner whose sends waited out an outage, or that ran ahead of a
  /// syncer short of CPU, honestly carries many periods of work (after a
  /// syncer's restart every learner does, and striking them all would
  /// quarantine the run); the clip bounds its push, a dropped round has none.
  void strike_for_work(std::uint32_t id, learner_entry& l, std::uint64_t steps) {
    if (steps <= options_.training.sync_period) strike(id, l);
  }

  void strike(std::uint32_t id, learner_entry& l) {
    const auto limit = options_.screening.quarantine_after;
    if (limit == 0 || l.quarantined) return;
    l.strikes += 2;
    if (l.strikes < 2 * limit) return;
    l.quarantined = true;
    ++metrics_.quarantines;
    log_(syncer_log_category::membership, [&] {
      return "learner " + std::to_string(id) + "/" + std::to_string(l.incarnation) +
             " quarantined: too many of its contributions were clipped or refused; refused until it rejoins";
    });
  }

  /// Frees the place of the learner gone longest (left or dead, not
  /// `busy`) for a joining one; false if every learner is live or busy.
  template <class Busy>
  bool make_room(time_point now, Busy&& busy) {
    auto oldest = learners_.end();
    for (auto it = learners_.begin(); it != learners_.end(); ++it) {
      if (it->second.live || busy(it->first)) continue;
      const time_point gone = it->second.gone_since.value_or(now);
      if (oldest == learners_.end() || gone < oldest->second.gone_since.value_or(now)) oldest = it;
    }
    if (oldest == learners_.end()) return false;
    retire_report(oldest->second);
    learners_.erase(oldest);
    ++metrics_.learners_forgotten;
    return true;
  }

  /// Declares the learners silent for `heartbeat_timeout` dead at `now`.
  void declare_silent(time_point now) {
    for (auto& [id, l] : learners_) {
      if (l.live && now - l.last_seen >= options_.heartbeat_timeout) {
        l.live = false;
        l.gone_since = now;
        ++metrics_.declared_dead;
        log_(syncer_log_category::liveness, [id = id, silent = now - l.last_seen] {
          return "learner " + std::to_string(id) + " silent for " + syncer_log::seconds(silent) + ", declared dead";
        });
      }
      if (!l.live && !l.gone_since) l.gone_since = now;  // restored from a checkpoint
    }
  }

  /// How long a gone learner stays in the table: `membership.forget_after` half-lives.
  std::chrono::nanoseconds forget_after() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(half_life() * options_.membership.forget_after);
  }

  /// Forgets the learners gone for `after` (`forget_after()`) at `now`,
  /// except those `keep(id)` holds.
  template <class Keep>
  void forget(time_point now, std::chrono::nanoseconds after, Keep&& keep) {
    std::erase_if(learners_, [&](const auto& entry) {
      const auto& l = entry.second;
      if (!l.gone_since || now - *l.gone_since < after || keep(entry.first)) return false;
      ++metrics_.learners_forgotten;
      retire_report(l);
      return true;
    });
  }

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

  /// How long an absent learner's weight takes to halve now.
  std::chrono::duration<double> half_life() const {
    return rounds::absent_half_life(step_time(), options_.training.sync_period, options_.heartbeat_timeout,
                                    options_.membership.absent_half_life);
  }

  /// `syncer::training_loss`: the weighted lower median of the live
  /// learners' latest losses, each weighing its merged steps.
  std::optional<double> training_loss() const {
    const bool any_work = std::any_of(learners_.begin(), learners_.end(),
                                      [](const auto& kv) { return kv.second.live && kv.second.steps_merged > 0; });
    loss_scratch_.clear();
    for (const auto& [id, l] : learners_)
      if (l.live && l.loss && (l.steps_merged > 0 || !any_work))
        loss_scratch_.emplace_back(*l.loss, double(l.steps_merged));
    return detail::weighted_lower_median(loss_scratch_);
  }

  /// `syncer::steps_computed`: every incarnation's last report, saturating.
  std::uint64_t steps_computed() const noexcept {
    std::uint64_t n = metrics_.steps_reported_earlier;
    for (const auto& [id, l] : learners_) n = detail::saturating_add(n, l.steps_reported);
    return n;
  }

 private:
  /// How long a learner's connection must stay unreachable before a second
  /// connection may take its place.
  static constexpr std::chrono::milliseconds confirm_gone{100};

  void heard_from(std::uint32_t id, learner_entry& l, time_point now) {
    l.last_seen = now;
    if (!l.live && !l.left) {
      l.live = true;
      l.gone_since.reset();
      ++metrics_.revived;
      log_(syncer_log_category::liveness, [&] { return "learner " + std::to_string(id) + " is alive again"; });
    }
  }

  /// An incarnation is over (replaced, or its learner forgotten): its last
  /// report of computed steps moves to the syncer's counters (the caller
  /// then forgets it).
  void retire_report(const learner_entry& l) noexcept {
    metrics_.steps_reported_earlier = detail::saturating_add(metrics_.steps_reported_earlier, l.steps_reported);
  }

  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_log& log_;
  table learners_;
  mutable std::vector<double> report_scratch_;                   ///< medians of the learners' reports
  mutable std::vector<std::pair<double, double>> loss_scratch_;  ///< (loss, merged steps) per learner
};

}  // namespace diloco::detail
