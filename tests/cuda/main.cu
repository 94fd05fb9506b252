// The runner of the CUDA tests: `diloco_cuda_tests SUITE` runs the cases of
// one suite (all without an argument). Exit status 0 if all passed, 1 if a
// check failed or the GPU is there but unusable (a driver too old for this
// runtime, say), 77 (skipped) if there is no GPU at all and
// DILOCO_REQUIRE_GPU=1 is not set (tests/support/gpu.hpp).
#include <cstdio>
#include <cstring>

#include <cuda_runtime_api.h>

#include "../support/gpu.hpp"
#include "harness.hpp"

int main(int argc, char** argv) {
  namespace t = diloco::test::cuda;
  if (const auto gpus = diloco::test::count_gpus(); gpus.devices == 0) return diloco::test::no_gpu_status(gpus);
  const char* suite = argc > 1 ? argv[1] : nullptr;
  int run = 0;
  for (const auto& c : t::registry()) {
    if (suite && std::strcmp(suite, c.suite) != 0) continue;
    const int before = t::failures();
    c.run();
    const cudaError_t pending = cudaDeviceSynchronize();
    if (pending != cudaSuccess)
      t::fail(__FILE__, __LINE__, std::string("after the case: ") + cudaGetErrorString(pending));
    std::printf("%s %s/%s\n", t::failures() == before ? "passed" : "FAILED", c.suite, c.name);
    ++run;
  }
  if (run == 0) {
    std::printf("no test case in suite %s\n", suite ? suite : "(all)");
    return 1;
  }
  std::printf("%d cases, %d failed checks\n", run, t::failures());
  return t::failures() == 0 ? 0 : 1;
}
