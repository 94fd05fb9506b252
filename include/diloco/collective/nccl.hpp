// The ranks of a learner unit on NCCL, one GPU per rank: a
// `diloco::collective` whose spans are device memory. The optional component
// `diloco::nccl` (CMake option DILOCO_WITH_NCCL; the NCCL that ships with the
// CUDA toolkit).
//
// NCCL's own collectives move the bytes (ncclAllReduce, ncclReduceScatter,
// ncclAllGather, ncclBroadcast; a mean is ncclAvg). The communicator is
// non-blocking (ncclConfig_t::blocking = 0): every call returns at once, and
// the host polls the stream and ncclCommGetAsyncError until the work is done
// or the deadline passes, then aborts the communicator (ncclCommAbort), which
// stops NCCL's kernels. A blocking NCCL collective whose peer died spins on
// the GPU forever; this is the wait that NCCL's documentation prescribes for
// fault tolerance ("Fault Tolerance", NCCL User Guide: non-blocking
// communicators, ncclCommGetAsyncError, ncclCommAbort).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

#include "diloco/clock.hpp"
#include "diloco/concepts/collective.hpp"
#include "diloco/error.hpp"

namespace diloco::nccl {

/// The element types NCCL reduces here: the library's scalars and bf16.
template <class T>
concept element = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, __nv_bfloat16>;

namespace detail {

template <element T>
constexpr ncclDataType_t datatype() noexcept {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else
    return ncclBfloat16;
}

constexpr ncclRedOp_t reduction(reduce_op op) noexcept { return op == reduce_op::mean ? ncclAvg : ncclSum; }

inline std::runtime_error failure(const char* what, ncclResult_t r) {
  return std::runtime_error(std::string("diloco::nccl: ") + what + ": " + ncclGetErrorString(r));
}

}  // namespace detail

/// Makes the NCCL identifier of a new unit on rank 0 of `unit` and gives it
/// to every rank over `unit` (any `diloco::collective` that is already up:
/// an `mpi::communicator`, say), one byte per element so that no bit pattern
/// can be changed on the way. Every rank calls it; throws
/// `std::system_error` if the broadcast fails (e.g. past `deadline`).
template <collective Unit>
ncclUniqueId unique_id(Unit& unit, time_point deadline) {
  ncclUniqueId id{};
  if (unit.rank() == 0)
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) throw detail::failure("ncclGetUniqueId", r);
  std::array<double, sizeof(id.internal)> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(id.internal[i]);
  if (const auto e = unit.broadcast(std::span<double>(bytes), 0, deadline))
    throw std::system_error(e, "diloco::nccl::unique_id: broadcast");
  for (std::size_t i = 0; i < bytes.size(); ++i)
    id.internal[i] = static_cast<char>(static_cast<unsigned char>(bytes[i]));
  return id;
}

/// Where a rank's collectives run.
struct options {
  int device = 0;  ///< the rank's GPU (one GPU per rank)
  /// The stream the collectives are queued on, after whatever the caller
  /// queued there (gradients, say: no extra synchronization needed). Null:
  /// a non-blocking stream of the communicator's own, in which case the
  /// caller makes sure its inputs are ready before each call.
  cudaStream_t stream = nullptr;
};

/// One rank of a unit on NCCL. Every span is device memory on this rank's
/// GPU (`options::device`); each call returns once the result is there (the
/// stream has reached it) or the deadline has passed.
///
/// A rank that dies: NCCL reports it (`ncclRemoteError`, `ncclSystemError`)
/// or the others' kernels wait for it; either way every other rank's call
/// returns `errc::rank_lost` or `errc::timed_out` by its deadline, having
/// aborted its communicator. A broken communicator answers every later call
/// with `errc::rank_lost`; the unit is restarted as a whole.
///
/// Sizes as the `collective` requirements say, else
/// `std::errc::invalid_argument` before anything is queued (the
/// communicator is broken then too: the other ranks may be inside the call).
/// bf16 (`__nv_bfloat16`) is accepted by every call besides float and
/// double; NCCL sums it in float and rounds the result once per step of its
/// algorithm.
class communicator {
 public:
  /// Joins unit `id` (`unique_id`) as rank `rank` of `size` on
  /// `where.device`; every rank of the unit constructs its communicator
  /// together. Throws `std::runtime_error` if CUDA or NCCL fail, or if not
  /// every rank has joined by `deadline` (the communicator is aborted).
  communicator(const ncclUniqueId& id, std::size_t rank, std::size_t size, time_point deadline, options where = {})
      : rank_(rank), size_(size), device_(where.device), stream_(where.stream) {
    if (size == 0 || rank >= size) throw std::invalid_argument("diloco::nccl::communicator: rank must be below size");
    cuda("cudaSetDevice", cudaSetDevice(device_));
    if (!stream_) {
      cuda("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_stream_ = true;
    }
    if (const cudaError_t e = cudaMalloc(&scratch_, sizeof(float)); e != cudaSuccess) {
      release();
      cuda("cudaMalloc", e);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, static_cast<int>(size), id, static_cast<int>(rank), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      release();
      throw detail::failure("ncclCommInitRankConfig", r);
    }
    if (const auto e = settle(deadline)) {
      release();
      throw std::runtime_error("diloco::nccl::communicator: joining the unit failed: " + e.message());
    }
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  ~communicator() { release(); }

  std::size_t rank() const noexcept { return rank_; }
  std::size_t size() const noexcept { return size_; }
  /// The NCCL communicator and the stream the collectives run on.
  ncclComm_t native() const noexcept { return comm_; }
  cudaStream_t stream() const noexcept { return stream_; }

  template <element T>
  std::error_code all_reduce(std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op,
                             time_point deadline) {
    if (broken_) return make_error_code(errc::rank_lost);
    if (in.size() != out.size()) return refuse();
    return run(
        ncclAllReduce(in.data(), out.data(), out.size(), detail::datatype<T>(), detail::reduction(op), comm_, stream_),
        deadline);
  }

  template <element T>
  std::error_code reduce_scatter(std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op,
                                 time_point deadline) {
    if (broken_) return make_error_code(errc::rank_lost);
    if (in.size() != out.size() * size_) return refuse();
    return run(ncclReduceScatter(in.data(), out.data(), out.size(), detail::datatype<T>(), detail::reduction(op), comm_,
                                 stream_),
               deadline);
  }

  template <element T>
  std::error_code all_gather(std::span<const std::type_identity_t<T>> in, std::span<T> out, time_point deadline) {
    if (broken_) return make_error_code(errc::rank_lost);
    if (out.size() != in.size() * size_) return refuse();
    return run(ncclAllGather(in.data(), out.data(), in.size(), detail::datatype<T>(), comm_, stream_), deadline);
  }

  template <element T>
  std::error_code broadcast(std::span<T> data, std::size_t root, time_point deadline) {
    if (broken_) return make_error_code(errc::rank_lost);
    if (root >= size_) return refuse();
    return run(ncclBroadcast(data.data(), data.data(), data.size(), detail::datatype<T>(), static_cast<int>(root),
                             comm_, stream_),
               deadline);
  }

  /// An all-reduce of one float (NCCL has no barrier of its own).
  std::error_code barrier(time_point deadline) {
    if (broken_) return make_error_code(errc::rank_lost);
    return run(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), deadline);
  }

 private:
  static void cuda(const char* what, cudaError_t e) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("diloco::nccl::communicator: ") + what + ": " + cudaGetErrorString(e));
  }

  std::error_code refuse() {
    lose(errc::rank_lost);
    return std::make_error_code(std::errc::invalid_argument);
  }

  /// `queued`: what the NCCL call returned (a non-blocking communicator may
  /// answer ncclInProgress while it queues the work).
  std::error_code run(ncclResult_t queued, time_point deadline) {
    if (queued != ncclSuccess && queued != ncclInProgress) return lose(errc::rank_lost);
    if (const auto e = settle(deadline)) return e;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return {};
      if (e != cudaErrorNotReady) return lose(errc::rank_lost);
      if (const auto failed = async_error()) return failed;
      if (clock::now() >= deadline) return lose(errc::timed_out);
      std::this_thread::yield();
    }
  }

  /// Waits until NCCL has finished the call in progress on the host side
  /// (joining, queuing), or the deadline.
  std::error_code settle(time_point deadline) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return lose(errc::rank_lost);
      if (state == ncclSuccess) return {};
      if (state != ncclInProgress) return lose(errc::rank_lost);
      if (clock::now() >= deadline) return lose(errc::timed_out);
      std::this_thread::yield();
    }
  }

  /// A peer's failure that NCCL noticed while the kernels run.
  std::error_code async_error() {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return lose(errc::rank_lost);
    if (state != ncclSuccess && state != ncclInProgress) return lose(errc::rank_lost);
    return {};
  }

  /// Breaks the communicator for good: aborting stops NCCL's kernels, so the
  /// stream drains and nothing waits on the dead peer.
  std::error_code lose(errc why) {
    broken_ = true;
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return make_error_code(why);
  }

  void release() noexcept {
    if (comm_) {
      // A healthy communicator flushes what it queued (every call waited
      // for its work already), for at most `finalize_bound`; one that cannot
      // is aborted.
      if (broken_ || ncclCommFinalize(comm_) != ncclSuccess) {
        ncclCommAbort(comm_);
      } else {
        const time_point give_up = clock::now() + finalize_bound;
        ncclResult_t state = ncclInProgress;
        while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress && clock::now() < give_up)
          std::this_thread::yield();
        if (state == ncclSuccess)
          ncclCommDestroy(comm_);
        else
          ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    if (owns_stream_) cudaStreamDestroy(stream_);
    owns_stream_ = false;
  }

  static constexpr std::chrono::seconds finalize_bound{10};

  ncclComm_t comm_ = nullptr;
  std::size_t rank_ = 0, size_ = 1;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  float* scratch_ = nullptr;  ///< the barrier's one element
  bool broken_ = false;
};

static_assert(check_collective<communicator>());

}  // namespace diloco::nccl
