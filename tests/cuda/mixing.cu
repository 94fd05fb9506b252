// The device mixing and rebasing against mixing_element, local_work_element
// and add_global_element on the CPU (the learner's formulas), bit for bit:
// the functors round each product and sum on their own (detail::mul_rn), so
// nvcc has no `α·θ + (1−α)·Θ` to contract into an FMA. (With the plain
// operators it did, and about 300 of these 70,001 floats at α = 0.9 came out
// an ulp apart.)
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "diloco/cuda/mixing.cuh"
#include "diloco/params/mixing.hpp"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

template <class T>
void check_mixing() {
  constexpr std::size_t n = 70001;
  std::mt19937 rng(5);
  std::normal_distribution<T> normal(T(0), T(1));
  std::vector<T> theta(n), global(n);
  for (std::size_t i = 0; i < n; ++i) theta[i] = normal(rng), global[i] = theta[i] + T(0.1) * normal(rng);
  for (const T alpha : {T(0), T(0.5), T(0.9)}) {
    const diloco::mixing_element<T> f{alpha};
    std::vector<T> expected = theta;
    for (std::size_t i = 0; i < n; ++i) f(expected[i], global[i]);
    auto d_theta = t::upload(theta), d_global = t::upload(global);
    CUDA_TEST_REQUIRE_SUCCESS(dc::mix(f, d_theta.span(), std::span<const T>(d_global.span()), nullptr));
    const auto got = t::download(d_theta);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += std::memcmp(&got[i], &expected[i], sizeof(T)) != 0;
    const std::string what = std::string(sizeof(T) == 8 ? "double" : "float") + " α=" + std::to_string(alpha);
    CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " values differ from the CPU's bits");
    if (alpha == T(0)) CUDA_TEST_CHECK(got == global, "α = 0 must overwrite θ with Θ exactly");

    // Rebasing onto Θ from the base θ − 0.01: both steps, as the learner runs them.
    std::vector<T> base(n), rebased = theta;
    for (std::size_t i = 0; i < n; ++i) base[i] = theta[i] - T(0.01);
    const T follow = T(1) - alpha;
    for (std::size_t i = 0; i < n; ++i) {
      diloco::local_work_element<T>{follow}(rebased[i], base[i]);
      diloco::add_global_element<T>{follow}(rebased[i], global[i]);
    }
    auto d_rebased = t::upload(theta), d_base = t::upload(base);
    CUDA_TEST_REQUIRE_SUCCESS(dc::subtract_base(d_rebased.span(), std::span<const T>(d_base.span()), alpha, nullptr));
    CUDA_TEST_REQUIRE_SUCCESS(dc::add_global(d_rebased.span(), std::span<const T>(d_global.span()), alpha, nullptr));
    const auto got_rebased = t::download(d_rebased);
    wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += std::memcmp(&got_rebased[i], &rebased[i], sizeof(T)) != 0;
    CUDA_TEST_CHECK(wrong == 0, what + " rebase: " + std::to_string(wrong) + " values differ from the CPU's bits");
  }
}

DILOCO_CUDA_TEST(mixing, matches_mixing_element) {
  check_mixing<float>();
  check_mixing<double>();
}

// A failed call leaves its (non-sticky) error pending: the next launch must
// not report it as its own, since its kernel ran.
DILOCO_CUDA_TEST(mixing, a_stale_error_is_not_the_next_launchs) {
  void* huge = nullptr;
  CUDA_TEST_CHECK(cudaMalloc(&huge, std::size_t{1} << 62) == cudaErrorMemoryAllocation, "a 4 EiB cudaMalloc fails");
  CUDA_TEST_CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation, "its error is pending");
  std::vector<float> theta(1000, 1.0f), global(1000, 3.0f);
  auto d_theta = t::upload(theta), d_global = t::upload(global);
  CUDA_TEST_CHECK(dc::mix(diloco::mixing_element<float>{0.5f}, d_theta.span(), std::span<const float>(d_global.span()),
                          nullptr) == cudaSuccess,
                  "the launch reported the earlier cudaMalloc's error");
  CUDA_TEST_CHECK(t::download(d_theta) == std::vector<float>(1000, 2.0f), "the kernel ran");
}

}  // namespace
