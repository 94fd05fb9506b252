// Launch shapes and the element-wise kernel shared by the optimizer kernels.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace diloco::cuda::detail {

/// Threads per block of the element-wise kernels.
inline constexpr unsigned threads = 256;

/// Blocks for `n` elements in a grid-stride loop: one element a thread up to
/// 65535 blocks (16.7 M elements), then fewer threads each doing several.
inline unsigned blocks_for(std::size_t n) noexcept {
  const std::size_t b = (n + threads - 1) / threads;
  return b < 65535 ? static_cast<unsigned>(b) : 65535u;
}

/// The error of the launch just made: a bad configuration, or an earlier
/// asynchronous error still pending (`cudaGetLastError`, which clears it).
inline cudaError_t launched() noexcept { return cudaGetLastError(); }

/// The first index and the stride of a grid-stride loop.
__device__ inline std::size_t first_index() { return std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return std::size_t(gridDim.x) * blockDim.x; }

}  // namespace diloco::cuda::detail
