// ctest-labels: unit
#include "diloco/outer/nesterov.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/outer/delayed_nesterov.hpp"
#include "support/numeric.hpp"

namespace outer_nesterov_test {

using diloco::corrupt_state;
using diloco::outer::nesterov;
using diloco::outer::nesterov_options;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

/// Outer Nesterov in double, one momentum buffer per fragment:
/// `m ← μm + Δ; Θ ← Θ − η(Δ + μm)`.
struct reference_nesterov {
  double lr, momentum;
  std::map<std::uint32_t, std::vector<double>> m;

  void step(std::uint32_t f, std::vector<double>& global, const std::vector<double>& delta) {
    auto& buf = m[f];
    buf.resize(global.size());
    for (std::size_t i = 0; i < global.size(); ++i) {
      buf[i] = momentum * buf[i] + delta[i];
      global[i] -= lr * (delta[i] + momentum * buf[i]);
    }
  }
};

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

/// Fragment sizes used by the multi-fragment tests: fragment 1 is never stepped.
constexpr std::size_t size_of(std::uint32_t f) { return f == 0 ? 3 : 5; }

template <class T>
nesterov<T> trained(int steps, int salt) {
  nesterov<T> opt({0.7, 0.9});
  std::vector<T> g0(size_of(0), T(1));
  std::vector<T> g2(size_of(2), T(1));
  for (int t = 1; t <= steps; ++t) {
    opt.step(0, g0, delta_for<T>(0, size_of(0), t + salt));
    opt.step(2, g2, delta_for<T>(2, size_of(2), t + salt));
  }
  return opt;
}

/// Checks that `a` and `b` hold the same momentum and take bit-identical next steps.
template <class T>
void check_same_state(nesterov<T> a, nesterov<T> b) {
  for (std::uint32_t f : {0u, 2u}) {
    const auto ma = a.momentum(f);
    const auto mb = b.momentum(f);
    BOOST_TEST(std::vector<T>(ma.begin(), ma.end()) == std::vector<T>(mb.begin(), mb.end()),
               boost::test_tools::per_element());
    std::vector<T> ga(size_of(f), T(0.5));
    auto gb = ga;
    const auto d = delta_for<T>(f, size_of(f), 99);
    a.step(f, ga, d);
    b.step(f, gb, d);
    BOOST_TEST(ga == gb, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE(outer_nesterov)

BOOST_AUTO_TEST_CASE_TEMPLATE(three_steps_by_hand, T, scalar_types) {
  // η = 0.7, μ = 0.9, Θ = 1, Δ = 0.1 every step:
  // m = 0.1,                 Θ = 1 − 0.7·(0.1 + 0.09)        = 0.867
  // m = 0.09 + 0.1 = 0.19,   Θ = 0.867 − 0.7·(0.1 + 0.171)   = 0.6773
  // m = 0.171 + 0.1 = 0.271, Θ = 0.6773 − 0.7·(0.1 + 0.2439) = 0.43657
  nesterov<T> opt({0.7, 0.9});
  BOOST_TEST(opt.momentum(0).empty());
  std::vector<T> global{T(1)};
  const std::vector<T> delta{T(0.1)};
  const double expected_global[] = {0.867, 0.6773, 0.43657};
  const double expected_momentum[] = {0.1, 0.19, 0.271};
  for (int t = 0; t < 3; ++t) {
    opt.step(0, global, delta);
    check_close(global, {expected_global[t]}, tolerance<T>);
    const auto m = opt.momentum(0);
    check_close(std::vector<T>(m.begin(), m.end()), {expected_momentum[t]}, tolerance<T>);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_delta_overlapping_the_global_is_read_in_element_order, T, scalar_types) {
  // One buffer b of n + 1 values; η = 0.1, μ = 0.5, a first step (m = 0, so
  // m ← Δ and Θ ← Θ − η(1 + μ)Δ), on every core. In element order:
  //  - Δ one behind Θ (Δ[i] = b[i], Θ[i] = b[i+1]): Δ[i] is Θ[i−1] as
  //    already updated, a recurrence;
  //  - Δ one ahead of Θ (Δ[i] = b[i+1], Θ[i] = b[i]): Δ[i] is not yet
  //    written, the original b[i+1].
  const std::size_t n = 3 * (std::size_t{1} << 16) + 37;  // enough for 3 threads, were it split
  const double eta = 0.1, mu = 0.5, factor = eta * (1 + mu);
  std::vector<double> b0(n + 1);
  for (std::size_t i = 0; i <= n; ++i) b0[i] = 1.0 + 0.001 * double(i % 13);

  std::vector<T> b(b0.begin(), b0.end());
  nesterov<T> behind({eta, mu, 0});
  behind.step(0, std::span<T>(b).subspan(1), std::span<const T>(b).first(n));
  std::vector<double> want(n), want_m(n);
  for (std::size_t i = 0; i < n; ++i) {
    want_m[i] = i == 0 ? b0[0] : want[i - 1];
    want[i] = b0[i + 1] - factor * want_m[i];
  }
  check_close(std::span<const T>(b).subspan(1), want, tolerance<T>);
  check_close(behind.momentum(0), want_m, tolerance<T>);
  BOOST_TEST(double(b[0]) == b0[0]);  // read, never written

  std::vector<T> a(b0.begin(), b0.end());
  nesterov<T> ahead({eta, mu, 0});
  ahead.step(0, std::span<T>(a).first(n), std::span<const T>(a).subspan(1));
  for (std::size_t i = 0; i < n; ++i) {
    want_m[i] = b0[i + 1];
    want[i] = b0[i] - factor * b0[i + 1];
  }
  check_close(std::span<const T>(a).first(n), want, tolerance<T>);
  check_close(ahead.momentum(0), want_m, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(defaults_are_dilocos, T, scalar_types) {
  const nesterov_options o;
  BOOST_TEST(o.learning_rate == 0.7);
  BOOST_TEST(o.momentum == 0.9);
  // μ = 0 is outer SGD: Θ = 2 − 0.5·0.5 = 1.75, twice: 1.5.
  nesterov<T> opt({0.5, 0.0});
  std::vector<T> global{T(2)};
  opt.step(0, global, std::vector<T>{T(0.5)});
  opt.step(0, global, std::vector<T>{T(0.5)});
  BOOST_TEST(global[0] == T(1.5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fragments_keep_separate_momentum, T, scalar_types) {
  nesterov<T> opt({0.7, 0.9});
  reference_nesterov ref{0.7, 0.9, {}};
  std::map<std::uint32_t, std::vector<T>> global;
  std::map<std::uint32_t, std::vector<double>> expected;
  for (std::uint32_t f : {0u, 2u}) {
    global[f] = std::vector<T>(size_of(f), T(1));
    expected[f] = widen(global[f]);
  }
  // Uneven interleaving: fragment 0 steps five times, fragment 2 three times.
  const std::uint32_t order[] = {0, 2, 0, 0, 2, 0, 2, 0};
  int t = 0;
  for (std::uint32_t f : order) {
    ++t;
    const auto d = delta_for<T>(f, size_of(f), t);
    opt.step(f, global[f], d);
    ref.step(f, expected[f], widen(d));
    BOOST_TEST_CONTEXT("fragment " << f << ", call " << t) {
      check_close(global[f], expected[f], tolerance<T>);
      const auto m = opt.momentum(f);
      check_close(std::vector<T>(m.begin(), m.end()), ref.m[f], tolerance<T>);
    }
  }
  BOOST_TEST(opt.momentum(1).empty());
}

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(nesterov<float>({-0.7, 0.9}), std::invalid_argument);
  BOOST_CHECK_THROW(nesterov<float>({nan, 0.9}), std::invalid_argument);
  BOOST_CHECK_THROW(nesterov<float>({0.7, -0.1}), std::invalid_argument);
  BOOST_CHECK_THROW(nesterov<double>({0.7, 1.0}), std::invalid_argument);
  BOOST_CHECK_THROW(nesterov<double>({0.7, nan}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(nesterov<double>({0.0, 0.0}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_reproduces_every_fragment, T, scalar_types) {
  const auto original = trained<T>(3, 0);
  std::stringstream state;
  original.save(state);
  auto restored = trained<T>(5, 40);  // other state, overwritten by load
  restored.load(state);
  check_same_state(original, restored);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(truncated_state_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  std::stringstream saved;
  trained<T>(3, 0).save(saved);
  const std::string bytes = saved.str();
  const auto before = trained<T>(2, 40);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    auto opt = before;
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
    check_same_state(opt, before);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_blocks_throw_and_leave_the_optimizer_unchanged, T, scalar_types) {
  const auto before = trained<T>(2, 40);

  std::stringstream delayed;
  diloco::outer::delayed_nesterov<T>{}.save(delayed);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(delayed), corrupt_state);
  check_same_state(opt, before);

  std::stringstream many_fragments;
  diloco::serial::write_tag(many_fragments, "NSTV", 1);
  diloco::serial::write_pod<std::uint64_t>(many_fragments, std::uint64_t{1} << 40);
  BOOST_CHECK_THROW(opt.load(many_fragments), corrupt_state);
  check_same_state(opt, before);

  std::stringstream future;
  diloco::serial::write_tag(future, "NSTV", 2);
  diloco::serial::write_pod<std::uint64_t>(future, 0);
  BOOST_CHECK_THROW(opt.load(future), corrupt_state);
  check_same_state(opt, before);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace outer_nesterov_test
