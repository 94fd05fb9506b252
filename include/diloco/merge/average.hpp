// Plain and token-weighted averaging of outer gradients.
#pragma once

#include <cstdint>
#include <span>

#include "diloco/merge/detail/linear.hpp"

namespace diloco::merge {

/// Every contribution weighs the same: `Δ = (1/n) Σ Δ_m` — DiLoCo's average.
struct average {
  double weight(std::uint64_t /*tokens*/, std::uint64_t /*steps*/) const noexcept { return 1.0; }

  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> /*slices*/, std::span<T> out,
             double scale) const {
    detail::weighted_mean(in, out, scale);
  }
};

/// Token weighting of Decoupled DiLoCo ("quantity × quality"):
/// `w = tokens² / steps` — the tokens behind a contribution times its tokens per
/// step — and `Δ = Σ w_m Δ_m / Σ w_m`. A contribution with no steps weighs 0.
struct token_weights {
  double weight(std::uint64_t tokens, std::uint64_t steps) const noexcept {
    if (steps == 0) return 0.0;
    const double t = static_cast<double>(tokens);
    return t * t / static_cast<double>(steps);
  }
};

/// Weighted averaging with `token_weights`.
struct token_weighted : token_weights {
  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> /*slices*/, std::span<T> out,
             double scale) const {
    detail::weighted_mean(in, out, scale);
  }
};

}  // namespace diloco::merge
