// Byzantine-robust merges: coordinate-wise trimmed mean and median (Yin et
// al. 2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
// Rates", arXiv 1803.01498).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <utility>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/merge/detail/coordinatewise.hpp"
#include "diloco/merge/detail/linear.hpp"
#include "diloco/merge/weightings.hpp"

namespace diloco::merge {

struct trimmed_mean_options {
  /// β ∈ [0, 0.5): the fraction of contributions dropped at each end of every
  /// coordinate. The default 0.25 (the interquartile mean) drops one
  /// contribution per end from 4 contributions up (two from 8, four from 16),
  /// where β = 0.2 would drop nothing at 4; at a Gaussian it keeps 84% of the
  /// mean's asymptotic efficiency, where the median keeps 2/π ≈ 64%.
  double trim = 0.25;
};

/// Coordinate-wise trimmed mean (Yin et al. 2018): with n contributions of
/// positive weight and `k = ⌊β·n⌋` (computed in double), each coordinate drops
/// its k smallest and k largest values and takes the weighted mean of the
/// remaining n − 2k, `Σ_kept w_m Δ_m[i] / Σ_kept w_m`, times `scale`. Values
/// that tie across a trim boundary share it in proportion to how many of them
/// are kept (see `detail::trimmed_weighted_mean`), so the result does not
/// depend on the order of the contributions. A NaN orders above +∞.
///
/// Robustness: with at most k hostile contributions every coordinate of the
/// result lies between the smallest and largest honest value, whatever the
/// hostile values and (finite) weights; weights only move it within that
/// range. With `k = 0` (fewer than 1/β contributions; at the default fewer
/// than 4) nothing is trimmed and the result is exactly `weighted_mean<Weighting>`,
/// which one contribution can move arbitrarily far.
///
/// Trimming counts contributions, not learners, and does not look at roles:
/// embedding rows are coordinates like any other, so a row that at most k
/// contributions updated (a rare token) is trimmed like an outlier.
///
/// `Weighting` supplies `weight(tokens, steps)`; the default is token weighting.
/// Cost: each input read once and the output written once, in blocks of
/// ⌊2048/n⌋ elements; per element a sort of n values, O(n log n), and an O(n)
/// sum; one scratch allocation of 32 KiB per call. Compute-bound: the sorts
/// cost tens of times the single pass of the weighted mean.
template <weighting Weighting = token>
class trimmed_mean : public Weighting {
 public:
  using options_type = trimmed_mean_options;

  /// Throws `std::invalid_argument` unless `trim` is in [0, 0.5).
  explicit trimmed_mean(options_type options = {}, Weighting weights = {})
      : Weighting(std::move(weights)), options_(options) {
    if (!(options.trim >= 0.0 && options.trim < 0.5))
      throw std::invalid_argument("diloco::merge::trimmed_mean: trim must be in [0, 0.5)");
  }

  const options_type& options() const noexcept { return options_; }

  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> /*slices*/, std::span<T> out,
             double scale) const {
    const std::size_t n = detail::positive_count(in);
    const auto k = static_cast<std::size_t>(std::floor(options_.trim * double(n)));
    if (k == 0) {
      detail::weighted_average(in, out, scale);
      return;
    }
    detail::reduce_sorted(in, n, out, scale, [k](std::span<const detail::weighted_value> v) {
      return detail::trimmed_weighted_mean(v, k);
    });
  }

 private:
  options_type options_;
};

/// Coordinate-wise median (Yin et al. 2018), weighted, times `scale`: over the
/// n contributions of positive weight, each coordinate takes the midpoint of
/// the minimizers of `Σ w_m |Δ_m[i] − μ|` — with values sorted, cumulative
/// weights `C_j` and total W, the value where `2·C_j` first exceeds W, or the
/// mean of that value and the previous one where `2·C_j` first equals W (see
/// `detail::weighted_median`). With equal weights this is the ordinary median:
/// the middle value for odd n, the mean of the two middle ones for even n. A
/// NaN orders above +∞. With n ≤ 2 no contribution can be outvoted and the
/// result is exactly `weighted_mean<Weighting>` (for equal weights the median).
///
/// Robustness: every coordinate lies between the smallest and largest honest
/// value as long as hostile contributions hold less than half the weight.
/// Since weights come from the tokens and steps a learner reports, the default
/// `Weighting` is `uniform` (one vote per contribution), so that the bound
/// counts contributions; with `token` one contribution above half the
/// total weight sets every coordinate (the syncer's screening lets a weight
/// reach `clip_factor ×` its reference weight).
///
/// Embedding rows are coordinates like any other: a row that fewer than half
/// of the contributions updated (a rare token) stays at the majority's value.
///
/// Cost: each input read once and the output written once, in blocks of
/// ⌊2048/n⌋ elements; per element a sort of n values, O(n log n), and an O(n)
/// scan; one scratch allocation of 32 KiB per call. Compute-bound: the sorts
/// cost tens of times the single pass of the weighted mean.
template <weighting Weighting = uniform>
struct coordinate_median : Weighting {
  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> /*slices*/, std::span<T> out,
             double scale) const {
    const std::size_t n = detail::positive_count(in);
    if (n <= 2) {
      detail::weighted_average(in, out, scale);
      return;
    }
    detail::reduce_sorted(in, n, out, scale,
                          [](std::span<const detail::weighted_value> v) { return detail::weighted_median(v); });
  }
};

}  // namespace diloco::merge
