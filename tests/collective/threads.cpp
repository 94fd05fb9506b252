// ctest-labels: unit threads
// The threads backend of `diloco::collective` and the `unit_model` model
// on it: each collective against values computed here by formula, deadlines,
// a rank that leaves, sizes that do not fit.
#include "diloco/collective/threads.hpp"
#include "diloco/collective/unit_model.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/params/layout.hpp"

namespace collective_threads_test {

using namespace std::chrono_literals;
using diloco::errc;
using diloco::reduce_op;
using diloco::threads::communicator;

diloco::time_point far() { return diloco::clock::now() + 60s; }

/// Runs `body(rank, communicator)` on one thread per rank of a fresh unit
/// of `ranks` and returns each rank's result.
std::vector<std::error_code> on_ranks(std::size_t ranks,
                                      const std::function<std::error_code(std::size_t, communicator&)>& body) {
  auto unit = diloco::threads::make_unit(ranks);
  std::vector<std::error_code> results(ranks);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < ranks; ++r) threads.emplace_back([&, r] { results[r] = body(r, unit[r]); });
  }
  return results;
}

bool all_ok(const std::vector<std::error_code>& results) {
  for (const auto& e : results)
    if (e) return false;
  return true;
}

BOOST_AUTO_TEST_SUITE(collective_threads)

BOOST_AUTO_TEST_CASE(all_reduce_sums_and_averages_over_three_ranks) {
  constexpr std::size_t n = 1000;
  std::vector<std::vector<float>> sums(3, std::vector<float>(n)), means(3, std::vector<float>(n));
  std::vector<std::vector<double>> in_place(3, std::vector<double>(n));
  std::vector<std::size_t> ranks(3), sizes(3);
  // Boost.Test's assertions are made on the main thread only.
  const auto results = on_ranks(3, [&](std::size_t r, communicator& c) {
    ranks[r] = c.rank();
    sizes[r] = c.size();
    // Rank k holds 10k + i/2 at element i.
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = float(10 * r) + float(i) * 0.5f;
    for (std::size_t i = 0; i < n; ++i) in_place[r][i] = double(10 * r) + double(i) * 0.5;
    if (auto e = c.all_reduce(std::span<const float>(in), std::span<float>(sums[r]), reduce_op::sum, far())) return e;
    if (auto e = c.all_reduce(std::span<const float>(in), std::span<float>(means[r]), reduce_op::mean, far())) return e;
    return c.all_reduce(std::span<const double>(in_place[r]), std::span<double>(in_place[r]), reduce_op::mean, far());
  });
  BOOST_TEST(all_ok(results));
  BOOST_TEST(ranks == (std::vector<std::size_t>{0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(sizes == std::vector<std::size_t>(3, 3), boost::test_tools::per_element());
  // Σ_k (10k + i/2) over k = 0, 1, 2 is 30 + 1.5 i, and the mean 10 + i/2:
  // exact in float for these i.
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      BOOST_TEST(sums[r][i] == 30.0f + 1.5f * float(i));
      BOOST_TEST(means[r][i] == 10.0f + 0.5f * float(i));
      BOOST_TEST(in_place[r][i] == 10.0 + 0.5 * double(i));
    }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_gives_each_rank_its_block_of_the_sum) {
  constexpr std::size_t block = 7;
  std::vector<std::vector<double>> out(4, std::vector<double>(block));
  const auto results = on_ranks(4, [&](std::size_t r, communicator& c) {
    // Rank k holds k + 100 j at element j of 4 blocks.
    std::vector<double> in(4 * block);
    for (std::size_t j = 0; j < in.size(); ++j) in[j] = double(r) + 100.0 * double(j);
    return c.reduce_scatter(std::span<const double>(in), std::span<double>(out[r]), reduce_op::sum, far());
  });
  BOOST_TEST(all_ok(results));
  // Rank r gets Σ_k (k + 100 (r·block + i)) = 6 + 400 (r·block + i).
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t i = 0; i < block; ++i) BOOST_TEST(out[r][i] == 6.0 + 400.0 * double(r * block + i));
}

BOOST_AUTO_TEST_CASE(all_gather_puts_rank_k_in_block_k_and_broadcast_copies_the_root) {
  constexpr std::size_t n = 5;
  std::vector<std::vector<float>> gathered(3, std::vector<float>(3 * n)), broadcast(3, std::vector<float>(n));
  const auto results = on_ranks(3, [&](std::size_t r, communicator& c) {
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = float(1000 * r + i);
    if (auto e = c.all_gather(std::span<const float>(in), std::span<float>(gathered[r]), far())) return e;
    broadcast[r] = in;
    return c.broadcast(std::span<float>(broadcast[r]), 2, far());
  });
  BOOST_TEST(all_ok(results));
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < 3; ++k) BOOST_TEST(gathered[r][k * n + i] == float(1000 * k + i));
      BOOST_TEST(broadcast[r][i] == float(2000 + i));
    }
}

BOOST_AUTO_TEST_CASE(nobody_leaves_a_barrier_before_everybody_has_reached_it) {
  std::atomic<int> reached{0};
  std::vector<int> seen(4, -1);
  const auto results = on_ranks(4, [&](std::size_t r, communicator& c) {
    if (r == 3) std::this_thread::sleep_for(20ms);  // the last one late
    reached.fetch_add(1);
    const auto e = c.barrier(far());
    seen[r] = reached.load();
    return e;
  });
  BOOST_TEST(all_ok(results));
  for (int s : seen) BOOST_TEST(s == 4);
}

BOOST_AUTO_TEST_CASE(a_unit_of_one_rank_computes_alone) {
  auto unit = diloco::threads::make_unit(1);
  std::vector<float> x{1.0f, 2.0f}, y(2), gathered(2);
  BOOST_TEST(!unit[0].all_reduce(std::span<const float>(x), std::span<float>(y), reduce_op::mean, far()));
  BOOST_TEST(!unit[0].all_gather(std::span<const float>(x), std::span<float>(gathered), far()));
  BOOST_TEST(!unit[0].barrier(far()));
  BOOST_TEST(y == x);
  BOOST_TEST(gathered == x);
  BOOST_CHECK_THROW(diloco::threads::make_unit(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_comes_times_out_and_ends_the_unit) {
  auto unit = diloco::threads::make_unit(2);
  std::vector<float> x(3, 1.0f), y(3);
  const auto started = diloco::clock::now();
  const auto e = unit[0].all_reduce(std::span<const float>(x), std::span<float>(y), reduce_op::sum, started + 50ms);
  BOOST_TEST((e == make_error_code(errc::timed_out)));
  BOOST_TEST((diloco::clock::now() >= started + 50ms));
  // The late rank finds the unit ended, and so does every later call.
  BOOST_TEST((unit[1].all_reduce(std::span<const float>(x), std::span<float>(y), reduce_op::sum, far()) ==
              make_error_code(errc::rank_lost)));
  BOOST_TEST((unit[0].barrier(far()) == make_error_code(errc::rank_lost)));
}

BOOST_AUTO_TEST_CASE(a_rank_that_leaves_wakes_the_waiting_rank_at_once) {
  // Rank 0 waits with a deadline a minute away while rank 1's communicator
  // is destroyed: rank_lost, not timed_out, says the departure woke it (or
  // ended the unit before it arrived), not its deadline.
  auto unit = diloco::threads::make_unit(2);
  std::vector<double> x(4, 1.0), y(4);
  std::error_code waited;
  std::atomic<bool> inside{false};
  {
    std::jthread waiting([&] {
      inside = true;
      waited = unit[0].all_reduce(std::span<const double>(x), std::span<double>(y), reduce_op::sum, far());
    });
    while (!inside) std::this_thread::yield();
    std::this_thread::sleep_for(10ms);  // most likely inside the wait; either way the result is rank_lost
    communicator leaving = std::move(unit[1]);
  }
  BOOST_TEST((waited == make_error_code(errc::rank_lost)));
}

BOOST_AUTO_TEST_CASE(sizes_that_do_not_fit_are_refused_and_end_the_unit) {
  // Locally wrong: reduce_scatter's input is not size() blocks of the output.
  const auto local = on_ranks(2, [&](std::size_t r, communicator& c) {
    std::vector<float> in(r == 0 ? 5 : 6), out(3);
    return c.reduce_scatter(std::span<const float>(in), std::span<float>(out), reduce_op::sum, far());
  });
  const auto invalid = make_error_code(std::errc::invalid_argument);
  const auto lost = make_error_code(errc::rank_lost);
  BOOST_TEST((local[0] == invalid));
  BOOST_TEST((local[1] == lost));

  // Valid on each rank, but the ranks disagree on the length.
  const auto disagree = on_ranks(2, [&](std::size_t r, communicator& c) {
    std::vector<float> in(4 + r), out(4 + r);
    return c.all_reduce(std::span<const float>(in), std::span<float>(out), reduce_op::sum, far());
  });
  BOOST_TEST(((disagree[0] == invalid && disagree[1] == lost) || (disagree[0] == lost && disagree[1] == invalid)));

  // A root out of range, and overlapping spans.
  auto unit = diloco::threads::make_unit(2);
  std::vector<float> data(8);
  BOOST_TEST((unit[0].broadcast(std::span<float>(data), 2, far()) == invalid));
  auto again = diloco::threads::make_unit(1);
  BOOST_TEST((again[0].all_reduce(std::span<const float>(data.data(), 4), std::span<float>(data.data() + 2, 4),
                                  reduce_op::sum, far()) == invalid));
}

/// A model of n parameters whose loss on a batch is the mean over its
/// examples x of ½‖w − x‖², so its gradient is w − mean(x).
struct quadratic {
  using scalar_type = double;
  using batch_type = std::vector<std::vector<double>>;

  explicit quadratic(std::size_t n, double start) : w(n, start), g(n) { shape.add("w", n); }

  const diloco::parameter_layout& layout() const noexcept { return shape; }
  std::span<double> parameters() noexcept { return w; }
  std::span<const double> gradients() const noexcept { return g; }
  diloco::step_stats compute_gradients(const batch_type& batch) {
    double loss = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      double mean = 0;
      for (const auto& x : batch) mean += x[i];
      mean /= double(batch.size());
      g[i] = w[i] - mean;
    }
    for (const auto& x : batch)
      for (std::size_t i = 0; i < w.size(); ++i) loss += 0.5 * (w[i] - x[i]) * (w[i] - x[i]);
    return {loss / double(batch.size()), batch.size()};
  }

  diloco::parameter_layout shape;
  std::vector<double> w, g;
};
static_assert(diloco::model<diloco::unit_model<quadratic, communicator>>);

BOOST_AUTO_TEST_CASE(unit_model_starts_from_rank_0_and_averages_the_gradients) {
  // Rank r's batch: two examples, every element 4r + 1 and 4r + 3, so its
  // mean is 4r + 2; the unit's mean over both ranks is 4, its batch's
  // gradient at w = 10 is 6, and the loss (½(w−x)²) of rank r is the mean of
  // ½(9 − 4r)² and ½(7 − 4r)².
  std::vector<std::vector<double>> gradients(2), starts(2);
  std::vector<diloco::step_stats> stats(2);
  const auto results = on_ranks(2, [&](std::size_t r, communicator& c) {
    quadratic local(3, r == 0 ? 10.0 : -7.0);  // rank 1 starts elsewhere
    diloco::unit_model unit(local, c);
    starts[r] = local.w;
    const double a = 4.0 * double(r) + 1.0, b = a + 2.0;
    stats[r] = unit.compute_gradients({{a, a, a}, {b, b, b}});
    gradients[r].assign(unit.gradients().begin(), unit.gradients().end());
    return std::error_code{};
  });
  BOOST_TEST(all_ok(results));
  auto half_square = [](double d) { return 0.5 * d * d; };
  // Per example the loss sums over the 3 elements.
  const double loss0 = 3.0 * (half_square(9.0) + half_square(7.0)) / 2.0;
  const double loss1 = 3.0 * (half_square(5.0) + half_square(3.0)) / 2.0;
  for (std::size_t r = 0; r < 2; ++r) {
    BOOST_TEST(starts[r] == std::vector<double>(3, 10.0), boost::test_tools::per_element());
    BOOST_TEST(gradients[r] == std::vector<double>(3, 6.0), boost::test_tools::per_element());
    BOOST_TEST(stats[r].tokens == 4u);
    BOOST_TEST(stats[r].loss == (loss0 + loss1) / 2.0);
  }
}

BOOST_AUTO_TEST_CASE(unit_model_throws_once_the_unit_has_ended) {
  auto unit = diloco::threads::make_unit(2);
  { communicator leaving = std::move(unit[1]); }
  quadratic local(2, 0.0);
  try {
    diloco::unit_model ranked(local, unit[0]);
    BOOST_FAIL("constructed on an ended unit");
  } catch (const std::system_error& e) {
    BOOST_TEST((e.code() == make_error_code(errc::rank_lost)));
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace collective_threads_test
