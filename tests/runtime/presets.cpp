// The presets are bundles: each names the inner step, outer optimizer and
// merge policy of its configuration (from the papers: data parallelism is
// inner SGD at rate 1 with AdamW at the syncer and a plain average; the
// DiLoCo family is AdamW inside and Nesterov outside, averaged for the
// synchronous ones and token-weighted for Decoupled DiLoCo), and builds both
// ends from them.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/toy_model.hpp"

namespace runtime_presets_test {

using namespace diloco;

template <class Setup, class Inner, class Outer, class Merge>
constexpr bool names = std::is_same_v<typename Setup::inner_step_type, Inner>&& std::is_same_v<
    typename Setup::outer_optimizer_type, Outer>&& std::is_same_v<typename Setup::merge_policy_type, Merge>;

using dp = decltype(presets::data_parallel<double>(4));
static_assert(
    names<dp, inner::sgd<double>, outer::from_inner<inner::adamw<double>>, merge::weighted_mean<merge::uniform>>);
using dl = decltype(presets::diloco(4, 50));
static_assert(names<dl, inner::adamw<float>, outer::nesterov<float>, merge::weighted_mean<merge::uniform>>);
using sd = decltype(presets::streaming_diloco(4, 50, 2, 5));
static_assert(names<sd, inner::adamw<float>, outer::nesterov<float>, merge::weighted_mean<merge::uniform>>);
using dd = decltype(presets::decoupled_diloco<double>(50, 4));
static_assert(names<dd, inner::adamw<double>, outer::nesterov<double>, merge::weighted_mean<merge::token>>);
// A bundle is the syncer's options.
static_assert(std::is_base_of_v<syncer_options, dp>);

BOOST_AUTO_TEST_SUITE(runtime_presets)

BOOST_AUTO_TEST_CASE(data_parallel_learners_take_sgd_at_rate_one_and_the_syncer_adamw) {
  auto config = presets::data_parallel<double>(4, {.learning_rate = 3e-4});
  BOOST_TEST(config.inner.options().learning_rate == 1.0);
  BOOST_TEST(config.inner.options().momentum == 0.0);
  BOOST_TEST(config.outer.options().learning_rate == 3e-4);
  BOOST_TEST(config.training.sync_period == 1u);
  BOOST_TEST(config.training.lock_step);
}

BOOST_AUTO_TEST_CASE(a_bundle_builds_a_syncer_and_learners_that_train_together) {
  // Decoupled DiLoCo on the simulator: two learners fit the toy teacher.
  auto config = presets::decoupled_diloco<double>(/*H=*/10, /*P=*/1);
  config.inner = inner::adamw<double>({.learning_rate = 0.05});
  toy::linear_regression<double> init(4, 7);
  sim::network net(1, sim::link_options{std::chrono::milliseconds(1), 1e9});
  auto sync = config.make_syncer(init.layout(), init.parameters(), net.attach(syncer_peer));
  toy::linear_regression<double> m0(4, 1), m1(4, 2);
  auto l0 = config.make_learner(m0, net.attach(0), {.id = 0});
  auto l1 = config.make_learner(m1, net.attach(1), {.id = 1});
  using learner_type = decltype(l0);
  std::vector<learner_type*> ls{&l0, &l1};
  std::vector<toy::teacher<double>> data{toy::teacher<double>(4, 100), toy::teacher<double>(4, 101)};
  const auto result = sim::run(
      net, sync, ls, std::vector<sim::learner_plan>(2, sim::learner_plan{1.0, 1000, {}}),
      [&](std::size_t i) { return data[i].next(16); }, [](std::size_t, const step_stats&, time_point) {});
  BOOST_TEST(result.completed);
  BOOST_TEST(l0.inner().options().learning_rate == 0.05);  // the bundle's inner step, as set
  const auto theta = sync.parameters();
  const toy::teacher<double> truth(4, 0);
  for (std::size_t k = 0; k < 4; ++k)
    BOOST_TEST(std::abs(theta[k] - truth.weight(k)) < 0.05,
               "weight " << k << ": " << theta[k] << " vs " << truth.weight(k));
  BOOST_TEST(std::abs(theta[4] - 0.5) < 0.05);
  BOOST_TEST(sync.metrics().outer_updates > 10u);
}

/// The message of the `std::invalid_argument` that `f` throws ("" if none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

BOOST_AUTO_TEST_CASE(an_option_error_names_the_option_and_its_value) {
  toy::linear_regression<double> init(4, 7);
  inproc::hub hub;
  auto& end = hub.attach(syncer_peer);
  auto config = presets::diloco<double>(4, 5);
  config.training.overlap = 7;
  BOOST_TEST(refusal([&] { config.make_syncer(init.layout(), init.parameters(), end); }) ==
             "diloco::syncer: overlap tau = 7: must be smaller than the sync period H = 5");
  config.training.overlap = 0;
  config.screening.clip_factor = 0.5;
  BOOST_TEST(refusal([&] { config.make_syncer(init.layout(), init.parameters(), end); }) ==
             "diloco::screening_options: clip_factor = 0.5: must be 0 (off) or a finite value >= 1");
  config.screening.clip_factor = 8;
  config.world.loss_wait = -std::chrono::milliseconds(250);
  BOOST_TEST(refusal([&] { config.make_syncer(init.layout(), init.parameters(), end); }) ==
             "diloco::world_options: loss_wait = -0.25 s: must not be negative");
  timeouts t;
  t.heartbeat = std::chrono::seconds(1);
  t.dead_after = std::chrono::seconds(2);
  BOOST_TEST(refusal([&] { t.check(); }) ==
             "diloco::timeouts: dead_after = 2 s: must be at least 3 heartbeats (3 x 1 s), so that one lost heartbeat "
             "is no death");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_presets_test
