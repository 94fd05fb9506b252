// A model whose parameters live where the host cannot reach them (a GPU's
// memory in real use): the learner keeps its bases there and does every
// outer-loop pass through the model's memory space (concepts/memory_space.hpp).
// Without a GPU, tests/support/fenced_memory.hpp stands in for one: memory
// that faults on any access outside the space's passes, the model's forward
// and backward pass and the inner step. Each run is compared with the same
// run on the same model in host memory, which the other runtime tests check
// against references of their own: it must give the same bits.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/fenced_memory.hpp"
#include "support/toy_model.hpp"

namespace runtime_memory_space_test {

using namespace diloco;
using T = float;
constexpr std::size_t features = 12;
constexpr std::size_t batch_size = 8;

/// What a run leaves: the global model, each learner's parameters and saved
/// state, and the bytes that went on the wire.
struct outcome {
  std::vector<T> global;
  std::vector<std::vector<T>> thetas;
  std::vector<std::string> saved;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t outer_updates = 0;
};

/// The host model, or the fenced one, with its inner step.
template <bool Fenced>
struct world {
  using model_type = std::conditional_t<Fenced, fenced::linear_regression<T>, toy::linear_regression<T>>;
  using inner_type = std::conditional_t<Fenced, fenced::inner_step<inner::adamw<T>>, inner::adamw<T>>;
  using learner_type = learner<model_type, inner_type, sim::endpoint>;

  fenced::arena arena;

  std::unique_ptr<model_type> model(std::uint64_t seed) {
    if constexpr (Fenced)
      return std::make_unique<model_type>(arena, features, seed);
    else
      return std::make_unique<model_type>(features, seed);
  }
  inner_type inner() {
    const inner::adamw<T> adamw({.learning_rate = 0.02});
    if constexpr (Fenced)
      return inner_type(arena, adamw);
    else
      return adamw;
  }
  static std::vector<T> values(model_type& m) {
    if constexpr (Fenced)
      return m.values();
    else
      return {m.parameters().begin(), m.parameters().end()};
  }
};

/// Three learners (speeds 1, 0.7, 0.5) train the toy regression on their
/// own teacher streams over the simulated network, then each saves its state.
template <bool Fenced, class Setup>
outcome run(Setup setup, bool error_feedback, std::uint64_t steps, adoption_rule rule = learner_options{}.adopt) {
  world<Fenced> w;
  toy::linear_regression<T> initial(features, 7);
  sim::network net(1, sim::link_options{std::chrono::milliseconds(3), 1e6});
  setup.log = [](const std::string&) {};
  auto s = setup.make_syncer(initial.layout(), std::span<const T>(initial.parameters()), net.attach(syncer_peer));
  std::vector<std::unique_ptr<typename world<Fenced>::model_type>> models;
  std::vector<std::unique_ptr<typename world<Fenced>::learner_type>> learners;
  std::vector<toy::teacher<T>> teachers;
  const std::vector<double> speeds{1.0, 0.7, 0.5};
  std::vector<sim::learner_plan> plans;
  for (std::uint32_t i = 0; i < speeds.size(); ++i) {
    models.push_back(w.model(1000 + i));  // overwritten when it joins
    learners.push_back(std::make_unique<typename world<Fenced>::learner_type>(
        *models.back(), net.attach(i), learner_options{.id = i, .error_feedback = error_feedback, .adopt = rule},
        w.inner()));
    teachers.emplace_back(features, 100 + i);
    plans.push_back({speeds[i], steps, {}});
  }
  const auto report = sim::run(
      net, s, learners, plans, [&](std::size_t i) { return teachers[i].next(batch_size); },
      [](std::size_t, const step_stats&, time_point) {});
  BOOST_TEST_REQUIRE(report.completed);
  outcome o;
  const auto global = s.parameters();  // a copy
  o.global.assign(global.begin(), global.end());
  o.outer_updates = s.metrics().outer_updates;
  for (std::size_t i = 0; i < learners.size(); ++i) {
    o.thetas.push_back(world<Fenced>::values(*models[i]));
    std::ostringstream out;
    learners[i]->save(out);
    o.saved.push_back(std::move(out).str());
    o.bytes_sent += learners[i]->metrics().bytes_sent;
    o.bytes_received += learners[i]->metrics().bytes_received;
  }
  return o;
}

void same_bits(const outcome& fenced, const outcome& host, std::uint64_t least_updates) {
  BOOST_TEST(host.outer_updates >= least_updates);  // the runs trained
  BOOST_TEST(fenced.outer_updates == host.outer_updates);
  BOOST_TEST(fenced.global == host.global, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(fenced.thetas.size() == host.thetas.size());
  for (std::size_t i = 0; i < host.thetas.size(); ++i) {
    BOOST_TEST(fenced.thetas[i] == host.thetas[i], boost::test_tools::per_element());
    BOOST_TEST((fenced.saved[i] == host.saved[i]));  // θ, bases, AdamW state, counters
  }
  BOOST_TEST(fenced.bytes_sent == host.bytes_sent);
  BOOST_TEST(fenced.bytes_received == host.bytes_received);
}

BOOST_AUTO_TEST_SUITE(runtime_memory_space)

BOOST_AUTO_TEST_CASE(fenced_memory_faults_outside_the_spaces_passes) {
  // The premise of every other case: reading a fenced model's parameters
  // directly kills the process (a child, so that the test lives on).
  fenced::arena arena;
  fenced::linear_regression<T> model(arena, features, 1);
  const pid_t child = fork();
  BOOST_TEST_REQUIRE(child >= 0);
  if (child == 0) {
    volatile T x = model.parameters()[0];
    (void)x;
    _exit(0);
  }
  int status = 0;
  BOOST_TEST_REQUIRE(waitpid(child, &status, 0) == child);
  BOOST_TEST(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));  // SIGSEGV, or a sanitizer's exit after it
  // And the same read through the space's own copy works.
  const std::vector<T> values = model.values();
  toy::linear_regression<T> reference(features, 1);
  BOOST_TEST(values == std::vector<T>(reference.parameters().begin(), reference.parameters().end()),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(decoupled_with_compression_mixing_and_error_feedback_trains_as_in_host_memory) {
  // Contributions in int8, updates in bf16, error feedback: every pass of
  // the space (encode with a residual; with the default rule pack and adopt
  // by rebase, with the overwrite rule and α = 0.5 adopt by overwrite and by
  // mixing) with fragments whose slices are not contiguous in θ.
  auto setup = presets::decoupled_diloco<T>(/*H=*/4, /*P=*/3, /*quorum=*/1, /*overlap=*/1);
  setup.training.mixing = 0.5;
  setup.training.codecs = {.contributions = codec_id::int8, .updates = codec_id::bf16, .block = 5};
  for (const auto rule : {adoption_rule::rebase, adoption_rule::overwrite}) {
    BOOST_TEST_CONTEXT("adoption rule " << name(rule)) {
      const auto host = run<false>(setup, true, 60, rule);
      const auto fenced = run<true>(setup, true, 60, rule);
      // every fragment is sent once per H = 4 steps: at least one update per fragment and period
      same_bits(fenced, host, 3 * 60 / 4);
    }
  }
}

BOOST_AUTO_TEST_CASE(lock_step_diloco_at_full_precision_trains_as_in_host_memory) {
  const auto setup = presets::diloco<T>(3, 5);
  const auto host = run<false>(setup, false, 40);
  const auto fenced = run<true>(setup, false, 40);
  same_bits(fenced, host, 40 / 5);  // one round every H = 5 steps
}

BOOST_AUTO_TEST_CASE(a_fenced_learner_resumes_from_its_checkpoint) {
  // A state saved by a fenced learner loads into a new fenced learner: θ is
  // written through the space, and equals what was saved.
  auto setup = presets::decoupled_diloco<T>(4, 2);
  setup.training.codecs = {.contributions = codec_id::int4, .updates = codec_id::f32, .block = 4};
  const auto ran = run<true>(setup, false, 30);
  fenced::arena arena;
  fenced::linear_regression<T> model(arena, features, 555);
  sim::network net(1, sim::link_options{std::chrono::milliseconds(3), 1e6});
  learner<fenced::linear_regression<T>, fenced::inner_step<inner::adamw<T>>, sim::endpoint> restarted(
      model, net.attach(0), learner_options{.id = 0, .incarnation = 2},
      fenced::inner_step<inner::adamw<T>>(arena, inner::adamw<T>({.learning_rate = 0.02})));
  std::istringstream in(ran.saved[0]);
  restarted.load(in);
  BOOST_TEST(model.values() == ran.thetas[0], boost::test_tools::per_element());
  BOOST_TEST(model.memory().passes == 1u);  // one write of θ
}

BOOST_AUTO_TEST_CASE(a_fenced_learner_gives_a_syncer_without_a_model_its_initial_state) {
  // The syncer asks the first learner for its parameters: gathered from the
  // fenced θ through the space.
  inproc::hub hub;
  auto& service = hub.attach(syncer_peer);
  bootstrap<T, inproc::endpoint> boot(
      service, training_config{.fragments = 3, .sync_period = 4, .overlap = 1, .mixing = 0.0, .lock_step = false});
  fenced::arena arena;
  fenced::linear_regression<T> model(arena, features, 42);
  learner<fenced::linear_regression<T>, fenced::inner_step<inner::adamw<T>>, inproc::endpoint> l(
      model, hub.attach(0), learner_options{.id = 0},
      fenced::inner_step<inner::adamw<T>>(arena, inner::adamw<T>(inner::adamw_options{})));
  time_point now{};
  for (int round = 0; round < 3 && !boot.ready(); ++round) {
    BOOST_TEST(!l.poll(now));
    while (auto e = service.try_receive()) boot.handle(std::move(*e), now);
  }
  BOOST_TEST_REQUIRE(boot.ready());
  toy::linear_regression<T> reference(features, 42);
  const auto expected = reference.parameters();
  BOOST_TEST(
      std::vector<T>(boot.initial().begin(), boot.initial().end()) == std::vector<T>(expected.begin(), expected.end()),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_memory_space_test
