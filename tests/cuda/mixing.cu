// The device mixing against mixing_element on the CPU (the learner's
// formula). Tolerance: nvcc contracts `α·θ + (1−α)·Θ` into one FMA, which
// skips one rounding of α·θ: at most ε·|α·θ| (ε = 2⁻²⁴) apart.
#include <cmath>
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

DILOCO_CUDA_TEST(mixing, matches_mixing_element) {
  constexpr std::size_t n = 70001;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> theta(n), global(n);
  for (std::size_t i = 0; i < n; ++i) theta[i] = normal(rng), global[i] = theta[i] + 0.1f * normal(rng);
  for (const float alpha : {0.0f, 0.5f, 0.9f}) {
    const diloco::mixing_element<float> f{alpha};
    std::vector<float> expected = theta;
    for (std::size_t i = 0; i < n; ++i) f(expected[i], global[i]);
    auto d_theta = t::upload(theta), d_global = t::upload(global);
    CUDA_TEST_REQUIRE_SUCCESS(dc::mix(f, d_theta.span(), std::span<const float>(d_global.span()), nullptr));
    const auto got = t::download(d_theta);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double tolerance = 0x1p-24 * std::fabs(double(alpha) * theta[i]) + 0x1p-24 * std::fabs(expected[i]);
      wrong += !(std::fabs(double(got[i]) - expected[i]) <= tolerance);
    }
    CUDA_TEST_CHECK(wrong == 0, "α=" + std::to_string(alpha) + ": " + std::to_string(wrong) + " values differ");
    if (alpha == 0.0f) CUDA_TEST_CHECK(got == global, "α = 0 must overwrite θ with Θ exactly");
  }
}

}  // namespace
