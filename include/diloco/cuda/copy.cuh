// Copies on a stream of their own, ordered after the work that produced their
// source by events, so that sending a fragment never blocks the inner loop.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "diloco/cuda/memory.cuh"

namespace diloco::cuda {

/// One asynchronous copy at a time, on its own stream. `start` records an
/// event on the producing stream (the inner loop's), makes the copy stream
/// wait for it on the device, enqueues the copy and records a completion
/// event, and returns at once: the producing stream carries on with the next
/// inner step while the copy runs, and neither the inner loop's thread nor its
/// stream ever waits for it. The thread that sends the fragment polls
/// `query` or blocks in `wait`; before the producing stream may overwrite the
/// copy's source, `order_before(producer)` makes it wait on the device.
///
/// Copies between device memory and `pinned_buffer`s only: a copy from or to
/// pageable host memory makes the calling thread wait for it.
/// Starting a second copy before the first has finished is allowed (the
/// stream runs them in order) but `query` and `wait` then follow the last.
/// The constructor throws `error`; every operation returns its `cudaError_t`.
class copy_stream {
 public:
  copy_stream() = default;

  /// Copies `bytes` bytes from `source` to `destination` (device or pinned
  /// host memory, `cudaMemcpyDefault`) once the work enqueued on `producer`
  /// so far has finished.
  cudaError_t start(void* destination, const void* source, std::size_t bytes, cudaStream_t producer) noexcept {
    if (cudaError_t e = produced_.record(producer); e != cudaSuccess) return e;
    if (cudaError_t e = produced_.wait_on(stream_.get()); e != cudaSuccess) return e;
    if (cudaError_t e = cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream_.get()); e != cudaSuccess)
      return e;
    return copied_.record(stream_.get());
  }

  /// Device values to pinned host memory of the same size
  /// (cudaErrorInvalidValue if the sizes differ).
  template <class T>
  cudaError_t to_host(pinned_buffer<T>& destination, std::span<const T> device_source, cudaStream_t producer) noexcept {
    if (destination.size() != device_source.size()) return cudaErrorInvalidValue;
    return start(destination.data(), device_source.data(), destination.bytes(), producer);
  }

  /// Pinned host values to device memory of the same size
  /// (cudaErrorInvalidValue if the sizes differ).
  template <class T>
  cudaError_t to_device(std::span<T> device_destination, const pinned_buffer<T>& source,
                        cudaStream_t producer) noexcept {
    if (device_destination.size() != source.size()) return cudaErrorInvalidValue;
    return start(device_destination.data(), source.data(), source.bytes(), producer);
  }

  /// cudaSuccess once the last copy has finished, cudaErrorNotReady before;
  /// never blocks.
  cudaError_t query() const noexcept { return copied_.query(); }
  /// Blocks the calling thread (the sender, never the inner loop) until the
  /// last copy has finished.
  cudaError_t wait() const noexcept { return copied_.synchronize(); }
  /// Makes the work enqueued on `consumer` from now on wait, on the device,
  /// for the last copy (before overwriting its source, or reading its
  /// destination on the device); the host does not wait.
  cudaError_t order_before(cudaStream_t consumer) const noexcept { return copied_.wait_on(consumer); }

  cudaStream_t get() const noexcept { return stream_.get(); }

 private:
  stream stream_;
  event produced_, copied_;
};

}  // namespace diloco::cuda
