// A learner process of a downstream project, run by diloco_launch against
// diloco_syncer (both installed): its model is a plain std::vector<float>
// (y = a·x + b fitted to the line y = 2x − 1), its transport diloco::zeromq,
// and it learns who it is from the launcher's environment: DILOCO_ENDPOINT,
// DILOCO_LEARNER_ID, DILOCO_INCARNATION, DILOCO_LEARNERS.
//
//   launch_learner STEPS [DIE_ID:DIE_STEP]
// With DIE_ID:DIE_STEP, learner DIE_ID's first incarnation kills itself with
// SIGKILL at that step, for the launcher to restart it. Prints "learner ID
// incarnation I: a=… b=…" and exits 0 when its model fits the line.
#include <signal.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/transport/zeromq.hpp>

namespace {

class line_model {
 public:
  using scalar_type = float;
  using batch_type = std::array<float, 8>;

  line_model() {
    layout_.add("a", 1);
    layout_.add("b", 1);
  }
  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> gradients() const { return grads_; }

  diloco::step_stats compute_gradients(const batch_type& xs) {
    grads_.assign(2, 0.0f);
    double loss = 0.0;
    for (const float x : xs) {
      const float err = params_[0] * x + params_[1] - (2.0f * x - 1.0f);
      loss += double(err) * double(err) / double(xs.size());
      grads_[0] += 2.0f * err * x / float(xs.size());
      grads_[1] += 2.0f * err / float(xs.size());
    }
    return {loss, xs.size()};
  }

 private:
  diloco::parameter_layout layout_;
  std::vector<float> params_ = std::vector<float>(2, 0.0f);
  std::vector<float> grads_ = std::vector<float>(2, 0.0f);
};
static_assert(diloco::model<line_model>);

/// The environment variable `name` as a number; exits with a message if it is
/// missing (the program was not started by diloco_launch).
std::uint32_t from_environment(const char* name) {
  const char* text = std::getenv(name);
  if (!text) {
    std::fprintf(stderr, "launch_learner: %s is not set (run me with diloco_launch)\n", name);
    std::exit(2);
  }
  return static_cast<std::uint32_t>(std::strtoul(text, nullptr, 10));
}

}  // namespace

int main(int argc, char** argv) {
  const char* endpoint = std::getenv("DILOCO_ENDPOINT");
  const auto id = from_environment("DILOCO_LEARNER_ID");
  const auto incarnation = from_environment("DILOCO_INCARNATION");
  const auto learners = from_environment("DILOCO_LEARNERS");
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  int die_id = -1, die_step = -1;
  if (argc > 2) std::sscanf(argv[2], "%d:%d", &die_id, &die_step);
  if (!endpoint || id >= learners) {
    std::fprintf(stderr, "launch_learner: bad environment\n");
    return 2;
  }

  auto config = diloco::presets::decoupled_diloco(/*H=*/10, /*P=*/1, /*K=*/1);
  config.inner = diloco::inner::adamw<float>({.learning_rate = 0.02});
  ::zmq::context_t context;
  diloco::zeromq::client client(context, endpoint, id, incarnation);
  line_model model;
  auto unit = config.make_learner(model, client, {.id = id, .incarnation = incarnation});
  for (int step = 0; step < steps; ++step) {
    if (static_cast<int>(id) == die_id && incarnation == 1 && step == die_step) ::raise(SIGKILL);
    line_model::batch_type xs{};
    for (std::size_t i = 0; i < xs.size(); ++i)
      xs[i] = std::fmod(0.37f * float(step * 8 + int(i)) + 0.11f * float(id), 2.0f) - 1.0f;
    const auto r = unit.step(xs);
    if (!r && unit.ended()) break;  // the syncer ended the run
    if (!r) {
      std::fprintf(stderr, "launch_learner: learner %u: %s\n", id, r.error().message().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // stands in for real work
  }
  unit.finish();  // waits for its answers in flight, sends what is left, then leaves
  const auto theta = model.parameters();
  std::printf("learner %u incarnation %u of %u: a=%.3f b=%.3f\n", id, incarnation, learners, theta[0], theta[1]);
  return std::abs(theta[0] - 2.0f) < 0.5f && std::abs(theta[1] + 1.0f) < 0.5f
             ? 0
             : 1;  // from a = b = 0; local steps since the last update scatter it by up to 0.25
}
