// Mixing a merged global fragment into the learner's own parameters.
#pragma once

#include "diloco/detail/config.hpp"
#include "diloco/detail/rounding.hpp"

namespace diloco {

/// One element of adopting a merged fragment with mixing factor α
/// (Streaming DiLoCo, Douillard et al. 2025, arXiv 2501.18512):
/// `θ ← α·θ + (1−α)·Θ`; α = 0 overwrites θ with Θ. Each product and the sum
/// rounded on its own (`detail::mul_rn`, `add_rn`), so that the CUDA kernel
/// (diloco/cuda/mixing.cuh), which nvcc would otherwise contract into an
/// FMA, gives the CPU's bits.
template <class T>
struct mixing_element {
  T alpha;
  DILOCO_HOST_DEVICE void operator()(T& theta, T global) const {
    theta = detail::add_rn(detail::mul_rn(alpha, theta), detail::mul_rn(T(1) - alpha, global));
  }
};

/// Rebasing a fragment onto a new global value with mixing factor α,
/// `θ ← θ + (1−α)·(Θ − base)` (docs/design.md, "Keeping every step"): θ
/// keeps all the work done since its base and follows the global value's
/// move by 1 − α (α = 0: `θ ← Θ + (θ − base)`). Two element steps, with
/// `follow` = 1 − α: before the base takes the new values,
/// `local_work_element` makes θ `θ − follow·base`; once the base holds Θ,
/// `add_global_element` adds `follow·Θ`. Each product and sum rounded on its
/// own, as `mixing_element`: the host and a device round alike.
template <class T>
struct local_work_element {
  T follow;
  DILOCO_HOST_DEVICE void operator()(T& theta, T base) const {
    theta = detail::sub_rn(theta, detail::mul_rn(follow, base));
  }
};
template <class T>
struct add_global_element {
  T follow;
  DILOCO_HOST_DEVICE void operator()(T& theta, T global) const {
    theta = detail::add_rn(theta, detail::mul_rn(follow, global));
  }
};

}  // namespace diloco
