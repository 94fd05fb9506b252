// A communicator without all_gather, handed to unit_model.
// expect-error: diloco::collective: missing member `std::error_code all_gather\(std::span<const T> in, std::span<T> out, time_point deadline\)`
#include <diloco/diloco.hpp>

#include <cstddef>
#include <span>
#include <system_error>

namespace {

struct no_gather {
  std::size_t rank() const { return 0; }
  std::size_t size() const { return 1; }
  template <class T>
  std::error_code all_reduce(std::span<const T>, std::span<T>, diloco::reduce_op, diloco::time_point) {
    return {};
  }
  template <class T>
  std::error_code reduce_scatter(std::span<const T>, std::span<T>, diloco::reduce_op, diloco::time_point) {
    return {};
  }
  template <class T>
  std::error_code broadcast(std::span<T>, std::size_t, diloco::time_point) {
    return {};
  }
  std::error_code barrier(diloco::time_point) { return {}; }
};

struct tiny_model {
  using scalar_type = float;
  struct batch_type {};
  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() { return parameters_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }
  diloco::parameter_layout layout_;
  std::span<float> parameters_;
};

}  // namespace

int main() {
  tiny_model model;
  no_gather ranks;
  diloco::unit_model<tiny_model, no_gather> unit(model, ranks);
}
