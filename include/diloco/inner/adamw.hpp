// AdamW: Adam with decoupled weight decay and bias correction.
#pragma once

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "diloco/detail/config.hpp"
#include "diloco/serialize.hpp"

// SSE2 is the x86-64 baseline: every x86-64 compiler targets it by default.
#if defined(__SSE2__) && !defined(__CUDACC__)
#include <emmintrin.h>
#define DILOCO_ADAMW_SSE2 1
#else
#define DILOCO_ADAMW_SSE2 0
#endif

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

namespace detail {

#if DILOCO_ADAMW_SSE2
// The SSE2 operations `adamw_apply` needs, for both scalar types.
inline __m128 sse_broadcast(float x) noexcept { return _mm_set1_ps(x); }
inline __m128d sse_broadcast(double x) noexcept { return _mm_set1_pd(x); }
inline __m128 sse_load(const float* p) noexcept { return _mm_loadu_ps(p); }
inline __m128d sse_load(const double* p) noexcept { return _mm_loadu_pd(p); }
inline void sse_store(float* p, __m128 x) noexcept { _mm_storeu_ps(p, x); }
inline void sse_store(double* p, __m128d x) noexcept { _mm_storeu_pd(p, x); }
inline __m128 sse_add(__m128 a, __m128 b) noexcept { return _mm_add_ps(a, b); }
inline __m128d sse_add(__m128d a, __m128d b) noexcept { return _mm_add_pd(a, b); }
inline __m128 sse_sub(__m128 a, __m128 b) noexcept { return _mm_sub_ps(a, b); }
inline __m128d sse_sub(__m128d a, __m128d b) noexcept { return _mm_sub_pd(a, b); }
inline __m128 sse_mul(__m128 a, __m128 b) noexcept { return _mm_mul_ps(a, b); }
inline __m128d sse_mul(__m128d a, __m128d b) noexcept { return _mm_mul_pd(a, b); }
inline __m128 sse_div(__m128 a, __m128 b) noexcept { return _mm_div_ps(a, b); }
inline __m128d sse_div(__m128d a, __m128d b) noexcept { return _mm_div_pd(a, b); }
inline __m128 sse_sqrt(__m128 a) noexcept { return _mm_sqrt_ps(a); }
inline __m128d sse_sqrt(__m128d a) noexcept { return _mm_sqrt_pd(a); }
#endif

/// Applies `f` to the `n` elements of `p`, `m`, `v`, `g`: with SSE2, a
/// register (four floats, two doubles) at a time, the same IEEE operations in
/// the same order as `adamw_element::operator()` and so the same bits, then
/// the last few one by one. Written out because compilers do not vectorize
/// the plain loop: `sqrt` may set `errno`, and the call that would set it
/// keeps g++ 12 at one element at a time even at -O3 (3.1 ns an element
/// against 0.73 with -fno-math-errno, on 200,000 floats), and no library
/// should ask its users' programs to be built with that flag.
template <class T>
void adamw_apply(const adamw_element<T>& f, T* p, T* m, T* v, const T* g, std::size_t n) noexcept {
  std::size_t i = 0;
#if DILOCO_ADAMW_SSE2
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr std::size_t width = 16 / sizeof(T);
    const auto beta1 = sse_broadcast(f.beta1), rest1 = sse_broadcast(T(1) - f.beta1);
    const auto beta2 = sse_broadcast(f.beta2), rest2 = sse_broadcast(T(1) - f.beta2);
    const auto lr = sse_broadcast(f.lr), epsilon = sse_broadcast(f.epsilon), decay = sse_broadcast(f.decay_factor);
    const auto inv_bias1 = sse_broadcast(f.inv_bias1), inv_sqrt_bias2 = sse_broadcast(f.inv_sqrt_bias2);
    for (const std::size_t whole = n - n % width; i < whole; i += width) {
      const auto gi = sse_load(g + i);
      const auto mi = sse_add(sse_mul(beta1, sse_load(m + i)), sse_mul(rest1, gi));
      const auto vi = sse_add(sse_mul(beta2, sse_load(v + i)), sse_mul(sse_mul(rest2, gi), gi));
      const auto denom = sse_add(sse_mul(sse_sqrt(vi), inv_sqrt_bias2), epsilon);
      const auto step = sse_div(sse_mul(lr, sse_mul(mi, inv_bias1)), denom);
      sse_store(m + i, mi);
      sse_store(v + i, vi);
      sse_store(p + i, sse_sub(sse_mul(sse_load(p + i), decay), step));
    }
  }
#endif
  for (; i < n; ++i) f(p[i], m[i], v[i], g[i]);
}

}  // namespace detail

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
    detail::adamw_apply(f, p, m, v, g, params.size());
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
