// The concepts against their archetypes (tests/support/archetypes.hpp): each
// archetype satisfies its concept, each variant that lacks one requirement
// does not, the library's own types satisfy theirs, and the runtime compiles
// and runs with nothing but archetypes.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/archetypes.hpp"

namespace concepts_archetypes_test {

using archetypes::blocking_transport_archetype;
using archetypes::collective_archetype;
using archetypes::inner_archetype;
using archetypes::merge_archetype;
using archetypes::model_archetype;
using archetypes::outer_archetype;
using archetypes::transport_archetype;

// ---------------------------------------------------------------------------
// The archetypes satisfy their concepts, and the checks the runtime makes
// (which fail with a message instead of returning false) accept them.

static_assert(diloco::model<model_archetype>);
static_assert(diloco::inner_step<inner_archetype>);
static_assert(diloco::outer_optimizer<outer_archetype>);
static_assert(diloco::merge_policy<merge_archetype, float>);
static_assert(diloco::transport<transport_archetype>);
static_assert(!diloco::blocking_transport<transport_archetype>);
static_assert(diloco::blocking_transport<blocking_transport_archetype>);

static_assert(diloco::check_model<model_archetype>());
static_assert(diloco::check_inner_step<inner_archetype>());
static_assert(diloco::check_outer_optimizer<outer_archetype>());
static_assert(diloco::check_merge_policy<merge_archetype, float>());
static_assert(diloco::check_transport<transport_archetype>());
static_assert(diloco::collective<collective_archetype> && diloco::check_collective<collective_archetype>());
static_assert(!std::is_copy_constructible_v<collective_archetype> &&
              !std::is_move_constructible_v<collective_archetype>);
// A unit's model, built from nothing but archetypes, is a model.
static_assert(diloco::model<diloco::unit_model<model_archetype, collective_archetype>>);

// Nothing beyond the requirements.
static_assert(!std::is_default_constructible_v<model_archetype> && !std::is_copy_constructible_v<model_archetype>);
static_assert(!std::is_copy_constructible_v<model_archetype::batch_type>);
static_assert(!std::is_default_constructible_v<inner_archetype> && !std::is_copy_constructible_v<inner_archetype>);
static_assert(!std::is_default_constructible_v<outer_archetype> && !std::is_copy_constructible_v<outer_archetype>);
static_assert(!std::is_default_constructible_v<merge_archetype> && !std::is_copy_constructible_v<merge_archetype>);
static_assert(!std::is_copy_constructible_v<transport_archetype>);
static_assert(!std::is_same_v<decltype(std::declval<model_archetype&>().gradients()), std::span<const float>>);
static_assert(!std::is_same_v<decltype(std::declval<const merge_archetype&>().weight(0, 0)), double>);

// ---------------------------------------------------------------------------
// Small variants (tests/support/archetypes.hpp): `X_lacking<r>` has every
// requirement of concept X except `r`; `X_lacking<none>` has them all, so each
// negative assertion below differs from a positive one in exactly one
// requirement. Declarations suffice: the concepts only look at them.

using archetypes::batch;
using archetypes::inner_lacking;
using archetypes::inner_req;
using archetypes::merge_lacking;
using archetypes::merge_req;
using archetypes::model_lacking;
using archetypes::model_req;
using archetypes::outer_lacking;
using archetypes::outer_req;
using archetypes::transport_lacking;
using archetypes::transport_req;

static_assert(diloco::model<model_lacking<model_req::none>>);
static_assert(!diloco::model<model_lacking<model_req::scalar_type>>);
static_assert(!diloco::model<model_lacking<model_req::batch_type>>);
static_assert(!diloco::model<model_lacking<model_req::layout>>);
static_assert(!diloco::model<model_lacking<model_req::parameters>>);
static_assert(!diloco::model<model_lacking<model_req::gradients>>);
static_assert(!diloco::model<model_lacking<model_req::compute_gradients>>);

// The forms matter too: `layout()` must work on a const model, and
// `compute_gradients` must accept a const batch.
struct model_with_mutable_layout : model_lacking<model_req::layout> {
  const diloco::parameter_layout& layout();
};
struct model_with_mutable_batch : model_lacking<model_req::compute_gradients> {
  diloco::step_stats compute_gradients(batch&);
};
static_assert(!diloco::model<model_with_mutable_layout>);
static_assert(!diloco::model<model_with_mutable_batch>);

static_assert(diloco::inner_step<inner_lacking<inner_req::none>>);
static_assert(!diloco::inner_step<inner_lacking<inner_req::scalar_type>>);
static_assert(!diloco::inner_step<inner_lacking<inner_req::options_type>>);
static_assert(!diloco::inner_step<inner_lacking<inner_req::step>>);
static_assert(!diloco::inner_step<inner_lacking<inner_req::options>>);

static_assert(diloco::outer_optimizer<outer_lacking<outer_req::none>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::scalar_type>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::options_type>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::step>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::reset>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::save>>);
static_assert(!diloco::outer_optimizer<outer_lacking<outer_req::load>>);

// `save` must work on a const optimizer.
struct outer_with_mutable_save : outer_lacking<outer_req::save> {
  void save(std::ostream&);
};
static_assert(!diloco::outer_optimizer<outer_with_mutable_save>);

static_assert(diloco::merge_policy<merge_lacking<merge_req::none>, float>);
static_assert(!diloco::merge_policy<merge_lacking<merge_req::weight>, float>);
static_assert(!diloco::merge_policy<merge_lacking<merge_req::merge>, float>);
// A policy for float is not one for double, and both members must be const.
static_assert(!diloco::merge_policy<merge_lacking<merge_req::none>, double>);
struct merge_with_mutable_merge : merge_lacking<merge_req::merge> {
  void merge(std::span<const diloco::weighted_delta<float>>, std::span<const diloco::fragment_slice>, std::span<float>,
             double);
};
static_assert(!diloco::merge_policy<merge_with_mutable_merge, float>);

static_assert(diloco::blocking_transport<transport_lacking<transport_req::none>>);
static_assert(!diloco::transport<transport_lacking<transport_req::try_send>>);
static_assert(!diloco::transport<transport_lacking<transport_req::try_receive>>);
static_assert(diloco::transport<transport_lacking<transport_req::receive_for>>);
static_assert(!diloco::blocking_transport<transport_lacking<transport_req::receive_for>>);
// Blocking needs the non-blocking half too.
static_assert(!diloco::blocking_transport<transport_lacking<transport_req::try_receive>>);

// ---------------------------------------------------------------------------
// The library's own types.

static_assert(diloco::inner_step<diloco::inner::sgd<float>>);
static_assert(diloco::inner_step<diloco::inner::adamw<float>>);
static_assert(diloco::inner_step<diloco::inner::adamw<double>>);

static_assert(diloco::outer_optimizer<diloco::outer::sgd<float>>);
static_assert(diloco::outer_optimizer<diloco::outer::nesterov<float>>);
static_assert(diloco::outer_optimizer<diloco::outer::nesterov<double>>);
static_assert(diloco::outer_optimizer<diloco::outer::delayed_nesterov<double>>);
static_assert(diloco::outer_optimizer<diloco::outer::from_inner<diloco::inner::adamw<float>>>);

static_assert(diloco::merge_policy<diloco::merge::average, float>);
static_assert(diloco::merge_policy<diloco::merge::token_weighted, double>);
static_assert(diloco::merge_policy<diloco::merge::radial_directional<>, float>);
static_assert(diloco::merge_policy<diloco::merge::radial_directional<diloco::merge::token_weights>, double>);

static_assert(diloco::blocking_transport<diloco::inproc::endpoint>);
static_assert(diloco::transport<diloco::sim::endpoint>);
static_assert(!diloco::blocking_transport<diloco::sim::endpoint>);

// ---------------------------------------------------------------------------
// The runtime against nothing but the requirements: every member function of
// the learner and the syncer, instantiated with archetypes. The blocking
// transport archetype is the one that has every member the runtime may use;
// the test case below drives both with the non-blocking one. (Explicitly
// instantiating them with `transport_archetype` would be enough in C++20,
// which skips the members whose constraints fail, `step` and `run`; clang 14
// instantiates those too and fails.)

}  // namespace concepts_archetypes_test

// An explicit instantiation stands in a namespace that encloses diloco's.
template class diloco::learner<archetypes::model_archetype, archetypes::inner_archetype,
                               archetypes::blocking_transport_archetype>;
template class diloco::syncer<archetypes::outer_archetype, archetypes::merge_archetype,
                              archetypes::blocking_transport_archetype>;

namespace concepts_archetypes_test {

BOOST_AUTO_TEST_SUITE(concepts_archetypes)

// One learner, one fragment, H = 2, τ = 0, driven by hand on the archetype
// transport. Θ = (1, 2, 3, 4). The learner adopts Θ, takes two inner steps of
// SGD (lr 0.5, gradient 1): θ = Θ − 1, so Δ = Θ − θ = 1 everywhere. The merge
// of one contribution is Δ itself (scale 1: the only learner brought all the
// expected weight); the outer step with lr 0.5 gives Θ' = Θ − 0.5 =
// (0.5, 1.5, 2.5, 3.5), which the learner adopts.
BOOST_AUTO_TEST_CASE(unit_model_with_archetypes) {
  // A unit of one rank: the broadcast keeps the parameters, the mean over
  // one rank is the rank's own gradient, and the tokens are its own.
  diloco::parameter_layout layout;
  layout.add("w", 3);
  model_archetype model(layout, {1.0f, 2.0f, 3.0f});
  collective_archetype ranks(archetypes::construct);
  diloco::unit_model unit(model, ranks);
  const model_archetype::batch_type batch(0.25f, 8);
  const diloco::step_stats stats = unit.compute_gradients(batch);
  BOOST_TEST(stats.tokens == 8u);
  BOOST_TEST(stats.loss == 0.0);
  const std::vector<float> gradients(unit.gradients().begin(), unit.gradients().end());
  const std::vector<float> parameters(unit.parameters().begin(), unit.parameters().end());
  BOOST_TEST(gradients == std::vector<float>(3, 0.25f), boost::test_tools::per_element());
  BOOST_TEST(parameters == (std::vector<float>{1.0f, 2.0f, 3.0f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(round_with_archetypes) {
  diloco::parameter_layout layout;
  layout.add("w", 4);
  const std::vector<float> initial = {1.0f, 2.0f, 3.0f, 4.0f};

  transport_archetype learner_end(7);
  transport_archetype syncer_end(diloco::syncer_peer);
  connect(learner_end, syncer_end);

  diloco::syncer_options options;
  options.training =
      diloco::training_config{.fragments = 1, .sync_period = 2, .overlap = 0, .mixing = 0.0, .lock_step = false};
  std::vector<std::string> log;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  diloco::syncer<outer_archetype, merge_archetype, transport_archetype> syncer(layout, initial, syncer_end, options,
                                                                               outer_archetype({.learning_rate = 0.5f}),
                                                                               merge_archetype(archetypes::construct));

  model_archetype model(layout, std::vector<float>(4, 0.0f));
  diloco::learner<model_archetype, inner_archetype, transport_archetype> learner(
      model, learner_end, diloco::learner_options{.id = 1}, inner_archetype({.learning_rate = 0.5f}));

  diloco::time_point now{};
  const auto deliver_to_syncer = [&] {
    while (auto e = syncer_end.try_receive()) syncer.handle(std::move(*e), now);
  };

  BOOST_TEST(!learner.poll(now));  // sends join
  deliver_to_syncer();             // welcome and the global state
  BOOST_TEST(learner.poll(now));
  BOOST_TEST(learner.joined());
  const std::vector<float> adopted(model.parameters().begin(), model.parameters().end());
  BOOST_TEST(adopted == initial, boost::test_tools::per_element());

  const model_archetype::batch_type ones(1.0f, 3);
  for (int step = 0; step < 2; ++step) {
    now += std::chrono::milliseconds(10);
    BOOST_TEST(learner.poll(now));
    const diloco::step_stats stats = learner.train_step(ones, now);
    BOOST_TEST(stats.tokens == 3u);
  }
  BOOST_TEST(learner.metrics().contributions_sent == 1u);
  deliver_to_syncer();  // heartbeat and the contribution: the round closes
  BOOST_TEST(syncer.revision(0) == 1u);

  const std::vector<float> expected = {0.5f, 1.5f, 2.5f, 3.5f};
  const std::vector<float> global = syncer.parameters();
  BOOST_TEST(global == expected, boost::test_tools::per_element());

  BOOST_TEST(learner.poll(now));  // adopts the answer
  BOOST_TEST(learner.revision(0) == 1u);
  const std::vector<float> theta(model.parameters().begin(), model.parameters().end());
  BOOST_TEST(theta == expected, boost::test_tools::per_element());

  // Nothing left to send since the adoption: finishing only says goodbye.
  BOOST_TEST(learner.next_deadline().has_value());
  learner.finish(now);
  deliver_to_syncer();
  BOOST_TEST(syncer.metrics().leaves == 1u);
  BOOST_TEST(syncer.live_learners() == 0u);
  syncer.flush(now);
  BOOST_TEST(syncer.revision(0) == 1u);
  BOOST_TEST(log.empty());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace concepts_archetypes_test
