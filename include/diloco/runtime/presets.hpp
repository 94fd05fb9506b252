// Named configurations: synchronous data parallelism, DiLoCo, Streaming DiLoCo
// and Decoupled DiLoCo are settings of one runtime, so every comparison runs
// the same code. Each preset is a bundle (`setup`): the syncer's options
// together with the inner step, outer optimizer and merge policy that belong
// with them, so that a configuration cannot be assembled from mismatched
// parts; `make_syncer` and `make_learner` build the two ends from it.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "diloco/concepts/inner_step.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/inner/adamw.hpp"
#include "diloco/inner/sgd.hpp"
#include "diloco/merge/weighted_mean.hpp"
#include "diloco/outer/from_inner.hpp"
#include "diloco/outer/nesterov.hpp"
#include "diloco/runtime/learner.hpp"
#include "diloco/runtime/syncer.hpp"

namespace diloco::presets {

/// A configuration: the syncer's options (it derives from `syncer_options`,
/// so it is what a syncer takes and its fields read as before) and the
/// policies of both ends. Change a policy's settings by assigning the member
/// (`config.inner = inner::adamw<float>({.learning_rate = 0.05})`).
///
/// The parts must satisfy their concepts (a missing member is named at
/// compile time, as for `learner` and `syncer`) and agree on the scalar type.
template <class InnerStep, class OuterOptimizer, class MergePolicy>
requires(check_inner_step<InnerStep>() && inner_step<InnerStep> && check_outer_optimizer<OuterOptimizer>() &&
         outer_optimizer<OuterOptimizer> && check_merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>() &&
         merge_policy<MergePolicy, typename OuterOptimizer::scalar_type>) struct setup : syncer_options {
  static_assert(std::same_as<typename InnerStep::scalar_type, typename OuterOptimizer::scalar_type>,
                "diloco::presets::setup: the inner step and the outer optimizer must have the same scalar_type");
  using scalar_type = typename OuterOptimizer::scalar_type;
  using inner_step_type = InnerStep;
  using outer_optimizer_type = OuterOptimizer;
  using merge_policy_type = MergePolicy;
  template <class Transport>
  using syncer_type = diloco::syncer<OuterOptimizer, MergePolicy, Transport>;
  template <class Model, class Transport>
  using learner_type = diloco::learner<Model, InnerStep, Transport>;

  InnerStep inner{};
  OuterOptimizer outer{};
  MergePolicy merge{};

  /// The syncer of this configuration, starting from `initial` (flat, in
  /// `layout` order) and serving `transport`.
  template <class Transport>
  syncer_type<Transport> make_syncer(const parameter_layout& layout, std::span<const scalar_type> initial,
                                     Transport& transport) const {
    return syncer_type<Transport>(layout, initial, transport, *this, outer, merge);
  }

  /// A learner of this configuration training `model` over `transport`.
  template <class Model, class Transport>
  learner_type<Model, Transport> make_learner(Model& model, Transport& transport, learner_options options) const {
    return learner_type<Model, Transport>(model, transport, std::move(options), inner);
  }
};

/// The inner step of data parallelism: SGD with learning rate 1, so that a
/// learner's outer gradient is its gradient.
inline inner::sgd_options data_parallel_inner_options() { return inner::sgd_options{.learning_rate = 1.0}; }

/// Synchronous data parallelism over `learners` learners: H = 1, one fragment,
/// lock-step, a world of M = `learners` (a rendezvous first, every round
/// waits for every live learner). Learners take inner SGD with learning rate
/// 1; the syncer applies AdamW (`adamw`) to the averaged gradient.
template <scalar T = float>
setup<inner::sgd<T>, outer::from_inner<inner::adamw<T>>, merge::average> data_parallel(
    std::uint32_t learners, inner::adamw_options adamw = {}) {
  setup<inner::sgd<T>, outer::from_inner<inner::adamw<T>>, merge::average> o{
      {}, inner::sgd<T>(data_parallel_inner_options()), outer::from_inner<inner::adamw<T>>(adamw), {}};
  o.training = training_config{.fragments = 1, .sync_period = 1, .overlap = 0, .mixing = 0.0, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

template <scalar T>
using data_parallel_inner = inner::sgd<T>;

template <scalar T>
using data_parallel_outer = outer::from_inner<inner::adamw<T>>;

/// DiLoCo's outer optimizer (Nesterov, η = 0.7, μ = 0.9 by default) and inner optimizer (AdamW).
template <scalar T>
using diloco_outer = outer::nesterov<T>;

/// The outer Nesterov settings of DiLoCo (arXiv 2311.08105): η = 0.7, μ = 0.9.
inline outer::nesterov_options diloco_outer_options() { return {.learning_rate = 0.7, .momentum = 0.9}; }

/// The outer Nesterov settings of Decoupled DiLoCo: η = 1, μ = 0.5. A
/// fragment takes about one outer step per learner and period there (each
/// partial round at its contributors' share), so momentum compounds M times
/// as often as in DiLoCo. Measured on the text model (docs/text.md has the
/// figures): DiLoCo's η = 0.7, μ = 0.9 left Decoupled DiLoCo 9 % behind
/// these settings at 600 steps, and μ from 0.3 to 0.6 at η = 1 were within
/// 0.5 % of one another. The best outer step depends on the task: the
/// Fashion-MNIST MLP ended 0.5 points better with DiLoCo's (87.96 against
/// 87.45 % test accuracy, 3 seeds), and `fashion_mnist` keeps those.
inline outer::nesterov_options decoupled_outer_options() { return {.learning_rate = 1.0, .momentum = 0.5}; }
template <scalar T>
using diloco_inner = inner::adamw<T>;

/// The policies of the DiLoCo family: AdamW inside, Nesterov outside, merged by `Merge`.
template <scalar T, class Merge>
using diloco_setup = setup<inner::adamw<T>, outer::nesterov<T>, Merge>;

/// DiLoCo (arXiv 2311.08105): every learner sends the whole model every H
/// steps and waits for the merged result; a world of M = `learners`; the
/// learners' outer gradients are averaged.
template <scalar T = float>
diloco_setup<T, merge::average> diloco(std::uint32_t learners, std::uint32_t sync_period) {
  diloco_setup<T, merge::average> o;
  o.training =
      training_config{.fragments = 1, .sync_period = sync_period, .overlap = 0, .mixing = 0.0, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

/// Streaming DiLoCo (arXiv 2501.18512): P staggered fragments, answers used τ
/// steps after the send, mixed in with α (0.5 was found robust); a world of
/// M = `learners`.
template <scalar T = float>
diloco_setup<T, merge::average> streaming_diloco(std::uint32_t learners, std::uint32_t sync_period,
                                                 std::uint32_t fragments, std::uint32_t overlap, double mixing = 0.5) {
  diloco_setup<T, merge::average> o;
  o.training = training_config{
      .fragments = fragments, .sync_period = sync_period, .overlap = overlap, .mixing = mixing, .lock_step = true};
  o.world.size = learners;
  o.quorum = learners;
  o.grace_factor = 0.0;
  return o;
}

/// Decoupled DiLoCo (arXiv 2604.21428): nobody waits; a round closes with K
/// learners plus an adaptive grace window; learners keep every step
/// (`adoption_rule::rebase`, their default); contributions weighted by their
/// tokens; the outer step at `decoupled_outer_options()`. Open membership
/// (no world size). τ defaults to min(5, H − 1): 5 steps of overlap, never
/// as many as H. The trainers use H = 50 and P = 8.
template <scalar T = float>
diloco_setup<T, merge::token_weighted> decoupled_diloco(std::uint32_t sync_period, std::uint32_t fragments,
                                                        std::uint32_t quorum = 1,
                                                        std::optional<std::uint32_t> overlap = std::nullopt) {
  diloco_setup<T, merge::token_weighted> o;
  o.outer = outer::nesterov<T>(decoupled_outer_options());
  const std::uint32_t tau = overlap.value_or(std::min<std::uint32_t>(5, sync_period > 0 ? sync_period - 1 : 0));
  o.training = training_config{
      .fragments = fragments, .sync_period = sync_period, .overlap = tau, .mixing = 0.0, .lock_step = false};
  o.quorum = quorum;
  o.grace_factor = 0.5;
  return o;
}

}  // namespace diloco::presets

/// Declares that a program compiles the syncer for these policies once, in
/// the file that says `DILOCO_COMPILE_SYNCER` for them (at namespace scope,
/// with qualified names, before the syncer is used); nothing without
/// DILOCO_SEPARATE_COMPILATION. The presets' syncers are declared here and
/// compiled by diloco/separate_compilation.hpp; a program whose syncer has
/// other policies may do the same for its own (docs/building.md, "Separate
/// compilation").
#if defined(DILOCO_SEPARATE_COMPILATION)
#define DILOCO_EXTERN_SYNCER(OuterOptimizer, MergePolicy) \
  extern template class diloco::detail::syncer_core<OuterOptimizer, MergePolicy>;
#else
#define DILOCO_EXTERN_SYNCER(OuterOptimizer, MergePolicy)
#endif

/// Compiles the syncer for these policies in this file, for every file of
/// the program that declared it with `DILOCO_EXTERN_SYNCER`.
#define DILOCO_COMPILE_SYNCER(OuterOptimizer, MergePolicy) \
  template class diloco::detail::syncer_core<OuterOptimizer, MergePolicy>;

/// The syncers of the presets for `float` models, one `X(outer optimizer,
/// merge policy)` each.
#define DILOCO_PRESET_SYNCERS(X)                                                    \
  X(diloco::outer::from_inner<diloco::inner::adamw<float>>, diloco::merge::average) \
  X(diloco::outer::nesterov<float>, diloco::merge::average)                         \
  X(diloco::outer::nesterov<float>, diloco::merge::token_weighted)

DILOCO_PRESET_SYNCERS(DILOCO_EXTERN_SYNCER)
