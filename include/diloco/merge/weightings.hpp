// How the merges weigh a contribution: the `Weighting`s of
// `merge::weighted_mean`, `radial_directional`, `trimmed_mean` and
// `coordinate_median`.
#pragma once

#include <cstdint>

namespace diloco::merge {

/// Every contribution weighs the same: `w = 1`.
struct uniform {
  double weight(std::uint64_t /*tokens*/, std::uint64_t /*steps*/) const noexcept { return 1.0; }
};

/// Token weighting of Decoupled DiLoCo ("quantity × quality"):
/// `w = tokens² / steps` — the tokens behind a contribution times its tokens
/// per step. A contribution with no steps weighs 0.
struct token {
  double weight(std::uint64_t tokens, std::uint64_t steps) const noexcept {
    if (steps == 0) return 0.0;
    const double t = static_cast<double>(tokens);
    return t * t / static_cast<double>(steps);
  }
};

/// The former name of `token`.
using token_weights = token;

}  // namespace diloco::merge
