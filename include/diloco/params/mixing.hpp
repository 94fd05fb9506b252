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

}  // namespace diloco
