// ctest-labels: unit
#include "diloco/merge/radial_directional.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/merge/weighted_mean.hpp"
#include "diloco/params/fragments.hpp"
#include "support/numeric.hpp"

namespace merge_radial_directional_test {

using diloco::fragment_plan;
using diloco::fragment_slice;
using diloco::parameter_layout;
using diloco::tensor_role;
using diloco::weighted_delta;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;
using rda = diloco::merge::radial_directional<>;

static_assert(diloco::merge_policy<rda, float>);
static_assert(diloco::merge_policy<rda, double>);
static_assert(diloco::merge_policy<diloco::merge::radial_directional<diloco::merge::average>, float>);

template <class T>
struct contributions {
  std::vector<std::vector<T>> deltas;
  std::vector<double> weights;
};

template <class T, class Policy>
std::vector<T> merged(const Policy& policy, const contributions<T>& c, std::span<const fragment_slice> slices,
                      double scale) {
  std::vector<weighted_delta<T>> in;
  for (std::size_t m = 0; m < c.deltas.size(); ++m) in.push_back({c.deltas[m], c.weights[m]});
  std::vector<T> out(c.deltas.at(0).size(), T(7));  // garbage that must be overwritten
  policy.merge(std::span<const weighted_delta<T>>(in), slices, std::span<T>(out), scale);
  return out;
}

/// Radial-directional averaging in double, slice by slice, from the formula of
/// Decoupled DiLoCo: dense slices get `(Σ w‖Δ_m‖/Σw) · dir(Σ w·dir(Δ_m)/Σw)`
/// with dir(0) = 0; embedding slices get `Σ wΔ_m/Σw`; all times `scale`.
template <class T>
std::vector<double> naive_rda(const contributions<T>& c, std::span<const fragment_slice> slices, double scale) {
  const std::size_t n = c.deltas.at(0).size();
  std::vector<double> out(n, 0.0);
  double total = 0;
  for (double w : c.weights) total += w;
  if (total <= 0) return out;
  for (const auto& s : slices) {
    const std::size_t begin = s.packed_offset;
    const std::size_t end = s.packed_offset + s.size;
    if (s.role == tensor_role::embedding) {
      for (std::size_t m = 0; m < c.deltas.size(); ++m)
        for (std::size_t i = begin; i < end; ++i) out[i] += c.weights[m] * double(c.deltas[m][i]) / total;
    } else {
      double mean_norm = 0;
      std::vector<double> direction(n, 0.0);
      for (std::size_t m = 0; m < c.deltas.size(); ++m) {
        double sq = 0;
        for (std::size_t i = begin; i < end; ++i) sq += double(c.deltas[m][i]) * double(c.deltas[m][i]);
        const double norm_m = std::sqrt(sq);
        mean_norm += c.weights[m] * norm_m / total;
        if (norm_m == 0) continue;
        for (std::size_t i = begin; i < end; ++i)
          direction[i] += c.weights[m] / total * double(c.deltas[m][i]) / norm_m;
      }
      double sq = 0;
      for (std::size_t i = begin; i < end; ++i) sq += direction[i] * direction[i];
      const double u = std::sqrt(sq);
      for (std::size_t i = begin; i < end; ++i) out[i] = u > 0 ? mean_norm * direction[i] / u : 0.0;
    }
    for (std::size_t i = begin; i < end; ++i) out[i] *= scale;
  }
  return out;
}

/// One dense slice covering a fragment of `n` elements.
std::vector<fragment_slice> dense(std::size_t n) { return {fragment_slice{0, 0, 0, n, tensor_role::dense}}; }

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

/// A model with an embedding and dense tensors; with P = 3 the embedding (24 >
/// 54/3 = 18) is cut in two and fragments mix embedding and dense slices.
parameter_layout mixed_layout() {
  parameter_layout layout;
  layout.add("embed", 24, tensor_role::embedding);
  layout.add("w1", 15);
  layout.add("b1", 5);
  layout.add("w2", 10);
  return layout;
}

BOOST_AUTO_TEST_SUITE(merge_radial_directional)

BOOST_AUTO_TEST_CASE(default_weighting_is_token_weighting) {
  const rda policy;
  BOOST_TEST(policy.weight(1000, 10) == 100000.0);  // 1000² / 10
  BOOST_TEST(policy.weight(5, 0) == 0.0);
  const diloco::merge::radial_directional<diloco::merge::average> uniform;
  BOOST_TEST(uniform.weight(1000, 10) == 1.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(orthogonal_unit_vectors_keep_norm_one, T, scalar_types) {
  // Norms 1 and 1 average to 1; directions average to (0.5, 0.5), whose
  // direction is (1/√2, 1/√2). Plain averaging would give norm 1/√2.
  const contributions<T> c{{{T(1), T(0)}, {T(0), T(1)}}, {1, 1}};
  const auto slices = dense(2);
  const auto out = merged(rda{}, c, slices, 1.0);
  const double r = 1 / std::sqrt(2.0);
  check_close(out, {r, r}, tolerance<T>);
  BOOST_TEST(norm(widen(out)) == 1.0, boost::test_tools::tolerance(tolerance<T>));

  const auto avg = merged(diloco::merge::average{}, c, slices, 1.0);
  BOOST_TEST(norm(widen(avg)) == r, boost::test_tools::tolerance(tolerance<T>));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(orthogonal_vectors_of_different_norms, T, scalar_types) {
  // (3, 0) and (0, 4), equal weights: mean norm 3.5; directions (1, 0) and
  // (0, 1) average to (0.5, 0.5) → (1/√2, 1/√2); result 3.5/√2 · (1, 1).
  const contributions<T> c{{{T(3), T(0)}, {T(0), T(4)}}, {1, 1}};
  const double x = 3.5 / std::sqrt(2.0);
  check_close(merged(rda{}, c, dense(2), 1.0), {x, x}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weights_apply_to_norms_and_directions, T, scalar_types) {
  // (1, 0) with w = 1 and (0, 2) with w = 3: mean norm (1 + 6)/4 = 1.75;
  // directions (0.25, 0.75), norm sqrt(0.625); result 1.75·(0.25, 0.75)/sqrt(0.625).
  const contributions<T> c{{{T(1), T(0)}, {T(0), T(2)}}, {1, 3}};
  const double u = std::sqrt(0.625);
  check_close(merged(rda{}, c, dense(2), 1.0), {1.75 * 0.25 / u, 1.75 * 0.75 / u}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_zero_contribution_counts_in_the_norm_only, T, scalar_types) {
  // (0, 0) and (3, 4), equal weights: mean norm (0 + 5)/2 = 2.5; dir(0) = 0, so
  // the direction is that of (3, 4): (0.6, 0.8); result (1.5, 2).
  const contributions<T> c{{{T(0), T(0)}, {T(3), T(4)}}, {1, 1}};
  check_close(merged(rda{}, c, dense(2), 1.0), {1.5, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(opposite_directions_cancel_to_zero, T, scalar_types) {
  const contributions<T> c{{{T(1), T(2)}, {T(-2), T(-4)}}, {1, 1}};
  const auto out = merged(rda{}, c, dense(2), 1.0);
  BOOST_TEST(out == (std::vector<T>{T(0), T(0)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_weights_zero_give_zero, T, scalar_types) {
  const auto layout = mixed_layout();
  const auto plan = fragment_plan::balanced(layout, 1);
  contributions<T> c;
  for (int m = 0; m < 2; ++m) {
    c.deltas.emplace_back(layout.size(), T(m + 1));
    c.weights.push_back(0);
  }
  const auto out = merged(rda{}, c, plan[0].slices(), 1.0);
  BOOST_TEST(out == std::vector<T>(layout.size(), T(0)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(embedding_slices_are_averaged_directly, T, scalar_types) {
  // The same orthogonal unit vectors in an embedding table: (0.5, 0.5).
  parameter_layout layout;
  layout.add("embed", 2, tensor_role::embedding);
  const auto plan = fragment_plan::balanced(layout, 1);
  const contributions<T> c{{{T(1), T(0)}, {T(0), T(1)}}, {1, 1}};
  check_close(merged(rda{}, c, plan[0].slices(), 1.0), {0.5, 0.5}, tolerance<T>);
  check_close(merged(rda{}, c, plan[0].slices(), 4.0), {2, 2}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(each_dense_tensor_is_normalized_separately, T, scalar_types) {
  // Two dense tensors of two elements each. Tensor a: (1, 0) and (0, 1) →
  // (1/√2, 1/√2). Tensor b: (2, 0) and (4, 0) → mean norm 3, direction (1, 0)
  // → (3, 0). Treating the fragment as one vector would mix the norms.
  parameter_layout layout;
  layout.add("a", 2);
  layout.add("b", 2);
  const auto plan = fragment_plan::balanced(layout, 1);
  const contributions<T> c{{{T(1), T(0), T(2), T(0)}, {T(0), T(1), T(4), T(0)}}, {1, 1}};
  const double r = 1 / std::sqrt(2.0);
  check_close(merged(rda{}, c, plan[0].slices(), 1.0), {r, r, 3, 0}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(identical_contributions_merge_to_themselves, T, scalar_types) {
  const auto layout = mixed_layout();
  const auto plan = fragment_plan::balanced(layout, 3);
  for (std::size_t p = 0; p < plan.count(); ++p) {
    std::vector<T> d(plan[p].size());
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = T(std::cos(0.8 * double(i) + double(p)));
    const contributions<T> c{{d, d, d}, {1, 4, 0.25}};
    BOOST_TEST_CONTEXT("fragment " << p) {
      check_close(merged(rda{}, c, plan[p].slices(), 1.0), widen(d), tolerance<T>);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fragments_of_a_plan_match_a_naive_implementation, T, scalar_types) {
  const auto layout = mixed_layout();
  const auto plan = fragment_plan::balanced(layout, 3);
  const rda policy;
  std::size_t embedding_slices = 0;
  std::size_t dense_slices = 0;
  for (std::size_t p = 0; p < plan.count(); ++p) {
    for (const auto& s : plan[p].slices()) (s.role == tensor_role::embedding ? embedding_slices : dense_slices) += 1;
    contributions<T> c;
    // Token counts and steps behind each learner's contribution.
    const std::uint64_t tokens[] = {100, 50, 200};
    const std::uint64_t steps[] = {10, 5, 40};
    for (std::size_t m = 0; m < 3; ++m) {
      std::vector<T> d(plan[p].size());
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = T(std::sin(1.1 * double(i) + 2.3 * double(m)) * double(m + 1));
      c.deltas.push_back(d);
      c.weights.push_back(policy.weight(tokens[m], steps[m]));
    }
    for (double scale : {1.0, 0.5, 2.5}) {
      BOOST_TEST_CONTEXT("fragment " << p << ", scale " << scale) {
        const auto out = merged(policy, c, plan[p].slices(), scale);
        check_close(out, naive_rda(c, plan[p].slices(), scale), tolerance<T>);
        // scale multiplies the unscaled result.
        const auto unscaled = widen(merged(policy, c, plan[p].slices(), 1.0));
        std::vector<double> scaled(unscaled.size());
        for (std::size_t i = 0; i < scaled.size(); ++i) scaled[i] = scale * unscaled[i];
        check_close(out, scaled, tolerance<T>);
      }
    }
  }
  // The test covers both kinds of slice.
  BOOST_TEST(embedding_slices >= 2u);
  BOOST_TEST(dense_slices >= 3u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(long_dense_slices_match_the_naive_implementation, T, scalar_types) {
  // Over 2048 elements per slice exercises the blocked combination.
  parameter_layout layout;
  layout.add("w", 5000);
  layout.add("e", 3000, tensor_role::embedding);
  const auto plan = fragment_plan::balanced(layout, 1);
  contributions<T> c;
  for (std::size_t m = 0; m < 4; ++m) {
    std::vector<T> d(layout.size());
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = T(std::sin(0.01 * double(i * (m + 1))) + 0.1 * double(m));
    c.deltas.push_back(d);
    c.weights.push_back(double(m + 1));
  }
  check_close(merged(rda{}, c, plan[0].slices(), 1.0), naive_rda(c, plan[0].slices(), 1.0), tolerance<T>);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace merge_radial_directional_test
