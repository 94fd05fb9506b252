// A minimal `diloco::inner_step` (docs/concepts/inner_step.md): RMSprop
// (Tieleman and Hinton, 2012). Its state, the running mean of the squared
// gradients, is created by the first `step`, when the size is known. `main`
// minimizes Σ (θ_i − c_i)², lowering the learning rate through `options()`
// halfway, as a trainer's schedule would between two learner steps.
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <diloco/concepts/inner_step.hpp>

template <class T>
class rmsprop {
 public:
  using scalar_type = T;
  struct options_type {
    double learning_rate = 0.01;
    double decay = 0.9;  ///< ρ of the running mean of g²
    double epsilon = 1e-8;
  };

  explicit rmsprop(options_type options = {}) : options_(options) {}

  void step(std::span<T> params, std::span<const T> grads) {
    if (mean_square_.empty()) mean_square_.assign(params.size(), T(0));
    const T lr = T(options_.learning_rate), rho = T(options_.decay), eps = T(options_.epsilon);
    for (std::size_t i = 0; i < params.size(); ++i) {
      mean_square_[i] = rho * mean_square_[i] + (T(1) - rho) * grads[i] * grads[i];
      params[i] -= lr * grads[i] / (std::sqrt(mean_square_[i]) + eps);
    }
  }

  options_type& options() { return options_; }

 private:
  options_type options_;
  std::vector<T> mean_square_;
};

static_assert(diloco::check_inner_step<rmsprop<float>>());
static_assert(diloco::check_inner_step<rmsprop<double>>());

int main() {
  const std::vector<float> target{1.0f, -2.0f, 3.0f};
  std::vector<float> theta(3, 0.0f), gradient(3);
  rmsprop<float> inner({.learning_rate = 0.05});
  for (int step = 0; step < 600; ++step) {
    if (step == 300) inner.options().learning_rate = 0.002;
    for (std::size_t i = 0; i < theta.size(); ++i) gradient[i] = 2.0f * (theta[i] - target[i]);
    inner.step(theta, gradient);
  }
  float error = 0.0f;
  for (std::size_t i = 0; i < theta.size(); ++i) error = std::fmax(error, std::abs(theta[i] - target[i]));
  std::printf("theta = %.4f %.4f %.4f, largest error %.1e\n", theta[0], theta[1], theta[2], error);
  return error < 1e-2f ? 0 : 1;
}
