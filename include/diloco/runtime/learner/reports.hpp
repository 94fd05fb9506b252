// What a learner reports about itself: its pace (step and transfer times),
// the mean loss and totals its heartbeats carry, the time it spends waiting,
// and the events it hands to `learner_options::on_event`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/detail/ema.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco::detail {

/// A learner's measurements of itself and its event hook. Reads the
/// learner's totals from `metrics` and adds its waits there
/// (`learner_metrics::wait_ns`). Costs nothing per inner step beyond a few
/// arithmetic operations; events are never per step.
class learner_reports {
 public:
  /// `on_event` and `metrics` are the learner's and outlive this.
  learner_reports(const std::function<void(const learner_event&)>& on_event, learner_metrics& metrics) noexcept
      : on_event_(on_event), metrics_(metrics) {}

  /// Whether anyone listens: callers skip building events otherwise.
  bool wants_events() const noexcept { return static_cast<bool>(on_event_); }

  /// Hands `e` to the hook, stamped with the steps taken and the time waited so far.
  void emit(learner_event e) const {
    e.steps = metrics_.steps;
    e.waited_total = std::chrono::nanoseconds(metrics_.wait_ns);
    on_event_(e);
  }

  /// An inner step starts at `now`: the time since the previous step counts
  /// towards the step time unless a wait came between.
  void step_began(time_point now) noexcept {
    if (last_step_at_ && !waited_) step_time_.add(double((now - *last_step_at_).count()));
    waited_ = false;
    last_step_at_ = now;
  }

  /// An inner step reported `loss`, for the next heartbeat's mean.
  void add_loss(double loss) noexcept {
    loss_sum_ += loss;
    ++loss_steps_;
  }

  /// One round trip of a contribution and its answer took `rtt_ns`, of which
  /// the syncer held the answer `hold_ns`: the rest counts as transfer time.
  void round_trip(double rtt_ns, double hold_ns) noexcept { transfer_time_.add(std::max(0.0, rtt_ns - hold_ns)); }

  /// Smoothed time of one inner step (ns), from steps not preceded by a wait.
  double step_time_ns() const noexcept { return step_time_.value(); }

  /// Writes the pace into an outgoing header: step and transfer time (ns).
  void pace(message_header& h) const noexcept {
    h.step_time_ns = static_cast<std::int64_t>(step_time_.value());
    h.transfer_ns = static_cast<std::int64_t>(transfer_time_.value());
  }

  bool heartbeat_due(time_point now) const noexcept { return now >= next_heartbeat_; }
  time_point next_heartbeat() const noexcept { return next_heartbeat_; }

  /// Fills a heartbeat sent at `now`: the totals, the pace and the mean loss
  /// of the steps since the last heartbeat (none when there were none); the
  /// next one falls due `interval` later.
  void heartbeat(message_header& h, time_point now, std::chrono::nanoseconds interval) noexcept {
    h.steps = metrics_.steps_computed;
    h.tokens = metrics_.tokens;
    pace(h);
    if (loss_steps_ > 0) h.loss = loss_sum_ / double(loss_steps_);
    loss_sum_ = 0.0;
    loss_steps_ = 0;
    next_heartbeat_ = now + interval;
  }

  /// The learner cannot step at `now`: a wait begins unless one is under way.
  void wait_from(time_point now) noexcept {
    if (!wait_began_) wait_began_ = now;
  }

  /// The next step follows a wait: its time since the last step is not a step time.
  void waited() noexcept { waited_ = true; }

  /// Ends the wait under way, if any: its time counts as waiting, not work,
  /// and a wait of 20 ms or more is an event.
  void end_wait(time_point now) {
    if (!wait_began_) return;
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(now - *wait_began_);
    wait_began_.reset();
    metrics_.wait_ns += static_cast<std::uint64_t>(std::max<std::int64_t>(0, wait.count()));
    if (wants_events() && wait >= std::chrono::milliseconds(20))
      emit({.what = learner_event::kind::waited, .wait = wait});
  }

 private:
  const std::function<void(const learner_event&)>& on_event_;
  learner_metrics& metrics_;
  time_point next_heartbeat_{};
  std::optional<time_point> last_step_at_;
  bool waited_ = false;
  std::optional<time_point> wait_began_;  ///< since when the learner has been kept from stepping
  detail::ema step_time_;
  detail::ema transfer_time_;
  double loss_sum_ = 0.0;  ///< Σ `step_stats::loss` since the last heartbeat, which sends their mean
  std::uint64_t loss_steps_ = 0;
};

}  // namespace diloco::detail
