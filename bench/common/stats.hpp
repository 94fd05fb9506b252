// The statistics the benches report over repetitions: median, a quantile,
// and median with its range.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace bench {

/// The median of `v` (the mean of the two middle values for an even count);
/// NaN when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size();
  return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

/// The smallest sample with at least `q` of all samples at or below it; NaN
/// when empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

struct summary {
  double median, min, max;
};

/// Median, smallest and largest of `v`, which must not be empty.
inline summary summarize(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {median(v), *lo, *hi};
}

}  // namespace bench
