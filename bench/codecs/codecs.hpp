// The fused codec passes and the outer step on every core, and STREAM triad
// on the same number of threads. Each lives in its own translation unit, so
// none is inlined into or fused with another.
#pragma once

#include <cstddef>
#include <span>

#include "diloco/codec/blocks.hpp"
#include "diloco/outer/nesterov.hpp"

namespace bench {

/// η and μ of DiLoCo's outer Nesterov (Douillard et al. 2023, arXiv 2311.08105).
inline constexpr float outer_lr = 0.7f;
inline constexpr float outer_momentum = 0.9f;

/// Bytes per parameter as STREAM counts them: 4 per fp32 the program reads
/// or writes, plus the encoded bytes; a block read twice counts once (the
/// second read is from cache), and the line read that write-allocate adds to
/// a store is not counted.
namespace bytes_per_param {
inline constexpr double triad = 12;     ///< reads b, c; writes a
inline constexpr double nesterov = 20;  ///< reads Θ, m, Δ; writes Θ, m
/// encode_delta: reads base, θ (and residual), writes the encoding (and residual).
inline double encode(diloco::codec_id f, std::size_t n, std::size_t block, bool feedback) {
  return (feedback ? 16.0 : 8.0) + double(diloco::codec::encoded_size(f, n, block)) / double(n);
}
/// decode_accumulate: reads the encoding, reads and writes acc.
inline double decode(diloco::codec_id f, std::size_t n, std::size_t block) {
  return 8.0 + double(diloco::codec::encoded_size(f, n, block)) / double(n);
}
}  // namespace bytes_per_param

// stream.cpp

/// STREAM triad `a[i] = b[i] + s·c[i]` on `threads` threads (0: every core),
/// split as the library splits its passes.
void triad(std::span<float> a, std::span<const float> b, std::span<const float> c, float s, unsigned threads);

// library.cpp

/// `diloco::codec::encode_delta`.
bool encode_delta(diloco::codec_id f, std::size_t block, std::span<const float> base, std::span<const float> theta,
                  std::span<float> residual, std::span<std::byte> out, unsigned threads);
/// `diloco::codec::decode_accumulate`.
void decode_accumulate(diloco::codec_id f, std::size_t block, std::span<const std::byte> in, float weight,
                       std::span<float> acc, unsigned threads);
/// `diloco::outer::nesterov<float>::step` on fragment 0 (its options say how many threads).
void nesterov_step(diloco::outer::nesterov<float>& optimizer, std::span<float> global, std::span<const float> delta);

}  // namespace bench
