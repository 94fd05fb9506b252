// Synchronous data parallelism and synchronous DiLoCo are configurations of
// the decoupled runtime. Each is run through learners, the syncer and the
// simulated network, and compared with a direct implementation of the
// algorithm written here from the papers' formulas (no diloco optimizer or
// merge code is used by the references).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/reference_adamw.hpp"
#include "support/toy_model.hpp"

namespace runtime_equivalence_test {

using T = double;
constexpr std::size_t features = 6;
constexpr std::size_t batch_size = 16;

using diloco::test::reference_adamw;

std::vector<double> gradient(const std::vector<double>& params, const toy::batch<T>& b) {
  toy::linear_regression<T> model(features);
  std::copy(params.begin(), params.end(), model.parameters().begin());
  model.compute_gradients(b);
  const auto g = model.gradients();
  return {g.begin(), g.end()};
}

double max_relative_difference(std::span<const double> a, std::span<const double> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1e-3, std::abs(b[i])));
  return worst;
}

/// Runs `learners` learners through the runtime on the simulator, each taking
/// `steps` steps on its own teacher stream (seed 100 + i).
template <class Inner, class Outer, class Merge>
std::vector<double> run_runtime(std::uint32_t learners, std::uint64_t steps, Inner inner, Outer outer,
                                diloco::syncer_options options) {
  using namespace diloco;
  toy::linear_regression<T> initial(features, 7);
  sim::network net(1, sim::link_options{std::chrono::milliseconds(3), 1e6});
  options.log = [](const std::string&) {};
  syncer<Outer, Merge, sim::endpoint> s(initial.layout(), initial.parameters(), net.attach(syncer_peer), options,
                                        outer);
  std::vector<std::unique_ptr<toy::linear_regression<T>>> models;
  std::vector<std::unique_ptr<learner<toy::linear_regression<T>, Inner, sim::endpoint>>> ls;
  std::vector<toy::teacher<T>> teachers;
  for (std::uint32_t i = 0; i < learners; ++i) {
    models.push_back(std::make_unique<toy::linear_regression<T>>(features, 1000 + i));  // overwritten on join
    ls.push_back(std::make_unique<learner<toy::linear_regression<T>, Inner, sim::endpoint>>(
        *models.back(), net.attach(i), learner_options{.id = i}, inner));
    teachers.emplace_back(features, 100 + i);
  }
  std::vector<sim::learner_plan> plans(learners, sim::learner_plan{1.0, steps, {}});
  const auto report = sim::run(
      net, s, ls, plans, [&](std::size_t i) { return teachers[i].next(batch_size); },
      [](std::size_t, const step_stats&, time_point) {});
  BOOST_TEST_REQUIRE(report.completed);
  return s.parameters();
}

BOOST_AUTO_TEST_SUITE(runtime_equivalence)

BOOST_AUTO_TEST_CASE(data_parallel_preset_is_gradient_averaging_with_adamw) {
  using namespace diloco;
  constexpr std::uint32_t M = 3;
  constexpr std::uint64_t steps = 40;
  const inner::adamw_options adamw{.learning_rate = 0.05, .weight_decay = 0.01};
  const auto got = run_runtime<presets::data_parallel_inner<T>, presets::data_parallel_outer<T>, merge::average>(
      M, steps, presets::data_parallel_inner<T>(presets::data_parallel_inner_options()),
      presets::data_parallel_outer<T>(adamw), presets::data_parallel(M));

  // Reference: every step, average the M gradients at the global parameters
  // and take one AdamW step.
  toy::linear_regression<T> initial(features, 7);
  std::vector<double> theta(initial.parameters().begin(), initial.parameters().end());
  std::vector<toy::teacher<T>> teachers;
  for (std::uint32_t i = 0; i < M; ++i) teachers.emplace_back(features, 100 + i);
  reference_adamw opt{{.learning_rate = 0.05, .weight_decay = 0.01}, {}, {}, 0};
  for (std::uint64_t t = 0; t < steps; ++t) {
    std::vector<double> g(theta.size(), 0.0);
    for (auto& teacher : teachers) {
      const auto gm = gradient(theta, teacher.next(batch_size));
      for (std::size_t k = 0; k < g.size(); ++k) g[k] += gm[k] / M;
    }
    opt.step(theta, g);
  }
  // The runtime's outer gradient is Θ − (Θ − g): equal to g up to one rounding.
  BOOST_TEST(max_relative_difference(got, theta) < 1e-9);
  // And training did something: the parameters moved away from the start.
  BOOST_TEST(max_relative_difference(
                 theta, std::vector<double>(initial.parameters().begin(), initial.parameters().end())) > 0.1);
}

BOOST_AUTO_TEST_CASE(diloco_preset_is_local_adamw_then_nesterov_on_the_average) {
  using namespace diloco;
  constexpr std::uint32_t M = 4;
  constexpr std::uint32_t H = 5;
  constexpr std::uint64_t rounds = 6;
  const inner::adamw_options adamw{.learning_rate = 0.02, .weight_decay = 0.0};
  const auto got = run_runtime<inner::adamw<T>, outer::nesterov<T>, merge::token_weighted>(
      M, rounds * H, inner::adamw<T>(adamw), outer::nesterov<T>({.learning_rate = 0.7, .momentum = 0.9}),
      presets::diloco(M, H));

  // Reference (DiLoCo, Douillard et al. 2023, Algorithm 1): each learner runs H
  // AdamW steps from the global model (its AdamW state persists), the outer
  // gradient is Θ − θ_m, averaged (equal token weights), and Nesterov
  // m ← μm + Δ; Θ ← Θ − η(Δ + μm) updates the global model.
  toy::linear_regression<T> initial(features, 7);
  std::vector<double> global(initial.parameters().begin(), initial.parameters().end());
  std::vector<double> momentum(global.size(), 0.0);
  std::vector<toy::teacher<T>> teachers;
  std::vector<reference_adamw> inner_opt(M, reference_adamw{{.learning_rate = 0.02, .weight_decay = 0.0}, {}, {}, 0});
  for (std::uint32_t i = 0; i < M; ++i) teachers.emplace_back(features, 100 + i);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    std::vector<double> delta(global.size(), 0.0);
    for (std::uint32_t i = 0; i < M; ++i) {
      std::vector<double> local = global;
      for (std::uint32_t h = 0; h < H; ++h) inner_opt[i].step(local, gradient(local, teachers[i].next(batch_size)));
      for (std::size_t k = 0; k < delta.size(); ++k) delta[k] += (global[k] - local[k]) / M;
    }
    for (std::size_t k = 0; k < global.size(); ++k) {
      momentum[k] = 0.9 * momentum[k] + delta[k];
      global[k] -= 0.7 * (delta[k] + 0.9 * momentum[k]);
    }
  }
  BOOST_TEST(max_relative_difference(got, global) < 1e-9);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_equivalence_test
