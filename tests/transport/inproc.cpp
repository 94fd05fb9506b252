// ctest-labels: unit threads
#include "diloco/transport/inproc.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace transport_inproc_test {

using namespace std::chrono_literals;
using diloco::errc;
using diloco::message;
using diloco::peer_id;
using diloco::inproc::hub;
using diloco::inproc::hub_options;
using steady = std::chrono::steady_clock;

/// A message numbered `sequence` with `bytes` bytes of payload, each set to
/// the low byte of `sequence`.
message numbered(std::uint64_t sequence, std::size_t bytes = 0) {
  message m;
  m.header.sequence = sequence;
  m.header.kind = diloco::message_kind::contribution;
  if (bytes > 0) {
    m.payload = diloco::byte_buffer(bytes);
    std::memset(m.payload.data(), static_cast<int>(sequence & 0xff), bytes);
  }
  return m;
}

/// Checks that a failed send left `m` as `numbered(sequence, bytes)` made it,
/// with the same payload block.
void check_intact(const message& m, std::uint64_t sequence, std::size_t bytes, const std::byte* block) {
  BOOST_TEST(m.header.sequence == sequence);
  BOOST_TEST((m.header.kind == diloco::message_kind::contribution));
  BOOST_TEST(m.payload.size() == bytes);
  BOOST_TEST(m.payload.data() == block);
  if (bytes > 0) BOOST_TEST(std::to_integer<unsigned>(m.payload.bytes()[bytes - 1]) == (sequence & 0xff));
}

constexpr auto generous = 10s;  // a bound that only a hang reaches

BOOST_AUTO_TEST_SUITE(transport_inproc)

BOOST_AUTO_TEST_CASE(messages_arrive_in_order_with_their_sender) {
  hub h;
  auto& a = h.attach(1);
  auto& b = h.attach(2);
  auto& syncer = h.attach(diloco::syncer_peer);
  BOOST_TEST(a.id() == 1u);
  BOOST_TEST(syncer.id() == diloco::syncer_peer);

  for (std::uint64_t k = 0; k < 5; ++k) {
    auto m = numbered(k, 10 * k);
    BOOST_TEST(!a.try_send(diloco::syncer_peer, m));
    auto n = numbered(100 + k);
    BOOST_TEST(!b.try_send(diloco::syncer_peer, n));
  }
  std::uint64_t next_from_a = 0;
  std::uint64_t next_from_b = 100;
  for (int i = 0; i < 10; ++i) {
    auto e = syncer.try_receive();
    BOOST_TEST_REQUIRE(e.has_value());
    if (e->from == 1) {
      BOOST_TEST(e->msg.header.sequence == next_from_a);
      BOOST_TEST(e->msg.payload.size() == 10 * next_from_a);
      ++next_from_a;
    } else {
      BOOST_TEST(e->from == 2u);
      BOOST_TEST(e->msg.header.sequence == next_from_b);
      ++next_from_b;
    }
  }
  BOOST_TEST(next_from_a == 5u);
  BOOST_TEST(next_from_b == 105u);
  BOOST_TEST(!syncer.try_receive().has_value());
  BOOST_TEST(!a.try_receive().has_value());
}

BOOST_AUTO_TEST_CASE(a_peer_can_be_attached_once) {
  hub h;
  h.attach(3);
  BOOST_CHECK_THROW(h.attach(3), std::invalid_argument);
  BOOST_CHECK_NO_THROW(h.attach(4));
}

BOOST_AUTO_TEST_CASE(sending_to_an_unknown_peer_fails_and_keeps_the_message) {
  hub h;
  auto& a = h.attach(1);
  auto m = numbered(42, 64);
  const auto* block = m.payload.data();
  const std::error_code ec = a.try_send(9, m);
  BOOST_TEST((ec == errc::unknown_peer));
  check_intact(m, 42, 64, block);
}

BOOST_AUTO_TEST_CASE(a_full_message_queue_rejects_and_keeps_the_message) {
  hub h(hub_options{std::size_t{1} << 20, 2});
  auto& a = h.attach(1);
  auto& b = h.attach(2);
  auto m0 = numbered(0);
  auto m1 = numbered(1);
  BOOST_TEST(!a.try_send(2, m0));
  BOOST_TEST(!a.try_send(2, m1));
  auto m2 = numbered(2, 16);
  const auto* block = m2.payload.data();
  BOOST_TEST((a.try_send(2, m2) == errc::queue_full));
  check_intact(m2, 2, 16, block);

  BOOST_TEST_REQUIRE(b.try_receive().has_value());
  BOOST_TEST(!a.try_send(2, m2));  // room again
  BOOST_TEST(b.try_receive()->msg.header.sequence == 1u);
  BOOST_TEST(b.try_receive()->msg.header.sequence == 2u);
}

BOOST_AUTO_TEST_CASE(a_full_byte_budget_rejects_and_keeps_the_message) {
  hub h(hub_options{100, 100});
  auto& a = h.attach(1);
  auto& b = h.attach(2);
  auto first = numbered(0, 60);
  BOOST_TEST(!a.try_send(2, first));
  auto second = numbered(1, 60);  // 60 + 60 > 100
  const auto* block = second.payload.data();
  BOOST_TEST((a.try_send(2, second) == errc::queue_full));
  check_intact(second, 1, 60, block);
  auto third = numbered(2, 40);  // 60 + 40 = 100 fits exactly
  BOOST_TEST(!a.try_send(2, third));
  auto empty = numbered(3);  // no payload bytes: only the message count limits it
  BOOST_TEST(!a.try_send(2, empty));

  BOOST_TEST(b.try_receive()->msg.header.sequence == 0u);  // frees 60 bytes
  BOOST_TEST(!a.try_send(2, second));
  BOOST_TEST(b.try_receive()->msg.header.sequence == 2u);
  BOOST_TEST(b.try_receive()->msg.header.sequence == 3u);
  auto last = b.try_receive();
  BOOST_TEST_REQUIRE(last.has_value());
  BOOST_TEST(last->msg.header.sequence == 1u);
  BOOST_TEST(last->msg.payload.data() == block);  // the same payload, moved, not copied
}

BOOST_AUTO_TEST_CASE(a_closed_endpoint_rejects_further_messages) {
  hub h;
  auto& a = h.attach(1);
  auto& b = h.attach(2);
  auto before = numbered(0, 8);
  BOOST_TEST(!a.try_send(2, before));
  b.close();
  auto after = numbered(1, 8);
  const auto* block = after.payload.data();
  BOOST_TEST((a.try_send(2, after) == errc::closed));
  check_intact(after, 1, 8, block);
  // What arrived before the close can still be read; then nothing.
  auto e = b.receive_for(generous);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(e->msg.header.sequence == 0u);
  const auto start = steady::now();
  BOOST_TEST(!b.receive_for(generous).has_value());
  BOOST_TEST((steady::now() - start < 5s));  // a closed endpoint does not wait
}

BOOST_AUTO_TEST_CASE(close_wakes_a_blocked_receiver) {
  hub h;
  auto& b = h.attach(2);
  std::atomic<bool> got_message{true};
  steady::duration waited{};
  std::thread receiver([&] {
    const auto start = steady::now();
    got_message = b.receive_for(generous).has_value();
    waited = steady::now() - start;
  });
  // Give the receiver time to block; if it has not yet, it sees the close at once.
  std::this_thread::sleep_for(50ms);
  b.close();
  receiver.join();
  BOOST_TEST(!got_message);
  BOOST_TEST((waited < generous / 2));
}

BOOST_AUTO_TEST_CASE(receive_for_times_out) {
  hub h;
  auto& b = h.attach(2);
  const auto start = steady::now();
  BOOST_TEST(!b.receive_for(30ms).has_value());
  const auto waited = steady::now() - start;
  BOOST_TEST((waited >= 29ms));
  BOOST_TEST((waited < 5s));
  BOOST_TEST(!b.receive_for(0ns).has_value());
}

BOOST_AUTO_TEST_CASE(receive_for_wakes_when_a_message_arrives) {
  hub h;
  auto& a = h.attach(1);
  auto& b = h.attach(2);
  std::thread sender([&a] {
    std::this_thread::sleep_for(20ms);
    auto m = numbered(5);
    (void)a.try_send(2, m);
  });
  const auto start = steady::now();
  auto e = b.receive_for(generous);
  const auto waited = steady::now() - start;
  sender.join();
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(e->from == 1u);
  BOOST_TEST(e->msg.header.sequence == 5u);
  BOOST_TEST((waited < generous / 2));
}

BOOST_AUTO_TEST_CASE(two_threads_exchange_ten_thousand_messages_each_way) {
  constexpr std::uint64_t count = 10000;
  hub h;
  auto& a = h.attach(1);
  auto& b = h.attach(2);

  struct outcome {
    std::uint64_t sent = 0, received = 0, out_of_order = 0, wrong_sender = 0, bad_payload = 0, send_errors = 0;
  };
  // Sends and receives interleaved so that both queues are in use at once.
  const auto run = [](diloco::inproc::endpoint& self, peer_id peer, outcome& out) {
    std::uint64_t next_send = 0;
    while (out.received < count || next_send < count) {
      if (next_send < count) {
        auto m = numbered(next_send, 8 + next_send % 32);
        if (self.try_send(peer, m))
          ++out.send_errors;
        else
          ++out.sent;
        ++next_send;
      }
      auto e = next_send < count ? self.try_receive() : self.receive_for(generous);
      if (!e) {
        if (next_send >= count) break;  // timed out: a message was lost
        continue;
      }
      if (e->from != peer) ++out.wrong_sender;
      if (e->msg.header.sequence != out.received) ++out.out_of_order;
      const auto expected_bytes = 8 + out.received % 32;
      if (e->msg.payload.size() != expected_bytes ||
          std::to_integer<unsigned>(e->msg.payload.bytes()[expected_bytes - 1]) != (out.received & 0xff))
        ++out.bad_payload;
      ++out.received;
    }
  };
  outcome at_a;
  outcome at_b;
  std::thread ta([&] { run(a, 2, at_a); });
  std::thread tb([&] { run(b, 1, at_b); });
  ta.join();
  tb.join();
  for (const auto* o : {&at_a, &at_b}) {
    BOOST_TEST(o->sent == count);
    BOOST_TEST(o->received == count);
    BOOST_TEST(o->send_errors == 0u);
    BOOST_TEST(o->out_of_order == 0u);
    BOOST_TEST(o->wrong_sender == 0u);
    BOOST_TEST(o->bad_payload == 0u);
  }
  BOOST_TEST(!a.try_receive().has_value());
  BOOST_TEST(!b.try_receive().has_value());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_inproc_test
