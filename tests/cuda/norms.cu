// The Thrust norms on the device (CUDA system) against the CPU's loop
// (merge::detail::squared_norm). Tolerance: all terms are positive, so any
// order of the n additions in double is within n·2⁻⁵³ relative of the loop.
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <thrust/execution_policy.h>

#include "diloco/cuda/memory.cuh"
#include "diloco/cuda/norms.cuh"
#include "diloco/merge/detail/linear.hpp"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

DILOCO_CUDA_TEST(norms, match_the_cpu_loop) {
  const std::vector<std::size_t> offsets{0, 1, 1000, 1001, 70000, 250007};
  const std::size_t n = offsets.back(), segments = offsets.size() - 1;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  auto d_x = t::upload(x);
  auto d_offsets = t::upload(offsets);
  dc::device_buffer<double> d_out(segments);
  dc::stream s;
  const auto policy = thrust::cuda::par_nosync.on(s.get());
  const double whole = dc::squared_norm(policy, d_x.data(), n);
  const double expected = diloco::merge::detail::squared_norm(std::span<const float>(x), 0, n);
  CUDA_TEST_CHECK(std::fabs(whole - expected) <= double(n) * 0x1p-53 * expected,
                  "whole: " + std::to_string(whole) + " vs " + std::to_string(expected));
  dc::squared_norms(policy, d_x.data(), d_offsets.data(), segments, n, d_out.data());
  const auto got = t::download(d_out);
  for (std::size_t k = 0; k < segments; ++k) {
    const std::size_t size = offsets[k + 1] - offsets[k];
    const double e = diloco::merge::detail::squared_norm(std::span<const float>(x), offsets[k], size);
    CUDA_TEST_CHECK(std::fabs(got[k] - e) <= double(size) * 0x1p-53 * e,
                    "segment " + std::to_string(k) + ": " + std::to_string(got[k]) + " vs " + std::to_string(e));
  }
}

}  // namespace
