// The GPU side of the trainer (gpu.hpp): the only translation unit of
// fashion_mnist that nvcc compiles. A GPU learner is a `diloco::learner` of
// `gpu_mlp` with `diloco::cuda::adamw` on the model's stream, behind the
// trainer's `learner_unit`.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <diloco/cuda/adamw.cuh>
#include <diloco/sim/network.hpp>
#include <diloco/transport/inproc.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco/transport/zeromq/failover.hpp>

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
