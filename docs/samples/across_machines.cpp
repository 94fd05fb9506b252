// One program, two roles: the syncer, or a learner, of a Decoupled DiLoCo run
// across machines, over ZeroMQ with CURVE (encrypted, and only learners whose
// keys the syncer allows get in). The model is its own: a linear fit
// y = w·x + b of 4 features, on data each learner draws for itself.
//
//   across_machines syncer KEYS          # KEYS/syncer.key, KEYS/learners.pub
//   across_machines learner KEYS STEPS   # KEYS/learners.key, KEYS/syncer.pub
//
// Settings come from the environment, as diloco_launch and cluster
// schedulers set it (docs/launch.md):
//   DILOCO_ENDPOINT     the syncer binds it (tcp://0.0.0.0:5555, or port 0 for
//                       any) and prints what it bound; learners connect to it
//   DILOCO_LEARNERS     the syncer: how many learners the run waits for
//   DILOCO_LEARNER_ID   a learner's id, stable across its restarts
//   DILOCO_INCARNATION  1 at a learner's first start, one more at each restart
//
// A learner trains until its local step reaches STEPS, saving its state
// (docs/design.md, "Learner checkpoints") to learner-ID.state in the working
// directory every 50 steps and at the end; started again with a newer
// incarnation, it resumes from that file. The syncer ends the run once every
// learner has left, and exits with 0 if the global model's held-out loss fell
// to under a hundredth of the initial model's.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/transport/zeromq.hpp>

namespace fs = std::filesystem;

struct example {
  std::array<float, 4> x;
  float y;
};

float predict(std::span<const float> theta, const std::array<float, 4>& x) {
  return theta[0] * x[0] + theta[1] * x[1] + theta[2] * x[2] + theta[3] * x[3] + theta[4];
}

double loss(std::span<const float> theta, const std::vector<example>& data) {
  double sum = 0.0;
  for (const auto& e : data) sum += std::pow(double(predict(theta, e.x) - e.y), 2);
  return sum / double(data.size());
}

/// `n` examples of y = 2·x0 + x1 − 3·x2 + 0.5·x3 + 0.25, with a little noise.
std::vector<example> draw(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  std::vector<example> out(n);
  for (auto& e : out) {
    for (float& v : e.x) v = uniform(rng);
    e.y = 2.0f * e.x[0] + e.x[1] - 3.0f * e.x[2] + 0.5f * e.x[3] + 0.25f + noise(rng);
  }
  return out;
}

class linear_fit {
 public:
  using scalar_type = float;
  using batch_type = std::vector<example>;

  linear_fit() : theta_(5, 0.0f), grad_(5, 0.0f) {
    layout_.add("weight", 4);
    layout_.add("bias", 1);
  }
  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return theta_; }
  std::span<const float> gradients() const { return grad_; }

  diloco::step_stats compute_gradients(const batch_type& batch) {
    std::fill(grad_.begin(), grad_.end(), 0.0f);
    const float n = float(batch.size());
    for (const auto& e : batch) {
      const float error = predict(theta_, e.x) - e.y;
      for (std::size_t i = 0; i < 4; ++i) grad_[i] += 2.0f * error * e.x[i] / n;
      grad_[4] += 2.0f * error / n;
    }
    return {.loss = loss(theta_, batch), .tokens = batch.size()};
  }

 private:
  diloco::parameter_layout layout_;
  std::vector<float> theta_, grad_;
};

/// The run's configuration, the same on both ends.
auto configuration() {
  auto config = diloco::presets::decoupled_diloco(/*H=*/10, /*P=*/2, /*K=*/1);
  config.inner = diloco::inner::adamw<float>({.learning_rate = 0.02, .weight_decay = 0.0});
  return config;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) throw std::invalid_argument(std::string("set the environment variable ") + name);
  return value;
}

std::uint32_t environment_number(const char* name) {
  const std::string text = environment(name);
  std::size_t used = 0;
  const unsigned long value = std::stoul(text, &used);
  if (used != text.size() || text.front() == '-' || value > 0xFFFFFFFFul)
    throw std::invalid_argument(std::string(name) + " must be a number from 0 to 4294967295, not '" + text + "'");
  return std::uint32_t(value);
}

int run_syncer(const fs::path& keys) {
  using namespace diloco;
  const std::uint32_t learners = environment_number("DILOCO_LEARNERS");
  zmq::context_t context;
  zeromq::server transport(context, environment("DILOCO_ENDPOINT"), {},
                           zeromq::server_security{zeromq::load_keypair(keys / "syncer.key"),
                                                   zeromq::load_allow_list(keys / "learners.pub")});
  std::printf("syncer: listening on %s\n", transport.endpoint().c_str());
  std::fflush(stdout);

  auto config = configuration();
  config.end.expected_learners = learners;             // not before all of them have joined,
  config.end.when_all_gone = std::chrono::seconds(3);  // end 3 s after the last one left
  config.end.deadline = std::chrono::minutes(10);      // and in any case after 10 minutes
  const linear_fit init;
  const std::vector<float> start(init.layout().size(), 0.0f);  // the initial global model: all zero
  auto sync = config.make_syncer(init.layout(), std::span<const float>(start), transport);
  sync.run(std::stop_token{});  // returns when the run has ended

  std::mt19937 rng(7);
  const auto held_out = draw(rng, 1000);
  const double before = loss(start, held_out);
  const double after = loss(sync.parameters(), held_out);
  std::printf("syncer: %s; held-out loss %.4f -> %.6f after %llu outer updates\n",
              sync.ended().value_or("stopped").c_str(), before, after,
              static_cast<unsigned long long>(sync.metrics().outer_updates));
  return after < 0.01 * before ? 0 : 1;
}

int run_learner(const fs::path& keys, std::uint64_t steps) {
  using namespace diloco;
  const std::uint32_t id = environment_number("DILOCO_LEARNER_ID");
  const std::uint32_t incarnation = environment_number("DILOCO_INCARNATION");
  zmq::context_t context;
  zeromq::client transport(context, environment("DILOCO_ENDPOINT"), id, incarnation, {},
                           zeromq::client_security{zeromq::load_keypair(keys / "learners.key"),
                                                   zeromq::load_public_key(keys / "syncer.pub")});
  linear_fit model;
  auto config = configuration();
  auto unit = config.make_learner(model, transport, {.id = id, .incarnation = incarnation});

  const fs::path state = "learner-" + std::to_string(id) + ".state";
  if (fs::exists(state)) {
    std::ifstream in(state, std::ios::binary);
    unit.load(in);  // throws if the file is not this learner's, or its incarnation is not older
    std::printf("learner %u: resumed at step %llu\n", id, static_cast<unsigned long long>(unit.local_step()));
  }
  const auto save = [&] {  // a new file, then renamed over the old one: never half written
    const fs::path part = state.string() + ".part";
    {
      std::ofstream out(part, std::ios::binary | std::ios::trunc);
      unit.save(out);
      if (!out.flush()) throw std::runtime_error("cannot write " + part.string());
    }
    fs::rename(part, state);
  };

  std::mt19937 data(1000 * id + incarnation);  // each learner, and each incarnation, its own data
  while (unit.local_step() < steps) {
    const auto stepped = unit.step(draw(data, 16));
    if (!stepped) {
      std::printf("learner %u: stopped: %s\n", id, stepped.error().message().c_str());
      return unit.ended() ? 0 : 1;
    }
    if (unit.local_step() % 50 == 0) save();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // stands in for real work
  }
  unit.finish();
  save();
  std::printf("learner %u: done at step %llu\n", id, static_cast<unsigned long long>(unit.local_step()));
  return 0;
}

int main(int argc, char** argv) try {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "syncer" && argc == 3) return run_syncer(argv[2]);
  if (role == "learner" && argc == 4) {
    const std::string steps = argv[3];
    if (steps.empty() || steps.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("STEPS must be a positive number, not '" + steps + "'");
    return run_learner(argv[2], std::stoull(steps));
  }
  std::fprintf(stderr, "usage: %s syncer KEYS | %s learner KEYS STEPS\n", argv[0], argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "across_machines: %s\n", e.what());
  return 1;
}
