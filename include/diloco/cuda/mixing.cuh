// Mixing an arriving global fragment into the learner's parameters on the device.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/cuda/detail/launch.cuh"
#include "diloco/params/mixing.hpp"

namespace diloco::cuda {

namespace detail {

template <class T>
__global__ void mixing_kernel(mixing_element<T> f, std::size_t n, T* theta, const T* global) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) f(theta[i], global[i]);
}

}  // namespace detail

/// `θ ← α·θ + (1−α)·Θ` on device memory, with the CPU's functor
/// (`mixing_element`), over one contiguous piece: a fragment whose tensors are
/// not contiguous in θ takes one call per slice. Reads θ and Θ, writes θ;
/// enqueued on `stream`, returns at once with the launch's error
/// (cudaErrorInvalidValue if the sizes differ). Deterministic; nvcc contracts
/// `α·θ + (…)` into an FMA, so results differ from the CPU by up to an ulp.
template <class T>
cudaError_t mix(const mixing_element<T>& f, std::span<T> theta, std::span<const T> global, cudaStream_t stream) {
  const std::size_t n = theta.size();
  if (global.size() != n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::mixing_kernel<<<detail::blocks_for(n), detail::threads, 0, stream>>>(f, n, theta.data(), global.data());
  return detail::launched();
}

}  // namespace diloco::cuda
