// The fused Nesterov outer step on the device.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/cuda/detail/launch.cuh"
#include "diloco/outer/nesterov.hpp"

namespace diloco::cuda {

namespace detail {

template <class T>
__global__ void nesterov_kernel(outer::nesterov_element<T> f, std::size_t n, T* global, T* momentum, const T* delta) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) f(global[i], momentum[i], delta[i]);
}

}  // namespace detail

/// One fused Nesterov outer step on device memory, element by element with
/// the CPU's functor (`outer::nesterov_element`): `m ← μm + Δ;  Θ ← Θ − η(Δ + μm)`.
/// Reads Θ, m, Δ and writes Θ, m once (20 bytes per fp32 parameter); enqueued
/// on `stream`, returns at once with the launch's error (cudaErrorInvalidValue
/// if the sizes differ). Deterministic: each element is computed alone. nvcc
/// contracts the multiply-adds into FMAs where the CPU rounds twice, so
/// results differ from `outer::nesterov` by a few units in the last place.
template <class T>
cudaError_t nesterov_step(const outer::nesterov_element<T>& f, std::span<T> global, std::span<T> momentum,
                          std::span<const T> delta, cudaStream_t stream) {
  const std::size_t n = global.size();
  if (momentum.size() != n || delta.size() != n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::clear_stale_error();
  detail::nesterov_kernel<<<detail::blocks_for(n), detail::threads, 0, stream>>>(f, n, global.data(), momentum.data(),
                                                                                 delta.data());
  return detail::launched();
}

}  // namespace diloco::cuda
