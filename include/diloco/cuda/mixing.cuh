// Mixing or rebasing an arriving global fragment into the learner's parameters on the device.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/cuda/detail/launch.cuh"
#include "diloco/params/mixing.hpp"

namespace diloco::cuda {

namespace detail {

/// `f(theta[i], other[i])` for every i: the element steps of mixing and rebasing.
template <class F, class T>
__global__ void element_kernel(F f, std::size_t n, T* theta, const T* other) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) f(theta[i], other[i]);
}

template <class F, class T>
cudaError_t for_each_element(F f, std::span<T> theta, std::span<const T> other, cudaStream_t stream) {
  const std::size_t n = theta.size();
  if (other.size() != n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  clear_stale_error();
  element_kernel<<<blocks_for(n), threads, 0, stream>>>(f, n, theta.data(), other.data());
  return launched();
}

}  // namespace detail

/// `θ ← α·θ + (1−α)·Θ` on device memory, with the CPU's functor
/// (`mixing_element`), over one contiguous piece: a fragment whose tensors are
/// not contiguous in θ takes one call per slice. Reads θ and Θ, writes θ;
/// enqueued on `stream`, returns at once with the launch's error
/// (cudaErrorInvalidValue if the sizes differ). The CPU's bits: the functor
/// rounds each product and the sum on its own (`detail::mul_rn`), which nvcc
/// does not contract into an FMA.
template <class T>
cudaError_t mix(const mixing_element<T>& f, std::span<T> theta, std::span<const T> global, cudaStream_t stream) {
  return detail::for_each_element(f, theta, global, stream);
}

/// The first step of rebasing (`local_work_element`): `θ ← θ − (1−α)·base`,
/// over one contiguous piece. Reads θ and the base, writes θ; enqueued on
/// `stream`, returns at once with the launch's error (cudaErrorInvalidValue
/// if the sizes differ). The CPU's bits, as `mix`.
template <class T>
cudaError_t subtract_base(std::span<T> theta, std::span<const T> base, T alpha, cudaStream_t stream) {
  return detail::for_each_element(local_work_element<T>{T(1) - alpha}, theta, base, stream);
}

/// The second step of rebasing (`add_global_element`): `θ ← θ + (1−α)·Θ`,
/// as `subtract_base` is launched.
template <class T>
cudaError_t add_global(std::span<T> theta, std::span<const T> global, T alpha, cudaStream_t stream) {
  return detail::for_each_element(add_global_element<T>{T(1) - alpha}, theta, global, stream);
}

}  // namespace diloco::cuda
