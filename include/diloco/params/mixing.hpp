// Mixing a merged global fragment into the learner's own parameters.
#pragma once

#include "diloco/detail/config.hpp"

namespace diloco {

/// One element of adopting a merged fragment with mixing factor α
/// (Streaming DiLoCo, Douillard et al. 2025, arXiv 2501.18512):
/// `θ ← α·θ + (1−α)·Θ`; α = 0 overwrites θ with Θ. Written exactly as
/// `learner` writes it, so that the CUDA kernel (diloco/cuda/mixing.cuh)
/// applies the same formula.
template <class T>
struct mixing_element {
  T alpha;
  DILOCO_HOST_DEVICE void operator()(T& theta, T global) const { theta = alpha * theta + (T(1) - alpha) * global; }
};

/// Rebasing a fragment onto a new global value with mixing factor α,
/// `θ ← θ + (1−α)·(Θ − base)` (docs/design.md, "Keeping every step"): θ
/// keeps all the work done since its base and follows the global value's
/// move by 1 − α (α = 0: `θ ← Θ + (θ − base)`). Two element steps, with
/// `follow` = 1 − α: before the base takes the new values,
/// `local_work_element` makes θ `θ − follow·base`; once the base holds Θ,
/// `add_global_element` adds `follow·Θ`. With α = 0 the products are exact,
/// so the host and a device round alike (a device may contract a product
/// with α > 0 into an FMA, as `mixing_element`).
template <class T>
struct local_work_element {
  T follow;
  DILOCO_HOST_DEVICE void operator()(T& theta, T base) const { theta = theta - follow * base; }
};
template <class T>
struct add_global_element {
  T follow;
  DILOCO_HOST_DEVICE void operator()(T& theta, T global) const { theta = theta + follow * global; }
};

}  // namespace diloco
