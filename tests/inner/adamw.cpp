// ctest-labels: unit
#include "diloco/inner/adamw.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/inner/sgd.hpp"
#include "support/numeric.hpp"
#include "support/reference_adamw.hpp"

namespace inner_adamw_test {

using diloco::corrupt_state;
using diloco::inner::adamw;
using diloco::inner::adamw_options;
using diloco::test::check_close;
using diloco::test::reference_adamw;
using diloco::test::scalar_types;
using diloco::test::tolerance;

template <class T>
std::vector<T> initial_params(std::size_t n) {
  std::vector<T> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = T(1.5) + T(0.25) * T(i);
  return p;
}

/// A deterministic gradient for element i at step t, rounded to T.
template <class T>
std::vector<T> gradient(std::size_t n, int t) {
  std::vector<T> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = T(std::sin(0.7 * double(i) + 1.3 * t) + 0.2 * double(i) - 0.5);
  return g;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

/// Checks that `a` and `b` take bit-identical next steps.
template <class T>
void check_same_next_step(adamw<T> a, adamw<T> b) {
  BOOST_TEST(a.steps() == b.steps());
  auto pa = initial_params<T>(6);
  auto pb = pa;
  for (int t = 0; t < 2; ++t) {
    const auto g = gradient<T>(6, 20 + t);
    a.step(pa, g);
    b.step(pb, g);
    BOOST_TEST(pa == pb, boost::test_tools::per_element());
  }
}

template <class T>
adamw<T> trained(adamw_options options, int steps, int salt) {
  adamw<T> opt(options);
  auto p = initial_params<T>(6);
  for (int t = 1; t <= steps; ++t) opt.step(p, gradient<T>(6, t + salt));
  return opt;
}

const adamw_options options_a{0.01, 0.9, 0.999, 1e-8, 0.1};

BOOST_AUTO_TEST_SUITE(inner_adamw)

BOOST_AUTO_TEST_CASE(defaults_are_pytorchs) {
  const adamw_options o;
  BOOST_TEST(o.learning_rate == 1e-3);
  BOOST_TEST(o.beta1 == 0.9);
  BOOST_TEST(o.beta2 == 0.999);
  BOOST_TEST(o.epsilon == 1e-8);
  BOOST_TEST(o.weight_decay == 0.01);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(first_step_by_hand, T, scalar_types) {
  // p = 1, g = 0.5, lr = 0.1, λ = 0.1, β = (0.9, 0.999), ε = 1e-8:
  // decay: p = 1·(1 − 0.01) = 0.99; m = 0.1·0.5 = 0.05; v = 0.001·0.25 = 0.00025;
  // m̂ = 0.05 / (1 − 0.9) = 0.5; sqrt(v̂) = sqrt(0.00025 / 0.001) = 0.5;
  // p = 0.99 − 0.1 · 0.5 / (0.5 + 1e-8) = 0.89 + 2e-9 (to 1e-16).
  adamw<T> opt({0.1, 0.9, 0.999, 1e-8, 0.1});
  std::vector<T> p{T(1)};
  opt.step(p, std::vector<T>{T(0.5)});
  check_close(p, {0.89 + 2e-9}, tolerance<T>);
  BOOST_TEST(opt.steps() == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(constant_gradient_moves_by_the_learning_rate, T, scalar_types) {
  // With a constant gradient g the bias-corrected moments are exactly g and g²:
  // m_t = (1 − β1^t)·g and v_t = (1 − β2^t)·g², so every step is
  // p ← p·(1 − lr·λ) − lr · g / (|g| + ε).
  const adamw_options o{0.05, 0.8, 0.99, 1e-8, 0.2};
  adamw<T> opt(o);
  const std::vector<T> g{T(0.5), T(-2), T(1e-3), T(4)};
  std::vector<T> p{T(1), T(1), T(-1), T(0.5)};
  auto expected = widen(p);
  for (int t = 1; t <= 6; ++t) {
    opt.step(p, g);
    for (std::size_t i = 0; i < p.size(); ++i)
      expected[i] = expected[i] * (1 - 0.05 * 0.2) - 0.05 * double(g[i]) / (std::abs(double(g[i])) + 1e-8);
    BOOST_TEST_CONTEXT("step " << t) { check_close(p, expected, tolerance<T>); }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_pytorch_adamw, T, scalar_types) {
  for (const auto& o : {options_a, adamw_options{}, adamw_options{0.1, 0.5, 0.9, 1e-6, 0.0}}) {
    adamw<T> opt(o);
    reference_adamw ref{o, {}, {}};
    auto p = initial_params<T>(6);
    auto expected = widen(p);
    for (int t = 1; t <= 10; ++t) {
      const auto g = gradient<T>(6, t);
      opt.step(p, g);
      ref.step(expected, widen(g));
      BOOST_TEST_CONTEXT("lr " << o.learning_rate << ", step " << t) { check_close(p, expected, tolerance<T>); }
    }
    BOOST_TEST(opt.steps() == 10u);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_length_matches_pytorch_and_the_element_formula_bit_for_bit, T, scalar_types) {
  // Lengths around every vector width (a step may run whole registers, then
  // the last elements one by one): against the double-precision reference,
  // and bit for bit against the element update applied one element at a time.
  for (std::size_t n = 0; n <= 37; ++n) {
    adamw<T> opt(options_a);
    reference_adamw ref{options_a, {}, {}};
    auto p = initial_params<T>(n);
    auto expected = widen(p);
    auto by_element = p;
    std::vector<T> m(n), v(n);
    for (int t = 1; t <= 5; ++t) {
      auto g = gradient<T>(n, t);
      if (n > 3) g[3] = T(0);  // a zero gradient: v may stay 0, the step is the decay alone
      opt.step(p, g);
      ref.step(expected, widen(g));
      const auto f = diloco::inner::adamw_element<T>::at_step(options_a, std::uint64_t(t));
      for (std::size_t i = 0; i < n; ++i) f(by_element[i], m[i], v[i], g[i]);
      BOOST_TEST_CONTEXT("n " << n << ", step " << t) {
        check_close(p, expected, tolerance<T>);
        BOOST_TEST(p == by_element, boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weight_decay_is_decoupled, T, scalar_types) {
  // A zero gradient leaves m = v = 0, so only the decay acts:
  // p = 2·(1 − 0.1·0.5)^3 = 2·0.95^3 = 1.71475.
  adamw<T> opt({0.1, 0.9, 0.999, 1e-8, 0.5});
  std::vector<T> p{T(2)};
  for (int t = 0; t < 3; ++t) opt.step(p, std::vector<T>{T(0)});
  check_close(p, {1.71475}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(adamw<float>({-1e-3, 0.9, 0.999, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({nan, 0.9, 0.999, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, -0.1, 0.999, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, 1.0, 0.999, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, nan, 0.999, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, 0.9, -0.1, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, 0.9, 1.0, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<float>({1e-3, 0.9, nan, 1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<double>({1e-3, 0.9, 0.999, 0.0, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<double>({1e-3, 0.9, 0.999, -1e-8, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<double>({1e-3, 0.9, 0.999, nan, 0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<double>({1e-3, 0.9, 0.999, 1e-8, -0.01}), std::invalid_argument);
  BOOST_CHECK_THROW(adamw<double>({1e-3, 0.9, 0.999, 1e-8, nan}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(adamw<double>({0.0, 0.0, 0.0, 1e-8, 0.0}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_reproduces_the_next_step, T, scalar_types) {
  const auto original = trained<T>(options_a, 4, 0);
  std::stringstream state;
  original.save(state);

  auto restored = trained<T>(options_a, 7, 100);  // other state, overwritten by load
  restored.load(state);
  BOOST_TEST(restored.steps() == 4u);  // bias correction continues at t = 5
  check_same_next_step(original, restored);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(truncated_state_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  std::stringstream saved;
  trained<T>(options_a, 3, 0).save(saved);
  const std::string bytes = saved.str();
  const auto before = trained<T>(options_a, 2, 50);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    auto opt = before;
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
    check_same_next_step(opt, before);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(wrong_tag_or_version_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  const auto before = trained<T>(options_a, 2, 50);

  std::stringstream sgd_state;
  diloco::inner::sgd<T> other({0.1, 0.9, 0.0, false});
  std::vector<T> p{T(1)};
  other.step(p, std::vector<T>{T(1)});
  other.save(sgd_state);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(sgd_state), corrupt_state);
  check_same_next_step(opt, before);

  // The four-byte tag is followed by a little-endian 32-bit version.
  std::stringstream saved;
  trained<T>(options_a, 3, 0).save(saved);
  std::string bytes = saved.str();
  bytes[4] = 7;
  std::istringstream future(bytes);
  BOOST_CHECK_THROW(opt.load(future), corrupt_state);
  check_same_next_step(opt, before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(moments_of_different_sizes_are_corrupt, T, scalar_types) {
  std::stringstream in;
  diloco::serial::write_tag(in, "ADMW", 1);
  diloco::serial::write_pod<std::uint64_t>(in, 2);
  diloco::serial::write_array(in, std::vector<T>{T(0.1), T(0.2)});
  diloco::serial::write_array(in, std::vector<T>{T(0.1), T(0.2), T(0.3)});
  const auto before = trained<T>(options_a, 2, 50);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(in), corrupt_state);
  check_same_next_step(opt, before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reset_restarts_bias_correction, T, scalar_types) {
  auto opt = trained<T>(options_a, 5, 0);
  opt.reset();
  BOOST_TEST(opt.steps() == 0u);
  check_same_next_step(opt, adamw<T>(options_a));

  // The first step after reset is a first step again (see first_step_by_hand).
  adamw<T> again({0.1, 0.9, 0.999, 1e-8, 0.1});
  std::vector<T> p{T(1)};
  for (int t = 0; t < 3; ++t) again.step(p, std::vector<T>{T(-3)});
  again.reset();
  p = {T(1)};
  again.step(p, std::vector<T>{T(0.5)});
  check_close(p, {0.89 + 2e-9}, tolerance<T>);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace inner_adamw_test
