// ctest-labels: unit
#include "diloco/inner/sgd.hpp"

#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/inner/adamw.hpp"
#include "support/numeric.hpp"

namespace inner_sgd_test {

using diloco::corrupt_state;
using diloco::inner::sgd;
using diloco::inner::sgd_options;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

/// PyTorch's `torch.optim.SGD` (dampening 0) for one parameter vector, in
/// double, written from its documented algorithm:
/// `g ← g + λθ; b ← (t = 1 ? g : μb + g); g ← nesterov ? g + μb : b; θ ← θ − lr·g`.
struct reference_sgd {
  double lr, momentum, weight_decay;
  bool nesterov;
  std::vector<double> buffer;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g) {
    ++t;
    buffer.resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + weight_decay * p[i];
      if (momentum != 0) {
        buffer[i] = t == 1 ? d : momentum * buffer[i] + d;
        d = nesterov ? d + momentum * buffer[i] : buffer[i];
      }
      p[i] -= lr * d;
    }
  }
};

template <class T>
std::vector<T> initial_params(std::size_t n) {
  std::vector<T> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = T(0.5) + T(0.25) * T(i) - T(n / 2);
  return p;
}

/// A deterministic gradient for element i at step t, rounded to T.
template <class T>
std::vector<T> gradient(std::size_t n, int t) {
  std::vector<T> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = T(std::sin(0.7 * double(i) + 1.3 * t) + 0.1 * double(i));
  return g;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

/// Runs `steps` steps of `sgd<T>` and of the double reference from the same
/// start and compares the parameters after every step.
template <class T>
void check_against_reference(sgd_options options, int steps) {
  constexpr std::size_t n = 7;
  sgd<T> opt(options);
  reference_sgd ref{options.learning_rate, options.momentum, options.weight_decay, options.nesterov, {}};
  auto p = initial_params<T>(n);
  auto expected = widen(p);
  for (int t = 1; t <= steps; ++t) {
    const auto g = gradient<T>(n, t);
    opt.step(p, g);
    ref.step(expected, widen(g));
    BOOST_TEST_CONTEXT("step " << t) { check_close(p, expected, tolerance<T>); }
  }
  BOOST_TEST(opt.steps() == std::uint64_t(steps));
}

/// Checks that `a` and `b` take bit-identical next steps.
template <class T>
void check_same_next_step(sgd<T> a, sgd<T> b) {
  BOOST_TEST(a.steps() == b.steps());
  auto pa = initial_params<T>(7);
  auto pb = pa;
  const auto g = gradient<T>(7, 11);
  a.step(pa, g);
  b.step(pb, g);
  BOOST_TEST(pa == pb, boost::test_tools::per_element());
  // A second step exercises the momentum buffer the first one left behind.
  a.step(pa, g);
  b.step(pb, g);
  BOOST_TEST(pa == pb, boost::test_tools::per_element());
}

template <class T>
sgd<T> trained(sgd_options options, int steps, int salt) {
  sgd<T> opt(options);
  auto p = initial_params<T>(7);
  for (int t = 1; t <= steps; ++t) opt.step(p, gradient<T>(7, t + salt));
  return opt;
}

const sgd_options with_momentum{0.05, 0.9, 0.01, false};

BOOST_AUTO_TEST_SUITE(inner_sgd)

BOOST_AUTO_TEST_CASE_TEMPLATE(two_steps_by_hand, T, scalar_types) {
  // p = 1, g = 0.5 each step, lr = 0.1, λ = 0.1.
  // plain:    d = 0.5 + 0.1·1 = 0.6, p = 1 − 0.06 = 0.94;
  //           d = 0.5 + 0.094 = 0.594, p = 0.94 − 0.0594 = 0.8806.
  // μ = 0.9:  b = 0.6, p = 0.94; b = 0.54 + 0.594 = 1.134, p = 0.94 − 0.1134 = 0.8266.
  // Nesterov: b = 0.6, step 0.6 + 0.54 = 1.14, p = 0.886;
  //           d = 0.5 + 0.0886 = 0.5886, b = 0.54 + 0.5886 = 1.1286,
  //           step 0.5886 + 1.01574 = 1.60434, p = 0.886 − 0.160434 = 0.725566.
  const std::vector<T> g{T(0.5)};
  struct hand_case {
    sgd_options options;
    double after_one, after_two;
  };
  for (const auto& c :
       {hand_case{{0.1, 0.0, 0.1, false}, 0.94, 0.8806}, hand_case{{0.1, 0.9, 0.1, false}, 0.94, 0.8266},
        hand_case{{0.1, 0.9, 0.1, true}, 0.886, 0.725566}}) {
    sgd<T> opt(c.options);
    std::vector<T> p{T(1)};
    opt.step(p, g);
    check_close(p, {c.after_one}, tolerance<T>);
    opt.step(p, g);
    check_close(p, {c.after_two}, tolerance<T>);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_pytorch_sgd_plain, T, scalar_types) {
  check_against_reference<T>({0.1, 0.0, 0.0, false}, 6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_pytorch_sgd_weight_decay, T, scalar_types) {
  check_against_reference<T>({0.1, 0.0, 0.05, false}, 6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_pytorch_sgd_momentum, T, scalar_types) {
  check_against_reference<T>({0.05, 0.9, 0.01, false}, 8);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_pytorch_sgd_nesterov, T, scalar_types) {
  check_against_reference<T>({0.05, 0.9, 0.01, true}, 8);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(learning_rate_one_subtracts_the_gradient, T, scalar_types) {
  // The data-parallel preset relies on this: p − 1·g.
  sgd<T> opt({1.0, 0.0, 0.0, false});
  std::vector<T> p{T(1), T(-2), T(0.25)};
  const std::vector<T> g{T(0.5), T(0.25), T(-1)};
  opt.step(p, g);
  BOOST_TEST(p == (std::vector<T>{T(0.5), T(-2.25), T(1.25)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(sgd<float>({-0.1, 0.0, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<float>({nan, 0.0, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<float>({0.1, -0.1, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<float>({0.1, 1.0, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<float>({0.1, nan, 0.0, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<double>({0.1, 0.0, -1e-3, false}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<double>({0.1, 0.0, nan, false}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(sgd<double>({0.0, 0.0, 0.0, false}));
  BOOST_CHECK_NO_THROW(sgd<double>({0.1, 0.99, 0.1, true}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_reproduces_the_next_step, T, scalar_types) {
  for (const auto& options : {with_momentum, sgd_options{0.05, 0.0, 0.0, false}}) {
    const auto original = trained<T>(options, 3, 0);
    std::stringstream state;
    original.save(state);

    auto restored = trained<T>(options, 5, 100);  // other state, overwritten by load
    restored.load(state);
    BOOST_TEST(restored.steps() == 3u);
    check_same_next_step(original, restored);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(truncated_state_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  std::stringstream saved;
  trained<T>(with_momentum, 3, 0).save(saved);
  const std::string bytes = saved.str();
  const auto before = trained<T>(with_momentum, 2, 50);
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    auto opt = before;
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
    if (length % 8 == 0 || length + 1 == bytes.size()) check_same_next_step(opt, before);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(wrong_tag_or_version_throws_and_leaves_the_optimizer_unchanged, T, scalar_types) {
  const auto before = trained<T>(with_momentum, 2, 50);

  std::stringstream adamw_state;
  diloco::inner::adamw<T> other;
  std::vector<T> p{T(1)};
  other.step(p, std::vector<T>{T(1)});
  other.save(adamw_state);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(adamw_state), corrupt_state);
  check_same_next_step(opt, before);

  // The four-byte tag is followed by a little-endian 32-bit version.
  std::stringstream saved;
  trained<T>(with_momentum, 3, 0).save(saved);
  std::string bytes = saved.str();
  bytes[4] = 2;
  std::istringstream future(bytes);
  BOOST_CHECK_THROW(opt.load(future), corrupt_state);
  check_same_next_step(opt, before);

  std::istringstream garbage("not an optimizer state at all");
  BOOST_CHECK_THROW(opt.load(garbage), corrupt_state);
  check_same_next_step(opt, before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(implausible_array_length_throws, T, scalar_types) {
  std::stringstream in;
  diloco::serial::write_tag(in, "SGD1", 1);
  diloco::serial::write_pod<std::uint64_t>(in, 3);
  diloco::serial::write_pod<std::uint64_t>(in, diloco::serial::max_state_elements + 1);
  const auto before = trained<T>(with_momentum, 2, 50);
  auto opt = before;
  BOOST_CHECK_THROW(opt.load(in), corrupt_state);
  check_same_next_step(opt, before);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

// Regression: `serial::read_array` allocated the announced length before it
// read a byte, so a truncated block announcing up to `max_state_elements`
// (2^40) elements threw `std::bad_alloc` instead of `corrupt_state` (or, where
// memory is overcommitted, zero-filled terabytes). The address space is capped
// below so the test behaves the same on every host.
BOOST_AUTO_TEST_CASE(truncated_state_announcing_a_huge_array_throws_corrupt_state) {
  if (sanitized) {
    BOOST_TEST_MESSAGE("skipped: sanitizers abort on a multi-terabyte allocation");
    return;
  }
  std::stringstream in;
  diloco::serial::write_tag(in, "SGD1", 1);
  diloco::serial::write_pod<std::uint64_t>(in, 3);
  diloco::serial::write_pod<std::uint64_t>(in, diloco::serial::max_state_elements);  // and no elements

  rlimit saved{};
  BOOST_TEST_REQUIRE(getrlimit(RLIMIT_AS, &saved) == 0);
  rlimit capped = saved;
  const rlim_t one_tib = rlim_t{1} << 40;
  if (capped.rlim_cur == RLIM_INFINITY || capped.rlim_cur > one_tib) capped.rlim_cur = one_tib;
  BOOST_TEST_REQUIRE(setrlimit(RLIMIT_AS, &capped) == 0);

  const auto before = trained<double>(with_momentum, 2, 50);
  auto opt = before;
  bool corrupt = false;
  try {
    opt.load(in);
  } catch (const corrupt_state&) {
    corrupt = true;
  } catch (const std::bad_alloc&) {
  }
  setrlimit(RLIMIT_AS, &saved);
  BOOST_TEST(corrupt, "a truncated block must throw corrupt_state");
  check_same_next_step(opt, before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reset_forgets_momentum_and_steps, T, scalar_types) {
  auto opt = trained<T>(with_momentum, 4, 0);
  BOOST_TEST(opt.steps() == 4u);
  opt.reset();
  BOOST_TEST(opt.steps() == 0u);
  check_same_next_step(opt, sgd<T>(with_momentum));
}

BOOST_AUTO_TEST_CASE(options_are_kept_and_can_change) {
  sgd<double> opt({0.5, 0.0, 0.0, false});
  BOOST_TEST(opt.options().learning_rate == 0.5);
  opt.options().learning_rate = 0.25;
  std::vector<double> p{1.0};
  opt.step(p, std::vector<double>{1.0});
  BOOST_TEST(p[0] == 0.75);  // 1 − 0.25·1
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace inner_sgd_test
