// A model held in Eigen arrays, with diloco::eigen::parameter_store: the store
// owns one flat parameter buffer and one flat gradient buffer, and hands out
// Eigen maps onto the named tensors in them. Two learner threads and a syncer
// thread fit y = W·x + b (W 2×3, b 2×1) with Decoupled DiLoCo.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <Eigen/Core>
#include <diloco/adapters/eigen.hpp>
#include <diloco/diloco.hpp>

using matrix = Eigen::MatrixXf;

/// A batch: inputs as the columns of `x` (3 × n), targets as those of `y` (2 × n).
struct batch {
  matrix x, y;
};

/// `n` examples of y = W·x + b, W = [[1, −2, 0.5], [3, 0, −1]], b = (0.5, −1), with a little noise.
batch draw(std::mt19937& rng, Eigen::Index n) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  matrix w(2, 3);
  w << 1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -1.0f;
  const Eigen::Vector2f b(0.5f, -1.0f);
  batch out{matrix(3, n), matrix(2, n)};
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < 3; ++i) out.x(i, j) = uniform(rng);
  out.y = (w * out.x).colwise() + b;
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < 2; ++i) out.y(i, j) += noise(rng);
  return out;
}

class eigen_linear {
 public:
  using scalar_type = float;
  using batch_type = batch;

  explicit eigen_linear(unsigned seed) {
    // Every tensor first: each `add` may move the flat buffers, and a map
    // taken before a later `add` points into the old ones.
    weight_ = store_.add("weight", 2, 3);
    bias_ = store_.add("bias", 2, 1);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (float& p : store_.parameters()) p = normal(rng);
  }

  const diloco::parameter_layout& layout() const { return store_.layout(); }
  std::span<float> parameters() { return store_.parameters(); }
  std::span<const float> gradients() const { return store_.gradients(); }

  /// Mean squared error (over outputs and examples) and its gradient. The
  /// maps are taken here, after the last `add`; they view the store's memory,
  /// which the learner reads and writes between steps.
  diloco::step_stats compute_gradients(const batch& b) {
    const auto w = store_.param(weight_);
    const auto bias = store_.param(bias_);
    const matrix error = (w * b.x).colwise() + bias.col(0) - b.y;  // 2 × n
    const float n = float(error.size());
    store_.grad(weight_) = (2.0f / n) * error * b.x.transpose();
    store_.grad(bias_) = (2.0f / n) * error.rowwise().sum();
    return {.loss = double(error.squaredNorm() / n), .tokens = std::uint64_t(b.x.cols())};
  }

  double loss(const batch& b) const {
    const matrix error = (store_.param(weight_) * b.x).colwise() + store_.param(bias_).col(0) - b.y;
    return double(error.squaredNorm() / float(error.size()));
  }

 private:
  diloco::eigen::parameter_store<float> store_;
  std::size_t weight_ = 0, bias_ = 0;
};

static_assert(diloco::check_model<eigen_linear>());

int main() {
  using namespace diloco;
  inproc::hub hub;
  eigen_linear init(1);
  std::mt19937 held_out_rng(7);
  const batch held_out = draw(held_out_rng, 512);
  const double before = init.loss(held_out);

  auto config = presets::decoupled_diloco(/*H=*/10, /*P=*/2, /*K=*/1);
  config.inner = inner::adamw<float>({.learning_rate = 0.02, .weight_decay = 0.0});
  auto sync = config.make_syncer(init.layout(), init.parameters(), hub.attach(syncer_peer));
  std::jthread server([&](std::stop_token stop) { sync.run(stop); });

  std::vector<std::jthread> learners;
  for (std::uint32_t id = 0; id < 2; ++id)
    learners.emplace_back([&, id] {
      eigen_linear model(1);
      std::mt19937 data(100 + id);
      auto unit = config.make_learner(model, hub.attach(id), {.id = id});
      for (int step = 0; step < 1000; ++step) {
        unit.step(draw(data, 16)).value();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      unit.finish();
    });
  learners.clear();
  server.request_stop();
  server.join();

  // The global parameters, read back through a store of the same layout.
  eigen_linear result(1);
  const std::vector<float> theta = sync.parameters();
  std::copy(theta.begin(), theta.end(), result.parameters().begin());
  const double after = result.loss(held_out);
  std::printf("held-out loss %.4f -> %.6f after %llu outer updates\n", before, after,
              static_cast<unsigned long long>(sync.metrics().outer_updates));
  // theta is W column by column (Eigen's default order), then b.
  const float truth[] = {1.0f, 3.0f, -2.0f, 0.0f, 0.5f, -1.0f, 0.5f, -1.0f};
  bool ok = after < 0.01 * before;
  for (std::size_t i = 0; i < 8; ++i) ok = ok && std::abs(theta[i] - truth[i]) < 0.05f;
  return ok ? 0 : 1;
}
