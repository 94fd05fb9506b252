// Decoupled DiLoCo on the simulated network: heterogeneous learners, one of
// them stalled for a third of the run, lossy and jittery links. The global
// model must keep advancing during the stall, and the run must be a pure
// function of its seeds.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/toy_model.hpp"

namespace sim_run_test {

using namespace std::chrono_literals;
using T = float;
constexpr std::size_t features = 8;

struct outcome {
  std::vector<T> parameters;
  std::vector<diloco::update_event> updates;
  diloco::syncer_metrics metrics;
  diloco::sim::run_report report;
  diloco::time_point start{};
};

/// 4 learners at speeds 1, 1, 0.7, 0.5, 600 steps each (1 s per step at speed
/// 1), H = 20, P = 4, K = 1. The run lasts about 1200 s (the slowest learner);
/// learner 1 is frozen for a third of it, from 400 s to 800 s.
outcome run(std::uint64_t network_seed) {
  using namespace diloco;
  toy::linear_regression<T> initial(features, 3);
  sim::network net(network_seed,
                   sim::link_options{.latency = 20ms, .bytes_per_second = 1e5, .jitter = 10ms, .loss = 0.02});
  auto options = presets::decoupled_diloco<T>(20, 4, 1, 3);
  options.heartbeat_timeout = 10s;
  options.log = [](const std::string&) {};
  outcome out;
  options.on_update = [&out](const update_event& e) { out.updates.push_back(e); };
  syncer<outer::nesterov<T>, merge::token_weighted, sim::endpoint> s(initial.layout(), initial.parameters(),
                                                                     net.attach(syncer_peer), options, options.outer);
  using learner_type = learner<toy::linear_regression<T>, inner::adamw<T>, sim::endpoint>;
  std::vector<std::unique_ptr<toy::linear_regression<T>>> models;
  std::vector<std::unique_ptr<learner_type>> learners;
  std::vector<toy::teacher<T>> teachers;
  for (std::uint32_t i = 0; i < 4; ++i) {
    models.push_back(std::make_unique<toy::linear_regression<T>>(features, 3));
    learners.push_back(std::make_unique<learner_type>(*models.back(), net.attach(i),
                                                      learner_options{.id = i, .heartbeat_interval = 2s},
                                                      inner::adamw<T>({.learning_rate = 0.01, .weight_decay = 0.0})));
    teachers.emplace_back(features, 50 + i);
  }
  const std::vector<sim::learner_plan> plans{
      {1.0, 600, {}}, {1.0, 600, {{400s, 400s}}}, {0.7, 600, {}}, {0.5, 600, {}}};
  out.start = net.now();
  out.report = sim::run(
      net, s, learners, plans, [&](std::size_t i) { return teachers[i].next(16); },
      [](std::size_t, const step_stats&, time_point) {}, sim::run_options{.step_time = 1s});
  out.parameters = s.parameters();
  out.metrics = s.metrics();
  return out;
}

BOOST_AUTO_TEST_SUITE(sim_run)

BOOST_AUTO_TEST_CASE(global_model_advances_while_a_learner_is_stalled) {
  const auto out = run(11);
  BOOST_TEST_REQUIRE(out.report.completed);
  // The slowest learner (2 s per step) starts its 600th step 599 × 2 = 1198 s
  // after it joined.
  BOOST_TEST(std::chrono::duration<double>(out.report.end - out.start).count() >= 1198.0);

  // Every 20 s window inside the stall [400 s, 800 s) has outer updates.
  for (int window = 400; window < 800; window += 20) {
    const auto from = out.start + std::chrono::seconds(window);
    const auto to = from + 20s;
    const auto n = std::count_if(out.updates.begin(), out.updates.end(),
                                 [&](const diloco::update_event& e) { return e.at >= from && e.at < to; });
    BOOST_TEST(n > 0, "no outer update in [" << window << " s, " << window + 20 << " s)");
  }
  // The stalled learner was noticed and taken back.
  BOOST_TEST(out.metrics.declared_dead >= 1u);
  BOOST_TEST(out.metrics.revived >= 1u);
  // Nothing accepted went missing: all merged, none pending.
  BOOST_TEST(out.metrics.contributions_accepted == out.metrics.contributions_merged);
  BOOST_TEST(out.metrics.contributions_pending == 0u);

  // And the global model learned the teacher (w_k = ±(k+1)/8, b = 0.5).
  toy::teacher<T> teacher(features, 0);
  for (std::size_t k = 0; k < features; ++k) BOOST_TEST(std::abs(out.parameters[k] - teacher.weight(k)) < 0.05);
  BOOST_TEST(std::abs(out.parameters[features] - 0.5f) < 0.05);
}

BOOST_AUTO_TEST_CASE(same_seed_gives_bit_identical_global_parameters) {
  const auto a = run(11);
  const auto b = run(11);
  BOOST_TEST_REQUIRE(a.parameters.size() == b.parameters.size());
  BOOST_TEST(std::memcmp(a.parameters.data(), b.parameters.data(), a.parameters.size() * sizeof(T)) == 0);
  BOOST_TEST(a.updates.size() == b.updates.size());
  BOOST_TEST(a.metrics.contributions_merged == b.metrics.contributions_merged);

  // A different network seed (other losses and delays) gives another run, so
  // the comparison above is not vacuous.
  const auto c = run(12);
  BOOST_TEST(std::memcmp(a.parameters.data(), c.parameters.data(), a.parameters.size() * sizeof(T)) != 0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace sim_run_test
