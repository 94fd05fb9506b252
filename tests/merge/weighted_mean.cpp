// ctest-labels: unit threads
#include "diloco/merge/weighted_mean.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/params/fragments.hpp"
#include "support/numeric.hpp"

namespace merge_weighted_mean_test {

using diloco::fragment_plan;
using diloco::parameter_layout;
using diloco::tensor_role;
using diloco::weighted_delta;
using diloco::merge::average;
using diloco::merge::token_weighted;
using diloco::merge::weighted_mean;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

static_assert(diloco::merge_policy<average, float>);
static_assert(diloco::merge_policy<average, double>);
static_assert(diloco::merge_policy<token_weighted, float>);
static_assert(diloco::merge_policy<token_weighted, double>);

// The names the merges had before `weighted_mean<Weighting>` are the same
// types, so code written against them is unchanged; the default weighting is
// by tokens, as for `radial_directional<>` and `trimmed_mean<>`.
static_assert(std::is_same_v<average, weighted_mean<diloco::merge::uniform>>);
static_assert(std::is_same_v<token_weighted, weighted_mean<diloco::merge::token>>);
static_assert(std::is_same_v<weighted_mean<>, token_weighted>);
static_assert(std::is_same_v<diloco::merge::token_weights, diloco::merge::token>);
static_assert(diloco::weighting<diloco::merge::uniform> && diloco::weighting<diloco::merge::token>);
static_assert(!diloco::weighting<int>);

/// A weighting of the test's own: one vote per inner step.
struct by_steps {
  double weight(std::uint64_t /*tokens*/, std::uint64_t steps) const { return static_cast<double>(steps); }
};
static_assert(diloco::merge_policy<weighted_mean<by_steps>, float>);

/// Contributions of one fragment and the spans a policy reads.
template <class T>
struct contributions {
  std::vector<std::vector<T>> deltas;
  std::vector<double> weights;

  std::vector<weighted_delta<T>> view() const {
    std::vector<weighted_delta<T>> in;
    for (std::size_t m = 0; m < deltas.size(); ++m) in.push_back({deltas[m], weights[m]});
    return in;
  }
};

/// Runs `policy.merge` over `c` with no slices needed (plain averaging ignores them).
template <class T, class Policy>
std::vector<T> merged(const Policy& policy, const contributions<T>& c, double scale,
                      std::span<const diloco::fragment_slice> slices = {}) {
  const auto in = c.view();
  std::vector<T> out(c.deltas.at(0).size(), T(7));  // garbage that must be overwritten
  policy.merge(std::span<const weighted_delta<T>>(in), slices, std::span<T>(out), scale);
  return out;
}

/// `scale · Σ w_m Δ_m / Σ w_m`, in double; zeros when Σ w = 0.
template <class T>
std::vector<double> naive_weighted_mean(const contributions<T>& c, double scale) {
  double total = 0;
  for (double w : c.weights) total += w;
  std::vector<double> out(c.deltas.at(0).size(), 0.0);
  if (total <= 0) return out;
  for (std::size_t m = 0; m < c.deltas.size(); ++m)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += scale * c.weights[m] * double(c.deltas[m][i]) / total;
  return out;
}

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

BOOST_AUTO_TEST_SUITE(merge_weighted_mean)

BOOST_AUTO_TEST_CASE(weights) {
  const average avg;
  BOOST_TEST(avg.weight(0, 0) == 1.0);
  BOOST_TEST(avg.weight(1000, 10) == 1.0);
  const token_weighted tw;
  BOOST_TEST(tw.weight(1000, 10) == 100000.0);  // 1000² / 10
  BOOST_TEST(tw.weight(3, 2) == 4.5);           // 9 / 2
  BOOST_TEST(tw.weight(0, 5) == 0.0);
  BOOST_TEST(tw.weight(7, 0) == 0.0);  // no steps: weight 0
  BOOST_TEST(tw.weight(0, 0) == 0.0);
  // 2^30 tokens in 2^10 steps: 2^60 / 2^10 = 2^50, exact in double.
  BOOST_TEST(tw.weight(std::uint64_t{1} << 30, 1024) == std::ldexp(1.0, 50));
}

BOOST_AUTO_TEST_CASE(weightings) {
  const diloco::merge::uniform uniform;
  BOOST_TEST(uniform.weight(0, 0) == 1.0);
  BOOST_TEST(uniform.weight(1000, 10) == 1.0);
  const diloco::merge::token token;
  BOOST_TEST(token.weight(1000, 10) == 100000.0);  // 1000² / 10
  BOOST_TEST(token.weight(7, 0) == 0.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weighted_mean_takes_its_weights_from_the_weighting, T, scalar_types) {
  // Weights from `by_steps`: 1 and 3 steps. ((1, 2)·1 + (4, 8)·3) / 4 =
  // (13/4, 26/4) = (3.25, 6.5); scale 0.5 → (1.625, 3.25).
  const weighted_mean<by_steps> policy;
  const contributions<T> c{{{T(1), T(2)}, {T(4), T(8)}}, {policy.weight(500, 1), policy.weight(20, 3)}};
  BOOST_TEST(c.weights == (std::vector<double>{1, 3}), boost::test_tools::per_element());
  check_close(merged(policy, c, 1.0), {3.25, 6.5}, tolerance<T>);
  check_close(merged(policy, c, 0.5), {1.625, 3.25}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(average_is_the_plain_mean_times_scale, T, scalar_types) {
  // ((1, 2, 3) + (3, 0, −3) + (2, 4, 6)) / 3 = (2, 2, 2); scale 0.5 → (1, 1, 1).
  const contributions<T> c{{{T(1), T(2), T(3)}, {T(3), T(0), T(-3)}, {T(2), T(4), T(6)}}, {1, 1, 1}};
  check_close(merged(average{}, c, 1.0), {2, 2, 2}, tolerance<T>);
  check_close(merged(average{}, c, 0.5), {1, 1, 1}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(token_weighted_by_hand, T, scalar_types) {
  // w = (1, 3): ((1, 2)·1 + (3, 6)·3) / 4 = (10/4, 20/4) = (2.5, 5); scale 2 → (5, 10).
  const contributions<T> c{{{T(1), T(2)}, {T(3), T(6)}}, {1, 3}};
  check_close(merged(token_weighted{}, c, 1.0), {2.5, 5}, tolerance<T>);
  check_close(merged(token_weighted{}, c, 2.0), {5, 10}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(token_weighted_uses_tokens_squared_over_steps, T, scalar_types) {
  // Learner a: 100 tokens in 10 steps → w = 1000; learner b: 100 tokens in 40
  // steps → w = 250. (1·1000 + 6·250) / 1250 = 2.
  const token_weighted tw;
  const contributions<T> c{{{T(1)}, {T(6)}}, {tw.weight(100, 10), tw.weight(100, 40)}};
  check_close(merged(tw, c, 1.0), {2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(orthogonal_unit_vectors_shrink_to_one_over_root_two, T, scalar_types) {
  // ((1, 0) + (0, 1)) / 2 = (0.5, 0.5), of norm sqrt(0.5) = 1/√2.
  const contributions<T> c{{{T(1), T(0)}, {T(0), T(1)}}, {1, 1}};
  const auto out = merged(average{}, c, 1.0);
  check_close(out, {0.5, 0.5}, tolerance<T>);
  BOOST_TEST(norm(widen(out)) == 1 / std::sqrt(2.0), boost::test_tools::tolerance(tolerance<T>));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(identical_contributions_merge_to_themselves, T, scalar_types) {
  const std::vector<T> d{T(0.25), T(-1.5), T(3), T(1e-3)};
  const contributions<T> c{{d, d, d}, {2, 5, 0.5}};
  check_close(merged(average{}, c, 1.0), widen(d), tolerance<T>);
  check_close(merged(token_weighted{}, c, 1.0), widen(d), tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_zero_contribution_pulls_towards_zero, T, scalar_types) {
  // ((0, 0) + (3, 4)) / 2 = (1.5, 2).
  const contributions<T> c{{{T(0), T(0)}, {T(3), T(4)}}, {1, 1}};
  check_close(merged(average{}, c, 1.0), {1.5, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_weights_zero_give_zero, T, scalar_types) {
  const contributions<T> c{{{T(1), T(2)}, {T(3), T(6)}}, {0, 0}};
  const auto out = merged(token_weighted{}, c, 1.0);
  BOOST_TEST(out == (std::vector<T>{T(0), T(0)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_zero_weight_ignores_its_contribution, T, scalar_types) {
  const contributions<T> c{{{T(1), T(2)}, {T(100), T(-100)}}, {2, 0}};
  check_close(merged(token_weighted{}, c, 1.0), {1, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fragments_of_a_plan_match_a_naive_weighted_mean, T, scalar_types) {
  // Plain averaging treats embeddings and dense tensors alike; long fragments
  // (over 2048 elements) exercise the blocked combination.
  parameter_layout layout;
  layout.add("embed", 3000, tensor_role::embedding);
  layout.add("w", 1500);
  layout.add("b", 7);
  const auto plan = fragment_plan::balanced(layout, 2);
  const token_weighted tw;
  for (std::size_t p = 0; p < plan.count(); ++p) {
    const std::size_t n = plan[p].size();
    contributions<T> c;
    for (std::size_t m = 0; m < 4; ++m) {
      std::vector<T> d(n);
      for (std::size_t i = 0; i < n; ++i) d[i] = T(std::sin(0.37 * double(i) + 1.7 * double(m)) * double(m + 1));
      c.deltas.push_back(d);
      c.weights.push_back(tw.weight(100 * (m + 1), 10 + m));
    }
    for (double scale : {1.0, 0.3}) {
      BOOST_TEST_CONTEXT("fragment " << p << ", scale " << scale) {
        check_close(merged(tw, c, scale, plan[p].slices()), naive_weighted_mean(c, scale), tolerance<T>);
        c.weights.assign(4, 1.0);
        check_close(merged(average{}, c, scale, plan[p].slices()), naive_weighted_mean(c, scale), tolerance<T>);
        for (std::size_t m = 0; m < 4; ++m) c.weights[m] = tw.weight(100 * (m + 1), 10 + m);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_thread_count_gives_the_one_thread_result) {
  // Large enough that 3 threads each get a share (2^16 elements at least).
  const std::size_t n = 3 * (std::size_t{1} << 16) + 1000;
  std::vector<std::vector<float>> deltas(3, std::vector<float>(n));
  for (std::size_t m = 0; m < deltas.size(); ++m)
    for (std::size_t i = 0; i < n; ++i) deltas[m][i] = float(std::sin(0.37 * double(i) + double(m)));
  const std::vector<weighted_delta<float>> in{{deltas[0], 1.0}, {deltas[1], 3.0}, {deltas[2], 0.5}};
  auto merged_on = [&](unsigned threads) {
    token_weighted policy;
    policy.threads = threads;
    std::vector<float> out(n);
    policy.merge(std::span<const weighted_delta<float>>(in), {}, std::span<float>(out), 0.8);
    return out;
  };
  const auto one = merged_on(1);
  // By hand for element 0: 0.8 · (1·sin 0 + 3·sin 1 + 0.5·sin 2) / 4.5.
  BOOST_TEST(std::fabs(one[0] - 0.8 * (3 * std::sin(1.0) + 0.5 * std::sin(2.0)) / 4.5) < 1e-6);
  for (const unsigned threads : {2u, 3u, 0u}) {
    const auto many = merged_on(threads);
    BOOST_TEST(std::memcmp(many.data(), one.data(), n * sizeof(float)) == 0, threads << " threads");
  }
  BOOST_TEST(token_weighted{}.threads == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace merge_weighted_mean_test
