// A model with memory() (a GPU model), handed to
// unit_model with one collective: the host one cannot reduce its gradients.
// expect-error: diloco::unit_model: a model with memory\(\) \(its own memory space\) needs a second collective on that memory
#include <diloco/diloco.hpp>

#include <span>

namespace {

/// Another memory space, as `cuda::device_memory` is.
struct elsewhere : diloco::host_memory {};

struct tiny_model {
  using scalar_type = float;
  struct batch_type {};
  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() const { return parameters_; }
  std::span<float> mutable_gradients() { return parameters_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }
  elsewhere& memory() { return memory_; }
  diloco::parameter_layout layout_;
  std::span<float> parameters_;
  elsewhere memory_;
};

}  // namespace

int main() {
  tiny_model model;
  auto ranks = diloco::threads::make_unit(1);
  diloco::unit_model<tiny_model, diloco::threads::communicator> unit(model, ranks[0]);
}
