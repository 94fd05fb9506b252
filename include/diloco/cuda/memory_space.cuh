// Device memory as a learner's memory space: a model whose parameters and
// gradients are on the GPU has the learner keep its bases there and do its
// outer-loop passes as kernels (concepts/memory_space.hpp).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/concepts/memory_space.hpp"
#include "diloco/cuda/codec.cuh"
#include "diloco/cuda/error.cuh"
#include "diloco/cuda/memory.cuh"
#include "diloco/cuda/mixing.cuh"
#include "diloco/params/fragments.hpp"
#include "diloco/params/mixing.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco::cuda {

/// The memory space of a model of `float`s whose parameters live in device
/// memory: return one from the model's `memory()` (requirement 7 of
/// `diloco::model`). The learner's bases and error-feedback residuals are
/// `device_buffer`s; every pass runs on the stream given at construction —
/// the model's, so that a pass follows the inner step's kernels and the
/// next inner step follows the pass — and returns once it is done:
///
/// - `encode_delta`: θ_p packed on the device (a device-to-device copy per
///   slice, none for a fragment of one slice), then `cuda::encode_delta`
///   (the outer gradient and its encoding in one kernel, error feedback
///   included); only the encoded bytes cross to the host, through pinned
///   memory.
/// - `adopt`: the bytes that arrived cross to the device (pinned), are
///   decoded into the base there (`cuda::decode_accumulate` into zeros with
///   weight 1: exact, except that −0 becomes +0), and θ_p takes them by a
///   copy, by `cuda::mix` or by a rebase (`cuda::subtract_base` before the
///   decode, `cuda::add_global` after it) per slice.
/// - `pack`: θ_p's slices copied into the base, device to device.
/// - `scatter`, `gather`, `read`, `write`: copies (the gather and the
///   checkpoints' copies go through pageable host memory: they are rare).
///
/// The bytes and residuals are those of `host_memory` bit for bit (the
/// kernels share the CPU's element math, each product and sum rounded on
/// its own as the CPU rounds it, cuda/mixing.cuh). Staging buffers grow to
/// the largest fragment on first use and are kept. A CUDA failure throws
/// `cuda::error` (the learner has nothing to carry on with: the device is
/// lost). Not thread-safe, like the learner that uses it.
class device_memory {
 public:
  template <class T>
  using buffer = device_buffer<T>;

  /// Runs every pass on `stream` (the legacy default stream if null).
  explicit device_memory(cudaStream_t stream = nullptr) : stream_(stream) {}

  cudaStream_t stream() const noexcept { return stream_; }

  template <std::same_as<float> T>
  buffer<T> allocate(std::size_t n) {
    buffer<T> b(n);
    if (n != 0) check(cudaMemsetAsync(b.data(), 0, b.bytes(), stream_), "cudaMemsetAsync");
    synchronize();
    return b;
  }

  template <std::same_as<float> T>
  bool encode_delta(codec_id c, std::uint32_t block, std::span<const fragment_slice> slices, std::span<const T> theta,
                    const buffer<T>& base, buffer<T>* residual, std::span<std::byte> out) {
    const std::size_t n = base.size();
    std::span<const float> packed = theta_of(slices, theta, n);
    grow(bytes_, out.size());
    grow(staging_, out.size());
    if (!refused_.data()) refused_ = device_buffer<unsigned>(1), flag_ = pinned_buffer<unsigned>(1);
    check(cudaMemsetAsync(refused_.data(), 0, sizeof(unsigned), stream_), "cudaMemsetAsync");
    check(diloco::cuda::encode_delta(c, block, std::span<const float>(base.span()), packed,
                                     residual ? residual->span() : std::span<float>(), bytes_.span().first(out.size()),
                                     refused_.data(), stream_),
          "encode_delta");
    // The bytes and the verdict cross together; the bytes are only used if
    // every value was finite.
    check(cudaMemcpyAsync(flag_.data(), refused_.data(), sizeof(unsigned), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(staging_.data(), bytes_.data(), out.size(), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
    synchronize();
    if (*flag_.data() != 0) return false;
    std::memcpy(out.data(), staging_.data(), out.size());
    return true;
  }

  template <std::same_as<float> T>
  void adopt(codec_id c, std::uint32_t block, std::span<const std::byte> payload,
             std::span<const fragment_slice> slices, std::span<T> theta, buffer<T>& base, adoption how, T alpha) {
    grow(staging_, payload.size());
    grow(bytes_, payload.size());
    std::memcpy(staging_.data(), payload.data(), payload.size());
    check(cudaMemcpyAsync(bytes_.data(), staging_.data(), payload.size(), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync");
    if (how == adoption::rebase)
      for (const auto& s : slices)
        check(
            diloco::cuda::subtract_base(theta.subspan(s.flat_offset, s.size),
                                        std::span<const float>(base.data() + s.packed_offset, s.size), alpha, stream_),
            "subtract_base");
    check(cudaMemsetAsync(base.data(), 0, base.bytes(), stream_), "cudaMemsetAsync");
    check(diloco::cuda::decode_accumulate(c, block, std::span<const std::byte>(bytes_.data(), payload.size()), 1.0f,
                                          base.span(), stream_),
          "decode_accumulate");
    if (how == adoption::overwrite) {
      scatter(slices, base, theta);
      return;
    }
    if (how == adoption::mix)
      for (const auto& s : slices)
        check(diloco::cuda::mix(mixing_element<float>{alpha}, theta.subspan(s.flat_offset, s.size),
                                std::span<const float>(base.data() + s.packed_offset, s.size), stream_),
              "mix");
    if (how == adoption::rebase)
      for (const auto& s : slices)
        check(diloco::cuda::add_global(theta.subspan(s.flat_offset, s.size),
                                       std::span<const float>(base.data() + s.packed_offset, s.size), alpha, stream_),
              "add_global");
    synchronize();  // the staging buffer is free again
  }

  template <std::same_as<float> T>
  void pack(std::span<const fragment_slice> slices, std::span<const T> theta, buffer<T>& base) {
    for (const auto& s : slices)
      copy(base.data() + s.packed_offset, theta.data() + s.flat_offset, s.size, cudaMemcpyDeviceToDevice);
    synchronize();
  }

  template <std::same_as<float> T>
  void scatter(std::span<const fragment_slice> slices, const buffer<T>& base, std::span<T> theta) {
    for (const auto& s : slices)
      copy(theta.data() + s.flat_offset, base.data() + s.packed_offset, s.size, cudaMemcpyDeviceToDevice);
    synchronize();
  }

  template <std::same_as<float> T>
  void gather(std::span<const fragment_slice> slices, std::span<const T> theta, std::span<T> host) {
    for (const auto& s : slices)
      copy(host.data() + s.packed_offset, theta.data() + s.flat_offset, s.size, cudaMemcpyDeviceToHost);
    synchronize();
  }

  template <std::same_as<float> T>
  void read(std::span<const T> from, std::span<T> host) {
    copy(host.data(), from.data(), from.size(), cudaMemcpyDeviceToHost);
    synchronize();
  }

  template <std::same_as<float> T>
  void write(std::span<const T> host, std::span<T> to) {
    copy(to.data(), host.data(), host.size(), cudaMemcpyHostToDevice);
    synchronize();
  }

 private:
  static void check(cudaError_t e, const char* what) { detail::check(e, what); }
  void synchronize() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void copy(float* to, const float* from, std::size_t n, cudaMemcpyKind kind) {
    if (n != 0) check(cudaMemcpyAsync(to, from, n * sizeof(float), kind, stream_), "cudaMemcpyAsync");
  }
  template <class Buffer>
  static void grow(Buffer& b, std::size_t n) {
    if (b.size() < n) b = Buffer(n);
  }

  /// θ_p as one contiguous run of device memory: θ itself for a fragment of
  /// one slice, else its slices copied into a scratch buffer.
  std::span<const float> theta_of(std::span<const fragment_slice> slices, std::span<const float> theta, std::size_t n) {
    if (slices.size() == 1) return theta.subspan(slices[0].flat_offset, n);
    grow(packed_, n);
    for (const auto& s : slices)
      copy(packed_.data() + s.packed_offset, theta.data() + s.flat_offset, s.size, cudaMemcpyDeviceToDevice);
    return {packed_.data(), n};
  }

  cudaStream_t stream_;
  device_buffer<float> packed_;       ///< θ_p packed, for fragments of several slices
  device_buffer<std::byte> bytes_;    ///< encoded bytes on the device, both ways
  device_buffer<unsigned> refused_;   ///< set by `encode_delta` on a non-finite value
  pinned_buffer<std::byte> staging_;  ///< the bytes on the host side of each copy
  pinned_buffer<unsigned> flag_;      ///< `refused_`, on the host
};

static_assert(check_memory_space<device_memory, float>() && memory_space<device_memory, float>);

}  // namespace diloco::cuda
