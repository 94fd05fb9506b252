// The definitions of fused_passes.hpp: included by it in the header-only
// build, and by diloco/separate_compilation.hpp, once per program, under
// DILOCO_SEPARATE_COMPILATION.
#pragma once

#include "diloco/codec/kernels.hpp"
#include "diloco/runtime/fused_passes.hpp"

namespace diloco::detail {

DILOCO_DECL bool encode_fragment_delta(codec_id c, std::uint32_t block, std::span<const fragment_slice> slices,
                                       const float* theta, std::span<const float> base, std::span<float> residual,
                                       std::span<std::byte> out) {
  return codec::encode_delta(c, block, slices, theta, base, residual, out, 1);
}

DILOCO_DECL void decode_accumulate(codec_id c, std::uint32_t block, std::span<const std::byte> in, float weight,
                                   std::span<float> acc, unsigned threads) {
  codec::decode_accumulate(c, block, in, weight, acc, threads);
}

}  // namespace diloco::detail
