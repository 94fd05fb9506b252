// ctest-labels: unit
#include "diloco/sim/network.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace sim_network_test {

using namespace std::chrono_literals;
using diloco::errc;
using diloco::message;
using diloco::peer_id;
using diloco::sim::header_bytes;
using diloco::sim::link_options;
using diloco::sim::network;
using diloco::sim::time_point;

message numbered(std::uint64_t sequence, std::size_t bytes = 0) {
  message m;
  m.header.sequence = sequence;
  if (bytes > 0) {
    m.payload = diloco::byte_buffer(bytes);
    std::memset(m.payload.data(), 0x5a, bytes);
  }
  return m;
}

/// Everything `to` can receive now: (sender, sequence) in delivery order.
std::vector<std::pair<peer_id, std::uint64_t>> drain(diloco::sim::endpoint& to) {
  std::vector<std::pair<peer_id, std::uint64_t>> got;
  while (auto e = to.try_receive()) got.emplace_back(e->from, e->msg.header.sequence);
  return got;
}

/// One delivery: the message, and when it became visible (ns since start).
struct delivery {
  std::uint64_t sequence;
  std::int64_t at_ns;
  friend bool operator==(const delivery&, const delivery&) = default;
};

/// Sends 300 messages from 1 to 2 and 3 in bursts over a lossy, jittery,
/// bandwidth-limited default link and records what 2 and 3 receive and when.
std::vector<delivery> lossy_jittery_run(std::uint64_t seed) {
  network net(seed, link_options{3ms, 1e7, 2ms, 0.1});
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  auto& c = net.attach(3);
  const auto start = net.now();
  std::vector<delivery> log;
  const auto collect = [&](diloco::sim::endpoint& to) {
    while (auto e = to.try_receive())
      log.push_back({e->msg.header.sequence + 1000 * to.id(),
                     std::chrono::duration_cast<std::chrono::nanoseconds>(net.now() - start).count()});
  };
  for (std::uint64_t k = 0; k < 300; ++k) {
    auto m = numbered(k, 100 * (k % 7));
    (void)a.try_send(k % 3 == 0 ? 3 : 2, m);
    if (k % 10 == 9) net.advance_to(net.now() + 1ms);
    collect(b);
    collect(c);
  }
  for (int i = 0; i < 200; ++i) {
    net.advance_to(net.now() + 1ms);
    collect(b);
    collect(c);
  }
  return log;
}

BOOST_AUTO_TEST_SUITE(sim_network)

BOOST_AUTO_TEST_CASE(arrival_is_latency_plus_serialization_back_to_back) {
  // Link 1 → 2: 5 ms latency, 10^6 bytes/s.
  //   m0: 1000 + 128 = 1128 bytes → 1128 µs on the wire, sent at 0:
  //       arrives at 1128 µs + 5 ms = 6128 µs.
  //   m1: 872 + 128 = 1000 bytes → 1000 µs, waits for m0: departs 1128 µs,
  //       leaves the wire at 2128 µs, arrives at 7128 µs.
  // Link 1 → 3 (the default, 2 ms latency, unlimited bandwidth) is independent:
  //   m2 arrives at 2 ms.
  BOOST_TEST(header_bytes == 128u);
  network net(1, link_options{2ms, 0.0, 0ns, 0.0});
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  auto& c = net.attach(3);
  net.set_link(1, 2, link_options{5ms, 1e6, 0ns, 0.0});
  const time_point t0 = net.now();

  auto m0 = numbered(0, 1000);
  auto m1 = numbered(1, 872);
  auto m2 = numbered(2, 1000);
  BOOST_TEST(!a.try_send(2, m0));
  BOOST_TEST(!a.try_send(2, m1));
  BOOST_TEST(!a.try_send(3, m2));

  BOOST_TEST_REQUIRE(b.next_arrival().has_value());
  BOOST_TEST((*b.next_arrival() == t0 + 6128us));
  BOOST_TEST((*c.next_arrival() == t0 + 2ms));

  net.advance_to(t0 + 2ms - 1ns);
  BOOST_TEST(!c.try_receive().has_value());
  net.advance_to(t0 + 2ms);
  auto e2 = c.try_receive();
  BOOST_TEST_REQUIRE(e2.has_value());
  BOOST_TEST(e2->from == 1u);
  BOOST_TEST(e2->msg.header.sequence == 2u);
  BOOST_TEST(e2->msg.payload.size() == 1000u);

  net.advance_to(t0 + 6128us - 1ns);
  BOOST_TEST(!b.try_receive().has_value());
  net.advance_to(t0 + 6128us);
  auto e0 = b.try_receive();
  BOOST_TEST_REQUIRE(e0.has_value());
  BOOST_TEST(e0->msg.header.sequence == 0u);
  BOOST_TEST(!b.try_receive().has_value());
  BOOST_TEST((*b.next_arrival() == t0 + 7128us));
  net.advance_to(t0 + 7128us - 1ns);
  BOOST_TEST(!b.try_receive().has_value());
  net.advance_to(t0 + 7128us);
  BOOST_TEST(b.try_receive()->msg.header.sequence == 1u);
  BOOST_TEST(!b.next_arrival().has_value());

  // The link has been idle since 2128 µs: a message sent at 10 ms departs at
  // once. 128 bytes → 128 µs; arrives at 10 ms + 128 µs + 5 ms.
  net.advance_to(t0 + 10ms);
  auto m3 = numbered(3);
  BOOST_TEST(!a.try_send(2, m3));
  BOOST_TEST((*b.next_arrival() == t0 + 15128us));

  BOOST_TEST(net.stats().sent == 4u);
  BOOST_TEST(net.stats().delivered == 3u);
  BOOST_TEST(net.stats().lost == 0u);
  BOOST_TEST(net.stats().bytes == 1128u + 1000u + 1128u + 128u);
}

BOOST_AUTO_TEST_CASE(the_clock_never_goes_back) {
  network net(1);
  const time_point t0 = net.now();
  net.advance_to(t0 + 10ms);
  net.advance_to(t0 + 5ms);
  BOOST_TEST((net.now() == t0 + 10ms));
}

BOOST_AUTO_TEST_CASE(equal_arrival_times_keep_sending_order) {
  network net(1, link_options{1ms, 0.0, 0ns, 0.0});
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  for (std::uint64_t k = 0; k < 20; ++k) {
    auto m = numbered(k, k);
    BOOST_TEST(!a.try_send(2, m));
  }
  BOOST_TEST(drain(b).empty());
  net.advance_to(net.now() + 1ms);
  const auto got = drain(b);
  BOOST_TEST_REQUIRE(got.size() == 20u);
  for (std::uint64_t k = 0; k < 20; ++k) {
    BOOST_TEST(got[k].first == 1u);
    BOOST_TEST(got[k].second == k);
  }
}

BOOST_AUTO_TEST_CASE(unknown_peer_and_double_attach) {
  network net(1);
  auto& a = net.attach(1);
  BOOST_CHECK_THROW(net.attach(1), std::invalid_argument);
  auto m = numbered(7, 32);
  const auto* block = m.payload.data();
  BOOST_TEST((a.try_send(99, m) == errc::unknown_peer));
  BOOST_TEST(m.header.sequence == 7u);
  BOOST_TEST(m.payload.size() == 32u);
  BOOST_TEST(m.payload.data() == block);
  BOOST_TEST(!a.try_receive().has_value());
  BOOST_TEST(!a.next_arrival().has_value());
}

BOOST_AUTO_TEST_CASE(a_lost_message_still_occupies_the_link) {
  // m0: 872 + 128 = 1000 bytes at 10^6 bytes/s, lost, but the link is busy
  // until 1 ms; m1 (128 bytes, 128 µs) departs at 1 ms and arrives at 1128 µs.
  network net(1);
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  const time_point t0 = net.now();
  net.set_link(1, 2, link_options{0ns, 1e6, 0ns, 1.0});
  auto m0 = numbered(0, 872);
  BOOST_TEST(!a.try_send(2, m0));  // a lost message is not an error
  BOOST_TEST(!b.next_arrival().has_value());
  BOOST_TEST(net.stats().lost == 1u);

  net.set_link(1, 2, link_options{0ns, 1e6, 0ns, 0.0});
  auto m1 = numbered(1);
  BOOST_TEST(!a.try_send(2, m1));
  BOOST_TEST_REQUIRE(b.next_arrival().has_value());
  BOOST_TEST((*b.next_arrival() == t0 + 1128us));
}

BOOST_AUTO_TEST_CASE(loss_rate_matches_the_probability_and_is_reproducible) {
  constexpr std::uint64_t count = 20000;
  constexpr double loss = 0.25;
  const auto lost_set = [&](std::uint64_t seed) {
    network net(seed, link_options{1ms, 0.0, 0ns, loss});
    auto& a = net.attach(1);
    auto& b = net.attach(2);
    for (std::uint64_t k = 0; k < count; ++k) {
      auto m = numbered(k);
      BOOST_TEST_REQUIRE(!a.try_send(2, m));
    }
    net.advance_to(net.now() + 1ms);
    std::set<std::uint64_t> lost;
    for (std::uint64_t k = 0; k < count; ++k) lost.insert(k);
    for (const auto& [from, sequence] : drain(b)) lost.erase(sequence);
    BOOST_TEST(net.stats().sent == count);
    BOOST_TEST(net.stats().lost == lost.size());
    BOOST_TEST(net.stats().delivered + net.stats().lost == count);
    return lost;
  };
  const auto first = lost_set(42);
  // Binomial(20000, 0.25): σ = sqrt(20000 · 0.25 · 0.75) ≈ 61; allow 6σ.
  const double rate = static_cast<double>(first.size()) / count;
  BOOST_TEST(std::abs(rate - loss) < 6 * std::sqrt(loss * (1 - loss) / count), "loss rate " << rate);
  BOOST_TEST((lost_set(42) == first));
  BOOST_TEST((lost_set(43) != first));
}

BOOST_AUTO_TEST_CASE(no_loss_without_a_loss_probability) {
  network net(5, link_options{0ns, 0.0, 0ns, 0.0});
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  for (std::uint64_t k = 0; k < 1000; ++k) {
    auto m = numbered(k);
    BOOST_TEST_REQUIRE(!a.try_send(2, m));
  }
  BOOST_TEST(drain(b).size() == 1000u);
  BOOST_TEST(net.stats().lost == 0u);
}

BOOST_AUTO_TEST_CASE(jitter_delays_within_its_bound_and_reorders) {
  // 1 ms latency plus jitter uniform in [0, 1 ms): every message arrives in
  // [1 ms, 2 ms), and 200 messages sent at once do not all keep their order.
  network net(9, link_options{1ms, 0.0, 1ms, 0.0});
  auto& a = net.attach(1);
  auto& b = net.attach(2);
  const time_point t0 = net.now();
  for (std::uint64_t k = 0; k < 200; ++k) {
    auto m = numbered(k);
    BOOST_TEST_REQUIRE(!a.try_send(2, m));
  }
  net.advance_to(t0 + 1ms - 1ns);
  BOOST_TEST(drain(b).empty());
  net.advance_to(t0 + 2ms);
  std::vector<std::uint64_t> order;
  time_point previous = t0;
  while (auto at = b.next_arrival()) {
    BOOST_TEST((*at >= t0 + 1ms));
    BOOST_TEST((*at < t0 + 2ms));
    BOOST_TEST((*at >= previous));  // delivered in arrival order
    previous = *at;
    order.push_back(b.try_receive()->msg.header.sequence);
  }
  BOOST_TEST(order.size() == 200u);
  BOOST_TEST(!std::is_sorted(order.begin(), order.end()));
  std::sort(order.begin(), order.end());
  BOOST_TEST((std::adjacent_find(order.begin(), order.end()) == order.end()));  // no duplicates
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_delivery_schedule) {
  const auto first = lossy_jittery_run(2024);
  const auto second = lossy_jittery_run(2024);
  const auto other = lossy_jittery_run(2025);
  BOOST_TEST(first.size() > 200u);  // about 90% of 300 arrive
  BOOST_TEST(first.size() < 300u);
  BOOST_TEST((first == second));
  BOOST_TEST(!(first == other));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace sim_network_test
