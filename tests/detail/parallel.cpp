// parallel_for covers every chunk exactly once in contiguous ranges, runs one
// thread inline, bounds the threads by the chunks, and hands exceptions back
// to the caller.
// ctest-labels: unit threads
#include "diloco/detail/parallel.hpp"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace detail_parallel_test {

using diloco::detail::parallel_for;
using diloco::detail::threads_for;

struct call {
  std::size_t first, last;
  std::thread::id thread;
};

std::vector<call> calls_of(std::size_t chunks, unsigned threads) {
  std::mutex mutex;
  std::vector<call> calls;
  parallel_for(chunks, threads, [&](std::size_t first, std::size_t last) {
    const std::lock_guard lock(mutex);
    calls.push_back({first, last, std::this_thread::get_id()});
  });
  return calls;
}

BOOST_AUTO_TEST_SUITE(detail_parallel)

BOOST_AUTO_TEST_CASE(every_chunk_is_covered_once_in_balanced_ranges) {
  for (const std::size_t chunks : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{7}, std::size_t{100}})
    for (const unsigned threads : {1u, 2u, 3u, 8u}) {
      const auto calls = calls_of(chunks, threads);
      const std::size_t want_calls = chunks < threads ? chunks : threads;
      BOOST_TEST_REQUIRE(calls.size() == want_calls, chunks << " chunks, " << threads << " threads");
      std::vector<int> seen(chunks, 0);
      for (const auto& c : calls) {
        BOOST_TEST(c.first < c.last);
        // Balanced: ⌊chunks/t⌋ or ⌈chunks/t⌉ each.
        BOOST_TEST(c.last - c.first >= chunks / want_calls);
        BOOST_TEST(c.last - c.first <= (chunks + want_calls - 1) / want_calls);
        for (std::size_t k = c.first; k < c.last && k < chunks; ++k) ++seen[k];
      }
      for (std::size_t k = 0; k < chunks; ++k) BOOST_TEST(seen[k] == 1, "chunk " << k);
    }
}

BOOST_AUTO_TEST_CASE(the_caller_runs_the_first_range_and_one_thread_runs_inline) {
  const auto inline_calls = calls_of(10, 1);
  BOOST_TEST_REQUIRE(inline_calls.size() == 1u);
  BOOST_TEST((inline_calls[0].thread == std::this_thread::get_id()));
  BOOST_TEST(inline_calls[0].first == 0u);
  BOOST_TEST(inline_calls[0].last == 10u);
  for (const auto& c : calls_of(10, 3)) {
    if (c.first == 0)
      BOOST_TEST((c.thread == std::this_thread::get_id()));
    else
      BOOST_TEST((c.thread != std::this_thread::get_id()));
  }
}

BOOST_AUTO_TEST_CASE(exceptions_reach_the_caller_after_every_range_ran) {
  std::atomic<int> ran{0};
  auto throw_in = [&](std::size_t bad) {
    return [&ran, bad](std::size_t first, std::size_t last) {
      ++ran;
      if (first <= bad && bad < last) throw std::runtime_error("range " + std::to_string(first));
    };
  };
  BOOST_CHECK_THROW(parallel_for(9, 3, throw_in(7)), std::runtime_error);  // in a worker
  BOOST_TEST(ran.load() == 3);
  BOOST_CHECK_THROW(parallel_for(9, 3, throw_in(0)), std::runtime_error);  // in the caller's range
  BOOST_TEST(ran.load() == 6);
  // Every range throws: the lowest range's exception wins.
  try {
    parallel_for(9, 3, [](std::size_t first, std::size_t) { throw std::runtime_error(std::to_string(first)); });
    BOOST_FAIL("no exception");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()) == "0");
  }
}

BOOST_AUTO_TEST_CASE(threads_are_bounded_by_the_work) {
  BOOST_TEST(threads_for(1000, 4, 100) == 4u);
  BOOST_TEST(threads_for(1000, 4, 300) == 3u);
  BOOST_TEST(threads_for(1000, 4, 2000) == 1u);
  BOOST_TEST(threads_for(0, 4, 100) == 1u);
  BOOST_TEST(threads_for(1000, 1, 1) == 1u);
  const unsigned cores = std::thread::hardware_concurrency();
  BOOST_TEST(threads_for(std::size_t{1} << 40, 0, 1) == (cores ? cores : 1u));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace detail_parallel_test
