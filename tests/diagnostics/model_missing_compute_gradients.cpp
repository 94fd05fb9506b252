// A model without `compute_gradients`, handed to a learner.
// expect-error: diloco::model: missing member `[^`]*compute_gradients\(const batch_type&\)`
#include <diloco/diloco.hpp>

#include <span>
#include <vector>

namespace {

struct model_without_compute_gradients {
  using scalar_type = float;
  struct batch_type {};

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() { return gradients_; }

  diloco::parameter_layout layout_;
  std::vector<float> parameters_, gradients_;
};

}  // namespace

int main() {
  model_without_compute_gradients model;
  diloco::inproc::hub hub;
  diloco::learner<model_without_compute_gradients, diloco::inner::sgd<float>, diloco::inproc::endpoint> learner(
      model, hub.attach(1));
}
