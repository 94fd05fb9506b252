// The runner of the CUDA tests: `diloco_cuda_tests SUITE` runs the cases of
// one suite (all without an argument). Exit status 0 if all passed, 1 if a
// check failed, 77 (skipped) if there is no usable CUDA device.
#include <cstdio>
#include <cstring>

#include <cuda_runtime_api.h>

#include "harness.hpp"

int main(int argc, char** argv) {
  namespace t = diloco::test::cuda;
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("skipped: no usable CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
                e == cudaSuccess ? "no error" : cudaGetErrorString(e), devices);
    return t::skip_code;
  }
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
