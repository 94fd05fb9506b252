// Outer Nesterov momentum, DiLoCo's outer optimizer (Douillard et al. 2023,
// arXiv 2311.08105: η = 0.7, μ = 0.9).
#pragma once

#include <cassert>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>

#include "diloco/detail/config.hpp"
#include "diloco/detail/parallel.hpp"
#include "diloco/outer/detail/per_fragment.hpp"

namespace diloco::outer {

struct nesterov_options {
  double learning_rate = 0.7;  ///< η
  double momentum = 0.9;       ///< μ
  /// Threads a step runs on: 0 means every core, fewer where a thread would
  /// get under 2^16 parameters. The default, 1, runs the step on the calling
  /// thread and starts none: the library starts no thread its user did not ask
  /// for, and a process that runs several learners or syncers side by side
  /// (the simulator, the tests) would otherwise have them all contend for
  /// every core. A learner or syncer that owns the machine sets 0: the step
  /// is memory-bound and one core does not saturate the memory. The result
  /// is the same, bit for bit, whatever the value.
  unsigned threads = 1;
};

/// One element: `m ← μ·m + Δ;  Θ ← Θ − η·(Δ + μ·m)` (the Nesterov form of
/// PyTorch's SGD, which DiLoCo uses as its outer optimizer).
template <class T>
struct nesterov_element {
  T lr, momentum;
  DILOCO_HOST_DEVICE void operator()(T& global, T& m, T delta) const {
    m = momentum * m + delta;
    global -= lr * (delta + momentum * m);
  }
};

/// Nesterov outer optimizer with one momentum buffer per fragment. One fused
/// pass: reads Θ, m, Δ and writes Θ, m — 20 bytes per fp32 parameter, the
/// floor for this update — split over `options().threads` threads.
template <class T>
class nesterov {
 public:
  using scalar_type = T;
  using options_type = nesterov_options;

  explicit nesterov(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0)) throw std::invalid_argument("diloco::outer::nesterov: learning_rate must be >= 0");
    if (!(options.momentum >= 0 && options.momentum < 1))
      throw std::invalid_argument("diloco::outer::nesterov: momentum must be in [0, 1)");
  }

  void step(std::uint32_t fragment, std::span<T> global, std::span<const T> delta) {
    assert(global.size() == delta.size());
    T* m = momentum_[fragment].sized(global.size()).data();
    T* g = global.data();
    const T* d = delta.data();
    const nesterov_element<T> f{T(options_.learning_rate), T(options_.momentum)};
    const std::size_t n = global.size();
    // Chunks of whole pages, so that no two threads write the same cache line.
    constexpr std::size_t chunk = 4096 / sizeof(T);
    diloco::detail::parallel_for((n + chunk - 1) / chunk,
                                 diloco::detail::threads_for(n, options_.threads, std::size_t{1} << 16),
                                 [&](std::size_t first, std::size_t last) {
                                   const std::size_t end = last * chunk < n ? last * chunk : n;
                                   for (std::size_t i = first * chunk; i < end; ++i) f(g[i], m[i], d[i]);
                                 });
  }

  /// Forgets fragment's momentum (the syncer refused the step that built it).
  void reset(std::uint32_t fragment) { momentum_.reset(fragment); }

  options_type& options() noexcept { return options_; }

  /// The momentum buffer of `fragment` (empty before its first step).
  std::span<const T> momentum(std::uint32_t fragment) const {
    const auto* state = momentum_.find(fragment);
    return state ? std::span<const T>(state->values) : std::span<const T>();
  }

  void save(std::ostream& out) const {
    diloco::serial::write_tag(out, "NSTV", 1);
    momentum_.save(out);
  }
  void load(std::istream& in) {
    diloco::serial::expect_tag(in, "NSTV", 1);
    momentum_.load(in);
  }

 private:
  options_type options_;
  detail::per_fragment<detail::buffer_state<T>> momentum_;
};

}  // namespace diloco::outer
