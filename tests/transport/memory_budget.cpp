// ctest-labels: unit
// The memory budget the network transports share
// (diloco/transport/detail/memory_budget.hpp): which unfinished messages give
// way when an endpoint holds more than its budget, that the one advancing is
// never among them, and when a send is admitted. Every number is worked out
// by hand in the comments.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include <diloco/transport/detail/memory_budget.hpp>

namespace transport_memory_budget_test {

using diloco::detail::memory_use;
using diloco::detail::unfinished_messages;

/// Runs an eviction after `key` advanced to `bytes` and returns the keys
/// let go, in order; each let go message is gone (0 bytes left).
std::vector<int> advance(unfinished_messages<int>& held, int key, std::uint64_t bytes) {
  held.advanced(key, bytes);
  std::vector<int> gone;
  held.evict(key, [&gone](int victim) -> std::uint64_t {
    gone.push_back(victim);
    return 0;
  });
  return gone;
}

BOOST_AUTO_TEST_SUITE(transport_memory_budget)

BOOST_AUTO_TEST_CASE(the_least_recently_advanced_go_first_and_the_advancing_one_never) {
  memory_use use;
  unfinished_messages<int> held(use, 1000);
  BOOST_TEST(advance(held, 1, 300).empty());
  BOOST_TEST(advance(held, 2, 300).empty());
  BOOST_TEST(advance(held, 3, 300).empty());  // 900
  BOOST_TEST(advance(held, 1, 400).empty());  // 1000, not more: order 2 3 1
  BOOST_TEST(use.inbound.load() == 1000u);

  // 3 grows to 500: 300 + 400 + 500 = 1200 > 1000. Order 2 1 3: 2 goes,
  // leaving 900.
  BOOST_TEST(advance(held, 3, 500) == std::vector<int>{2});
  BOOST_TEST(held.size() == 2u);
  BOOST_TEST(held.bytes() == 900u);
  BOOST_TEST(use.inbound.load() == 900u);

  // 3 alone grows past the budget: 1 goes (400 + 2000 > 1000), then only 3
  // is left, and it stays although 2000 > 1000.
  BOOST_TEST(advance(held, 3, 2000) == std::vector<int>{1});
  BOOST_TEST(held.size() == 1u);
  BOOST_TEST(held.bytes_of(3) == 2000u);
  BOOST_TEST(use.inbound.load() == 2000u);

  // A newcomer is the advancing one now: the old 3 goes, although larger
  // and more recent than nothing else.
  BOOST_TEST(advance(held, 4, 100) == std::vector<int>{3});
  BOOST_TEST(use.inbound.load() == 100u);
  held.forget(4);
  held.forget(4);  // twice: nothing
  BOOST_TEST(use.inbound.load() == 0u);
  BOOST_TEST(held.oldest() == nullptr);
}

BOOST_AUTO_TEST_CASE(queued_bytes_count_against_the_same_budget) {
  memory_use use;
  unfinished_messages<int> held(use, 1000);
  BOOST_TEST(advance(held, 1, 300).empty());
  BOOST_TEST(advance(held, 2, 300).empty());
  use.outbound = 500;
  // 300 + 300 + 100 + 500 = 1200 > 1000: 1 goes (900), then under.
  BOOST_TEST(advance(held, 3, 100) == std::vector<int>{1});
  // Sends: a peer with nothing queued always gets its message; one with
  // bytes queued only within the budget (900 + 100 = 1000 fits, 900 + 101
  // does not).
  BOOST_TEST(admit_send(use, 1000, 0, 5000));
  BOOST_TEST(admit_send(use, 1000, 1, 100));
  BOOST_TEST(!admit_send(use, 1000, 1, 101));
  BOOST_TEST(use.sends_refused.load() == 1u);
}

BOOST_AUTO_TEST_CASE(a_message_let_go_may_keep_a_charge_and_is_not_visited_twice_in_one_pass) {
  memory_use use;
  unfinished_messages<int> held(use, 1000);
  for (int key = 1; key <= 4; ++key) held.advanced(key, 300);  // 1200
  // Each message let go keeps 50 bytes (a tombstone). 1: 1200 - 250 = 950:
  // under, stop.
  std::vector<int> visited;
  held.evict(4, [&](int victim) -> std::uint64_t {
    visited.push_back(victim);
    return 50;
  });
  BOOST_TEST(visited == std::vector<int>{1});
  BOOST_TEST(held.bytes() == 950u);
  BOOST_TEST(held.size() == 4u);
  BOOST_TEST(*held.oldest() == 1);  // kept its place: the least recent still

  // 4 grows to 700: 50 + 300 + 300 + 700 = 1350. 1 (the tombstone) goes:
  // 1300; 2 keeps 50: 1050; 3 keeps 50: 800. 1 was visited once, not again.
  visited.clear();
  held.advanced(4, 700);
  held.evict(4, [&](int victim) -> std::uint64_t {
    visited.push_back(victim);
    return victim == 1 ? 0 : 50;
  });
  BOOST_TEST(visited == (std::vector<int>{1, 2, 3}));
  BOOST_TEST(held.size() == 3u);
  BOOST_TEST(held.bytes() == 800u);
  BOOST_TEST(use.inbound.load() == 800u);
}

BOOST_AUTO_TEST_CASE(buffers_grow_twofold_up_to_the_payload) {
  using diloco::detail::grown_capacity;
  BOOST_TEST(grown_capacity(4096, 5000, 10007) == 8192u);
  BOOST_TEST(grown_capacity(8192, 9000, 10007) == 10007u);  // 16384 is past the payload
  BOOST_TEST(grown_capacity(4096, 9000, 10007) == 9000u);   // a part larger than the doubling
  BOOST_TEST(grown_capacity(1 << 20, (1 << 20) + 1, std::uint64_t{1} << 30) == 2u << 20);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_memory_budget_test
