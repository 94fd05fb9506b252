// An inner optimizer over `int`, handed to a learner: an inner step updates
// real numbers (float or double), whatever else it provides.
// expect-error: diloco::inner_step: member type `scalar_type` is missing or is not float or double
#include <diloco/diloco.hpp>

#include <span>
#include <vector>

namespace {

struct model {
  using scalar_type = float;
  struct batch_type {};

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() { return gradients_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }

  diloco::parameter_layout layout_;
  std::vector<float> parameters_, gradients_;
};

struct integer_inner {
  using scalar_type = int;
  struct options_type {
    int learning_rate = 1;
  };

  void step(std::span<int> params, std::span<const int> grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= options_.learning_rate * grads[i];
  }
  options_type& options() { return options_; }

  options_type options_;
};

}  // namespace

int main() {
  model m;
  diloco::inproc::hub hub;
  diloco::learner<model, integer_inner, diloco::inproc::endpoint> learner(m, hub.attach(1));
}
