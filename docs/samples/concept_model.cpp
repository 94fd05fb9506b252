// A minimal `diloco::model` (docs/concepts/model.md): the least-squares fit
// of a line y = w·x + b, parameters and gradients in host memory. `main`
// does by hand what a learner does at every inner step (`compute_gradients`,
// then the inner step on `parameters()` and `gradients()`) and checks that
// the line is found.
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <diloco/concepts/model.hpp>
#include <diloco/inner/sgd.hpp>

struct point {
  float x, y;
};

class line {
 public:
  using scalar_type = float;
  using batch_type = std::vector<point>;

  line() {
    layout_.add("w", 1);  // the tensors, in the order they lie in parameters()
    layout_.add("b", 1);
  }

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }  // a std::array never moves: the same memory throughout
  std::span<const float> gradients() const { return gradients_; }

  diloco::step_stats compute_gradients(const batch_type& batch) {
    const float n = static_cast<float>(batch.size());
    double loss = 0.0;
    gradients_ = {};
    for (const point& p : batch) {
      const float error = parameters_[0] * p.x + parameters_[1] - p.y;
      gradients_[0] += 2.0f * error * p.x / n;
      gradients_[1] += 2.0f * error / n;
      loss += double(error) * double(error) / double(n);
    }
    return {.loss = loss, .tokens = batch.size()};  // tokens weigh this learner's contributions
  }

 private:
  diloco::parameter_layout layout_;
  std::array<float, 2> parameters_{};
  std::array<float, 2> gradients_{};
};

static_assert(diloco::check_model<line>());

int main() {
  const line::batch_type batch{{-1.0f, -2.0f}, {0.0f, 1.0f}, {1.0f, 4.0f}, {2.0f, 7.0f}};  // y = 3x + 1
  line model;
  diloco::inner::sgd<float> inner({.learning_rate = 0.1});
  const double first = model.compute_gradients(batch).loss;
  double last = first;
  for (int step = 0; step < 200; ++step) {
    last = model.compute_gradients(batch).loss;
    inner.step(model.parameters(), model.gradients());
  }
  const std::span<const float> p = model.parameters();
  std::printf("loss %.3f -> %.2e, w = %.4f, b = %.4f\n", first, last, p[0], p[1]);
  return last < 1e-6 * first && std::abs(p[0] - 3.0f) < 1e-3f && std::abs(p[1] - 1.0f) < 1e-3f ? 0 : 1;
}
