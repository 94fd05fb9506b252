// Weighted linear combination of packed outer gradients.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/detail/parallel.hpp"

namespace diloco::merge::detail {

/// `out[begin, begin+n) = Σ_m coefficient[m] · delta_m[begin, begin+n)`, in
/// blocks small enough that `out` stays in L1 while every input streams once.
template <class T>
void combine(std::span<const weighted_delta<T>> in, std::span<const double> coefficient, std::span<T> out,
             std::size_t begin, std::size_t n) {
  constexpr std::size_t block = 2048;
  for (std::size_t b = begin; b < begin + n; b += block) {
    const std::size_t e = std::min(begin + n, b + block);
    T* o = out.data();
    {
      const T c = T(coefficient[0]);
      const T* d = in[0].delta.data();
      for (std::size_t i = b; i < e; ++i) o[i] = c * d[i];
    }
    for (std::size_t m = 1; m < in.size(); ++m) {
      const T c = T(coefficient[m]);
      const T* d = in[m].delta.data();
      for (std::size_t i = b; i < e; ++i) o[i] += c * d[i];
    }
  }
}

/// Σ x² over `[begin, begin+n)`, accumulated in double.
template <class T>
double squared_norm(std::span<const T> x, std::size_t begin, std::size_t n) {
  double s = 0.0;
  for (std::size_t i = begin; i < begin + n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

template <class T>
double total_weight(std::span<const weighted_delta<T>> in) {
  double w = 0.0;
  for (const auto& c : in) w += c.weight;
  return w;
}

/// The weighted mean times `scale`, over the whole fragment, on up to
/// `threads` threads (0: every core); 0 if no contribution has a positive
/// weight.
template <class T>
void weighted_average(std::span<const weighted_delta<T>> in, std::span<T> out, double scale, unsigned threads = 1) {
  assert(!in.empty());
  const double w = total_weight(in);
  if (!(w > 0)) {
    std::fill(out.begin(), out.end(), T(0));
    return;
  }
  std::vector<double> coefficient(in.size());
  for (std::size_t m = 0; m < in.size(); ++m) coefficient[m] = scale * in[m].weight / w;
  // Chunks of combine's blocks: each thread writes its own part of `out`.
  constexpr std::size_t chunk = 2048;
  const std::size_t n = out.size();
  ::diloco::detail::parallel_for((n + chunk - 1) / chunk,
                                 ::diloco::detail::threads_for(n, threads, std::size_t{1} << 16),
                                 [&](std::size_t first, std::size_t last) {
                                   const std::size_t end = std::min(n, last * chunk);
                                   combine<T>(in, coefficient, out, first * chunk, end - first * chunk);
                                 });
}

}  // namespace diloco::merge::detail
