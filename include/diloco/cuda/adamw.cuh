// The AdamW inner step on the device: the kernel, and `adamw<T>`, the inner
// step of a model whose parameters live in device memory.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/inner_step.hpp"
#include "diloco/cuda/detail/launch.cuh"
#include "diloco/cuda/error.cuh"
#include "diloco/cuda/memory.cuh"
#include "diloco/inner/adamw.hpp"
#include "diloco/serialize.hpp"

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
  detail::clear_stale_error();
  detail::adamw_kernel<<<detail::blocks_for(n), detail::threads, 0, stream>>>(f, n, params.data(), m.data(), v.data(),
                                                                              grads.data());
  return detail::launched();
}

/// AdamW as an InnerStep on device memory: the inner step of a model whose
/// `memory()` is a `device_memory` (`params` and `grads` are device spans).
/// The same options as `inner::adamw<T>` (validated as it validates them) and
/// the same update: `adamw_step` with `adamw_element<T>::at_step(options, t)`,
/// so it differs from the CPU's only by nvcc's FMAs (`adamw_step`).
///
/// Each `step` is enqueued on the stream given at construction — the model's,
/// so that it follows `compute_gradients` and precedes the learner's passes —
/// and returns at once; the moments m and v are device buffers, allocated and
/// zeroed (on the stream) at the first step. A failed launch throws
/// `cuda::error`, as the learner's passes through `device_memory` do: the
/// `inner_step` concept has no value to return it in, and the device is
/// lost. Checkpointable: `save` copies the moments to the host (blocking)
/// and writes them in `inner::adamw<T>`'s format, so a state one of them
/// saved loads into the other; `load` reads it, then copies it to the device.
/// Not thread-safe.
template <class T>
class adamw {
 public:
  using scalar_type = T;
  using options_type = inner::adamw_options;

  /// Throws `std::invalid_argument` on options `inner::adamw<T>` refuses.
  /// Steps run on `stream`, which must be the model's (`device_memory`'s):
  /// there is no default, because the legacy default stream does not order
  /// itself with the non-blocking streams a model is likely to use.
  adamw(options_type options, cudaStream_t stream) : options_(inner::adamw<T>(options).options()), stream_(stream) {}

  void step(std::span<T> params, std::span<const T> grads) {
    assert(params.size() == grads.size());
    if (m_.size() != params.size()) {
      assert(m_.size() == 0);
      m_ = device_buffer<T>(params.size());
      v_ = device_buffer<T>(params.size());
      zero(m_);
      zero(v_);
    }
    ++steps_;
    detail::check(
        adamw_step(inner::adamw_element<T>::at_step(options_, steps_), params, m_.span(), v_.span(), grads, stream_),
        "adamw_step");
  }

  options_type& options() noexcept { return options_; }
  const options_type& options() const noexcept { return options_; }
  std::uint64_t steps() const noexcept { return steps_; }
  cudaStream_t stream() const noexcept { return stream_; }

  /// Forgets the moments and the step count (bias correction restarts).
  void reset() {
    m_ = {};
    v_ = {};
    steps_ = 0;
  }

  /// Writes the step count and the moments as `inner::adamw<T>::save` does;
  /// waits for the stream's work so far (two device-to-host copies).
  void save(std::ostream& out) const {
    const std::vector<T> m = download(m_), v = download(v_);
    inner::adamw<T>::saved_state::write(out, steps_, std::span<const T>(m), std::span<const T>(v));
  }

  /// Reads what `save` (or `inner::adamw<T>::save`) wrote. Throws
  /// `corrupt_state` on a bad block, leaving the state unchanged; the
  /// moments are sized by the first `step` after an empty state.
  void load(std::istream& in) {
    const auto s = inner::adamw<T>::saved_state::read(in);
    device_buffer<T> dm = upload(s.m), dv = upload(s.v);
    steps_ = s.steps;
    m_ = std::move(dm);
    v_ = std::move(dv);
  }

 private:
  void zero(device_buffer<T>& b) const {
    if (b.size() != 0) detail::check(cudaMemsetAsync(b.data(), 0, b.bytes(), stream_), "cudaMemsetAsync");
  }
  std::vector<T> download(const device_buffer<T>& b) const {
    std::vector<T> host(b.size());
    if (b.size() != 0)
      detail::check(cudaMemcpyAsync(host.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost, stream_),
                    "cudaMemcpyAsync");
    detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return host;
  }
  device_buffer<T> upload(const std::vector<T>& host) const {
    device_buffer<T> b(host.size());
    if (b.size() != 0)
      detail::check(cudaMemcpyAsync(b.data(), host.data(), b.bytes(), cudaMemcpyHostToDevice, stream_),
                    "cudaMemcpyAsync");
    detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // `host` is pageable and goes away
    return b;
  }

  options_type options_;
  cudaStream_t stream_;
  device_buffer<T> m_, v_;
  std::uint64_t steps_ = 0;
};

static_assert(check_inner_step<adamw<float>>() && inner_step<adamw<float>> && checkpointable<adamw<float>>);

}  // namespace diloco::cuda
