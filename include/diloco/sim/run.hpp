// Runs learners and a syncer on the simulated network under a virtual clock:
// deterministic, single-threaded, with per-learner speeds and stalls.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/model.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/sim/network.hpp"

namespace diloco::sim {

/// A pause of one learner, relative to the start of the run: the learner is
/// frozen (no steps, no messages handled, no heartbeats), like a SIGSTOPped
/// process.
struct stall {
  std::chrono::nanoseconds from{0};
  std::chrono::nanoseconds length{0};
};

/// What one simulated learner does.
struct learner_plan {
  double speed = 1.0;       ///< relative speed; an inner step takes `step_time / speed`
  std::uint64_t steps = 0;  ///< inner steps before it finishes and leaves
  std::vector<stall> stalls;
};

struct run_options {
  std::chrono::nanoseconds step_time = std::chrono::seconds(1);   ///< virtual duration of a step at speed 1
  std::chrono::nanoseconds limit = std::chrono::hours(24 * 365);  ///< virtual time after which the run stops
};

/// A syncer `run` can drive (`diloco::syncer` on a timed transport):
/// `transport()`, `handle(envelope&&, now)`, `poll(now)` returning its next
/// deadline, `flush(now)`.
template <class S>
concept driven_syncer = requires(S& s, envelope&& e, time_point now) {
  requires timed_transport<std::remove_reference_t<decltype(s.transport())>>;
  s.handle(std::move(e), now);
  { s.poll(now) } -> std::same_as<std::optional<time_point>>;
  s.flush(now);
};

/// A learner `run` can drive (`diloco::learner` on a timed transport), fed
/// by `NextBatch`: `transport()`, `poll(now)`, `train_step(batch, now)`
/// returning `step_stats`, `finish(now)`, `next_deadline()`.
template <class L, class NextBatch>
concept driven_learner = requires(L& l, NextBatch& next_batch, std::size_t i, time_point now) {
  requires timed_transport<std::remove_reference_t<decltype(l.transport())>>;
  { l.poll(now) } -> std::same_as<bool>;
  { l.train_step(next_batch(i), now) } -> std::same_as<step_stats>;
  l.finish(now);
  { l.next_deadline() } -> std::same_as<std::optional<time_point>>;
};

/// A sized, indexable range whose elements dereference to learners
/// (`*learners[i]`): raw or smart pointers.
template <class Ls, class NextBatch>
concept driven_learners = requires(const Ls& learners, std::size_t i) {
  { learners.size() } -> std::convertible_to<std::size_t>;
  requires driven_learner<std::remove_reference_t<decltype(*learners[i])>, NextBatch>;
};

struct run_report {
  bool completed = false;            ///< every learner took all its steps
  time_point end{};                  ///< virtual time when the run ended
  std::vector<std::uint64_t> steps;  ///< steps each learner took
};

/// Drives `syncer` and `learners` over `net`. `learners` is a sized range
/// whose elements dereference to learners (`*learners[i]`), in learner order:
/// raw or smart pointers.
/// Runs until every learner has taken its planned steps and the network is
/// quiet. A learner that has `drain()` and `drained()` (`diloco::learner`)
/// drains after its last step — it keeps handling arrivals until its
/// contributions in flight are answered — before it finishes.
/// `next_batch(i)` returns learner i's next batch; `on_step(i, stats, now)` is
/// called after each inner step. Events at the same virtual time run in a
/// fixed order (syncer, then learners by index), so a run is a pure function
/// of its inputs and seeds.
namespace detail {

/// Starts draining a learner that can (`drain()`), and says whether it is
/// done: always for one that cannot.
template <class L>
bool drained(L& l) {
  if constexpr (requires {
                  l.drain();
                  { l.drained() } -> std::convertible_to<bool>;
                }) {
    l.drain();
    return l.drained();
  } else {
    return true;
  }
}

/// `finish(now)`, then what still arrives for the learner is dropped unread.
template <class L>
void finish(L& l, time_point now) {
  l.finish(now);
  while (l.transport().try_receive()) {
  }
}

}  // namespace detail

template <driven_syncer Syncer, class Learners, class NextBatch, class OnStep>
requires driven_learners<Learners, NextBatch> && std::invocable<OnStep&, std::size_t, const step_stats&, time_point>
    run_report run(network& net, Syncer& syncer, const Learners& learners, std::span<const learner_plan> plans,
                   NextBatch&& next_batch, OnStep&& on_step, run_options options = {}) {
  if (learners.size() != plans.size()) throw std::invalid_argument("diloco::sim::run: one plan per learner");
  if (options.step_time <= std::chrono::nanoseconds::zero())
    throw std::invalid_argument("diloco::sim::run: step time must be positive");
  std::vector<std::chrono::nanoseconds> step_duration;
  for (const auto& p : plans) {
    if (!(p.speed > 0.0)) throw std::invalid_argument("diloco::sim::run: speeds must be positive");
    step_duration.emplace_back(std::llround(double(options.step_time.count()) / p.speed));
  }

  enum class mode { running, waiting, draining, done };
  struct state {
    mode m = mode::waiting;
    time_point next{};  ///< running: next step; waiting: next timed wake-up
    std::uint64_t steps = 0;
  };
  const time_point start = net.now();
  std::vector<state> st(learners.size(), state{mode::waiting, start, 0});
  for (std::size_t i = 0; i < learners.size(); ++i)
    if (plans[i].steps == 0) st[i].m = mode::done;

  auto stalled_until = [&](std::size_t i, time_point t) -> std::optional<time_point> {
    for (const auto& s : plans[i].stalls)
      if (t >= start + s.from && t < start + s.from + s.length) return start + s.from + s.length;
    return std::nullopt;
  };

  std::optional<time_point> syncer_deadline;
  auto& syncer_endpoint = syncer.transport();
  for (;;) {
    // Arrivals wake the syncer and waiting learners; a running learner reads
    // its messages at its next step boundary, a finished one never.
    std::optional<time_point> t;
    auto consider = [&t](std::optional<time_point> c) {
      if (c && (!t || *c < *t)) t = c;
    };
    consider(syncer_endpoint.next_arrival());
    // Once every learner is done, the syncer's own timers (liveness,
    // forgetting) no longer matter: what is in flight is handled, then flushed.
    const bool all_done = std::all_of(st.begin(), st.end(), [](const state& s) { return s.m == mode::done; });
    if (!all_done) consider(syncer_deadline);
    for (std::size_t i = 0; i < st.size(); ++i) {
      if (st[i].m == mode::done) continue;
      consider(st[i].next);
      if ((st[i].m == mode::waiting || st[i].m == mode::draining) && !stalled_until(i, net.now()))
        consider(learners[i]->transport().next_arrival());
    }
    if (!t || *t > start + options.limit) break;
    net.advance_to(*t);
    const time_point now = net.now();

    while (auto e = syncer_endpoint.try_receive()) syncer.handle(std::move(*e), now);
    syncer_deadline = syncer.poll(now);

    for (std::size_t i = 0; i < learners.size(); ++i) {
      auto& s = st[i];
      if (s.m == mode::done || (s.m == mode::running && s.next > now)) continue;
      if (auto until = stalled_until(i, now)) {
        s.next = *until;
        continue;
      }
      auto& l = *learners[i];
      if (s.m == mode::draining) {
        l.poll(now);
        if (detail::drained(l)) {
          detail::finish(l, now);
          s.m = mode::done;
        } else {
          s.next = l.next_deadline().value_or(start + options.limit + std::chrono::nanoseconds(1));
          if (s.next <= now) s.next = now + std::chrono::nanoseconds(1);
        }
        continue;
      }
      if (!l.poll(now)) {
        s.m = mode::waiting;
        // Woken by the next delivery anyway; otherwise by its own deadline.
        s.next = l.next_deadline().value_or(start + options.limit + std::chrono::nanoseconds(1));
        if (s.next <= now) s.next = now + std::chrono::nanoseconds(1);
        continue;
      }
      const auto stats = l.train_step(next_batch(i), now);
      on_step(i, stats, now);
      if (++s.steps == plans[i].steps) {
        if (detail::drained(l)) {
          detail::finish(l, now);
          s.m = mode::done;
        } else {
          s.m = mode::draining;
          s.next = now + step_duration[i];  // at the latest: a learner's deadline may be far
        }
      } else {
        s.m = mode::running;
        s.next = now + step_duration[i];
      }
    }
    syncer_deadline = syncer.poll(now);
  }
  syncer.flush(net.now());

  run_report report;
  report.end = net.now();
  report.completed = true;
  for (std::size_t i = 0; i < st.size(); ++i) {
    report.steps.push_back(st[i].steps);
    if (st[i].steps < plans[i].steps) report.completed = false;
  }
  return report;
}

}  // namespace diloco::sim
