// The weighted mean of outer gradients: DiLoCo's average and Decoupled
// DiLoCo's token-weighted merge.
#pragma once

#include <span>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/merge/detail/linear.hpp"
#include "diloco/merge/weightings.hpp"

namespace diloco::merge {

/// `Δ = scale · Σ w_m Δ_m / Σ w_m`, with the weights `w_m` from `Weighting`
/// (ensmallen's policy pattern: the merge inherits the weighting's `weight`).
/// All-zero weights merge to 0. Cost: each input read once and the output
/// written once, in blocks of 2048 elements so that the output stays in L1,
/// split over `threads` threads (0: every core; fewer where a thread would
/// get under 2^16 elements). Each element sums its contributions in their
/// order whatever the thread count, so the result is the same bit for bit.
/// The default, 1, starts no thread (see `outer::nesterov_options::threads`).
template <weighting Weighting = token>
struct weighted_mean : Weighting {
  static constexpr bool is_weighted_mean = true;  ///< `merge::linear`: compressed contributions are summed as decoded
  unsigned threads = 1;

  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> /*slices*/, std::span<T> out,
             double scale) const {
    detail::weighted_average(in, out, scale, threads);
  }
};

/// DiLoCo's merge: `Δ = (1/n) Σ Δ_m`.
using average = weighted_mean<uniform>;

/// Decoupled DiLoCo's merge: the mean weighted by `token`.
using token_weighted = weighted_mean<token>;

}  // namespace diloco::merge
