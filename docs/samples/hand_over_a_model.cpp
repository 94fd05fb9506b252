// Bring your own trainer, way 1: hand the learner a model. The model keeps
// its parameters and gradients in std::vector<float> and computes a loss and
// its gradient; the learner does the rest (the inner AdamW step, and every H
// steps the exchange of fragments with the syncer). Three learner threads and
// a syncer thread fit y = w·x + b with Decoupled DiLoCo.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>

struct example {
  std::array<float, 4> x;
  float y;
};

/// w·x + b for the parameters θ = (w0, w1, w2, w3, b).
float predict(std::span<const float> theta, const std::array<float, 4>& x) {
  float y = theta[4];
  for (std::size_t i = 0; i < 4; ++i) y += theta[i] * x[i];
  return y;
}

double mean_squared_error(std::span<const float> theta, const std::vector<example>& data) {
  double sum = 0.0;
  for (const auto& e : data) sum += std::pow(double(predict(theta, e.x) - e.y), 2);
  return sum / double(data.size());
}

/// `n` examples of the line to learn, y = 1.5·x0 − 2·x1 + 0.5·x2 + 3·x3 − 1, with a little noise.
std::vector<example> draw(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  std::vector<example> batch(n);
  for (auto& e : batch) {
    for (float& v : e.x) v = uniform(rng);
    e.y = 1.5f * e.x[0] - 2.0f * e.x[1] + 0.5f * e.x[2] + 3.0f * e.x[3] - 1.0f + noise(rng);
  }
  return batch;
}

/// The model: everything `diloco::model` asks for (docs/concepts/model.md).
class linear_model {
 public:
  using scalar_type = float;
  using batch_type = std::vector<example>;

  explicit linear_model(unsigned seed) : parameters_(5), gradients_(5) {
    layout_.add("weight", 4);  // named tensors, one after the other in the flat buffer
    layout_.add("bias", 1);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (float& p : parameters_) p = normal(rng);
  }

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }  // the same memory for the model's lifetime
  std::span<const float> gradients() const { return gradients_; }

  /// One forward and backward pass: overwrites the gradients, leaves the parameters alone.
  diloco::step_stats compute_gradients(const batch_type& batch) {
    std::fill(gradients_.begin(), gradients_.end(), 0.0f);
    const float n = float(batch.size());
    for (const auto& e : batch) {
      const float error = predict(parameters_, e.x) - e.y;
      for (std::size_t i = 0; i < 4; ++i) gradients_[i] += 2.0f * error * e.x[i] / n;
      gradients_[4] += 2.0f * error / n;
    }
    return {.loss = mean_squared_error(parameters_, batch), .tokens = batch.size()};
  }

 private:
  diloco::parameter_layout layout_;
  std::vector<float> parameters_, gradients_;
};

static_assert(diloco::check_model<linear_model>());  // names the first missing member, if any

int main() {
  using namespace diloco;
  inproc::hub hub;       // learners and the syncer as threads of this process
  linear_model init(1);  // the initial global model
  std::mt19937 held_out_rng(7);
  const auto held_out = draw(held_out_rng, 512);
  const double before = mean_squared_error(init.parameters(), held_out);

  auto config = presets::decoupled_diloco(/*H=*/10, /*P=*/2, /*K=*/1);
  config.inner = inner::adamw<float>({.learning_rate = 0.02, .weight_decay = 0.0});
  auto sync = config.make_syncer(init.layout(), init.parameters(), hub.attach(syncer_peer));
  std::jthread server([&](std::stop_token stop) { sync.run(stop); });

  std::vector<std::jthread> learners;
  for (std::uint32_t id = 0; id < 3; ++id)
    learners.emplace_back([&, id] {
      linear_model model(1);        // its parameters are replaced by the global ones on joining
      std::mt19937 data(100 + id);  // each learner its own shard of the data
      auto unit = config.make_learner(model, hub.attach(id), {.id = id});
      for (int step = 0; step < 1000; ++step) {
        unit.step(draw(data, 16)).value();  // throws if the learner stopped (timed out, ended, ...)
        std::this_thread::sleep_for(std::chrono::microseconds(100));  // stands in for real work
      }
      unit.finish();  // waits for its answers in flight, sends what is left, then leaves
    });
  learners.clear();       // joins the learner threads
  server.request_stop();  // the syncer merges what is left and stops
  server.join();

  const std::vector<float> theta = sync.parameters();
  const double after = mean_squared_error(theta, held_out);
  std::printf("held-out loss %.4f -> %.6f after %llu outer updates; w = %.3f %.3f %.3f %.3f, b = %.3f\n", before, after,
              static_cast<unsigned long long>(sync.metrics().outer_updates), theta[0], theta[1], theta[2], theta[3],
              theta[4]);
  const std::array<float, 5> truth{1.5f, -2.0f, 0.5f, 3.0f, -1.0f};
  bool ok = after < 0.01 * before;
  for (std::size_t i = 0; i < truth.size(); ++i) ok = ok && std::abs(theta[i] - truth[i]) < 0.05f;
  return ok ? 0 : 1;
}
