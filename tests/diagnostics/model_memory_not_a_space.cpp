// A model whose `memory()` returns something that is not a memory space,
// handed to a learner.
// expect-error: diloco::model: `memory\(\)` must return a reference to a diloco::memory_space
#include <diloco/diloco.hpp>

#include <span>
#include <vector>

namespace {

struct gpu_handle {};  // what a user might return: a handle, not the learner's passes

struct model_with_a_handle_for_memory {
  using scalar_type = float;
  struct batch_type {};

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() { return gradients_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }
  gpu_handle& memory() { return handle_; }

  diloco::parameter_layout layout_;
  std::vector<float> parameters_, gradients_;
  gpu_handle handle_;
};

}  // namespace

int main() {
  model_with_a_handle_for_memory model;
  diloco::inproc::hub hub;
  diloco::learner<model_with_a_handle_for_memory, diloco::inner::sgd<float>, diloco::inproc::endpoint> learner(
      model, hub.attach(1));
}
