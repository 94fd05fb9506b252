// Helpers for numeric unit tests: the scalar types every template test runs
// for, their tolerances, and element-wise comparison against a reference
// computed in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace diloco::test {

/// The scalar types of `BOOST_AUTO_TEST_CASE_TEMPLATE` tests.
using scalar_types = std::tuple<float, double>;

/// Relative tolerance for the result of a few dozen arithmetic steps in `T`
/// against a double-precision reference: about 250 ulps of float, 4500 of double.
template <class T>
inline constexpr double tolerance = std::is_same_v<T, float> ? 3e-5 : 1e-12;

/// Whether `actual` lies within `tol · max(1, |expected|)` of `expected`.
inline bool close(double actual, double expected, double tol) {
  return std::abs(actual - expected) <= tol * std::max(1.0, std::abs(expected));
}

/// Checks element by element that `actual` matches `expected`, reporting the
/// first few mismatches with their index.
template <class Range>
void check_close(const Range& actual, const std::vector<double>& expected, double tol) {
  BOOST_TEST_REQUIRE(actual.size() == expected.size());
  int reported = 0;
  for (std::size_t i = 0; i < actual.size() && reported < 5; ++i) {
    const bool ok = close(static_cast<double>(actual[i]), expected[i], tol);
    BOOST_TEST(ok, "element " << i << ": got " << actual[i] << ", expected " << expected[i]);
    if (!ok) ++reported;
  }
}

}  // namespace diloco::test
