// The trainer's way to GPU learners: plain C++, so that the trainer stays a
// C++ program. With CUDA (`FASHION_MNIST_CUDA`, set by CMake when
// DILOCO_ENABLE_CUDA is on) these are defined in gpu_learner.cu, which holds
// the GPU model (gpu_mlp.cuh) and is the only translation unit nvcc compiles;
// without it, `gpu_unavailable` says so and nothing else is ever called.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/concepts/model.hpp>
#include <diloco/inner/adamw.hpp>
#include <diloco/params/layout.hpp>
#include <diloco/runtime/learner.hpp>

#include "batch.hpp"
#include "learner_unit.hpp"

#ifdef FASHION_MNIST_MPI
#include <diloco/collective/mpi.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq/failover.hpp>

#include "unit_member.hpp"
#endif

namespace fashion {

/// What the GPU model computed, on the host (for the tests, `probe_gpu_mlp`).
struct gpu_probe {
  diloco::parameter_layout layout;
  std::vector<float> initial;    ///< the parameters it starts from
  diloco::step_stats stats;      ///< of one `compute_gradients`
  std::vector<float> gradients;  ///< of that step
};

#ifdef FASHION_MNIST_CUDA

/// Why no GPU learner can run in this process (no usable CUDA device, with
/// the runtime's words), or nothing if one can. Cheap; starts the CUDA runtime.
std::optional<std::string> gpu_unavailable();

/// A learner on `transport` that trains the 784-256-256-10 MLP on the GPU
/// (`gpu_mlp`: the CPU `mlp`'s layout and initial parameters for `seed`) with
/// `diloco::cuda::adamw` on the model's stream. Throws `diloco::cuda::error`
/// (a `std::runtime_error`) if the device's resources cannot be had.
/// Defined for `diloco::inproc::endpoint`, `diloco::sim::endpoint` and
/// `diloco::sharded<diloco::zeromq::failover_client>` (a learner process's connections).
template <class Transport>
std::unique_ptr<learner_unit<Transport>> make_gpu_learner(Transport& transport, const diloco::learner_options& options,
                                                          const diloco::inner::adamw_options& adamw,
                                                          std::uint64_t seed);

/// The GPU model for `seed`, its parameters then set to `params` (host
/// memory, the layout's size), and one `compute_gradients` on `b`; every
/// result copied back to the host. For tests against the CPU `mlp`.
gpu_probe probe_gpu_mlp(std::uint64_t seed, std::span<const float> params, const batch& b);

#else

inline std::optional<std::string> gpu_unavailable() {
  return "this fashion_mnist was built without CUDA (configure with -DDILOCO_ENABLE_CUDA=ON where nvcc is installed)";
}

template <class Transport>
std::unique_ptr<learner_unit<Transport>> make_gpu_learner(Transport&, const diloco::learner_options&,
                                                          const diloco::inner::adamw_options&, std::uint64_t) {
  throw std::invalid_argument(*gpu_unavailable());
}

#endif

#ifdef FASHION_MNIST_MPI

/// Why no GPU learner unit can run in this process, or nothing if one can:
/// `gpu_unavailable`, or a build without `diloco::nccl`.
inline std::optional<std::string> gpu_units_unavailable() {
  if (auto why = gpu_unavailable()) return why;
#ifndef FASHION_MNIST_NCCL
  return "this fashion_mnist was built without diloco::nccl (configure with -DDILOCO_WITH_NCCL=ON where the CUDA "
         "toolkit has NCCL)";
#else
  return std::nullopt;
#endif
}

#if defined(FASHION_MNIST_CUDA) && defined(FASHION_MNIST_NCCL)

/// Rank `ranks.rank()` of a GPU learner unit (collective: every rank of the
/// unit calls it): the GPU model for `seed` on this rank's GPU — its rank
/// among the unit's ranks on this machine, modulo the GPUs it sees — with
/// `diloco::cuda::adamw`; the gradients averaged and the fragments taken in
/// broadcast on the GPUs over NCCL (a communicator whose identifier rank 0
/// hands round over `ranks`), the unit's votes over `ranks`. Throws
/// `std::runtime_error` if the rank sees no GPU, or if CUDA or NCCL fail
/// (NCCL refuses two ranks on one GPU).
std::unique_ptr<unit_member> make_gpu_unit_member(diloco::mpi::communicator& ranks,
                                                  diloco::sharded<diloco::zeromq::failover_client>& transport,
                                                  const diloco::learner_options& options,
                                                  const diloco::inner::adamw_options& adamw, std::uint64_t seed);

#else

inline std::unique_ptr<unit_member> make_gpu_unit_member(diloco::mpi::communicator&,
                                                         diloco::sharded<diloco::zeromq::failover_client>&,
                                                         const diloco::learner_options&,
                                                         const diloco::inner::adamw_options&, std::uint64_t) {
  throw std::invalid_argument(*gpu_units_unavailable());
}

#endif
#endif

}  // namespace fashion
