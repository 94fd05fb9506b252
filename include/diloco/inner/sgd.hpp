// Stochastic gradient descent with optional momentum and weight decay.
#pragma once

#include <cassert>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>
#include <vector>

#include "diloco/detail/config.hpp"
#include "diloco/serialize.hpp"

namespace diloco::inner {

/// Hyperparameters of `sgd`. Dimensionless except the learning rate, which is
/// in parameter units per gradient unit.
struct sgd_options {
  double learning_rate = 0.01;
  double momentum = 0.0;      ///< μ; 0 disables the momentum buffer
  double weight_decay = 0.0;  ///< λ, added to the gradient (coupled L2)
  bool nesterov = false;      ///< use g + μ·b instead of b as the step direction
};

/// One element of SGD: `g' = g + λp; b = μb + g'; p -= lr·(nesterov ? g' + μb : b)`
/// (PyTorch's `torch.optim.SGD` convention). With μ = 0, `p -= lr·g'`.
template <class T>
struct sgd_element {
  T lr, momentum, decay;
  bool nesterov;

  DILOCO_HOST_DEVICE void operator()(T& p, T g) const { p -= lr * (g + decay * p); }

  DILOCO_HOST_DEVICE void operator()(T& p, T& b, T g) const {
    const T d = g + decay * p;
    b = momentum * b + d;
    p -= lr * (nesterov ? d + momentum * b : b);
  }
};

/// SGD as an InnerStep. One pass over the parameters per step; with momentum,
/// 12 (fp32) bytes read and 8 written per parameter. The data-parallel preset
/// uses `sgd` with learning rate 1 so that a learner's outer gradient equals its
/// gradient.
template <class T>
class sgd {
 public:
  using scalar_type = T;
  using options_type = sgd_options;

  explicit sgd(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0)) throw std::invalid_argument("diloco::inner::sgd: learning_rate must be >= 0");
    if (!(options.momentum >= 0 && options.momentum < 1))
      throw std::invalid_argument("diloco::inner::sgd: momentum must be in [0, 1)");
    if (!(options.weight_decay >= 0)) throw std::invalid_argument("diloco::inner::sgd: weight_decay must be >= 0");
    if (options.nesterov && options.momentum == 0)
      throw std::invalid_argument("diloco::inner::sgd: nesterov needs a momentum above 0");
  }

  void step(std::span<T> params, std::span<const T> grads) {
    assert(params.size() == grads.size());
    const sgd_element<T> f{T(options_.learning_rate), T(options_.momentum), T(options_.weight_decay),
                           options_.nesterov};
    ++steps_;
    if (options_.momentum == 0) {
      for (std::size_t i = 0; i < params.size(); ++i) f(params[i], grads[i]);
      return;
    }
    if (buffer_.empty()) buffer_.assign(params.size(), T(0));
    assert(buffer_.size() == params.size());
    for (std::size_t i = 0; i < params.size(); ++i) f(params[i], buffer_[i], grads[i]);
  }

  options_type& options() noexcept { return options_; }
  const options_type& options() const noexcept { return options_; }
  std::uint64_t steps() const noexcept { return steps_; }

  /// Forgets the momentum buffer and the step count.
  void reset() {
    buffer_.clear();
    steps_ = 0;
  }

  void save(std::ostream& out) const {
    serial::write_tag(out, "SGD1", 1);
    serial::write_pod(out, steps_);
    serial::write_array(out, buffer_);
  }

  /// Throws `corrupt_state` on a bad block; the state is unchanged then.
  void load(std::istream& in) {
    serial::expect_tag(in, "SGD1", 1);
    const auto steps = serial::read_pod<std::uint64_t>(in, "sgd steps");
    auto buffer = serial::read_array<T>(in, serial::max_state_elements, "sgd momentum");
    steps_ = steps;
    buffer_ = std::move(buffer);
  }

 private:
  options_type options_;
  std::vector<T> buffer_;
  std::uint64_t steps_ = 0;
};

}  // namespace diloco::inner
