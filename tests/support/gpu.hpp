// Whether a test that needs a GPU runs, is skipped, or fails before it
// starts: skipped (exit 77, CTest's SKIP_RETURN_CODE) only where there is no
// GPU at all — no driver installed, or a driver that sees no device. A driver
// that is there but does not work with this CUDA runtime (too old, say) is a
// failure, not a skip. With DILOCO_REQUIRE_GPU=1 in the environment every
// skip is a failure too, so that a machine meant to have a GPU cannot pass
// by skipping.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace diloco::test {

inline constexpr int skip_status = 77;

/// What the CUDA runtime says about the GPUs here.
struct gpu_census {
  int devices = 0;
  bool absent = false;  ///< no driver, or no device: nothing to run on
  std::string why;      ///< the runtime's error, if any
};

inline gpu_census count_gpus() {
  gpu_census c;
  int driver = 0;
  // "If no driver is installed, then 0 is returned as the driver version"
  // (CUDA Runtime API, cudaDriverGetVersion).
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) {
    c.absent = true;
    c.why = "no CUDA driver installed";
    return c;
  }
  const cudaError_t e = cudaGetDeviceCount(&c.devices);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && c.devices == 0)) {
    c.absent = true;
    c.devices = 0;
    c.why = "the CUDA driver sees no device";
  } else if (e != cudaSuccess) {
    c.devices = 0;
    c.why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  }
  return c;
}

/// The exit status of a test program that cannot run on `c` (no devices):
/// 77 if the GPU is absent and not required, 1 otherwise; says why on stdout.
inline int no_gpu_status(const gpu_census& c) {
  const char* required = std::getenv("DILOCO_REQUIRE_GPU");
  const bool must = required && std::strcmp(required, "1") == 0;
  if (c.absent && !must) {
    std::printf("skipped: %s\n", c.why.c_str());
    return skip_status;
  }
  std::printf("FAILED: no usable GPU: %s%s\n", c.why.c_str(), must ? " (DILOCO_REQUIRE_GPU=1)" : "");
  return 1;
}

}  // namespace diloco::test
