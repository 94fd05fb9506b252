// An inner optimizer whose update is named `update` instead of `step`, handed
// to a learner.
// expect-error: diloco::inner_step: missing member `void step\(std::span<scalar_type> params, std::span<const scalar_type> grads\)`
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

struct inner_without_step {
  using scalar_type = float;
  struct options_type {
    float learning_rate = 0.1f;
  };

  void update(std::span<float> params, std::span<const float> grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= options_.learning_rate * grads[i];
  }
  options_type& options() { return options_; }

  options_type options_;
};

}  // namespace

int main() {
  model m;
  diloco::inproc::hub hub;
  diloco::learner<model, inner_without_step, diloco::inproc::endpoint> learner(m, hub.attach(1));
}
