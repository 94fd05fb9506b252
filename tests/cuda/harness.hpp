// A small test harness for the CUDA tests (nvcc compiles them; Boost.Test's
// headers are kept out of its front end). Each test file registers cases
// under its suite name; `diloco_cuda_tests SUITE` runs one suite (skipped
// or failed without a GPU as tests/support/gpu.hpp says).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "diloco/cuda/memory.cuh"

namespace diloco::test::cuda {

struct test_case {
  const char* suite;
  const char* name;
  void (*run)();
};

inline std::vector<test_case>& registry() {
  static std::vector<test_case> cases;
  return cases;
}

inline int& failures() {
  static int count = 0;
  return count;
}

struct registrar {
  registrar(const char* suite, const char* name, void (*run)()) { registry().push_back({suite, name, run}); }
};

/// Reports a failed check (the first few of a case in full, then a count).
inline void fail(const char* file, int line, const std::string& what) {
  ++failures();
  if (failures() <= 20) std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what.c_str());
}

/// A cudaError_t that must be cudaSuccess; returns whether it is.
inline bool succeeded(cudaError_t e, const char* expression, const char* file, int line) {
  if (e == cudaSuccess) return true;
  fail(file, line, std::string(expression) + " returned " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  return false;
}

/// A device copy of `x` (a failed copy is reported as a failed check).
template <class T>
diloco::cuda::device_buffer<T> upload(const std::vector<T>& x) {
  diloco::cuda::device_buffer<T> d(x.size());
  if (!x.empty())
    succeeded(cudaMemcpy(d.data(), x.data(), d.bytes(), cudaMemcpyHostToDevice), "upload", __FILE__, __LINE__);
  return d;
}

/// A host copy of `d`, once the device is idle.
template <class T>
std::vector<T> download(const diloco::cuda::device_buffer<T>& d) {
  std::vector<T> x(d.size());
  succeeded(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
  if (!x.empty())
    succeeded(cudaMemcpy(x.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost), "download", __FILE__, __LINE__);
  return x;
}

/// Whether two floats are the same bits (NaN payloads and signed zeros included).
template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace diloco::test::cuda

#define DILOCO_CUDA_TEST(suite, name)                                                                      \
  static void suite##_##name();                                                                            \
  static const ::diloco::test::cuda::registrar suite##_##name##_registrar(#suite, #name, &suite##_##name); \
  static void suite##_##name()

/// Checks `condition`; `message` (streamed into a std::string with +) says what failed.
#define CUDA_TEST_CHECK(condition, message)                                                                       \
  do {                                                                                                            \
    if (!(condition)) ::diloco::test::cuda::fail(__FILE__, __LINE__, std::string(#condition) + ": " + (message)); \
  } while (0)

/// Stops the case (returns) unless `expression` gives cudaSuccess.
#define CUDA_TEST_REQUIRE_SUCCESS(expression)                                                    \
  do {                                                                                           \
    if (!::diloco::test::cuda::succeeded((expression), #expression, __FILE__, __LINE__)) return; \
  } while (0)
