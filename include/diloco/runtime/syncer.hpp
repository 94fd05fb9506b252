// The syncer: validates learners' fragment contributions, closes rounds,
// merges them, applies the outer optimizer and publishes each new revision.
// The public entry header of the syncer: the class adds a transport and its
// serving loop to the state machine of runtime/syncer/core.hpp, which drives
// the components in runtime/syncer/; its checkpoint body is
// runtime/syncer/checkpoint.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <stop_token>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/runtime/syncer/core.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/outbox.hpp"

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
requires(check_outer_optimizer<OuterOptimizer>() && outer_optimizer<OuterOptimizer> && check_transport<Transport>() &&
         transport<Transport> && check_merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>() &&
         merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>) class syncer
    : public detail::syncer_core<OuterOptimizer, MergePolicy> {
  using core = detail::syncer_core<OuterOptimizer, MergePolicy>;

 public:
  using scalar_type = typename OuterOptimizer::scalar_type;
  using T = scalar_type;

  /// Starts from `initial` parameters (flat, in `layout` order) at revision 0,
  /// serving `transport`, which outlives it. Throws `std::invalid_argument`
  /// for inconsistent settings or initial parameters that are not all finite.
  syncer(const parameter_layout& layout, std::span<const T> initial, Transport& transport, syncer_options options = {},
         OuterOptimizer outer = OuterOptimizer{}, MergePolicy merge = MergePolicy{})
      : core(layout, initial, detail::message_sender(transport), std::move(options), std::move(outer),
             std::move(merge)),
        transport_(transport) {}

  /// Serves a blocking transport until `stop` is requested or `done()`
  /// returns true (checked after every message and timer); then handles what
  /// has already arrived and flushes. Sleeps in the transport when nothing is
  /// due; never busy-waits.
  template <class Done>
  void run_until(std::stop_token stop, Done&& done) requires blocking_transport<Transport> {
    constexpr auto idle = std::chrono::milliseconds(50);
    while (!stop.stop_requested() && !this->over() && !done()) {
      const time_point now = clock::now();
      auto wait = std::chrono::nanoseconds(idle);
      if (auto next = this->poll(now)) wait = std::clamp<std::chrono::nanoseconds>(*next - now, {}, wait);
      if (auto e = transport_.receive_for(wait)) {
        this->handle(std::move(*e), clock::now());
        while (auto more = transport_.try_receive()) this->handle(std::move(*more), clock::now());
      }
    }
    while (auto rest = transport_.try_receive()) this->handle(std::move(*rest), clock::now());
    this->flush(clock::now());
  }

  /// `run_until(stop, never)`.
  void run(std::stop_token stop) requires blocking_transport<Transport> {
    run_until(stop, [] { return false; });
  }

  Transport& transport() noexcept { return transport_; }

 private:
  Transport& transport_;
};

}  // namespace diloco
