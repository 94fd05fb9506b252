// Outer Nesterov momentum, DiLoCo's outer optimizer (Douillard et al. 2023,
// arXiv 2311.08105: η = 0.7, μ = 0.9).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>

#include "diloco/detail/config.hpp"
#include "diloco/detail/parallel.hpp"
#include "diloco/detail/prefetch.hpp"
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

namespace detail {

/// How far ahead of the element it updates the step asks for each stream's
/// cache line. One core alone otherwise waits for memory on every line of
/// its three input streams: on the development VM the step over 16 Mi and
/// 64 Mi fp32 on one thread took 7-12 % less time with 2 KiB than without
/// (bench/codecs/README.md, "The outer step's prefetch").
inline constexpr std::size_t nesterov_prefetch_bytes = 2048;

/// `f` over elements `[begin, end)` of Θ (`g`), m and Δ (`d`), which do not
/// overlap: one cache line of each at a time, asking first for the line
/// `nesterov_prefetch_bytes` ahead in each (to write, for Θ and m).
template <class T>
void nesterov_range(const nesterov_element<T> f, T* __restrict g, T* __restrict m, const T* __restrict d,
                    std::size_t begin, std::size_t end) {
  constexpr std::size_t line = 64 / sizeof(T);
  for (std::size_t i = begin; i < end; i += line) {
    ::diloco::detail::prefetch_line<true>(g + i, nesterov_prefetch_bytes);
    ::diloco::detail::prefetch_line<true>(m + i, nesterov_prefetch_bytes);
    ::diloco::detail::prefetch_line(d + i, nesterov_prefetch_bytes);
    // A bound the compiler cannot count (not `i + line`): g++ unrolls a loop
    // of a known count into scalar code before it can vectorize it.
    const std::size_t stop = end - i < line ? end : i + line;
    for (std::size_t k = i; k < stop; ++k) f(g[k], m[k], d[k]);
  }
}

}  // namespace detail

/// Nesterov outer optimizer with one momentum buffer per fragment. One fused
/// pass: reads Θ, m, Δ and writes Θ, m — 20 bytes per fp32 parameter, the
/// floor for this update — split over `options().threads` threads.
template <class T>
class nesterov {
 public:
  using scalar_type = T;
  using options_type = nesterov_options;

  explicit nesterov(options_type options = {}) : options_(options) {
    if (!(options.learning_rate >= 0))
      throw std::invalid_argument("diloco::outer::nesterov: learning_rate must be >= 0");
    if (!(options.momentum >= 0 && options.momentum < 1))
      throw std::invalid_argument("diloco::outer::nesterov: momentum must be in [0, 1)");
  }

  /// `m ← μm + Δ; Θ ← Θ − η(Δ + μm)` for fragment `fragment`'s Θ
  /// (`global`) and Δ (`delta`, as long). Where `delta` overlaps `global`,
  /// the step is the loop over elements in order, on the calling thread:
  /// element i reads Δ[i] before it writes Θ[i] and after it wrote Θ[j],
  /// j < i.
  void step(std::uint32_t fragment, std::span<T> global, std::span<const T> delta) {
    assert(global.size() == delta.size());
    T* m = momentum_[fragment].sized(global.size()).data();
    T* g = global.data();
    const T* d = delta.data();
    const nesterov_element<T> f{T(options_.learning_rate), T(options_.momentum)};
    const std::size_t n = global.size();
    // Θ and Δ are the caller's, and may overlap (never in the library's own
    // use): then one loop in order on this thread, as documented above.
    const std::less<> before;
    if (n > 0 && before(g, d + n) && before(d, g + n)) {
      for (std::size_t i = 0; i < n; ++i) f(g[i], m[i], d[i]);
      return;
    }
    // Chunks of whole pages, so that no two threads write the same cache line.
    constexpr std::size_t chunk = 4096 / sizeof(T);
    diloco::detail::parallel_for((n + chunk - 1) / chunk,
                                 diloco::detail::threads_for(n, options_.threads, std::size_t{1} << 16),
                                 [&](std::size_t first, std::size_t last) {
                                   const std::size_t end = last * chunk < n ? last * chunk : n;
                                   detail::nesterov_range(f, g, m, d, first * chunk, end);
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
