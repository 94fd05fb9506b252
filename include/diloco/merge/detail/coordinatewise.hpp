// Coordinate-wise reductions over sorted contributions: the machinery shared
// by the order-statistic merges (trimmed mean, median).
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "diloco/concepts/merge_policy.hpp"

namespace diloco::merge::detail {

/// One contribution's value at one coordinate, with the contribution's weight.
struct weighted_value {
  double value;
  double weight;
};

/// Orders by value, then by weight; a NaN value orders after every number
/// (NaNs are equivalent to each other), so this is a strict weak order even
/// with NaNs and `std::sort` stays defined on any input.
inline bool value_order(const weighted_value& a, const weighted_value& b) noexcept {
  if (std::isnan(a.value)) return false;
  if (std::isnan(b.value)) return true;
  if (a.value != b.value) return a.value < b.value;
  return a.weight < b.weight;
}

/// Contributions with a positive weight: those the order statistics count.
template <class T>
std::size_t positive_count(std::span<const weighted_delta<T>> in) noexcept {
  return static_cast<std::size_t>(
      std::count_if(in.begin(), in.end(), [](const weighted_delta<T>& c) { return c.weight > 0; }));
}

/// The weighted mean of sorted `v` without its `k` first and `k` last entries
/// (2k < n). A run of equal values cut by a trim boundary shares it: with c
/// members of total weight W_g of which r lie inside, it enters with weight
/// `W_g · r / c`, so which tied entry is dropped does not matter. O(n).
inline double trimmed_weighted_mean(std::span<const weighted_value> v, std::size_t k) noexcept {
  const std::size_t n = v.size();
  assert(2 * k < n);
  double sum = 0.0;
  double weight = 0.0;
  for (std::size_t i = 0; i < n - k;) {
    std::size_t j = i + 1;
    double group_weight = v[i].weight;
    for (; j < n && v[j].value == v[i].value; ++j) group_weight += v[j].weight;
    const std::size_t hi = std::min(j, n - k);
    const std::size_t lo = std::max(i, k);
    const std::size_t inside = hi > lo ? hi - lo : 0;
    if (inside > 0) {
      const double share = inside == j - i ? group_weight : group_weight * double(inside) / double(j - i);
      sum += share * v[i].value;
      weight += share;
    }
    i = j;
  }
  return sum / weight;
}

/// The weighted median of sorted `v` (n ≥ 1, positive weights): with
/// cumulative weights `C_i = w_1 + … + w_i` and total W, the lower median is
/// the first `x_i` with `2·C_i ≥ W`; if `2·C_i > W` it is the median, and if
/// `2·C_i = W` the median is `(x_i + x_{i+1}) / 2`. That is the midpoint of the
/// minimizers of `Σ w_m |x_m − μ|`. O(n).
inline double weighted_median(std::span<const weighted_value> v) noexcept {
  const std::size_t n = v.size();
  assert(n > 0);
  double total = 0.0;
  for (const auto& e : v) total += e.weight;
  double cumulative = v[0].weight;
  std::size_t i = 0;
  for (; 2 * cumulative < total; cumulative += v[i].weight) ++i;
  if (2 * cumulative > total || i + 1 == n) return v[i].value;
  return 0.5 * (v[i].value + v[i + 1].value);
}

/// For each element i: `out[i] = T(scale · reduce(v))`, where `v` holds
/// `(Δ_m[i], w_m)` for the `n` contributions with `w_m > 0`, sorted by
/// `value_order`. `reduce` takes a `std::span<const weighted_value>` and
/// returns a `double`.
///
/// Elements go in blocks of ⌊2048/n⌋ (at least 1): each contribution streams
/// once, gathered into a scratch of `block · n` entries (32 KiB for n ≤ 2048),
/// the only allocation. Cost per element: n reads, one `std::sort` of n entries
/// (O(n log n) comparisons), `reduce`, one write.
template <class T, class Reduce>
void reduce_sorted(std::span<const weighted_delta<T>> in, std::size_t n, std::span<T> out, double scale,
                   Reduce reduce) {
  assert(n > 0 && n == positive_count(in));
  const std::size_t block = std::max<std::size_t>(1, 2048 / n);
  std::vector<weighted_value> scratch(block * n);
  T* o = out.data();
  for (std::size_t b = 0; b < out.size(); b += block) {
    const std::size_t e = std::min(out.size(), b + block);
    std::size_t column = 0;
    for (const auto& c : in) {
      if (!(c.weight > 0)) continue;
      assert(c.delta.size() == out.size());
      const T* d = c.delta.data();
      for (std::size_t i = b; i < e; ++i) scratch[(i - b) * n + column] = {double(d[i]), c.weight};
      ++column;
    }
    for (std::size_t i = b; i < e; ++i) {
      weighted_value* first = scratch.data() + (i - b) * n;
      std::sort(first, first + n, [](const weighted_value& x, const weighted_value& y) { return value_order(x, y); });
      o[i] = T(scale * reduce(std::span<const weighted_value>(first, n)));
    }
  }
}

}  // namespace diloco::merge::detail
