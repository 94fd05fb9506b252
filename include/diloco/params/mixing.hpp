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

/// Rebasing a fragment onto a new global value, `θ ← Θ + (θ − base)`
/// (docs/design.md, "Keeping every step"), is two element steps that round
/// alike on the host and on a device (no product to contract): before the
/// base takes the new values, `local_work_element` leaves in θ the work done
/// since the base, `θ − base`; once the base holds Θ, `add_global_element`
/// makes θ `(θ − base) + Θ`.
template <class T>
struct local_work_element {
  DILOCO_HOST_DEVICE void operator()(T& theta, T base) const { theta = theta - base; }
};
template <class T>
struct add_global_element {
  DILOCO_HOST_DEVICE void operator()(T& theta, T global) const { theta = theta + global; }
};

}  // namespace diloco
