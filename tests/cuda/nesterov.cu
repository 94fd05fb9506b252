// The device Nesterov step against outer::nesterov on the same inputs, over
// several steps. Tolerance: both apply outer::nesterov_element, but nvcc
// contracts `μ·m + Δ` and `Θ − η·(…)` into FMAs where the CPU rounds the
// product first; each contraction moves a result by at most one rounding of
// the product (≤ u·|product|, u the unit roundoff: 2⁻²⁴ float, 2⁻⁵³ double), so after s steps an element is
// within s·4u·(|Θ| + η(|Δ| + μ|m|) + |m|) of the CPU's, |Δ| the largest of
// the element's steps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "diloco/cuda/nesterov.cuh"
#include "diloco/outer/nesterov.hpp"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

template <class T>
void check_nesterov() {
  constexpr double eps = std::numeric_limits<T>::epsilon() / 2;  // the unit roundoff
  constexpr std::size_t n = 100003;
  constexpr int steps = 4;
  const diloco::outer::nesterov_options options{.learning_rate = 0.7, .momentum = 0.9};
  std::mt19937 rng(3);
  std::normal_distribution<T> normal(T(0), T(1));
  std::vector<T> global(n);
  for (auto& x : global) x = normal(rng);
  std::vector<std::vector<T>> deltas(steps, std::vector<T>(n));
  std::vector<double> largest_delta(n, 0.0);
  for (auto& d : deltas)
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = T(0.01) * normal(rng);
      largest_delta[i] = std::max(largest_delta[i], double(std::fabs(d[i])));
    }

  diloco::outer::nesterov<T> cpu(options);
  std::vector<T> cpu_global = global;
  auto device_global = t::upload(global);
  auto momentum = t::upload(std::vector<T>(n, T(0)));
  const diloco::outer::nesterov_element<T> f{T(options.learning_rate), T(options.momentum)};
  for (int s = 0; s < steps; ++s) {
    cpu.step(0, std::span<T>(cpu_global), std::span<const T>(deltas[s]));
    auto d = t::upload(deltas[s]);
    CUDA_TEST_REQUIRE_SUCCESS(
        dc::nesterov_step(f, device_global.span(), momentum.span(), std::span<const T>(d.span()), nullptr));
    t::download(d);  // the step has finished before d is freed
  }
  const auto got_global = t::download(device_global);
  const auto got_momentum = t::download(momentum);
  const auto cpu_momentum = cpu.momentum(0);
  std::size_t wrong = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double m = std::fabs(cpu_momentum[i]);
    const double scale = std::fabs(cpu_global[i]) + 0.7 * (largest_delta[i] + 0.9 * m) + m;
    const double tolerance = steps * 4 * eps * scale;
    const double error = std::max(std::fabs(double(got_global[i]) - cpu_global[i]),
                                  std::fabs(double(got_momentum[i]) - cpu_momentum[i]));
    worst = std::max(worst, error / scale);
    wrong += !(error <= tolerance);
  }
  CUDA_TEST_CHECK(wrong == 0, std::string(sizeof(T) == 8 ? "double: " : "float: ") + std::to_string(wrong) +
                                  " elements beyond the tolerance; worst relative error " + std::to_string(worst));
  CUDA_TEST_CHECK(dc::nesterov_step(f, device_global.span(), momentum.span().first(n - 1),
                                    std::span<const T>(momentum.span()), nullptr) == cudaErrorInvalidValue,
                  "sizes that differ");
}

DILOCO_CUDA_TEST(nesterov, matches_outer_nesterov) {
  check_nesterov<float>();
  check_nesterov<double>();
}

}  // namespace
