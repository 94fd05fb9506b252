// A user's own compile-time check of a model type that has no `gradients`,
// through the public entry point.
// expect-error: diloco::model: missing member `std::span<const scalar_type> gradients\(\)`
#include <diloco/concepts/model.hpp>

#include <span>
#include <vector>

namespace {

struct model_without_gradients {
  using scalar_type = double;
  struct batch_type {};

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<double> parameters() { return parameters_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }

  diloco::parameter_layout layout_;
  std::vector<double> parameters_;
};

static_assert(diloco::check_model<model_without_gradients>());

}  // namespace
