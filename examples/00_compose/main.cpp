// The README's example: four learner threads and a syncer thread train a
// small model with Decoupled DiLoCo through the in-process transport.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>

#include "line_model.hpp"  // a Model: fits y = a·x + b

int main() {
  using namespace diloco;
  inproc::hub hub;  // learners and the syncer as threads of this process
  line_model init;  // the initial global parameters
  auto config = presets::decoupled_diloco(/*H=*/20, /*P=*/2, /*K=*/1);  // AdamW, Nesterov, token-weighted
  config.inner = inner::adamw<float>({.learning_rate = 0.05});
  auto sync = config.make_syncer(init.layout(), init.parameters(), hub.attach(syncer_peer));
  std::jthread server([&](std::stop_token stop) { sync.run(stop); });

  std::vector<std::jthread> learners;
  for (std::uint32_t id = 0; id < 4; ++id)
    learners.emplace_back([&, id] {
      line_model model;
      auto unit = config.make_learner(model, hub.attach(id), {.id = id});
      for (int step = 0; step < 2000; ++step) {
        unit.step(line_model::sample(id, step)).value();
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // stands in for real work
      }
      unit.finish();  // waits for its answers in flight, sends what is left, then leaves
    });
  learners.clear();       // joins the learners
  server.request_stop();  // the syncer merges what is left and stops
  server.join();

  const auto theta = sync.parameters();
  std::printf("a = %.3f, b = %.3f (true: 2, -1) after %llu outer updates\n", theta[0], theta[1],
              static_cast<unsigned long long>(sync.metrics().outer_updates));
  return std::abs(theta[0] - 2.0f) < 0.05f && std::abs(theta[1] + 1.0f) < 0.05f ? 0 : 1;
}
