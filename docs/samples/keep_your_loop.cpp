// Bring your own trainer, way 2: keep your loop. The trainer below existed
// before diloco: its parameters live in a std::vector<float>, it computes its
// loss and gradient itself, applies its own optimizer and runs its own loop.
// To join a run it shows its vectors to the learner through a small view (a
// Model), passes its optimizer as the inner step, and calls the learner once
// per step in place of "gradient, then optimizer".
//
// The check: with one learner and an outer SGD step of 1, DiLoCo changes
// nothing (the global model becomes the learner's at every sync), so the run
// through the library must end where the plain loop ends.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>

// A program that compiles the library once (docs/building.md, "Separate
// compilation") compiles this file's syncer there too; otherwise nothing.
DILOCO_EXTERN_SYNCER(diloco::outer::sgd<float>, diloco::merge::average)

// ---- The trainer's own code: logistic regression on 3 features. ----

struct batch {
  std::vector<float> x;  // n × 3, row-major
  std::vector<float> y;  // labels, 0 or 1
};

/// Batch `step` of the training data (or, with step < 0, a held-out one).
batch make_batch(int step, std::size_t n = 32) {
  std::mt19937 rng(static_cast<unsigned>(step + 1000));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  batch b;
  for (std::size_t i = 0; i < n; ++i) {
    const float x0 = uniform(rng), x1 = uniform(rng), x2 = uniform(rng);
    b.x.insert(b.x.end(), {x0, x1, x2});
    b.y.push_back(2.0f * x0 - 1.0f * x1 + 0.5f * x2 + 0.2f + 0.3f * uniform(rng) > 0.0f ? 1.0f : 0.0f);
  }
  return b;
}

/// Mean binary cross-entropy of weights w = (w0, w1, w2, b) on `b`; writes its gradient.
double loss_and_gradient(std::span<const float> w, const batch& b, std::span<float> gradient) {
  std::fill(gradient.begin(), gradient.end(), 0.0f);
  const std::size_t n = b.y.size();
  double loss = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float* x = &b.x[3 * i];
    const float p = 1.0f / (1.0f + std::exp(-(w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3])));
    loss -= b.y[i] > 0.5f ? std::log(double(p) + 1e-12) : std::log(1.0 - double(p) + 1e-12);
    for (std::size_t k = 0; k < 3; ++k) gradient[k] += (p - b.y[i]) * x[k] / float(n);
    gradient[3] += (p - b.y[i]) / float(n);
  }
  return loss / double(n);
}

struct momentum_sgd_options {
  float learning_rate = 0.2f;
  float momentum = 0.9f;
};

/// The trainer's optimizer. The three lines marked "InnerStep" make it one
/// (docs/concepts/inner_step.md); nothing else changes.
class momentum_sgd {
 public:
  using scalar_type = float;                  // InnerStep
  using options_type = momentum_sgd_options;  // InnerStep
  explicit momentum_sgd(options_type options = {}) : options_(options) {}
  options_type& options() { return options_; }  // InnerStep

  void step(std::span<float> w, std::span<const float> gradient) {
    velocity_.resize(w.size(), 0.0f);
    for (std::size_t i = 0; i < w.size(); ++i) {
      velocity_[i] = options_.momentum * velocity_[i] + gradient[i];
      w[i] -= options_.learning_rate * velocity_[i];
    }
  }

 private:
  options_type options_;
  std::vector<float> velocity_;
};

std::vector<float> initial_weights() { return {0.1f, -0.2f, 0.05f, 0.0f}; }

/// The trainer as it was: its own loop.
std::vector<float> train_alone(int steps) {
  std::vector<float> w = initial_weights(), gradient(w.size());
  momentum_sgd optimizer;
  for (int step = 0; step < steps; ++step) {
    const batch b = make_batch(step);
    loss_and_gradient(w, b, gradient);
    optimizer.step(w, gradient);
  }
  return w;
}

// ---- What joining a diloco run adds. ----

/// The trainer's vectors seen as a `diloco::model`; owns nothing but the gradient.
class trainer_view {
 public:
  using scalar_type = float;
  using batch_type = batch;

  explicit trainer_view(std::vector<float>& weights) : weights_(weights), gradient_(weights.size()) {
    layout_.add("weight", 3);
    layout_.add("bias", 1);
  }
  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return weights_; }
  std::span<const float> gradients() const { return gradient_; }
  diloco::step_stats compute_gradients(const batch& b) {
    return {.loss = loss_and_gradient(weights_, b, gradient_), .tokens = b.y.size()};
  }

 private:
  std::vector<float>& weights_;
  std::vector<float> gradient_;
  diloco::parameter_layout layout_;
};

static_assert(diloco::check_model<trainer_view>());
static_assert(diloco::check_inner_step<momentum_sgd>());

/// The same loop, now one learner of a run: the syncer runs on a thread here;
/// across machines it is `diloco_syncer` and the learner's transport a
/// `diloco::zeromq::client` (docs/operations.md).
std::vector<float> train_with_diloco(int steps) {
  using namespace diloco;
  // Synchronous DiLoCo, one learner, H = 10, outer SGD with rate 1: Θ ← Θ − (Θ − θ) = θ.
  presets::setup<momentum_sgd, outer::sgd<float>, merge::average> config;
  config.training = training_config{.fragments = 1, .sync_period = 10, .overlap = 0, .mixing = 0.0, .lock_step = true};
  config.world.size = 1;
  config.quorum = 1;
  config.grace_factor = 0.0;
  config.outer = outer::sgd<float>({.learning_rate = 1.0});

  std::vector<float> w = initial_weights();
  trainer_view view(w);
  inproc::hub hub;
  auto sync = config.make_syncer(view.layout(), view.parameters(), hub.attach(syncer_peer));
  std::jthread server([&](std::stop_token stop) { sync.run(stop); });
  auto learner = config.make_learner(view, hub.attach(0), {.id = 0});

  for (int step = 0; step < steps; ++step) {
    const batch b = make_batch(step);
    const auto stats = learner.step(b);  // was: loss_and_gradient(w, b, gradient); optimizer.step(w, gradient);
    if (!stats) {
      std::fprintf(stderr, "learner stopped at step %d: %s\n", step, stats.error().message().c_str());
      return {};
    }
    if (step % 100 == 0) std::printf("step %d: training loss %.4f\n", step, stats->loss);
  }
  learner.finish();  // sends what is left, then leaves
  server.request_stop();
  server.join();
  return sync.parameters();  // the global model
}

int main() {
  const int steps = 300;
  const std::vector<float> reference = train_alone(steps);
  const std::vector<float> global = train_with_diloco(steps);
  if (global.size() != reference.size()) return 1;

  const batch held_out = make_batch(-1000, 1024);
  std::vector<float> unused(4);
  const double before = loss_and_gradient(initial_weights(), held_out, unused);
  const double after = loss_and_gradient(global, held_out, unused);
  double largest_difference = 0.0;
  for (std::size_t i = 0; i < global.size(); ++i)
    largest_difference = std::max(largest_difference, double(std::abs(global[i] - reference[i])));
  std::printf("held-out loss %.4f -> %.4f; largest difference from the plain loop %.2e\n", before, after,
              largest_difference);
  return after < 0.6 * before && largest_difference < 1e-4 ? 0 : 1;
}
