// Squared L2 norms with Thrust, for radial-directional averaging
// (diloco/merge/radial_directional.hpp) on the device. Thrust only: it also
// compiles with a host compiler and THRUST_DEVICE_SYSTEM_CPP (or _OMP), which
// is how CI without a GPU runs it. No header a host-only build reads includes
// this one.
#pragma once

#include <cstddef>

#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/discard_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/reduce.h>
#include <thrust/transform_reduce.h>

#include "diloco/detail/config.hpp"

namespace diloco::cuda {

namespace detail {

/// x² in double, as `merge::detail::squared_norm` accumulates.
template <class T>
struct square_in_double {
  DILOCO_HOST_DEVICE double operator()(T x) const { return double(x) * double(x); }
};

/// The segment holding element i: the k with offsets[k] ≤ i < offsets[k+1]
/// (binary search over the segments + 1 cumulative offsets).
struct segment_of {
  const std::size_t* offsets;
  std::size_t segments;
  DILOCO_HOST_DEVICE std::size_t operator()(std::size_t i) const {
    std::size_t low = 0, high = segments;  // offsets[low] ≤ i < offsets[high]
    while (high - low > 1) {
      const std::size_t mid = low + (high - low) / 2;
      if (offsets[mid] <= i)
        low = mid;
      else
        high = mid;
    }
    return low;
  }
};

}  // namespace detail

/// Σ x² over the `n` values at `x`, accumulated in double, on the Thrust
/// system of `policy`: `thrust::cuda::par_nosync.on(stream)` (or
/// `thrust::cuda::par.on(stream)`) for device memory, `thrust::host` for host
/// memory, `thrust::device` for the configured device system. Blocks the
/// calling thread until the sum is known (it returns it). The order of the
/// additions is the system's (a tree on CUDA, left to right on CPP), so
/// the sum equals the CPU loop's within n·2⁻⁵³ relative; on CPP it is the
/// loop's. Reads each value once.
template <class Policy, class T>
double squared_norm(const Policy& policy, const T* x, std::size_t n) {
  return thrust::transform_reduce(policy, x, x + n, detail::square_in_double<T>{}, 0.0, thrust::plus<double>());
}

/// The squared norms of `segments` consecutive pieces of `x`: piece k is
/// `[offsets[k], offsets[k+1])`, `offsets` holds segments + 1 increasing
/// values from 0, every piece has at least one value (a fragment's tensor
/// slices, packed), and `n` is offsets[segments], the values in all. Writes
/// `out[k]` (segments doubles). `offsets` and `out`
/// are memory of `policy`'s system, like `x`; reads each value once, in one
/// `reduce_by_key` over the whole fragment. Returns when the work is
/// enqueued (on CUDA with `par_nosync`, not necessarily finished).
template <class Policy, class T>
void squared_norms(const Policy& policy, const T* x, const std::size_t* offsets, std::size_t segments, std::size_t n,
                   double* out) {
  if (segments == 0 || n == 0) return;
  const auto keys = thrust::make_transform_iterator(thrust::make_counting_iterator<std::size_t>(0),
                                                    detail::segment_of{offsets, segments});
  const auto squares = thrust::make_transform_iterator(x, detail::square_in_double<T>{});
  thrust::reduce_by_key(policy, keys, keys + static_cast<std::ptrdiff_t>(n), squares, thrust::make_discard_iterator(),
                        out);
}

}  // namespace diloco::cuda
