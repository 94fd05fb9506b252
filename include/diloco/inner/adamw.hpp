// AdamW: Adam with decoupled weight decay and bias correction.
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>
#include <vector>

#include "diloco/detail/config.hpp"
#include "diloco/serialize.hpp"

namespace diloco::inner {

/// Hyperparameters of `adamw` (defaults of PyTorch's `torch.optim.AdamW`).
struct adamw_options {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;  ///< λ, decoupled: `p ← p·(1 − lr·λ)`
};

/// One element of AdamW at step t (Kingma & Ba 2015, with the decoupled weight
/// decay of Loshchilov & Hutter 2019):
/// `m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;`
/// `p = p·(1 − lr·λ) − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + ε)`.
/// The per-step constants are precomputed once per step, by `at_step`, on the
/// host; `adamw::step` and the CUDA kernel (diloco/cuda/adamw.cuh) apply the
/// same functor.
template <class T>
struct adamw_element {
  T lr, beta1, beta2, epsilon, decay_factor, inv_bias1, inv_sqrt_bias2;

  /// The element update of step `t` (t ≥ 1, counting from the first step
  /// after the moments were created).
  static adamw_element at_step(const adamw_options& o, std::uint64_t t) {
    const double steps = static_cast<double>(t);
    return {T(o.learning_rate),
            T(o.beta1),
            T(o.beta2),
            T(o.epsilon),
            T(1.0 - o.learning_rate * o.weight_decay),
            T(1.0 / (1.0 - std::pow(o.beta1, steps))),
            T(1.0 / std::sqrt(1.0 - std::pow(o.beta2, steps)))};
  }

  DILOCO_HOST_DEVICE void operator()(T& p, T& m, T& v, T g) const {
    using std::sqrt;
    m = beta1 * m + (T(1) - beta1) * g;
    v = beta2 * v + (T(1) - beta2) * g * g;
    const T denom = sqrt(v) * inv_sqrt_bias2 + epsilon;
    p = p * decay_factor - lr * (m * inv_bias1) / denom;
  }
};

/// AdamW as an InnerStep. One fused pass per step: reads p, m, v, g and writes
/// p, m, v (28 bytes per fp32 parameter). Moments are created on the first step.
template <class T>
class adamw {
 public:
  using scalar_type = T;
  using options_type = adamw_options;

  explicit adamw(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0)) throw std::invalid_argument("diloco::inner::adamw: learning_rate must be >= 0");
    if (!(options.beta1 >= 0 && options.beta1 < 1))
      throw std::invalid_argument("diloco::inner::adamw: beta1 must be in [0, 1)");
    if (!(options.beta2 >= 0 && options.beta2 < 1))
      throw std::invalid_argument("diloco::inner::adamw: beta2 must be in [0, 1)");
    if (!(options.epsilon > 0)) throw std::invalid_argument("diloco::inner::adamw: epsilon must be > 0");
    if (!(options.weight_decay >= 0)) throw std::invalid_argument("diloco::inner::adamw: weight_decay must be >= 0");
  }

  void step(std::span<T> params, std::span<const T> grads) {
    assert(params.size() == grads.size());
    if (m_.empty()) {
      m_.assign(params.size(), T(0));
      v_.assign(params.size(), T(0));
    }
    assert(m_.size() == params.size());
    ++steps_;
    const auto f = adamw_element<T>::at_step(options_, steps_);
    T* p = params.data();
    T* m = m_.data();
    T* v = v_.data();
    const T* g = grads.data();
    for (std::size_t i = 0; i < params.size(); ++i) f(p[i], m[i], v[i], g[i]);
  }

  options_type& options() noexcept { return options_; }
  const options_type& options() const noexcept { return options_; }
  std::uint64_t steps() const noexcept { return steps_; }

  /// Forgets the moments and the step count (bias correction restarts).
  void reset() {
    m_.clear();
    v_.clear();
    steps_ = 0;
  }

  /// The saved form of an AdamW state: the step count and both moments
  /// (also `cuda::adamw`'s, so that a state moves between host and device).
  struct saved_state {
    std::uint64_t steps = 0;
    std::vector<T> m, v;

    static void write(std::ostream& out, std::uint64_t step_count, std::span<const T> first,
                      std::span<const T> second) {
      serial::write_tag(out, "ADMW", 1);
      serial::write_pod(out, step_count);
      serial::write_array(out, first);
      serial::write_array(out, second);
    }
    /// Throws `corrupt_state` on a bad block.
    static saved_state read(std::istream& in) {
      serial::expect_tag(in, "ADMW", 1);
      saved_state s;
      s.steps = serial::read_pod<std::uint64_t>(in, "adamw steps");
      s.m = serial::read_array<T>(in, serial::max_state_elements, "adamw first moment");
      s.v = serial::read_array<T>(in, serial::max_state_elements, "adamw second moment");
      if (s.m.size() != s.v.size()) throw corrupt_state("diloco: adamw moments differ in size");
      return s;
    }
  };

  void save(std::ostream& out) const {
    saved_state::write(out, steps_, std::span<const T>(m_), std::span<const T>(v_));
  }

  /// Throws `corrupt_state` on a bad block; the state is unchanged then.
  void load(std::istream& in) {
    auto s = saved_state::read(in);
    steps_ = s.steps;
    m_ = std::move(s.m);
    v_ = std::move(s.v);
  }

 private:
  options_type options_;
  std::vector<T> m_, v_;
  std::uint64_t steps_ = 0;
};

}  // namespace diloco::inner
