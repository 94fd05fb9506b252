// The GPU side of the trainer (gpu.hpp): the only translation unit of
// fashion_mnist that nvcc compiles. A GPU learner is a `diloco::learner` of
// `gpu_mlp` with `diloco::cuda::adamw` on the model's stream, behind the
// trainer's `learner_unit`; a rank of a GPU learner unit is a
// `diloco::unit_learner` of the same, on NCCL and MPI, behind `unit_member`.
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include <diloco/cuda/adamw.cuh>
#include <diloco/sim/network.hpp>
#include <diloco/transport/inproc.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco/transport/zeromq/failover.hpp>

#if defined(FASHION_MNIST_MPI) && defined(FASHION_MNIST_NCCL)
#include <mpi.h>

#include <diloco/collective/nccl.hpp>
#include <diloco/runtime/unit.hpp>
#endif

#include "gpu.hpp"
#include "gpu_mlp.cuh"

namespace fashion {

namespace {

const std::vector<int> widths{784, 256, 256, 10};

}  // namespace

std::optional<std::string> gpu_unavailable() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess)
    return std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (devices == 0) return std::string("no CUDA device");
  if (const auto& blas = gpu_detail::cublas_functions::get(); !blas.error.empty()) return blas.error;
  return std::nullopt;
}

template <class Transport>
std::unique_ptr<learner_unit<Transport>> make_gpu_learner(Transport& transport, const diloco::learner_options& options,
                                                          const diloco::inner::adamw_options& adamw,
                                                          std::uint64_t seed) {
  auto model = std::make_unique<gpu_mlp>(widths, seed);
  diloco::cuda::adamw<float> inner(adamw, model->stream());
  return std::make_unique<learner_unit_of<gpu_mlp, diloco::cuda::adamw<float>, Transport>>(
      std::move(model), transport, options, std::move(inner), "gpu");
}

template std::unique_ptr<learner_unit<diloco::inproc::endpoint>> make_gpu_learner(diloco::inproc::endpoint&,
                                                                                  const diloco::learner_options&,
                                                                                  const diloco::inner::adamw_options&,
                                                                                  std::uint64_t);
template std::unique_ptr<learner_unit<diloco::sim::endpoint>> make_gpu_learner(diloco::sim::endpoint&,
                                                                               const diloco::learner_options&,
                                                                               const diloco::inner::adamw_options&,
                                                                               std::uint64_t);
template std::unique_ptr<learner_unit<diloco::sharded<diloco::zeromq::failover_client>>> make_gpu_learner(
    diloco::sharded<diloco::zeromq::failover_client>&, const diloco::learner_options&,
    const diloco::inner::adamw_options&, std::uint64_t);

#if defined(FASHION_MNIST_MPI) && defined(FASHION_MNIST_NCCL)

namespace {

/// This rank's rank among its unit's ranks on this machine.
int rank_on_this_machine(diloco::mpi::communicator& ranks) {
  MPI_Comm here = MPI_COMM_NULL;
  if (MPI_Comm_split_type(ranks.native(), MPI_COMM_TYPE_SHARED, static_cast<int>(ranks.rank()), MPI_INFO_NULL, &here) !=
      MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_split_type failed: cannot tell the unit's ranks on this machine");
  int local = 0;
  MPI_Comm_rank(here, &local);
  MPI_Comm_free(&here);
  return local;
}

}  // namespace

std::unique_ptr<unit_member> make_gpu_unit_member(diloco::mpi::communicator& ranks,
                                                  diloco::sharded<diloco::zeromq::failover_client>& transport,
                                                  const diloco::learner_options& options,
                                                  const diloco::inner::adamw_options& adamw, std::uint64_t seed) {
  using transport_type = diloco::sharded<diloco::zeromq::failover_client>;
  using unit = diloco::unit_learner<gpu_mlp, diloco::cuda::adamw<float>, transport_type, diloco::mpi::communicator,
                                    diloco::nccl::communicator>;
  // Its rank among the unit's ranks on this machine, modulo the GPUs it
  // sees: a GPU each where every rank sees the machine's GPUs, its own where
  // each sees one (Slurm's --gpus-per-task=1). NCCL refuses two ranks on one.
  // The split is collective: every rank makes it before any may throw.
  const int here = rank_on_this_machine(ranks);
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0)
    throw std::runtime_error(std::string("this rank sees no usable GPU: ") + cudaGetErrorString(e));
  const int device = here % devices;
  gpu_detail::check(cudaSetDevice(device), "cudaSetDevice");
  auto model = std::make_unique<gpu_mlp>(widths, seed);
  const auto deadline = diloco::clock::now() + std::chrono::seconds(60);
  // NCCL's collectives queued on the model's stream, after its gradients.
  auto gpus =
      std::make_unique<diloco::nccl::communicator>(diloco::nccl::unique_id(ranks, deadline), ranks.rank(), ranks.size(),
                                                   deadline, diloco::nccl::options{device, model->stream()});
  return std::make_unique<unit_member_of<unit, gpu_mlp, diloco::nccl::communicator>>(
      std::move(model), std::make_tuple(std::move(gpus)),
      [&](gpu_mlp& m, diloco::nccl::communicator& on_gpus) {
        return std::make_unique<unit>(m, ranks, on_gpus, transport, options,
                                      diloco::cuda::adamw<float>(adamw, m.stream()));
      },
      "gpu");
}

#endif

gpu_probe probe_gpu_mlp(std::uint64_t seed, std::span<const float> params, const batch& b) {
  gpu_mlp model(widths, seed);
  gpu_probe out;
  out.layout = model.layout();
  out.initial.resize(model.parameters().size());
  out.gradients.resize(model.parameters().size());
  if (params.size() != out.initial.size())
    throw std::invalid_argument("fashion::probe_gpu_mlp: " + std::to_string(params.size()) +
                                " parameters for a model of " + std::to_string(out.initial.size()));
  diloco::cuda::device_memory& space = model.memory();
  space.read(std::span<const float>(model.parameters()), std::span<float>(out.initial));
  space.write(params, model.parameters());
  out.stats = model.compute_gradients(b);
  space.read(model.gradients(), std::span<float>(out.gradients));
  return out;
}

}  // namespace fashion
