// ctest-labels: unit
#include "diloco/merge/robust.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/merge/weighted_mean.hpp"
#include "diloco/params/fragments.hpp"
#include "support/numeric.hpp"

namespace merge_robust_test {

using diloco::fragment_plan;
using diloco::fragment_slice;
using diloco::parameter_layout;
using diloco::tensor_role;
using diloco::weighted_delta;
using diloco::merge::average;
using diloco::merge::coordinate_median;
using diloco::merge::token_weights;
using diloco::merge::trimmed_mean;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

static_assert(diloco::merge_policy<trimmed_mean<>, float>);
static_assert(diloco::merge_policy<trimmed_mean<>, double>);
static_assert(diloco::merge_policy<trimmed_mean<average>, float>);
static_assert(diloco::merge_policy<coordinate_median<>, float>);
static_assert(diloco::merge_policy<coordinate_median<>, double>);
static_assert(diloco::merge_policy<coordinate_median<token_weights>, double>);
static_assert(diloco::check_merge_policy<trimmed_mean<>, float>());
static_assert(diloco::check_merge_policy<coordinate_median<>, double>());
// The defaults: token weighting for the trimmed mean, one vote per
// contribution for the median (see robust.hpp).
static_assert(std::is_same_v<trimmed_mean<>, trimmed_mean<diloco::merge::token>>);
static_assert(std::is_same_v<coordinate_median<>, coordinate_median<diloco::merge::uniform>>);

/// Contributions of one fragment: `deltas[m]` with weight `weights[m]`.
template <class T>
struct contributions {
  std::vector<std::vector<T>> deltas;
  std::vector<double> weights;
};

/// Builds contributions from one row of values per coordinate, so hand cases
/// read coordinate by coordinate: `by_coordinate({{a0, b0, c0}, {a1, b1, c1}}, w)`.
template <class T>
contributions<T> by_coordinate(const std::vector<std::vector<double>>& rows, std::vector<double> weights) {
  contributions<T> c;
  c.deltas.assign(weights.size(), std::vector<T>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t m = 0; m < weights.size(); ++m) c.deltas[m][i] = T(rows[i].at(m));
  c.weights = std::move(weights);
  return c;
}

template <class T, class Policy>
std::vector<T> merged(const Policy& policy, const contributions<T>& c, double scale,
                      std::span<const fragment_slice> slices = {}) {
  std::vector<weighted_delta<T>> in;
  for (std::size_t m = 0; m < c.deltas.size(); ++m) in.push_back({c.deltas[m], c.weights[m]});
  std::vector<T> out(c.deltas.at(0).size(), T(7));  // garbage that must be overwritten
  policy.merge(std::span<const weighted_delta<T>>(in), slices, std::span<T>(out), scale);
  return out;
}

/// Coordinate i's (value, weight) pairs of the contributions with weight > 0.
template <class T>
std::vector<std::pair<double, double>> column(const contributions<T>& c, std::size_t i) {
  std::vector<std::pair<double, double>> v;
  for (std::size_t m = 0; m < c.deltas.size(); ++m)
    if (c.weights[m] > 0) v.emplace_back(double(c.deltas[m][i]), c.weights[m]);
  return v;
}

/// Yin et al.'s coordinate-wise trimmed mean with weights, straight from the
/// definition: sort each coordinate's values, drop ⌊β·n⌋ at each end, take the
/// weighted mean of the rest. (Values are assumed distinct.)
template <class T>
std::vector<double> naive_trimmed_mean(const contributions<T>& c, double beta, double scale) {
  std::vector<double> out(c.deltas.at(0).size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto v = column(c, i);
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto k = static_cast<std::size_t>(std::floor(beta * double(v.size())));
    double sum = 0, weight = 0;
    for (std::size_t j = k; j < v.size() - k; ++j) {
      sum += v[j].second * v[j].first;
      weight += v[j].second;
    }
    out[i] = scale * sum / weight;
  }
  return out;
}

/// The weighted median as the midpoint of the weighted medians among the data:
/// x_j is one when the weight strictly below it and the weight strictly above
/// it are each at most half the total (the classical definition, no sorting).
template <class T>
std::vector<double> naive_weighted_median(const contributions<T>& c, double scale) {
  std::vector<double> out(c.deltas.at(0).size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto v = column(c, i);
    double total = 0;
    for (const auto& [x, w] : v) total += w;
    double lowest = std::numeric_limits<double>::infinity();
    double highest = -lowest;
    for (const auto& [x, w] : v) {
      double below = 0, above = 0;
      for (const auto& [y, u] : v) {
        if (y < x) below += u;
        if (y > x) above += u;
      }
      if (2 * below <= total && 2 * above <= total) {
        lowest = std::min(lowest, x);
        highest = std::max(highest, x);
      }
    }
    out[i] = scale * 0.5 * (lowest + highest);
  }
  return out;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

/// One dense tensor and one embedding table, in one fragment.
fragment_plan mixed_plan(std::size_t dense, std::size_t embedding) {
  parameter_layout layout;
  layout.add("w", dense);
  layout.add("embed", embedding, tensor_role::embedding);
  return fragment_plan::balanced(layout, 1);
}

BOOST_AUTO_TEST_SUITE(merge_robust)

BOOST_AUTO_TEST_CASE(weights_come_from_the_weighting) {
  BOOST_TEST(trimmed_mean<>{}.weight(1000, 10) == 100000.0);  // 1000² / 10
  BOOST_TEST(trimmed_mean<average>{}.weight(1000, 10) == 1.0);
  BOOST_TEST(coordinate_median<>{}.weight(1000, 10) == 1.0);
  BOOST_TEST(coordinate_median<token_weights>{}.weight(1000, 10) == 100000.0);
}

BOOST_AUTO_TEST_CASE(trim_must_lie_in_zero_to_one_half) {
  BOOST_TEST(trimmed_mean<>{}.options().trim == 0.25);
  BOOST_TEST(trimmed_mean<>({0.0}).options().trim == 0.0);
  BOOST_TEST(trimmed_mean<>({0.499}).options().trim == 0.499);
  for (double bad : {-0.01, 0.5, 0.75, 1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    BOOST_TEST_CONTEXT("trim " << bad) { BOOST_CHECK_THROW((void)trimmed_mean<>({bad}), std::invalid_argument); }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(trimmed_mean_drops_the_extremes, T, scalar_types) {
  // n = 5, β = 0.25: k = 1, equal weights; the middle three of each sorted row.
  //   (3, −1, 7, 2, 100)     → 2, 3, 7    → 4
  //   (−5, 0, 5, 10, −20)    → −5, 0, 5   → 0
  //   (1, 2, 3, 4, 5)        → 2, 3, 4    → 3
  //   (0.5, 0.5, 0.5, 0.5, 8) → 0.5 ×3    → 0.5
  const auto c = by_coordinate<T>({{3, -1, 7, 2, 100}, {-5, 0, 5, 10, -20}, {1, 2, 3, 4, 5}, {0.5, 0.5, 0.5, 0.5, 8}},
                                  {1, 1, 1, 1, 1});
  check_close(merged(trimmed_mean<>{}, c, 1.0), {4, 0, 3, 0.5}, tolerance<T>);
  check_close(merged(trimmed_mean<>{}, c, 0.5), {2, 0, 1.5, 0.25}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(trimmed_mean_weights_what_it_keeps, T, scalar_types) {
  // Weights (1, 2, 3, 4, 5), k = 1; the kept values keep their weights:
  //   (10, 20, 30, 40, 50): 20·2 + 30·3 + 40·4 = 290 over 9
  //   (50, 40, 30, 20, 10): 40·2 + 30·3 + 20·4 = 250 over 9
  //   (0, −6, 6, 100, −100): −6·2 + 0·1 + 6·3 = 6 over 6 → 1
  const auto c = by_coordinate<T>({{10, 20, 30, 40, 50}, {50, 40, 30, 20, 10}, {0, -6, 6, 100, -100}}, {1, 2, 3, 4, 5});
  check_close(merged(trimmed_mean<>{}, c, 1.0), {290.0 / 9, 250.0 / 9, 1}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(trimmed_mean_of_even_counts, T, scalar_types) {
  // n = 4, k = ⌊1⌋ = 1: (4, −3, 10, 1) → 1, 4 → 2.5.
  check_close(merged(trimmed_mean<>{}, by_coordinate<T>({{4, -3, 10, 1}}, {1, 1, 1, 1}), 1.0), {2.5}, tolerance<T>);
  // n = 8, k = 2: (8, 1, 7, 2, 6, 3, 5, 4) → 3, 4, 5, 6 → 4.5; seven zeros and 80 → 0.
  const auto eight = by_coordinate<T>({{8, 1, 7, 2, 6, 3, 5, 4}, {0, 0, 0, 0, 0, 0, 0, 80}}, std::vector<double>(8, 1));
  check_close(merged(trimmed_mean<>{}, eight, 1.0), {4.5, 0}, tolerance<T>);
  // n = 6: β = 0.25 gives k = ⌊1.5⌋ = 1 → (2 + 3 + 4 + 10)/4; β = 0.34 gives k = ⌊2.04⌋ = 2 → (3 + 4)/2.
  const auto six = by_coordinate<T>({{1, 2, 3, 4, 10, 60}}, std::vector<double>(6, 1));
  check_close(merged(trimmed_mean<>{}, six, 1.0), {4.75}, tolerance<T>);
  check_close(merged(trimmed_mean<>({0.34}), six, 1.0), {3.5}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(tied_values_share_a_trim_boundary, T, scalar_types) {
  // Weights (1, 3, 1, 1, 1), k = 1.
  // (1, 1, 5, 9, 9): one of the two 1s (weights 1 and 3) is dropped; they
  // share the cut and enter with weight 4·1/2 = 2; likewise the 9s with 2·1/2:
  // (2·1 + 1·5 + 1·9) / (2 + 1 + 1) = 4.
  // (0, 0, 0, 6, 12): 12 is dropped; the three zeros (weights 1, 3, 1) keep 2 of
  // 3 places, weight 5·2/3: 6 / (10/3 + 1) = 18/13. Dropping the first zero
  // would give 6/5, dropping the heavy one 6/3.
  // (2, 2, 2, 2, 2) → 2.
  contributions<T> c = by_coordinate<T>({{1, 1, 5, 9, 9}, {0, 0, 0, 6, 12}, {2, 2, 2, 2, 2}}, {1, 3, 1, 1, 1});
  const auto expected = merged(trimmed_mean<>{}, c, 1.0);
  check_close(expected, {4, 18.0 / 13, 2}, tolerance<T>);
  // The order of the contributions does not matter, to the bit.
  std::array<std::size_t, 5> order{0, 1, 2, 3, 4};
  const contributions<T> original = c;
  while (std::next_permutation(order.begin(), order.end())) {
    for (std::size_t m = 0; m < 5; ++m) {
      c.deltas[m] = original.deltas[order[m]];
      c.weights[m] = original.weights[order[m]];
    }
    const auto out = merged(trimmed_mean<>{}, c, 1.0);
    BOOST_TEST(out == expected, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nothing_to_trim_is_exactly_the_weighted_mean, T, scalar_types) {
  // n = 3 and β = 0.25: k = ⌊0.75⌋ = 0. (1, 2, 30) with weights (1, 1, 2): 63/4.
  const auto three = by_coordinate<T>({{1, 2, 30}, {-4, 0.5, 8}}, {1, 1, 2});
  const auto out = merged(trimmed_mean<>{}, three, 1.0);
  check_close(out, {15.75, (-4 + 0.5 + 16) / 4}, tolerance<T>);
  BOOST_TEST(out == merged(diloco::merge::token_weighted{}, three, 1.0), boost::test_tools::per_element());
  // β = 0 never trims: n = 5 with a far value.
  const auto five = by_coordinate<T>({{1, 2, 3, 4, 1000}}, {1, 1, 1, 1, 1});
  check_close(merged(trimmed_mean<>({0.0}), five, 1.0), {1010.0 / 5}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(zero_weights_do_not_count, T, scalar_types) {
  // (1, 2, 3, 4, 1000) with weights (1, 1, 1, 1, 0): n = 4, so k = 1 and the
  // trimmed mean is (2 + 3)/2 and the median (2 + 3)/2; counting the
  // weightless 1000 would give (2 + 3 + 4)/3 and 3.
  const auto c = by_coordinate<T>({{1, 2, 3, 4, 1000}}, {1, 1, 1, 1, 0});
  check_close(merged(trimmed_mean<>{}, c, 1.0), {2.5}, tolerance<T>);
  check_close(merged(coordinate_median<>{}, c, 1.0), {2.5}, tolerance<T>);
  // All weights zero: zero, as for the plain weighted mean.
  const auto none = by_coordinate<T>({{1, 2, 3, 4, 5}}, {0, 0, 0, 0, 0});
  BOOST_TEST(merged(trimmed_mean<>{}, none, 1.0) == std::vector<T>{T(0)}, boost::test_tools::per_element());
  BOOST_TEST(merged(coordinate_median<>{}, none, 1.0) == std::vector<T>{T(0)}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(median_of_an_odd_count_is_the_middle_value, T, scalar_types) {
  const auto five =
      by_coordinate<T>({{3, -1, 7, 2, 100}, {-5, 0, 5, 10, -20}, {0.5, 0.5, 0.5, 0.5, 8}}, {1, 1, 1, 1, 1});
  check_close(merged(coordinate_median<>{}, five, 1.0), {3, 0, 0.5}, tolerance<T>);
  check_close(merged(coordinate_median<>{}, five, 2.0), {6, 0, 1}, tolerance<T>);
  const auto three = by_coordinate<T>({{9, -4, 1}, {2, 2, -7}}, {1, 1, 1});
  check_close(merged(coordinate_median<>{}, three, 1.0), {1, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(median_of_an_even_count_is_the_mean_of_the_middle_two, T, scalar_types) {
  check_close(merged(coordinate_median<>{}, by_coordinate<T>({{4, -3, 10, 1}}, {1, 1, 1, 1}), 1.0), {2.5},
              tolerance<T>);
  check_close(merged(coordinate_median<>{}, by_coordinate<T>({{1, 2, 3, 4, 10, 60}}, std::vector<double>(6, 1)), 1.0),
              {3.5}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weighted_median_by_hand, T, scalar_types) {
  const coordinate_median<token_weights> policy;
  // Weights (1, 2, 3, 4), total 10. (10, 20, 30, 40): cumulative 1, 3, 6 → 30.
  // (40, 30, 20, 10): sorted 10 (4), 20 (3) → cumulative 4, 7 → 20.
  check_close(merged(policy, by_coordinate<T>({{10, 20, 30, 40}, {40, 30, 20, 10}}, {1, 2, 3, 4}), 1.0), {30, 20},
              tolerance<T>);
  // Weights (1, 4, 3, 2): cumulative 1, 5 reaches exactly half at 20, so every
  // μ in [20, 30] minimizes Σ w|x − μ|: the midpoint 25.
  check_close(merged(policy, by_coordinate<T>({{10, 20, 30, 40}}, {1, 4, 3, 2}), 1.0), {25}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_weight_majority_sets_the_weighted_median, T, scalar_types) {
  // Why the median counts contributions by default: with weights (1, 1, 1, 1, 5)
  // the fifth holds more than half the weight and is the weighted median.
  const auto c = by_coordinate<T>({{1, 2, 3, 4, 1e6}}, {1, 1, 1, 1, 5});
  check_close(merged(coordinate_median<token_weights>{}, c, 1.0), {1e6}, tolerance<T>);
  contributions<T> votes = c;
  const coordinate_median<> policy;
  for (auto& w : votes.weights) w = policy.weight(1000, 10);
  check_close(merged(policy, votes, 1.0), {3}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nan_orders_above_every_number, T, scalar_types) {
  // (1, 2, 3, 4, NaN) sorts as 1, 2, 3, 4, NaN; (NaN, −∞, 0, 1, 2) as −∞, 0, 1, 2, NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const auto c = by_coordinate<T>({{1, 2, 3, 4, nan}, {nan, -inf, 0, 1, 2}}, {1, 1, 1, 1, 1});
  check_close(merged(trimmed_mean<>{}, c, 1.0), {3, 1}, tolerance<T>);
  check_close(merged(coordinate_median<>{}, c, 1.0), {3, 1}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_contribution_is_returned_times_scale, T, scalar_types) {
  const auto c = by_coordinate<T>({{1.5}, {-2}, {4}}, {3});
  check_close(merged(trimmed_mean<>{}, c, 0.5), {0.75, -1, 2}, tolerance<T>);
  check_close(merged(trimmed_mean<>({0.49}), c, 0.5), {0.75, -1, 2}, tolerance<T>);
  check_close(merged(coordinate_median<>{}, c, 0.5), {0.75, -1, 2}, tolerance<T>);
  check_close(merged(coordinate_median<token_weights>{}, c, 0.5), {0.75, -1, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(two_contributions_give_their_weighted_mean, T, scalar_types) {
  // (1, 5) with weights (1, 3): (1 + 15)/4 = 4; equal weights: 3. No β < 0.5
  // trims anything from two, and neither can outvote the other.
  const auto c = by_coordinate<T>({{1, 5}}, {1, 3});
  check_close(merged(trimmed_mean<>({0.49}), c, 1.0), {4}, tolerance<T>);
  check_close(merged(coordinate_median<token_weights>{}, c, 1.0), {4}, tolerance<T>);
  check_close(merged(coordinate_median<>{}, by_coordinate<T>({{1, 5}}, {1, 1}), 1.0), {3}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(identical_contributions_merge_to_themselves, T, scalar_types) {
  std::vector<T> d(300);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = T(std::cos(0.8 * double(i)) * 3);
  for (std::size_t n = 1; n <= 7; ++n) {
    contributions<T> c;
    for (std::size_t m = 0; m < n; ++m) {
      c.deltas.push_back(d);
      c.weights.push_back(0.25 + double(m));
    }
    BOOST_TEST_CONTEXT("n = " << n) {
      check_close(merged(trimmed_mean<>{}, c, 1.0), widen(d), tolerance<T>);
      check_close(merged(trimmed_mean<>({0.4}), c, 1.0), widen(d), tolerance<T>);
      check_close(merged(coordinate_median<>{}, c, 1.0), widen(d), tolerance<T>);
      check_close(merged(coordinate_median<token_weights>{}, c, 1.0), widen(d), tolerance<T>);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(long_fragments_match_naive_references, T, scalar_types) {
  // 3000 elements span several blocks for every n (⌊2048/n⌋ elements each);
  // the embedding slice is merged like the dense one.
  const auto plan = mixed_plan(1800, 1200);
  const auto slices = plan[0].slices();
  for (std::size_t n : {3, 4, 5, 8, 17}) {
    contributions<T> c;
    for (std::size_t m = 0; m < n; ++m) {
      std::vector<T> d(plan[0].size());
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = T(std::sin(0.37 * double(i) + 1.7 * double(m)) * double(m + 1));
      c.deltas.push_back(d);
      c.weights.push_back(double(1 + (7 * m) % 5));  // integers: exact halves occur
    }
    for (double scale : {1.0, 0.3}) {
      BOOST_TEST_CONTEXT("n = " << n << ", scale " << scale) {
        for (double beta : {0.1, 0.25, 0.4}) {
          BOOST_TEST_CONTEXT("trim " << beta) {
            check_close(merged(trimmed_mean<>({beta}), c, scale, slices), naive_trimmed_mean(c, beta, scale),
                        tolerance<T>);
          }
        }
        check_close(merged(coordinate_median<token_weights>{}, c, scale, slices), naive_weighted_median(c, scale),
                    tolerance<T>);
        contributions<T> votes = c;
        votes.weights.assign(n, 1.0);
        check_close(merged(coordinate_median<>{}, votes, scale, slices), naive_weighted_median(votes, scale),
                    tolerance<T>);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_hostile_contribution_stays_within_the_honest_spread, T, scalar_types) {
  // Four honest contributions and one of ±1e30 with eight times the mean honest
  // weight (what the syncer's weight clipping lets through). n = 5, so the
  // trimmed mean drops one value per end and the median is the third.
  constexpr std::size_t size = 3000;
  contributions<T> honest;
  for (std::size_t m = 0; m < 4; ++m) {
    std::vector<T> d(size);
    for (std::size_t i = 0; i < size; ++i) d[i] = T(std::sin(0.01 * double(i * (m + 1))) + 0.1 * double(m));
    honest.deltas.push_back(d);
    honest.weights.push_back(double(m + 1));
  }
  for (double sign : {1.0, -1.0}) {
    contributions<T> poisoned = honest;
    std::vector<T> hostile(size);
    for (std::size_t i = 0; i < size; ++i) hostile[i] = T(i % 3 == 0 ? -sign * 1e30 : sign * 1e30);
    poisoned.deltas.push_back(hostile);
    poisoned.weights.push_back(20);
    contributions<T> votes = poisoned;
    votes.weights.assign(5, 1.0);
    contributions<T> honest_votes = honest;
    honest_votes.weights.assign(4, 1.0);
    const double scale = 0.3;

    const auto trimmed = merged(trimmed_mean<>{}, poisoned, scale);
    const auto trimmed_honest = merged(trimmed_mean<>{}, honest, scale);
    const auto median = merged(coordinate_median<>{}, votes, scale);
    const auto median_honest = merged(coordinate_median<>{}, honest_votes, scale);
    check_close(trimmed, naive_trimmed_mean(poisoned, 0.25, scale), tolerance<T>);
    check_close(median, naive_weighted_median(votes, scale), tolerance<T>);

    int failures = 0;
    for (std::size_t i = 0; i < size && failures < 5; ++i) {
      double lo = std::numeric_limits<double>::infinity();
      double hi = -lo;
      for (const auto& d : honest.deltas) {
        lo = std::min(lo, scale * double(d[i]));
        hi = std::max(hi, scale * double(d[i]));
      }
      const double slack = tolerance<T>;
      const bool ok = double(trimmed[i]) >= lo - slack && double(trimmed[i]) <= hi + slack &&
                      double(median[i]) >= lo - slack && double(median[i]) <= hi + slack &&
                      std::abs(double(trimmed[i]) - double(trimmed_honest[i])) <= hi - lo + slack &&
                      std::abs(double(median[i]) - double(median_honest[i])) <= hi - lo + slack;
      BOOST_TEST(ok, "element " << i << ": honest range [" << lo << ", " << hi << "], trimmed mean " << trimmed[i]
                                << " (honest only " << trimmed_honest[i] << "), median " << median[i]
                                << " (honest only " << median_honest[i] << ")");
      if (!ok) ++failures;
    }
    // The plain weighted mean is carried away.
    const auto mean = merged(diloco::merge::token_weighted{}, poisoned, scale);
    BOOST_TEST(std::abs(double(mean[1])) > 1e28);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace merge_robust_test
