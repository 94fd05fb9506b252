// A unit of one GPU per MPI process (docs/units.md): the processes of one
// `mpirun` step find each other over MPI, then all-reduce on their GPUs with
// NCCL. Each rank holds the gradient rank + 1 in every element; the mean over
// R ranks is (R + 1) / 2, checked on every rank. Run it as
//
//   mpirun -np 2 ./nccl_unit
//
// with one GPU per rank (NCCL refuses two ranks on one GPU). Exit status 0
// if the mean came back, 77 where there are too few GPUs (none: no driver,
// or no device), 1 otherwise.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include <diloco/collective/mpi.hpp>
#include <diloco/collective/nccl.hpp>

int main(int argc, char** argv) {
  diloco::mpi::environment mpi(argc, argv);
  diloco::mpi::communicator host;  // the processes of this mpirun step
  int driver = 0, devices = 0;
  const bool no_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
  const cudaError_t counted = no_driver ? cudaErrorNoDevice : cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess && counted != cudaErrorNoDevice) {
    std::printf("rank %zu: the CUDA runtime cannot use this machine's GPUs: %s\n", host.rank(),
                cudaGetErrorString(counted));
    return 1;
  }
  if (static_cast<std::size_t>(devices) < host.size()) {
    std::printf("rank %zu: %d GPUs here, one per rank needed\n", host.rank(), devices);
    return 77;
  }
  const auto deadline = diloco::clock::now() + std::chrono::seconds(60);
  diloco::nccl::communicator gpus(diloco::nccl::unique_id(host, deadline), host.rank(), host.size(), deadline,
                                  {.device = static_cast<int>(host.rank())});

  constexpr std::size_t n = 1 << 20;
  std::vector<float> gradient(n, static_cast<float>(host.rank() + 1));
  float* device = nullptr;
  cudaMalloc(&device, n * sizeof(float));
  cudaMemcpy(device, gradient.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  const std::span<float> g(device, n);
  const auto e = gpus.all_reduce(std::span<const float>(g), g, diloco::reduce_op::mean,
                                 diloco::clock::now() + std::chrono::seconds(10));
  cudaMemcpy(gradient.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  const float expected = static_cast<float>(host.size() + 1) / 2;
  const bool ok = !e && gradient.front() == expected && gradient.back() == expected;
  std::printf("rank %zu of %zu: mean %g (expected %g)%s\n", host.rank(), host.size(), double(gradient.front()),
              double(expected), e ? (" " + e.message()).c_str() : "");
  return ok ? 0 : 1;
}
