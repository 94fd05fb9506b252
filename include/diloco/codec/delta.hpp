// The outer gradient computed and encoded in one pass, with optional error
// feedback: the CPU path of diloco::cuda::encode_delta.
#pragma once

#include <cstddef>
#include <span>

#include "diloco/codec/blocks.hpp"

namespace diloco::codec {

/// Encodes the outer gradient `Δ = (base − θ) + residual` of the `n` =
/// `base.size()` values as format `f` (blocks of `block` values) into `out`
/// (`encoded_size(f, n, block)` bytes), rounding each subtraction and
/// addition on its own. With error feedback (`residual` not empty, n values;
/// Stich et al. 2018, "Sparsified SGD with memory") the residual becomes
/// `Δ − decode(code)`: what the code dropped is sent in a later round. Without
/// it (`residual` empty), Δ = base − θ.
///
/// Returns false if the sizes do not match or a value of Δ is not finite;
/// `out` and `residual` are then unspecified and must be discarded. Reads
/// base, θ and the residual twice for the block-scaled formats (once for the
/// scales, once for the codes) and the residual once more to update it.
inline bool encode_delta(format f, std::size_t block, std::span<const float> base, std::span<const float> theta,
                         std::span<float> residual, std::span<std::byte> out) {
  const std::size_t n = base.size();
  if (theta.size() != n || (!residual.empty() && residual.size() != n)) return false;
  auto delta = [&](std::size_t i) {
    const float d = base[i] - theta[i];
    return residual.empty() ? d : d + residual[i];
  };
  if (!encode(f, n, block, delta, out)) return false;
  if (!residual.empty()) decode(f, n, block, out, [&](std::size_t i, float v) { residual[i] = delta(i) - v; });
  return true;
}

}  // namespace diloco::codec
