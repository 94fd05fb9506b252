// ctest-labels: unit
#include "diloco/outer/from_inner.hpp"

#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/inner/adamw.hpp"
#include "diloco/inner/sgd.hpp"
#include "diloco/outer/nesterov.hpp"
#include "support/numeric.hpp"
#include "support/reference_adamw.hpp"

namespace outer_from_inner_test {

using diloco::corrupt_state;
using diloco::inner::adamw;
using diloco::inner::adamw_options;
using diloco::outer::from_inner;
using diloco::test::check_close;
using diloco::test::reference_adamw;
using diloco::test::scalar_types;
using diloco::test::tolerance;

template <class T>
std::vector<T> delta_for(std::uint32_t fragment, std::size_t n, int t) {
  std::vector<T> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = T(0.3 * std::cos(0.9 * double(i) + 0.4 * t + fragment) - 0.05);
  return d;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

constexpr std::size_t size_of(std::uint32_t f) { return f == 0 ? 4 : 2; }

const adamw_options outer_adamw{0.05, 0.9, 0.99, 1e-8, 0.1};

template <class T>
from_inner<adamw<T>> trained(int steps, int salt) {
  from_inner<adamw<T>> opt(outer_adamw);
  std::vector<T> g0(size_of(0), T(1));
  std::vector<T> g3(size_of(3), T(1));
  for (int t = 1; t <= steps; ++t) {
    opt.step(0, g0, delta_for<T>(0, size_of(0), t + salt));
    if (t % 2) opt.step(3, g3, delta_for<T>(3, size_of(3), t + salt));
  }
  return opt;
}

/// Checks that `a` and `b` take bit-identical steps on the fragments they
/// know (0 and 3) and on one they have not seen (1).
template <class T>
void check_same_steps(from_inner<adamw<T>> a, from_inner<adamw<T>> b) {
  for (std::uint32_t f : {0u, 3u, 1u}) {
    std::vector<T> ga(size_of(f), T(0.5));
    auto gb = ga;
    for (int t = 0; t < 2; ++t) {
      const auto d = delta_for<T>(f, size_of(f), 30 + t);
      a.step(f, ga, d);
      b.step(f, gb, d);
      BOOST_TEST(ga == gb, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE(outer_from_inner)

BOOST_AUTO_TEST_CASE_TEMPLATE(adamw_runs_per_fragment, T, scalar_types) {
  // Each fragment has its own moments and its own step count, so fragment 3's
  // first step is bias-corrected with t = 1 however often fragment 0 stepped.
  from_inner<adamw<T>> opt(outer_adamw);
  std::map<std::uint32_t, reference_adamw> ref;
  std::map<std::uint32_t, std::vector<T>> global;
  std::map<std::uint32_t, std::vector<double>> expected;
  for (std::uint32_t f : {0u, 3u}) {
    ref[f] = reference_adamw{outer_adamw, {}, {}};
    global[f] = std::vector<T>(size_of(f), T(1));
    expected[f] = widen(global[f]);
  }
  const std::uint32_t order[] = {0, 0, 0, 3, 0, 3, 3, 0};
  int t = 0;
  for (std::uint32_t f : order) {
    ++t;
    const auto d = delta_for<T>(f, size_of(f), t);
    opt.step(f, global[f], d);
    ref[f].step(expected[f], widen(d));
    BOOST_TEST_CONTEXT("fragment " << f << ", call " << t) { check_close(global[f], expected[f], tolerance<T>); }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(first_adamw_step_by_hand, T, scalar_types) {
  // Θ = 1, Δ = 0.5, lr = 0.1, λ = 0.1: Θ = 0.99 − 0.1·0.5/(0.5 + 1e-8) = 0.89 + 2e-9
  // (see inner_adamw/first_step_by_hand), on two fragments independently.
  from_inner<adamw<T>> opt({0.1, 0.9, 0.999, 1e-8, 0.1});
  std::vector<T> a{T(1)};
  std::vector<T> b{T(1)};
  opt.step(0, a, std::vector<T>{T(0.5)});
  opt.step(0, a, std::vector<T>{T(0.5)});  // fragment 0 is now at t = 2
  opt.step(1, b, std::vector<T>{T(0.5)});
  check_close(b, {0.89 + 2e-9}, tolerance<T>);
  // A constant Δ makes every AdamW step p(1 − lr·λ) − lr·Δ/(|Δ| + ε).
  check_close(a, {(0.89 + 2e-9) * 0.99 - 0.1 * 0.5 / (0.5 + 1e-8)}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_with_learning_rate_one_subtracts_the_outer_gradient, T, scalar_types) {
  // The data-parallel configuration: Θ ← Θ − 1·Δ.
  from_inner<diloco::inner::sgd<T>> opt({1.0, 0.0, 0.0, false});
  std::vector<T> global{T(1), T(-0.5)};
  opt.step(2, global, std::vector<T>{T(0.25), T(-0.25)});
  BOOST_TEST(global == (std::vector<T>{T(0.75), T(-0.25)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(changed_options_apply_to_existing_fragments, T, scalar_types) {
  // Θ = 1 − 0.5·1 = 0.5, then with lr = 0.25: 0.5 − 0.25·1 = 0.25.
  from_inner<diloco::inner::sgd<T>> opt({0.5, 0.0, 0.0, false});
  std::vector<T> global{T(1)};
  opt.step(0, global, std::vector<T>{T(1)});
  BOOST_TEST(global[0] == T(0.5));
  opt.options().learning_rate = 0.25;
  opt.step(0, global, std::vector<T>{T(1)});
  BOOST_TEST(global[0] == T(0.25));
}

BOOST_AUTO_TEST_CASE(inner_option_checks_apply) {
  BOOST_CHECK_THROW(from_inner<adamw<float>>({1e-3, 1.0, 0.999, 1e-8, 0.0}), std::invalid_argument);
  BOOST_CHECK_THROW(from_inner<adamw<double>>({1e-3, 0.9, 0.999, 0.0, 0.0}), std::invalid_argument);
  BOOST_CHECK_THROW(from_inner<diloco::inner::sgd<double>>({-1.0, 0.0, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(from_inner<adamw<double>>{});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_reproduces_every_fragment, T, scalar_types) {
  const auto original = trained<T>(5, 0);
  std::stringstream state;
  original.save(state);
  auto restored = trained<T>(2, 60);  // other state, overwritten by load
  restored.load(state);
  check_same_steps(original, restored);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(truncated_state_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  std::stringstream saved;
  trained<T>(5, 0).save(saved);
  const std::string bytes = saved.str();
  const auto before = trained<T>(3, 60);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    auto opt = before;
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
    if (length % 16 == 0) check_same_steps(opt, before);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_blocks_throw_and_leave_the_optimizer_unchanged, T, scalar_types) {
  const auto before = trained<T>(3, 60);

  std::stringstream other;
  diloco::outer::nesterov<T>{}.save(other);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(other), corrupt_state);
  check_same_steps(opt, before);

  std::stringstream bad_flag;
  diloco::serial::write_tag(bad_flag, "FINR", 1);
  diloco::serial::write_pod<std::uint64_t>(bad_flag, 1);
  diloco::serial::write_pod<std::uint8_t>(bad_flag, 2);
  BOOST_CHECK_THROW(opt.load(bad_flag), corrupt_state);
  check_same_steps(opt, before);

  // A present slot that holds an SGD block instead of an AdamW one.
  std::stringstream wrong_inner;
  diloco::serial::write_tag(wrong_inner, "FINR", 1);
  diloco::serial::write_pod<std::uint64_t>(wrong_inner, 1);
  diloco::serial::write_pod<std::uint8_t>(wrong_inner, 1);
  diloco::inner::sgd<T>{}.save(wrong_inner);
  BOOST_CHECK_THROW(opt.load(wrong_inner), corrupt_state);
  check_same_steps(opt, before);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace outer_from_inner_test
