// Outer SGD: Θ ← Θ − η·Δ. With η = 1 and every learner contributing, this is
// federated averaging (the global model becomes the learners' average).
#pragma once

#include <cassert>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>

#include "diloco/detail/config.hpp"
#include "diloco/serialize.hpp"

namespace diloco::outer {

struct sgd_options {
  double learning_rate = 1.0;  ///< η
};

template <class T>
struct sgd_element {
  T lr;
  DILOCO_HOST_DEVICE void operator()(T& global, T delta) const { global -= lr * delta; }
};

/// Stateless outer SGD: one pass, reads Θ and Δ, writes Θ (12 bytes per fp32
/// parameter).
template <class T>
class sgd {
 public:
  using scalar_type = T;
  using options_type = sgd_options;

  explicit sgd(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0)) throw std::invalid_argument("diloco::outer::sgd: learning_rate must be >= 0");
  }

  void step(std::uint32_t /*fragment*/, std::span<T> global, std::span<const T> delta) {
    assert(global.size() == delta.size());
    const sgd_element<T> f{T(options_.learning_rate)};
    for (std::size_t i = 0; i < global.size(); ++i) f(global[i], delta[i]);
  }

  /// Stateless: nothing to forget.
  void reset(std::uint32_t /*fragment*/) noexcept {}

  options_type& options() noexcept { return options_; }
  void save(std::ostream& out) const { diloco::serial::write_tag(out, "OSGD", 1); }
  void load(std::istream& in) { diloco::serial::expect_tag(in, "OSGD", 1); }

 private:
  options_type options_;
};

}  // namespace diloco::outer
