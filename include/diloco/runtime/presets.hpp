// Named configurations: synchronous data parallelism, DiLoCo, Streaming DiLoCo
// and Decoupled DiLoCo are settings of one runtime, so every comparison runs
// the same code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "diloco/concepts/scalar.hpp"
#include "diloco/inner/adamw.hpp"
#include "diloco/inner/sgd.hpp"
#include "diloco/outer/from_inner.hpp"
#include "diloco/outer/nesterov.hpp"
#include "diloco/runtime/syncer.hpp"

namespace diloco::presets {

/// Synchronous data parallelism over `learners` learners: H = 1, one fragment,
/// lock-step, a world of M = `learners` (a rendezvous first, every round
/// waits for every live learner). Pair it with `data_parallel_inner<T>` (SGD,
/// learning rate 1, so each outer gradient is the learner's gradient) and
/// `data_parallel_outer<T>` (the real optimizer, applied to the average).
inline syncer_options data_parallel(std::uint32_t learners) {
  syncer_options o;
  o.training = training_config{.fragments = 1, .sync_period = 1, .overlap = 0, .mixing = 0.0, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

template <scalar T>
using data_parallel_inner = inner::sgd<T>;

inline inner::sgd_options data_parallel_inner_options() { return inner::sgd_options{.learning_rate = 1.0}; }

template <scalar T>
using data_parallel_outer = outer::from_inner<inner::adamw<T>>;

/// DiLoCo (arXiv 2311.08105): every learner sends the whole model every H
/// steps and waits for the merged result; a world of M = `learners`.
inline syncer_options diloco(std::uint32_t learners, std::uint32_t sync_period) {
  syncer_options o;
  o.training = training_config{.fragments = 1, .sync_period = sync_period, .overlap = 0, .mixing = 0.0, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

/// Streaming DiLoCo (arXiv 2501.18512): P staggered fragments, answers used τ
/// steps after the send, mixed in with α (0.5 was found robust); a world of
/// M = `learners`.
inline syncer_options streaming_diloco(std::uint32_t learners, std::uint32_t sync_period, std::uint32_t fragments,
                                       std::uint32_t overlap, double mixing = 0.5) {
  syncer_options o;
  o.training = training_config{.fragments = fragments, .sync_period = sync_period, .overlap = overlap,
                               .mixing = mixing, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

/// Decoupled DiLoCo (arXiv 2604.21428): nobody waits; a round closes with K
/// learners plus an adaptive grace window; answers overwrite (α = 0). Open
/// membership (no world size). τ defaults to min(5, H − 1): 5 steps of
/// overlap, never as many as H.
inline syncer_options decoupled_diloco(std::uint32_t sync_period, std::uint32_t fragments, std::uint32_t quorum = 1,
                                       std::optional<std::uint32_t> overlap = std::nullopt) {
  syncer_options o;
  const std::uint32_t tau = overlap.value_or(std::min<std::uint32_t>(5, sync_period > 0 ? sync_period - 1 : 0));
  o.training = training_config{.fragments = fragments, .sync_period = sync_period, .overlap = tau,
                               .mixing = 0.0, .lock_step = false};
  o.quorum = quorum;
  o.grace_factor = 0.5;
  return o;
}

/// DiLoCo's outer optimizer (Nesterov, η = 0.7, μ = 0.9) and inner optimizer (AdamW).
template <scalar T>
using diloco_outer = outer::nesterov<T>;
template <scalar T>
using diloco_inner = inner::adamw<T>;

}  // namespace diloco::presets
