// The AdamW inner step on the device.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/cuda/detail/launch.cuh"
#include "diloco/inner/adamw.hpp"

namespace diloco::cuda {

namespace detail {

template <class T>
__global__ void adamw_kernel(inner::adamw_element<T> f, std::size_t n, T* params, T* m, T* v, const T* grads) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) f(params[i], m[i], v[i], grads[i]);
}

}  // namespace detail

/// One AdamW step on device memory with the CPU's functor: build `f` with
/// `inner::adamw_element<T>::at_step(options, t)` for step t ≥ 1, as
/// `inner::adamw::step` does, and zero `m` and `v` before step 1. Reads p, m,
/// v, g and writes p, m, v once (28 bytes per fp32 parameter); enqueued on
/// `stream`, returns at once with the launch's error (cudaErrorInvalidValue
/// if the sizes differ). Deterministic; differs from the CPU by the FMAs nvcc
/// contracts (a few units in the last place of each term).
template <class T>
cudaError_t adamw_step(const inner::adamw_element<T>& f, std::span<T> params, std::span<T> m, std::span<T> v,
                       std::span<const T> grads, cudaStream_t stream) {
  const std::size_t n = params.size();
  if (m.size() != n || v.size() != n || grads.size() != n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::adamw_kernel<<<detail::blocks_for(n), detail::threads, 0, stream>>>(f, n, params.data(), m.data(), v.data(),
                                                                              grads.data());
  return detail::launched();
}

}  // namespace diloco::cuda
