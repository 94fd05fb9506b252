// Errors of the CUDA component: values on every operation, an exception
// only where a constructor has nothing to return them in.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace diloco::cuda {

/// Thrown by the constructors of diloco::cuda's owners (device and pinned
/// buffers, streams, events), which is setup: every operation after that —
/// a kernel launch, a copy, a query — returns its `cudaError_t` instead and
/// throws nothing. `what()` holds what failed and `cudaGetErrorString`'s text.
class error : public std::runtime_error {
 public:
  error(cudaError_t code, const std::string& what)
      : std::runtime_error("diloco::cuda: " + what + ": " + cudaGetErrorString(code)), code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {

/// Throws `error` unless `code` is cudaSuccess (setup only).
inline void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess) throw error(code, what);
}

}  // namespace detail

}  // namespace diloco::cuda
