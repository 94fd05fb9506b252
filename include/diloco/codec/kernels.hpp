// The fused codec passes on contiguous fp32 spans, on every core: a learner's
// outer gradient `base − θ` encoded (with optional error feedback) in one pass,
// and a contribution decoded and weighted into an accumulator in one pass.
// They write exactly the bytes and values of `encode` and `decode` in
// blocks.hpp, with the element math of element.hpp (DILOCO_HOST_DEVICE), so
// that CUDA kernels doing the same passes share every per-value operation.
#pragma once

#include <atomic>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "diloco/codec/block_math.hpp"
#include "diloco/codec/blocks.hpp"
#include "diloco/codec/detail/passes.hpp"
#include "diloco/detail/parallel.hpp"

namespace diloco::codec {

/// Encodes the outer gradient `Δ = base − θ` of `base.size()` values into
/// `out` in one pass, on up to `threads` threads (0: every core; fewer where a
/// thread would get under 2^16 values). θ is the fragment's values gathered
/// from `runs` of `theta` (each `Run` has `flat_offset`, `packed_offset` and
/// `size`, like `diloco::fragment_slice`: in packed order, from packed value 0
/// to `base.size()` without gaps), so that a fragment of several tensors is
/// encoded where it lies; a codec chunk across two runs is copied first
/// (`codec::encode`'s result does not change). `out` holds
/// `encoded_size(f, base.size(), block)` bytes and receives exactly the bytes
/// `encode(f, n, block, [&](i) { return base[i] − θ[i]; }, out)` writes.
///
/// With error feedback (`residual` not empty, as long as `base`), the pass
/// encodes `Δ = (base − θ) + residual` instead and then sets
/// `residual ← Δ − decoded`, the encoding error, which the next call adds
/// back (`decoded` as `decode` gives it: the error is 0 for fp32).
///
/// Returns false if any `Δ` is not finite: nothing may be sent. `out` is then
/// partly written (discard it), and `residual`, whose blocks up to the first
/// bad one in each thread's share were already updated, is set to zero, so
/// that its content never depends on the thread count: error feedback starts
/// afresh. (Keeping the old residual instead would take a second pass over
/// the inputs, or a copy, on every call.) Returns false having touched
/// nothing if `f` is not one of `float_codecs`, `out` is not `encoded_size`
/// bytes or `block` is 0 for a block-scaled codec.
///
/// Cost: reads `base` and `θ` (and `residual`) once from memory, writes the
/// encoded bytes (and `residual`) once: 8 (16) bytes per value plus the
/// encoding. A block-scaled format reads each block twice, the second time
/// from cache. The result does not depend on `threads`.
template <class Run>
bool encode_delta(codec_id f, std::size_t block, std::span<const Run> runs, const float* theta,
                  std::span<const float> base, std::span<float> residual, std::span<std::byte> out, unsigned threads) {
  assert(residual.empty() || residual.size() == base.size());
  const std::size_t n = base.size();
  if (!float_codec(f) || (block_scaled(f) && block == 0) || out.size() != encoded_size(f, n, block)) return false;
  if (n == 0) return true;
  assert(!runs.empty() && runs.front().packed_offset == 0);
  const detail::chunking c(f, n, block);
  std::atomic<bool> failed{false};
  auto run = [&]<codec_id F, bool Feedback>() {
    ::diloco::detail::parallel_for(c.count, ::diloco::detail::threads_for(n, threads, detail::min_values_per_thread),
                                   [&](std::size_t first, std::size_t last) {
                                     detail::theta_runs<Run> gather{runs, theta, 0, {}};
                                     ::diloco::detail::with_best_isa([&] {
                                       detail::encode_delta_chunks<F, Feedback>(base.data(), gather, residual.data(), n,
                                                                                c, first, last, out.data(), failed);
                                     });
                                   });
  };
  auto with_format = [&]<bool Feedback>() {
    switch (f) {
      case codec_id::f32: return run.template operator()<codec_id::f32, Feedback>();
      case codec_id::bf16: return run.template operator()<codec_id::bf16, Feedback>();
      case codec_id::int8: return run.template operator()<codec_id::int8, Feedback>();
      case codec_id::fp8: return run.template operator()<codec_id::fp8, Feedback>();
      case codec_id::int4: return run.template operator()<codec_id::int4, Feedback>();
      default: return;  // refused above
    }
  };
  if (residual.empty())
    with_format.template operator()<false>();
  else
    with_format.template operator()<true>();
  if (failed.load()) {
    for (float& r : residual) r = 0.0f;
    return false;
  }
  return true;
}

/// `encode_delta` of a contiguous θ (`theta.size() == base.size()`).
inline bool encode_delta(codec_id f, std::size_t block, std::span<const float> base, std::span<const float> theta,
                         std::span<float> residual, std::span<std::byte> out, unsigned threads) {
  assert(base.size() == theta.size());
  const detail::theta_run whole{0, 0, base.size()};
  return encode_delta(f, block, std::span<const detail::theta_run>(&whole, 1), theta.data(), base, residual, out,
                      threads);
}

/// `acc[i] += weight · decoded[i]` for the `acc.size()` values encoded in
/// `in`, in one pass over the bytes, on up to `threads` threads (0: every
/// core; fewer where a thread would get under 2^16 values). Precondition:
/// `valid(f, acc.size(), block, in)` (bytes from the network are checked
/// first). Each `decoded[i]` is the value `decode` gives, and each `acc[i]`
/// receives one product, so the result is that of the loop
/// `decode(f, n, block, in, [&](i, v) { acc[i] += weight * v; })` whatever
/// `threads` is.
///
/// Cost: reads the encoded bytes once, reads and writes `acc` once (8 bytes
/// per value plus the encoding).
inline void decode_accumulate(codec_id f, std::size_t block, std::span<const std::byte> in, float weight,
                              std::span<float> acc, unsigned threads) {
  const std::size_t n = acc.size();
  assert(float_codec(f) && in.size() == encoded_size(f, n, block) && (!block_scaled(f) || block > 0));
  const detail::chunking c(f, n, block);
  auto run = [&]<codec_id F>() {
    ::diloco::detail::parallel_for(
        c.count, ::diloco::detail::threads_for(n, threads, detail::min_values_per_thread),
        [&](std::size_t first, std::size_t last) {
          ::diloco::detail::with_best_isa(
              [&] { detail::decode_accumulate_chunks<F>(in.data(), n, c, first, last, weight, acc.data()); });
        });
  };
  switch (f) {
    case codec_id::f32: return run.template operator()<codec_id::f32>();
    case codec_id::bf16: return run.template operator()<codec_id::bf16>();
    case codec_id::int8: return run.template operator()<codec_id::int8>();
    case codec_id::fp8: return run.template operator()<codec_id::fp8>();
    case codec_id::int4: return run.template operator()<codec_id::int4>();
    default: return;  // not a float codec: the precondition does not hold
  }
}

}  // namespace diloco::codec
