// nesterov's step split over threads: bit for bit the step of one thread,
// whatever the thread count, and the outer Nesterov formula.
// ctest-labels: unit threads
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/outer/nesterov.hpp"

namespace outer_nesterov_threads_test {

using diloco::outer::nesterov;
using diloco::outer::nesterov_options;

/// Large enough that 3 threads each get a share (2^16 parameters at least),
/// and not a whole number of the step's 4 KiB chunks.
constexpr std::size_t threaded_n = 3 * (std::size_t{1} << 16) + 1029;

std::vector<float> delta_for(std::size_t n, int t) {
  std::vector<float> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = float(0.3 * std::cos(0.9 * double(i) + 0.4 * t) - 0.05);
  return d;
}

struct state {
  std::vector<float> global, momentum;
};

/// Three steps of fragment 0 and one of fragment 2 on `threads` threads.
std::pair<state, state> run(unsigned threads) {
  nesterov<float> opt({0.7, 0.9, threads});
  std::vector<float> g0(threaded_n, 1.0f), g2(threaded_n / 3, -2.0f);
  for (int t = 0; t < 3; ++t) opt.step(0, g0, delta_for(g0.size(), t));
  opt.step(2, g2, delta_for(g2.size(), 7));
  const auto m0 = opt.momentum(0), m2 = opt.momentum(2);
  return {{g0, {m0.begin(), m0.end()}}, {g2, {m2.begin(), m2.end()}}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

BOOST_AUTO_TEST_SUITE(outer_nesterov_threads)

BOOST_AUTO_TEST_CASE(one_thread_is_the_default) { BOOST_TEST(nesterov_options{}.threads == 1u); }

BOOST_AUTO_TEST_CASE(every_thread_count_gives_the_one_thread_result) {
  const auto one = run(1);
  for (const unsigned threads : {2u, 3u, 0u}) {
    const auto many = run(threads);
    BOOST_TEST(same_bits(many.first.global, one.first.global), threads << " threads: Θ of fragment 0");
    BOOST_TEST(same_bits(many.first.momentum, one.first.momentum), threads << " threads: m of fragment 0");
    BOOST_TEST(same_bits(many.second.global, one.second.global), threads << " threads: Θ of fragment 2");
    BOOST_TEST(same_bits(many.second.momentum, one.second.momentum), threads << " threads: m of fragment 2");
  }
}

BOOST_AUTO_TEST_CASE(the_threaded_step_is_outer_nesterov) {
  // m ← μm + Δ; Θ ← Θ − η(Δ + μm), in double, three steps.
  const auto [f0, f2] = run(3);
  std::vector<double> g(threaded_n, 1.0), m(threaded_n, 0.0);
  for (int t = 0; t < 3; ++t) {
    const auto d = delta_for(threaded_n, t);
    for (std::size_t i = 0; i < threaded_n; ++i) {
      m[i] = 0.9 * m[i] + double(d[i]);
      g[i] -= 0.7 * (double(d[i]) + 0.9 * m[i]);
    }
  }
  for (std::size_t i = 0; i < threaded_n; ++i) {
    BOOST_TEST_REQUIRE(std::fabs(f0.global[i] - g[i]) <= 1e-5 * std::fmax(1.0, std::fabs(g[i])), "Θ " << i);
    BOOST_TEST_REQUIRE(std::fabs(f0.momentum[i] - m[i]) <= 1e-5 * std::fmax(1.0, std::fabs(m[i])), "m " << i);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace outer_nesterov_threads_test
