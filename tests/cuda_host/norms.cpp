// diloco/cuda/norms.cuh on Thrust's CPP device system, compiled by the host
// compiler: the squared norms of thrust::device_vectors (host memory here)
// against a plain loop in double, on the `thrust::device` policy (CPP) and on
// `thrust::host`. The CPP system adds left to right, as the loop does, but the
// check allows any order: within n·2⁻⁵³ relative (all terms are positive).
#define BOOST_TEST_MODULE diloco_cuda_host
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/host_vector.h>

#include "diloco/cuda/norms.cuh"

namespace {

double loop_squared_norm(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  double s = 0.0;
  for (std::size_t i = begin; i < end; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

void check_close(double got, double expected, std::size_t n) {
  BOOST_TEST(std::fabs(got - expected) <= double(n) * 0x1p-53 * expected, got << " vs " << expected);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_host_norms)

BOOST_AUTO_TEST_CASE(squared_norm_of_a_device_vector) {
  for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(100003)}) {
    const auto x = values(n, 1);
    const thrust::device_vector<float> d(x.begin(), x.end());
    const double got = diloco::cuda::squared_norm(thrust::device, thrust::raw_pointer_cast(d.data()), n);
    check_close(got, loop_squared_norm(x, 0, n), n);
    const double on_host = diloco::cuda::squared_norm(thrust::host, x.data(), n);
    check_close(on_host, loop_squared_norm(x, 0, n), n);
  }
  BOOST_TEST(diloco::cuda::squared_norm(thrust::host, static_cast<const float*>(nullptr), 0) == 0.0);
}

BOOST_AUTO_TEST_CASE(squared_norms_of_packed_slices) {
  // Slices of one value, of many, adjacent ones: a fragment's tensors, packed.
  const std::vector<std::size_t> offsets{0, 1, 2, 1000, 1001, 70000, 250007};
  const std::size_t n = offsets.back(), segments = offsets.size() - 1;
  const auto x = values(n, 2);
  const thrust::device_vector<float> d(x.begin(), x.end());
  const thrust::device_vector<std::size_t> d_offsets(offsets.begin(), offsets.end());
  thrust::device_vector<double> out(segments, -1.0);
  diloco::cuda::squared_norms(thrust::device, thrust::raw_pointer_cast(d.data()),
                              thrust::raw_pointer_cast(d_offsets.data()), segments, n,
                              thrust::raw_pointer_cast(out.data()));
  const thrust::host_vector<double> got = out;
  for (std::size_t k = 0; k < segments; ++k)
    check_close(got[k], loop_squared_norm(x, offsets[k], offsets[k + 1]), offsets[k + 1] - offsets[k]);
}

BOOST_AUTO_TEST_CASE(squared_norms_in_double_keep_what_float_would_lose) {
  // 2^24 + 1 ones: a float accumulator stops at 2^24, a double one does not.
  const std::size_t n = (std::size_t(1) << 24) + 1;
  const thrust::device_vector<float> ones(n, 1.0f);
  BOOST_TEST(diloco::cuda::squared_norm(thrust::device, thrust::raw_pointer_cast(ones.data()), n) == double(n));
}

BOOST_AUTO_TEST_SUITE_END()
