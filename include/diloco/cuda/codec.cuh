// The codecs on the device: the outer gradient computed and encoded in one
// pass (with optional error feedback), and decoding fused with the weighted
// accumulation of a merge. Byte for byte the formats of diloco/codec/blocks.hpp,
// value for value the CPU passes of diloco/codec/kernels.hpp, with their
// element functions (codec/element.hpp) and helpers (`outer_gradient`,
// `block_unit`).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <cuda_runtime_api.h>

#include "diloco/codec/blocks.hpp"
#include "diloco/codec/element.hpp"
#include "diloco/codec/kernels.hpp"
#include "diloco/cuda/detail/launch.cuh"

namespace diloco::cuda {

namespace detail {

/// The outer gradient of element i, `(base − θ) + residual`, as
/// `codec::outer_gradient` computes it on the CPU (a subtraction and an
/// addition, each rounded on its own: there is no product to contract).
struct delta_source {
  const float* base;
  const float* theta;
  float* residual;  ///< null without error feedback
  __device__ float operator()(std::size_t i) const {
    return residual ? codec::outer_gradient{}(base[i], theta[i], residual[i])
                    : codec::outer_gradient{}(base[i], theta[i]);
  }
};

/// The unit of `d` in a block scaled by `scale`, as `codec::encode_delta`
/// computes it: `d · (1/absmax)` where that inverse is normal, `d / absmax`
/// where it is not, 0 in an all-zero block (whose codes are all 0).
__device__ inline float unit_of(const codec::block_unit& scale, float d) {
  if (scale.absmax == 0.0f) return 0.0f;
  return scale.by_inverse ? codec::mul_rn(d, scale.inverse) : diloco::detail::div_rn(d, scale.absmax);
}

/// `acc + w·v`, rounded twice as the CPU's `acc += w * v` is (never an FMA).
__device__ inline float accumulate(float acc, float w, float v) { return __fadd_rn(acc, __fmul_rn(w, v)); }
__device__ inline double accumulate(double acc, double w, float v) { return __dadd_rn(acc, __dmul_rn(w, double(v))); }

/// The largest of the blocks' `v` (for a 1-D block whose size is a multiple of
/// 32, at most 1024), in every thread. `scratch` holds 33 floats of shared
/// memory; the call synchronises the block. `fmaxf` is exact, so the order of
/// the reduction cannot change the result.
__device__ inline float block_max(float v, float* scratch) {
  for (unsigned offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xFFFFFFFFu, v, offset));
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch is free again (a previous call's readers are done)
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? scratch[lane] : 0.0f;
    for (unsigned offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xFFFFFFFFu, v, offset));
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  return scratch[32];
}

/// fp32 and bf16: one value a thread, `out` aligned to its element size.
template <codec_id F>
__global__ void encode_dense_kernel(std::size_t n, delta_source delta, std::byte* out, unsigned* refused) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float d = delta(i);
    if (!isfinite(d)) {
      *refused = 1u;
      continue;
    }
    if constexpr (F == codec_id::f32) {
      reinterpret_cast<float*>(out)[i] = d;
      if (delta.residual) delta.residual[i] = 0.0f;  // d − d
    } else {
      const std::uint16_t b = codec::to_bf16(d);
      reinterpret_cast<std::uint16_t*>(out)[i] = b;
      if (delta.residual) delta.residual[i] = __fsub_rn(d, codec::from_bf16(b));
    }
  }
}

/// Block-scaled formats: one codec block per thread block (grid-stride over
/// codec blocks). Each thread reads its values twice, once for the block's
/// largest magnitude and once for its codes, as `codec::encode` reads them.
template <codec_id F>
__global__ void encode_blocks_kernel(std::size_t n, std::size_t block, delta_source delta, std::byte* out,
                                     unsigned* refused) {
  __shared__ float scratch[33];
  const std::size_t stride = 4 + codec::code_bytes(F, block);
  const std::size_t blocks = (n + block - 1) / block;
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t first = b * block;
    const std::size_t len = n - first < block ? n - first : block;
    std::byte* o = out + b * stride;
    float largest = 0.0f;
    bool finite = true;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float d = delta(first + i);
      if (!isfinite(d))
        finite = false;
      else
        largest = fmaxf(largest, fabsf(d));
    }
    if (!finite) *refused = 1u;
    const float absmax = block_max(largest, scratch);
    if (threadIdx.x == 0) memcpy(o, &absmax, 4);
    const codec::block_unit scale(absmax);
    std::byte* codes = o + 4;
    // The decoded value is `mul_rn(unit, absmax)`, rounded on its own before
    // the subtraction (no FMA), as the CPU computes `d − unit · absmax`.
    if constexpr (F == codec_id::int4) {
      for (std::size_t j = threadIdx.x; j < (len + 1) / 2; j += blockDim.x) {
        unsigned byte = 0;
        for (std::size_t k = 2 * j; k < 2 * j + 2 && k < len; ++k) {
          const float d = delta(first + k);
          const int level = codec::int4_level(unit_of(scale, d));
          byte |= (static_cast<unsigned>(level) & 0xFu) << (4 * (k % 2));  // codec::to_int4
          if (delta.residual) delta.residual[first + k] = __fsub_rn(d, codec::mul_rn(codec::int4_unit(level), absmax));
        }
        codes[j] = static_cast<std::byte>(byte);
      }
    } else {
      for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
        const float d = delta(first + i);
        std::uint8_t c;
        float unit;
        if constexpr (F == codec_id::int8) {
          const std::int8_t q = codec::to_int8(unit_of(scale, d));
          c = static_cast<std::uint8_t>(q);
          unit = codec::from_int8(q);
        } else {
          const codec::fp8_rounding r = codec::round_to_fp8(unit_of(scale, d));
          c = r.code;
          unit = r.unit;
        }
        codes[i] = static_cast<std::byte>(c);
        if (delta.residual) delta.residual[first + i] = __fsub_rn(d, codec::mul_rn(unit, absmax));
      }
    }
  }
}

template <codec_id F, class T>
__global__ void decode_dense_kernel(std::size_t n, const std::byte* in, T weight, T* acc) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float v;
    if constexpr (F == codec_id::f32)
      v = reinterpret_cast<const float*>(in)[i];
    else
      v = codec::from_bf16(reinterpret_cast<const std::uint16_t*>(in)[i]);
    acc[i] = accumulate(acc[i], weight, v);
  }
}

template <codec_id F, class T>
__global__ void decode_blocks_kernel(std::size_t n, std::size_t block, const std::byte* in, T weight, T* acc) {
  const std::size_t stride = 4 + codec::code_bytes(F, block);
  const std::size_t blocks = (n + block - 1) / block;
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t first = b * block;
    const std::size_t len = n - first < block ? n - first : block;
    const std::byte* p = in + b * stride;
    float absmax;
    memcpy(&absmax, p, 4);
    const std::byte* codes = p + 4;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      float unit;
      if constexpr (F == codec_id::int8)
        unit = codec::from_int8(static_cast<std::int8_t>(codes[i]));
      else if constexpr (F == codec_id::fp8)
        unit = codec::from_fp8(static_cast<std::uint8_t>(codes[i]));
      else
        unit = codec::from_int4(static_cast<unsigned>(codes[i / 2]) >> (4 * (i % 2)));
      acc[first + i] = accumulate(acc[first + i], weight, codec::mul_rn(unit, absmax));
    }
  }
}

/// After a refused encoding, the residual is zeroed, as `codec::encode_delta`
/// zeroes it: error feedback starts afresh, whatever the launch shape.
template <class T>
__global__ void restart_residual_if_refused(std::size_t n, T* residual, const unsigned* refused) {
  if (*refused == 0u) return;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) residual[i] = T(0);
}

/// Threads per block of the block-scaled kernels: the codec block rounded up
/// to whole warps, at most 256 (a thread then handles several values).
inline unsigned threads_for_block(std::size_t block) noexcept {
  const std::size_t warps = (block + 31) / 32;
  return warps >= 8 ? 256u : static_cast<unsigned>(32 * warps);
}

inline unsigned grid_for_blocks(std::size_t blocks) noexcept {
  return blocks < 65535 ? static_cast<unsigned>(blocks) : 65535u;
}

inline bool aligned(const void* p, std::size_t alignment) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

}  // namespace detail

/// Computes the outer gradient `Δ = (base − θ) + residual` of `n` =
/// `base.size()` fp32 values on the device and writes it as format `f`'s
/// bytes into `out` (`codec::encoded_size(f, n, block)` bytes of device
/// memory), byte for byte what `codec::encode` writes for the same Δ: the
/// device version of `codec::encode_delta` (codec/kernels.hpp, the host
/// path), which leaves the same bytes and residual. With
/// error feedback (`residual` not empty, n values) the residual becomes
/// `Δ − decode(code)` exactly as `codec::decode` decodes the code; without it
/// (`residual` empty) Δ = base − θ.
///
/// A value of Δ that is not finite sets `*refused` (device memory, zeroed by
/// the caller) to 1, where `codec::encode_delta` returns false: `out` is then
/// unspecified and must not be sent, and `residual` is set to zero by a
/// second kernel on the same stream, as `codec::encode_delta` zeroes it (error
/// feedback starts afresh).
///
/// Cost: one read of base, θ (and the residual) per value, two for the
/// block-scaled formats (their second read mostly hits the cache), and one
/// write of the bytes (and the residual). Block-scaled formats run one codec
/// block per thread block; the absmax is a max-reduction, exact in any
/// order: the result is deterministic. Enqueued on `stream`; returns at once
/// with the launch's error, or cudaErrorInvalidValue for a codec not in
/// `codec::float_codecs`, sizes that do not match, a zero `block` for a block-scaled format, a null `refused`, or an
/// `out` not aligned to 4 (fp32) or 2 (bf16) bytes.
inline cudaError_t encode_delta(codec_id f, std::size_t block, std::span<const float> base,
                                std::span<const float> theta, std::span<float> residual, std::span<std::byte> out,
                                unsigned* refused, cudaStream_t stream) {
  const std::size_t n = base.size();
  if (!codec::float_codec(f) || theta.size() != n || (!residual.empty() && residual.size() != n) ||
      refused == nullptr || (block_scaled(f) && block == 0) || out.size() != codec::encoded_size(f, n, block))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::clear_stale_error();
  const detail::delta_source delta{base.data(), theta.data(), residual.empty() ? nullptr : residual.data()};
  if (!block_scaled(f)) {
    if (!detail::aligned(out.data(), f == codec_id::f32 ? 4 : 2)) return cudaErrorInvalidValue;
    if (f == codec_id::f32)
      detail::encode_dense_kernel<codec_id::f32>
          <<<detail::blocks_for(n), detail::threads, 0, stream>>>(n, delta, out.data(), refused);
    else
      detail::encode_dense_kernel<codec_id::bf16>
          <<<detail::blocks_for(n), detail::threads, 0, stream>>>(n, delta, out.data(), refused);
  } else {
    const unsigned grid = detail::grid_for_blocks((n + block - 1) / block);
    const unsigned threads = detail::threads_for_block(f == codec_id::int4 ? (block + 1) / 2 : block);
    switch (f) {
      case codec_id::int8:
        detail::encode_blocks_kernel<codec_id::int8>
            <<<grid, threads, 0, stream>>>(n, block, delta, out.data(), refused);
        break;
      case codec_id::fp8:
        detail::encode_blocks_kernel<codec_id::fp8><<<grid, threads, 0, stream>>>(n, block, delta, out.data(), refused);
        break;
      default:
        detail::encode_blocks_kernel<codec_id::int4>
            <<<grid, threads, 0, stream>>>(n, block, delta, out.data(), refused);
        break;
    }
  }
  if (const cudaError_t e = detail::launched(); e != cudaSuccess || residual.empty()) return e;
  detail::restart_residual_if_refused<float>
      <<<detail::blocks_for(n), detail::threads, 0, stream>>>(n, residual.data(), refused);
  return detail::launched();
}

/// `acc[i] += weight · decode(in)[i]` for the `n` = `acc.size()` values of
/// `in` (device memory, format `f`, blocks of `block` values): the weighted
/// accumulation of a merge fused with decoding, rounded as the CPU's
/// `codec::decode_accumulate` (codec/kernels.hpp) and
/// `codec::decode(…, [&](i, v) { acc[i] += weight * v; })` round it (the
/// value `unit · absmax`, then the product by the weight, then the sum, each
/// rounded on its own, never an FMA), so the results are equal bit for bit.
/// `T` is float or double. `in` must have passed `codec::valid` (bytes from
/// the network are checked on the host, where they arrive). Reads the bytes
/// and acc once, writes acc once; deterministic. Enqueued on `stream`;
/// returns at once with the launch's error, or cudaErrorInvalidValue for a
/// codec not in `codec::float_codecs`, a size that does not match, a zero `block` for a block-scaled format, or an
/// `in` not aligned to 4 (fp32) or 2 (bf16) bytes.
template <class T>
cudaError_t decode_accumulate(codec_id f, std::size_t block, std::span<const std::byte> in, T weight, std::span<T> acc,
                              cudaStream_t stream) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "diloco::cuda::decode_accumulate: float or double");
  const std::size_t n = acc.size();
  if (!codec::float_codec(f) || (block_scaled(f) && block == 0) || in.size() != codec::encoded_size(f, n, block))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::clear_stale_error();
  if (!block_scaled(f)) {
    if (!detail::aligned(in.data(), f == codec_id::f32 ? 4 : 2)) return cudaErrorInvalidValue;
    if (f == codec_id::f32)
      detail::decode_dense_kernel<codec_id::f32, T>
          <<<detail::blocks_for(n), detail::threads, 0, stream>>>(n, in.data(), weight, acc.data());
    else
      detail::decode_dense_kernel<codec_id::bf16, T>
          <<<detail::blocks_for(n), detail::threads, 0, stream>>>(n, in.data(), weight, acc.data());
    return detail::launched();
  }
  const unsigned grid = detail::grid_for_blocks((n + block - 1) / block);
  const unsigned threads = detail::threads_for_block(block);
  switch (f) {
    case codec_id::int8:
      detail::decode_blocks_kernel<codec_id::int8, T>
          <<<grid, threads, 0, stream>>>(n, block, in.data(), weight, acc.data());
      break;
    case codec_id::fp8:
      detail::decode_blocks_kernel<codec_id::fp8, T>
          <<<grid, threads, 0, stream>>>(n, block, in.data(), weight, acc.data());
      break;
    default:
      detail::decode_blocks_kernel<codec_id::int4, T>
          <<<grid, threads, 0, stream>>>(n, block, in.data(), weight, acc.data());
      break;
  }
  return detail::launched();
}

}  // namespace diloco::cuda
