// Owners of CUDA resources: device and pinned host buffers, streams, events.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include <cuda_runtime_api.h>

#include "diloco/cuda/error.cuh"

namespace diloco::cuda {

/// `n` values of `T` in device memory (`cudaMalloc`), uninitialised. Owns
/// them; movable, not copyable. Allocating is setup: the constructor throws
/// `error` on failure, and nothing else here allocates. Frees with
/// `cudaFree`, which synchronises the device: keep buffers for the run.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) : size_(n) {
    if (n != 0) detail::check(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc");
  }
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  /// The buffer as a span of device memory (for the kernels; not to be
  /// dereferenced on the host).
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept {
    if (data_) cudaFree(data_);  // an error here has nowhere to go; the device is lost anyway
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// `n` values of `T` in page-locked host memory (`cudaMallocHost`),
/// uninitialised: copies to and from it run asynchronously (a copy from or to
/// pageable memory makes the host wait). Owns them; movable, not copyable;
/// the constructor throws `error` on failure.
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t n) : size_(n) {
    if (n != 0) detail::check(cudaMallocHost(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMallocHost");
  }
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept {
    if (data_) cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A CUDA stream that does not synchronise with the legacy default stream
/// (`cudaStreamNonBlocking`). Owns it; movable; the constructor throws `error`.
class stream {
 public:
  stream() { detail::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  stream(stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  stream& operator=(stream&& other) noexcept {
    if (this != &other) {
      release();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { release(); }

  cudaStream_t get() const noexcept { return stream_; }
  /// Blocks the calling thread until the work enqueued so far has finished.
  cudaError_t synchronize() const noexcept { return cudaStreamSynchronize(stream_); }

 private:
  void release() noexcept {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
};

/// A CUDA event without timing (`cudaEventDisableTiming`, the cheapest kind),
/// for ordering streams and for polling completion. Owns it; movable; the
/// constructor throws `error`.
class event {
 public:
  event() { detail::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
  event(event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  event& operator=(event&& other) noexcept {
    if (this != &other) {
      release();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() { release(); }

  cudaEvent_t get() const noexcept { return event_; }
  /// Marks the point of `s` reached by the work enqueued on it so far.
  cudaError_t record(cudaStream_t s) noexcept { return cudaEventRecord(event_, s); }
  /// cudaSuccess once the recorded work has finished, cudaErrorNotReady
  /// before; never blocks.
  cudaError_t query() const noexcept { return cudaEventQuery(event_); }
  /// Blocks the calling thread until the recorded work has finished.
  cudaError_t synchronize() const noexcept { return cudaEventSynchronize(event_); }
  /// Makes the work enqueued on `s` from now on wait, on the device, for the
  /// recorded work; the host does not wait.
  cudaError_t wait_on(cudaStream_t s) const noexcept { return cudaStreamWaitEvent(s, event_, 0); }

 private:
  void release() noexcept {
    if (event_) cudaEventDestroy(event_);
    event_ = nullptr;
  }
  cudaEvent_t event_ = nullptr;
};

}  // namespace diloco::cuda
