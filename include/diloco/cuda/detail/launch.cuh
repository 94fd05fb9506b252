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

/// Clears an error an earlier runtime call left pending, so that
/// `launched()` reports the launch that follows and nothing older: a
/// non-sticky error (a failed `cudaMalloc` the caller caught, say) was
/// returned already by the call that failed, and would otherwise be taken
/// for the launch's although its kernel ran; a sticky one (the context is
/// lost) is returned again by the launch itself. Call it before launching.
inline void clear_stale_error() noexcept { static_cast<void>(cudaGetLastError()); }

/// The error of the launch just made: a bad configuration, or a sticky
/// error of the context (`cudaGetLastError`, which clears a non-sticky one).
/// Precondition: `clear_stale_error()` before the launch.
inline cudaError_t launched() noexcept { return cudaGetLastError(); }

/// The first index and the stride of a grid-stride loop.
__device__ inline std::size_t first_index() { return std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return std::size_t(gridDim.x) * blockDim.x; }

}  // namespace diloco::cuda::detail
