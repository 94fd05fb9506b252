// The fused codec passes as a float model's learner and the syncer call them
// on host memory: a fragment's outer gradient encoded where its slices lie
// (host_memory.hpp), a contribution decoded into the merge's accumulator
// (syncer/fragments.hpp). They are most of the code a program instantiates
// (codec/kernels.hpp: five codecs, with and without error feedback, for up
// to three instruction sets), so a program may compile them once instead of
// in every translation unit that instantiates a learner or a syncer: define
// DILOCO_SEPARATE_COMPILATION for every source file of the program and
// include diloco/separate_compilation.hpp in one of them (docs/building.md,
// "Separate compilation"; Asio's ASIO_SEPARATE_COMPILATION is the model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "diloco/codec/codec_id.hpp"
#include "diloco/detail/config.hpp"
#include "diloco/params/fragments.hpp"

namespace diloco::detail {

/// `codec::encode_delta` (codec/kernels.hpp) of a fragment whose θ lies in
/// `slices` of `theta`, on the calling thread: a learner's other cores are
/// training. False, and nothing sent, if `c` is not a float codec or a value
/// is not finite.
DILOCO_DECL bool encode_fragment_delta(codec_id c, std::uint32_t block, std::span<const fragment_slice> slices,
                                       const float* theta, std::span<const float> base, std::span<float> residual,
                                       std::span<std::byte> out);

/// `codec::decode_accumulate` (codec/kernels.hpp): `acc += weight · decoded`
/// on up to `threads` threads. Precondition: `codec::valid(c, acc.size(), block, in)`.
DILOCO_DECL void decode_accumulate(codec_id c, std::uint32_t block, std::span<const std::byte> in, float weight,
                                   std::span<float> acc, unsigned threads);

}  // namespace diloco::detail

#if !defined(DILOCO_SEPARATE_COMPILATION)
#include "diloco/runtime/fused_passes_impl.hpp"
#endif
