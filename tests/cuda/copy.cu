// Device and pinned buffers, streams and events, and copy_stream: a copy
// started after a kernel on another stream sees the kernel's result, runs
// while the producer's thread goes on, and reports its completion by event;
// errors as values, and as diloco::cuda::error only from constructors.
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "diloco/cuda/copy.cuh"
#include "diloco/cuda/error.cuh"
#include "diloco/cuda/memory.cuh"
#include "diloco/cuda/mixing.cuh"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

DILOCO_CUDA_TEST(copy, round_trip_through_pinned_memory_after_a_kernel) {
  constexpr std::size_t n = 1 << 20;
  dc::stream compute;
  dc::copy_stream copies;
  dc::pinned_buffer<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = float(i % 1000);
  dc::device_buffer<float> theta(n), global(n);
  CUDA_TEST_REQUIRE_SUCCESS(copies.to_device(theta.span(), host, compute.get()));
  CUDA_TEST_REQUIRE_SUCCESS(copies.order_before(compute.get()));
  CUDA_TEST_REQUIRE_SUCCESS(cudaMemsetAsync(global.data(), 0, global.bytes(), compute.get()));
  // θ ← 0.5·θ + 0.5·0 on the compute stream, then copied out behind it.
  CUDA_TEST_REQUIRE_SUCCESS(
      dc::mix(diloco::mixing_element<float>{0.5f}, theta.span(), std::span<const float>(global.span()), compute.get()));
  dc::pinned_buffer<float> back(n);
  CUDA_TEST_REQUIRE_SUCCESS(copies.to_host(back, std::span<const float>(theta.span()), compute.get()));
  const cudaError_t polled = copies.query();
  CUDA_TEST_CHECK(polled == cudaSuccess || polled == cudaErrorNotReady,
                  std::string("query: ") + cudaGetErrorName(polled));
  CUDA_TEST_REQUIRE_SUCCESS(copies.wait());
  CUDA_TEST_CHECK(copies.query() == cudaSuccess, "finished after wait");
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += back[i] != 0.5f * float(i % 1000);
  CUDA_TEST_CHECK(wrong == 0, std::to_string(wrong) + " values differ after the round trip");
  CUDA_TEST_CHECK(
      copies.to_host(back, std::span<const float>(theta.span()).first(n - 1), compute.get()) == cudaErrorInvalidValue,
      "sizes that differ");
}

DILOCO_CUDA_TEST(copy, buffers_move_and_errors_carry_their_text) {
  dc::device_buffer<double> a(100);
  double* p = a.data();
  dc::device_buffer<double> b(std::move(a));
  CUDA_TEST_CHECK(b.data() == p && b.size() == 100 && a.data() == nullptr && a.size() == 0, "a moved buffer");
  dc::device_buffer<double> empty;
  CUDA_TEST_CHECK(empty.data() == nullptr && empty.bytes() == 0, "an empty buffer");
  const dc::error e(cudaErrorInvalidValue, "cudaMalloc");
  CUDA_TEST_CHECK(e.code() == cudaErrorInvalidValue, "the code");
  CUDA_TEST_CHECK(
      std::strstr(e.what(), "cudaMalloc") && std::strstr(e.what(), cudaGetErrorString(cudaErrorInvalidValue)),
      std::string("what(): ") + e.what());
  bool thrown = false;
  try {
    dc::device_buffer<char> huge(std::size_t(1) << 62);  // 4 EiB: no device has it
  } catch (const dc::error& caught) {
    thrown = caught.code() != cudaSuccess;
  }
  CUDA_TEST_CHECK(thrown, "an allocation that cannot succeed throws diloco::cuda::error");
  (void)cudaGetLastError();  // the failed allocation's error is not sticky; clear it for the next case
}

}  // namespace
