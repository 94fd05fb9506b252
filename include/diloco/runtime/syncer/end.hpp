// When a syncer's run starts and when it is over: the rendezvous of a world
// of M learners, the failures that stop a run, and the end rules
// (`end_options`).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/options.hpp"

namespace diloco::detail {

/// Where a run stands: waiting for its world's rendezvous, under way,
/// failed or ended. Decides from the learner table and the syncer's
/// counters; what the syncer then does (welcome, tell the learners, merge
/// the open rounds) is the syncer's.
class end_rules {
 public:
  /// The arguments are the syncer's and outlive this.
  end_rules(const syncer_options& options, const syncer_metrics& metrics, syncer_log& log,
            const syncer_learners& learners) noexcept
      : options_(options), metrics_(metrics), log_(log), learners_(learners), started_(options.world.size == 0) {}

  /// A message arrived at `now`: the first one starts the rendezvous and the deadline.
  void message_at(time_point now) {
    if (!first_message_) first_message_ = now;
  }

  /// Past the rendezvous (always, without a world size).
  bool started() const noexcept { return started_; }
  /// A restored run was past its rendezvous: its learners rejoin one by one.
  void restored() noexcept { started_ = true; }

  bool over() const noexcept { return ended_ || failure_; }
  const std::optional<std::string>& failure() const noexcept { return failure_; }
  const std::optional<std::string>& ended() const noexcept { return ended_; }

  /// The run ends, for reason `why` (logged).
  void end(std::string why) {
    ended_ = std::move(why);
    log_.always("run ended: " + *ended_);
  }

  /// Learner `id` joined: it counts towards `end_options::expected_learners`.
  void joined(std::uint32_t id) {
    if (joined_.size() < options_.end.expected_learners) joined_.insert(id);
  }

  /// The rendezvous: true once all M learners of the world are live (the
  /// run has then started, and they are to be welcomed at once, so that
  /// they start together from revision 0).
  bool rendezvous(time_point now) {
    const auto present = std::count_if(learners_.begin(), learners_.end(), [this](const auto& kv) {
      return learners_.in_world(kv.first) && kv.second.live;
    });
    if (std::size_t(present) < options_.world.size) return false;
    started_ = true;
    log_(syncer_log_category::membership, [&] {
      return "all " + std::to_string(options_.world.size) + " learners joined after " +
             syncer_log::seconds(now - first_message_.value_or(now)) + ": training starts";
    });
    return true;
  }

  /// Whether `end_options::when_all_gone` applies yet: past the rendezvous,
  /// with learners, and as many as `expected_learners` having joined.
  bool all_gone_may_end() const noexcept {
    return options_.end.when_all_gone && started_ && !learners_.empty() &&
           joined_.size() >= options_.end.expected_learners;
  }

  /// Why the run ends at `now` (`end_options`: the first limit reached), or
  /// nothing. `owned_fragments`: the fragments the syncer merges, over
  /// which the merged tokens and steps are counted.
  std::optional<std::string> limit_reached(time_point now, std::uint64_t owned_fragments) const {
    const auto& e = options_.end;
    const std::uint64_t p = owned_fragments;
    if (e.max_outer_updates && metrics_.outer_updates >= e.max_outer_updates)
      return std::to_string(metrics_.outer_updates) + " outer updates (max_outer_updates)";
    if (e.max_tokens && metrics_.tokens_merged / p >= e.max_tokens)
      return std::to_string(metrics_.tokens_merged / p) + " tokens trained (max_tokens)";
    if (e.max_steps && metrics_.steps_merged / p >= e.max_steps)
      return std::to_string(metrics_.steps_merged / p) + " inner steps trained (max_steps)";
    if (first_message_ && e.deadline > std::chrono::nanoseconds::zero() && now - *first_message_ >= e.deadline)
      return "deadline of " + syncer_log::seconds(e.deadline) + " reached";
    if (!all_gone_may_end()) return std::nullopt;
    std::size_t left = 0;
    for (const auto& [id, l] : learners_) {
      if (l.live || (!l.left && (!l.gone_since || now - *l.gone_since < *e.when_all_gone))) return std::nullopt;
      left += l.left;
    }
    return "every learner is gone (" + std::to_string(left) + " left, " + std::to_string(learners_.size() - left) +
           " dead for " + syncer_log::seconds(*e.when_all_gone) + " or more)";
  }

  /// Fails the run at `now` when the rendezvous has timed out, or when a
  /// learner of the world stayed dead past `loss_wait` under
  /// `lost_learner::fail`; true when it failed just now (the syncer then
  /// tells its live learners and `log_failure`s).
  bool world_failed(time_point now) {
    if (options_.world.size == 0 || failure_) return false;
    const auto& w = options_.world;
    if (!started_) {
      if (!first_message_ || now - *first_message_ < w.rendezvous_timeout) return false;
      std::string missing;
      std::size_t joined = 0;
      for (std::uint32_t id = 0; id < w.size; ++id) {
        const auto it = learners_.find(id);
        if (it != learners_.end() && it->second.live)
          ++joined;
        else
          missing += (missing.empty() ? "" : ", ") + std::to_string(id);
      }
      failure_ = "rendezvous timed out after " + syncer_log::seconds(now - *first_message_) + ": " +
                 std::to_string(joined) + " of " + std::to_string(w.size) +
                 " learners joined; missing learner ids: " + missing;
    } else if (w.on_loss == lost_learner::fail) {
      for (const auto& [id, l] : learners_)
        if (learners_.in_world(id) && !l.live && !l.left && l.gone_since && now - *l.gone_since >= w.loss_wait) {
          failure_ = "learner " + std::to_string(id) + " has been dead for " +
                     syncer_log::seconds(now - *l.gone_since) + " (world option on_loss = fail, loss_wait " +
                     syncer_log::seconds(w.loss_wait) + ")";
          break;
        }
    }
    return failure_.has_value();
  }

  void log_failure() const { log_.always("run failed: " + *failure_); }

  /// Hands `earliest` the times at which the rendezvous may time out and
  /// the end rules may end the run.
  template <class Earliest>
  void deadlines(Earliest&& earliest) const {
    if (!started_ && first_message_) earliest(*first_message_ + options_.world.rendezvous_timeout);
    const auto& end = options_.end;
    if (first_message_ && end.deadline > std::chrono::nanoseconds::zero()) earliest(*first_message_ + end.deadline);
    if (all_gone_may_end())
      for (const auto& [id, l] : learners_)
        if (!l.live && !l.left && l.gone_since) earliest(*l.gone_since + *end.when_all_gone);
  }

 private:
  const syncer_options& options_;
  const syncer_metrics& metrics_;
  syncer_log& log_;
  const syncer_learners& learners_;
  bool started_;
  std::set<std::uint32_t> joined_;           ///< learners that joined, up to `end_options::expected_learners`
  std::optional<time_point> first_message_;  ///< when the rendezvous began
  std::optional<std::string> failure_;
  std::optional<std::string> ended_;
};

}  // namespace diloco::detail
