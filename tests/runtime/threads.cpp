// ctest-labels: unit threads
// The runtime as the threaded trainer runs it: the syncer serving the
// in-process transport on its own thread (`run`), and learners stepping on
// theirs with the blocking `step`. Run by the sanitizer builds (the `threads`
// label under ThreadSanitizer): every message crosses a thread.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/toy_model.hpp"

namespace runtime_threads_test {

using namespace diloco;
using T = double;
constexpr std::size_t features = 6;

/// ½·‖θ − θ*‖², θ* the teacher's weights and bias (toy_model.hpp).
double distance_to_teacher(std::span<const T> params) { return toy::teacher<T>(features, 0).distance(params); }

struct outcome {
  std::vector<T> initial, global;
  syncer_metrics syncer;
  std::vector<learner_metrics> learners;
  std::vector<std::string> errors;
};

/// `learners` learners of `steps` inner steps each, every one on its own
/// thread, against a syncer on another.
outcome train_on_threads(syncer_options options, std::uint32_t learners, std::uint64_t steps) {
  using learner_type = learner<toy::linear_regression<T>, inner::sgd<T>, inproc::endpoint>;
  toy::linear_regression<T> initial(features, 7);
  outcome out;
  out.initial.assign(initial.parameters().begin(), initial.parameters().end());

  inproc::hub hub;
  syncer<outer::nesterov<T>, merge::weighted_mean<merge::token>, inproc::endpoint> sync(
      initial.layout(), initial.parameters(), hub.attach(syncer_peer), options);
  std::vector<std::unique_ptr<toy::linear_regression<T>>> models;
  std::vector<std::unique_ptr<learner_type>> ls;
  for (std::uint32_t i = 0; i < learners; ++i) {
    models.push_back(std::make_unique<toy::linear_regression<T>>(features, 1000 + i));  // replaced on join
    ls.push_back(std::make_unique<learner_type>(*models.back(), hub.attach(i), learner_options{.id = i},
                                                inner::sgd<T>({.learning_rate = 0.1})));
  }
  out.errors.resize(learners);
  {
    std::jthread server([&sync](std::stop_token stop) { sync.run(stop); });
    {
      std::vector<std::jthread> threads;
      for (std::uint32_t i = 0; i < learners; ++i)
        threads.emplace_back([&, i] {
          toy::teacher<T> data(features, 100 + i);
          for (std::uint64_t s = 0; s < steps; ++s) {
            if (auto r = ls[i]->step(data.next(16)); !r) {
              out.errors[i] = r.error().message();
              return;
            }
            // A step of a real model takes time: answers arrive while the
            // learner works, as they do in training.
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ls[i]->finish(clock::now());
        });
    }  // every learner has sent its last contribution and left
    server.request_stop();
  }  // the syncer has handled what was queued, flushed and stopped
  out.global = sync.parameters();
  out.syncer = sync.metrics();
  for (const auto& l : ls) out.learners.push_back(l->metrics());
  return out;
}

BOOST_AUTO_TEST_SUITE(runtime_threads)

BOOST_AUTO_TEST_CASE(decoupled_learners_on_threads_train_and_lose_nothing) {
  constexpr std::uint32_t learners = 3;
  constexpr std::uint64_t steps = 200;
  auto options = presets::decoupled_diloco(/*sync_period=*/8, /*fragments=*/2, /*quorum=*/1, /*overlap=*/2);
  const outcome o = train_on_threads(options, learners, steps);

  std::uint64_t sent = 0;
  for (std::uint32_t i = 0; i < learners; ++i) {
    BOOST_TEST(o.errors[i] == "", "learner " << i << ": " << o.errors[i]);
    BOOST_TEST(o.learners[i].steps == steps);
    BOOST_TEST(o.learners[i].sends_dropped == 0u);
    sent += o.learners[i].contributions_sent;
  }
  // Every contribution sent reached the syncer and got a verdict; every
  // accepted one was merged (the flush closes the open rounds).
  BOOST_TEST(sent >= learners * 2u);  // at least each fragment of each learner once
  BOOST_TEST(o.syncer.contributions_accepted + o.syncer.rejected_total() == sent);
  BOOST_TEST(o.syncer.contributions_merged == o.syncer.contributions_accepted);
  BOOST_TEST(o.syncer.contributions_pending == 0u);
  BOOST_TEST(o.syncer.contributions_lost == 0u);
  BOOST_TEST(o.syncer.joins == learners);
  BOOST_TEST(o.syncer.leaves == learners);
  BOOST_TEST(o.syncer.outer_updates > 0u);

  BOOST_TEST_MESSAGE("contributions " << sent << ", outer updates " << o.syncer.outer_updates
                                      << ", distance to the teacher " << distance_to_teacher(o.initial) << " -> "
                                      << distance_to_teacher(o.global));
  // The global model learned the teacher.
  for (T v : o.global) BOOST_TEST(std::isfinite(v));
  BOOST_TEST(distance_to_teacher(o.global) < 0.05 * distance_to_teacher(o.initial),
             "distance " << distance_to_teacher(o.global) << " from " << distance_to_teacher(o.initial));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_threads_test
