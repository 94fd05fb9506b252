// Delayed Nesterov for strongly asynchronous runs (Liu et al. 2024,
// "Asynchronous Local-SGD Training for Language Modeling", arXiv 2401.09135):
// the momentum buffer changes only once every N outer steps, on the average of
// the outer gradients since its last change; in between, steps are plain.
#pragma once

#include <cassert>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>
#include <vector>

#include "diloco/detail/config.hpp"
#include "diloco/outer/detail/per_fragment.hpp"

namespace diloco::outer {

struct delayed_nesterov_options {
  double learning_rate = 0.7;  ///< η
  double momentum = 0.9;       ///< μ
  std::uint32_t delay = 4;     ///< N, outer steps per momentum update
};

/// Elements of Delayed Nesterov, for the k-th step of a fragment (k = 1, 2, ...):
/// every step accumulates `b ← b + Δ`; when k is not a multiple of N the step is
/// plain, `Θ ← Θ − η·Δ`; when it is, `m ← μ·m + b/N;  Θ ← Θ − η·(Δ + μ·m);  b ← 0`.
/// With N = 1 this is exactly `nesterov`.
template <class T>
struct delayed_nesterov_element {
  T lr, momentum, inv_delay;

  DILOCO_HOST_DEVICE void plain(T& global, T& b, T delta) const {
    b += delta;
    global -= lr * delta;
  }
  DILOCO_HOST_DEVICE void boundary(T& global, T& m, T& b, T delta) const {
    m = momentum * m + (b + delta) * inv_delay;
    b = T(0);
    global -= lr * (delta + momentum * m);
  }
};

template <class T>
class delayed_nesterov {
 public:
  using scalar_type = T;
  using options_type = delayed_nesterov_options;

  explicit delayed_nesterov(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0))
      throw std::invalid_argument("diloco::outer::delayed_nesterov: learning_rate must be >= 0");
    if (!(options.momentum >= 0 && options.momentum < 1))
      throw std::invalid_argument("diloco::outer::delayed_nesterov: momentum must be in [0, 1)");
    if (options.delay == 0) throw std::invalid_argument("diloco::outer::delayed_nesterov: delay must be >= 1");
  }

  /// One fused pass: 16 bytes per fp32 parameter on plain steps, 24 on the
  /// momentum step.
  void step(std::uint32_t fragment, std::span<T> global, std::span<const T> delta) {
    assert(global.size() == delta.size());
    auto& s = state_[fragment];
    if (s.m.empty()) {
      s.m.assign(global.size(), T(0));
      s.b.assign(global.size(), T(0));
    }
    assert(s.m.size() == global.size());
    const delayed_nesterov_element<T> f{T(options_.learning_rate), T(options_.momentum), T(1.0 / options_.delay)};
    ++s.count;
    T* g = global.data();
    T* m = s.m.data();
    T* b = s.b.data();
    const T* d = delta.data();
    if (s.count % options_.delay != 0) {
      for (std::size_t i = 0; i < global.size(); ++i) f.plain(g[i], b[i], d[i]);
    } else {
      for (std::size_t i = 0; i < global.size(); ++i) f.boundary(g[i], m[i], b[i], d[i]);
    }
  }

  /// Forgets fragment's buffers and merge count (the syncer refused the step that built them).
  void reset(std::uint32_t fragment) { state_.reset(fragment); }

  options_type& options() noexcept { return options_; }

  void save(std::ostream& out) const {
    diloco::serial::write_tag(out, "DNST", 1);
    state_.save(out);
  }
  void load(std::istream& in) {
    diloco::serial::expect_tag(in, "DNST", 1);
    state_.load(in);
  }

 private:
  struct fragment_state {
    std::vector<T> m, b;
    std::uint64_t count = 0;
    void save(std::ostream& out) const {
      diloco::serial::write_pod(out, count);
      diloco::serial::write_array(out, m);
      diloco::serial::write_array(out, b);
    }
    void load(std::istream& in) {
      count = diloco::serial::read_pod<std::uint64_t>(in, "delayed nesterov count");
      m = diloco::serial::read_array<T>(in, diloco::serial::max_state_elements, "delayed nesterov momentum");
      b = diloco::serial::read_array<T>(in, diloco::serial::max_state_elements, "delayed nesterov buffer");
      if (m.size() != b.size()) throw diloco::corrupt_state("diloco: delayed nesterov buffers differ");
    }
  };

  options_type options_;
  detail::per_fragment<fragment_state> state_;
};

}  // namespace diloco::outer
