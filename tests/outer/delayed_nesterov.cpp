// ctest-labels: unit
#include "diloco/outer/delayed_nesterov.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/outer/nesterov.hpp"
#include "support/numeric.hpp"

namespace outer_delayed_nesterov_test {

using diloco::corrupt_state;
using diloco::outer::delayed_nesterov;
using diloco::outer::delayed_nesterov_options;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

/// Delayed Nesterov in double as documented, per fragment, for its k-th step:
/// `b ← b + Δ`; if N ∤ k: `Θ ← Θ − ηΔ`; else `m ← μm + b/N; Θ ← Θ − η(Δ + μm); b ← 0`.
struct reference_delayed {
  double lr, momentum;
  unsigned delay;
  struct fragment_state {
    std::vector<double> m, b;
    unsigned k = 0;
  };
  std::map<std::uint32_t, fragment_state> state;

  void step(std::uint32_t f, std::vector<double>& global, const std::vector<double>& delta) {
    auto& s = state[f];
    s.m.resize(global.size());
    s.b.resize(global.size());
    ++s.k;
    for (std::size_t i = 0; i < global.size(); ++i) {
      s.b[i] += delta[i];
      if (s.k % delay != 0) {
        global[i] -= lr * delta[i];
      } else {
        s.m[i] = momentum * s.m[i] + s.b[i] / delay;
        global[i] -= lr * (delta[i] + momentum * s.m[i]);
        s.b[i] = 0;
      }
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

constexpr std::size_t size_of(std::uint32_t f) { return f == 0 ? 3 : 5; }

template <class T>
delayed_nesterov<T> trained(std::uint32_t delay, int steps, int salt) {
  delayed_nesterov<T> opt({0.6, 0.8, delay});
  std::vector<T> g0(size_of(0), T(1));
  std::vector<T> g1(size_of(1), T(1));
  for (int t = 1; t <= steps; ++t) {
    opt.step(0, g0, delta_for<T>(0, size_of(0), t + salt));
    if (t % 2) opt.step(1, g1, delta_for<T>(1, size_of(1), t + salt));
  }
  return opt;
}

/// Checks that `a` and `b` take bit-identical steps for a whole momentum period
/// and more on both fragments.
template <class T>
void check_same_steps(delayed_nesterov<T> a, delayed_nesterov<T> b, int steps) {
  for (std::uint32_t f : {0u, 1u}) {
    std::vector<T> ga(size_of(f), T(0.5));
    auto gb = ga;
    for (int t = 0; t < steps; ++t) {
      const auto d = delta_for<T>(f, size_of(f), 50 + t);
      a.step(f, ga, d);
      b.step(f, gb, d);
      BOOST_TEST(ga == gb, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE(outer_delayed_nesterov)

BOOST_AUTO_TEST_CASE_TEMPLATE(four_steps_by_hand, T, scalar_types) {
  // N = 2, η = 0.5, μ = 0.5, Θ = 1, Δ = 0.2, 0.4, 0.2, 0.2:
  // k=1 plain:    b = 0.2,  Θ = 1 − 0.5·0.2 = 0.9
  // k=2 boundary: b = 0.6,  m = 0.6/2 = 0.3,          Θ = 0.9 − 0.5·(0.4 + 0.15)   = 0.625
  // k=3 plain:    b = 0.2,  Θ = 0.625 − 0.1 = 0.525
  // k=4 boundary: b = 0.4,  m = 0.15 + 0.2 = 0.35,    Θ = 0.525 − 0.5·(0.2 + 0.175) = 0.3375
  delayed_nesterov<T> opt({0.5, 0.5, 2});
  std::vector<T> global{T(1)};
  const double deltas[] = {0.2, 0.4, 0.2, 0.2};
  const double expected[] = {0.9, 0.625, 0.525, 0.3375};
  for (int k = 0; k < 4; ++k) {
    opt.step(0, global, std::vector<T>{T(deltas[k])});
    check_close(global, {expected[k]}, tolerance<T>);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_the_documented_formula, T, scalar_types) {
  for (std::uint32_t delay : {2u, 3u, 4u}) {
    delayed_nesterov<T> opt({0.6, 0.8, delay});
    reference_delayed ref{0.6, 0.8, delay, {}};
    std::map<std::uint32_t, std::vector<T>> global;
    std::map<std::uint32_t, std::vector<double>> expected;
    for (std::uint32_t f : {0u, 1u}) {
      global[f] = std::vector<T>(size_of(f), T(1));
      expected[f] = widen(global[f]);
    }
    // Fragment 0 steps 9 times, fragment 1 five times: their periods are
    // counted separately.
    for (int t = 1; t <= 9; ++t)
      for (std::uint32_t f : {0u, 1u}) {
        if (f == 1 && t % 2 == 0) continue;
        const auto d = delta_for<T>(f, size_of(f), t);
        opt.step(f, global[f], d);
        ref.step(f, expected[f], widen(d));
        BOOST_TEST_CONTEXT("N = " << delay << ", fragment " << f << ", call " << t) {
          check_close(global[f], expected[f], tolerance<T>);
        }
      }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(delay_one_is_exactly_nesterov, T, scalar_types) {
  delayed_nesterov<T> delayed({0.7, 0.9, 1});
  diloco::outer::nesterov<T> plain({0.7, 0.9});
  for (std::uint32_t f : {0u, 1u}) {
    std::vector<T> a(size_of(f), T(1));
    auto b = a;
    for (int t = 1; t <= 12; ++t) {
      const auto d = delta_for<T>(f, size_of(f), t);
      delayed.step(f, a, d);
      plain.step(f, b, d);
      BOOST_TEST(a == b, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(defaults_and_invalid_options) {
  const delayed_nesterov_options o;
  BOOST_TEST(o.learning_rate == 0.7);
  BOOST_TEST(o.momentum == 0.9);
  BOOST_TEST(o.delay == 4u);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(delayed_nesterov<float>({0.7, 0.9, 0}), std::invalid_argument);
  BOOST_CHECK_THROW(delayed_nesterov<float>({-0.7, 0.9, 4}), std::invalid_argument);
  BOOST_CHECK_THROW(delayed_nesterov<float>({nan, 0.9, 4}), std::invalid_argument);
  BOOST_CHECK_THROW(delayed_nesterov<double>({0.7, 1.0, 4}), std::invalid_argument);
  BOOST_CHECK_THROW(delayed_nesterov<double>({0.7, -0.5, 4}), std::invalid_argument);
  BOOST_CHECK_THROW(delayed_nesterov<double>({0.7, nan, 4}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(delayed_nesterov<double>({0.0, 0.0, 1}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_keeps_the_position_in_the_period, T, scalar_types) {
  // After 5 steps with N = 3 fragment 0 is two steps into its period with a
  // non-zero buffer b; the restored copy must hit the boundary at the same call.
  const auto original = trained<T>(3, 5, 0);
  std::stringstream state;
  original.save(state);
  auto restored = trained<T>(3, 1, 70);  // other state, overwritten by load
  restored.load(state);
  check_same_steps(original, restored, 7);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(truncated_state_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  std::stringstream saved;
  trained<T>(3, 5, 0).save(saved);
  const std::string bytes = saved.str();
  const auto before = trained<T>(3, 4, 70);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    auto opt = before;
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
    check_same_steps(opt, before, 4);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_blocks_throw_and_leave_the_optimizer_unchanged, T, scalar_types) {
  const auto before = trained<T>(3, 4, 70);

  std::stringstream plain;
  diloco::outer::nesterov<T>{}.save(plain);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(plain), corrupt_state);
  check_same_steps(opt, before, 4);

  // One fragment whose momentum and buffer differ in size.
  std::stringstream mismatched;
  diloco::serial::write_tag(mismatched, "DNST", 1);
  diloco::serial::write_pod<std::uint64_t>(mismatched, 1);
  diloco::serial::write_pod<std::uint64_t>(mismatched, 2);
  diloco::serial::write_array(mismatched, std::vector<T>{T(1), T(2)});
  diloco::serial::write_array(mismatched, std::vector<T>{T(1), T(2), T(3)});
  BOOST_CHECK_THROW(opt.load(mismatched), corrupt_state);
  check_same_steps(opt, before, 4);

  std::stringstream many_fragments;
  diloco::serial::write_tag(many_fragments, "DNST", 1);
  diloco::serial::write_pod<std::uint64_t>(many_fragments, (std::uint64_t{1} << 24) + 1);
  BOOST_CHECK_THROW(opt.load(many_fragments), corrupt_state);
  check_same_steps(opt, before, 4);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace outer_delayed_nesterov_test
