// Per-block arithmetic the CPU passes (kernels.hpp) and the CUDA kernels
// (cuda/codec.cuh) share, so that both produce the same bits: the outer
// gradient of one value, the absmax of a block, and the scaling of a block's
// values to units.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "diloco/detail/config.hpp"
#include "diloco/detail/rounding.hpp"

namespace diloco::codec {

/// One value of the outer gradient: `Δ = base − θ`, plus, with error feedback,
/// the error carried from the previous encoding: `Δ = (base − θ) + residual`
/// (Karimireddy et al. 2019, arXiv 1901.09847, "EF-SGD").
struct outer_gradient {
  DILOCO_HOST_DEVICE float operator()(float base, float theta) const { return base - theta; }
  DILOCO_HOST_DEVICE float operator()(float base, float theta, float residual) const { return base - theta + residual; }
};

/// The largest magnitude of a run of values as the bits of a non-negative
/// float: the maximum of `bits & 0x7FFFFFFF`, which orders finite
/// non-negative floats as their values do and puts infinity and NaN above
/// every finite value. Its value is the block's absmax exactly when
/// `finite()`; an integer maximum, so the loop that feeds it vectorizes.
struct magnitude_max {
  std::uint32_t bits = 0;
  DILOCO_HOST_DEVICE void operator()(float v) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu;
    bits = b > bits ? b : bits;
  }
  DILOCO_HOST_DEVICE bool finite() const { return bits < 0x7F800000u; }
  DILOCO_HOST_DEVICE float value() const { return std::bit_cast<float>(bits); }
};

/// Scales a block's values to units in [−1, 1] exactly as `encode` does: a
/// multiplication by `1/absmax` where that is a normal float, a division by
/// `absmax` where it is not. Callers handle `absmax == 0` (every code 0).
/// The reciprocal is correctly rounded on a device too (`detail::div_rn`).
struct block_unit {
  float absmax, inverse;
  bool by_inverse;
  DILOCO_HOST_DEVICE explicit block_unit(float a)
      : absmax(a), inverse(a > 0.0f ? diloco::detail::div_rn(1.0f, a) : 0.0f), by_inverse(std::isnormal(inverse)) {}
};

}  // namespace diloco::codec
