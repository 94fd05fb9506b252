// The device mixing against mixing_element on the CPU (the learner's
// formula). Tolerance: nvcc contracts `α·θ + (1−α)·Θ` into one FMA, which
// skips one rounding of α·θ: at most u·|α·θ| apart, plus the final rounding
// (u the unit roundoff: 2⁻²⁴ for float, 2⁻⁵³ for double).
#include <cmath>
#include <limits>
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
  constexpr double eps = std::numeric_limits<T>::epsilon() / 2;  // the unit roundoff
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
    for (std::size_t i = 0; i < n; ++i) {
      const double tolerance = eps * std::fabs(double(alpha) * double(theta[i])) + eps * std::fabs(double(expected[i]));
      wrong += !(std::fabs(double(got[i]) - double(expected[i])) <= tolerance);
    }
    CUDA_TEST_CHECK(wrong == 0, std::string(sizeof(T) == 8 ? "double" : "float") + " α=" + std::to_string(alpha) +
                                    ": " + std::to_string(wrong) + " values differ");
    if (alpha == T(0)) CUDA_TEST_CHECK(got == global, "α = 0 must overwrite θ with Θ exactly");
  }
}

DILOCO_CUDA_TEST(mixing, matches_mixing_element) {
  check_mixing<float>();
  check_mixing<double>();
}

}  // namespace
