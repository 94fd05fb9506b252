// ctest-labels: unit zeromq
// ctest-timeout: 300
// The memory budget of diloco::zeromq (`socket_options::memory_bytes`,
// docs/protocol.md, "Framing"): the receiver's unfinished messages hold what
// has arrived, the least recently advanced give way past the budget and the
// advancing one never does (hand-computed, part by part), then over real tcp
// sockets: 1 500 connections that each announce a 1 GiB payload, send one
// byte and close, and three learners that never read. Every wait is bounded.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <diloco/transport/zeromq.hpp>

#include "support/messages.hpp"
#include "support/process_memory.hpp"

namespace transport_zeromq_budget_test {

using namespace std::chrono_literals;
using namespace diloco;
using transport_test::join_of;
using transport_test::layout_of;
using transport_test::random_bytes;
using transport_test::same_bytes;
using transport_test::send_within;
using namespace process_memory;
using zeromq::detail::encode_continuation;
using zeromq::detail::inbox;
using steady = std::chrono::steady_clock;

constexpr std::uint64_t entry = diloco::detail::unfinished_entry_bytes;  // 256

/// ZeroMQ frames: the header of a `total`-byte payload with its first part
/// `first`, or the continuation `index` at `offset` carrying `part`.
std::vector<::zmq::message_t> first_part(const std::array<std::byte, wire::header_size>& header,
                                         std::span<const std::byte> first) {
  std::vector<::zmq::message_t> frames;
  frames.emplace_back(header.data(), header.size());
  frames.emplace_back(first.data(), first.size());
  return frames;
}
std::vector<::zmq::message_t> continuation_part(std::uint32_t index, std::uint64_t offset,
                                                std::span<const std::byte> part) {
  std::vector<::zmq::message_t> frames;
  const auto c = encode_continuation({index, offset});
  frames.emplace_back(c.data(), c.size());
  frames.emplace_back(part.data(), part.size());
  return frames;
}

struct budget_fixture {
  zeromq::socket_options options;
  std::shared_ptr<diloco::detail::memory_use> use = std::make_shared<diloco::detail::memory_use>();
  std::unique_ptr<inbox> box;
  inbox::clock::time_point now = inbox::clock::now();

  void make(std::uint64_t memory_bytes) {
    options.memory_bytes = memory_bytes;
    box = std::make_unique<inbox>(options, use);
  }
  void take(std::vector<::zmq::message_t> frames, peer_id from) { box->take(frames, from, nullptr, now); }
  std::vector<envelope> drain() {
    std::vector<envelope> out;
    while (auto e = box->pop()) out.push_back(std::move(*e));
    return out;
  }
};

/// (peer, error) of each envelope, for comparing refusals in order.
std::vector<std::pair<peer_id, int>> refusals(const std::vector<envelope>& got) {
  std::vector<std::pair<peer_id, int>> out;
  for (const auto& e : got) out.emplace_back(e.from, int(e.error));
  return out;
}

BOOST_AUTO_TEST_SUITE(transport_zeromq_budget)

BOOST_FIXTURE_TEST_CASE(an_unfinished_message_holds_what_has_arrived, budget_fixture) {
  make(std::uint64_t{256} << 20);
  const auto want = random_bytes(10007, 1);
  const auto m = layout_of(want);
  const auto header = wire::encode_header(m.header, want);
  const auto part = [&](std::size_t at, std::size_t n) { return std::span<const std::byte>(want).subspan(at, n); };
  // Parts of 1000 bytes. Capacities (whole pages): 4096 for the first part,
  // then doubled when a part does not fit: 8192 at 5000 bytes, then the
  // payload's 10007 (12288) at 9000, since 16384 is past it.
  const std::uint64_t held[] = {4096, 4096, 4096, 4096, 8192, 8192, 8192, 8192, 12288, 12288};
  take(first_part(header, part(0, 1000)), 1);
  BOOST_TEST(box->unfinished_bytes() == held[0] + entry);
  for (std::uint32_t i = 1; i < 10; ++i) {
    take(continuation_part(i, i * 1000u, part(i * 1000u, 1000)), 1);
    BOOST_TEST(box->unfinished_bytes() == held[i] + entry, "after part " << i);
    BOOST_TEST(use->inbound.load() == held[i] + entry);
  }
  take(continuation_part(10, 10000, part(10000, 7)), 1);
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got[0].msg.payload, want));
  BOOST_TEST(box->unfinished_bytes() == 0u);
  BOOST_TEST(use->inbound.load() == 0u);

  // Once that payload is back in the pool, the next message of its size
  // takes it whole from its first part: 12288 + 256, nothing copied later.
  got.clear();
  take(first_part(header, part(0, 1000)), 1);
  BOOST_TEST(box->unfinished_bytes() == 12288 + entry);
  take(continuation_part(1, 1000, part(1000, 9007)), 1);
  got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(same_bytes(got[0].msg.payload, want));
}

BOOST_FIXTURE_TEST_CASE(a_cached_buffer_is_taken_only_when_the_budget_has_room_for_it, budget_fixture) {
  // 12288 + 256 = 12544 bytes: with one byte less, the message grows from
  // its first part's 4096 instead.
  make(12543);
  const auto want = random_bytes(10007, 2);
  const auto header = wire::encode_header(layout_of(want).header, want);
  const auto part = [&](std::size_t at, std::size_t n) { return std::span<const std::byte>(want).subspan(at, n); };
  take(first_part(header, part(0, 1000)), 1);
  take(continuation_part(1, 1000, part(1000, 9007)), 1);
  BOOST_TEST_REQUIRE(drain().size() == 1u);  // dropped: its 12288 bytes go back to the pool
  take(first_part(header, part(0, 1000)), 1);
  BOOST_TEST(box->unfinished_bytes() == 4096 + entry);
}

BOOST_FIXTURE_TEST_CASE(the_least_recently_advanced_give_way_and_the_advancing_one_never_does, budget_fixture) {
  // Every message announces 100 000 bytes; a first part of one byte holds a
  // page: 4096 + 256 = 4352 bytes. The budget holds three of them.
  make(3 * 4352);
  const auto want = random_bytes(100000, 3);
  const auto header = wire::encode_header(layout_of(want).header, want);
  const auto part = [&](std::size_t at, std::size_t n) { return std::span<const std::byte>(want).subspan(at, n); };
  for (peer_id p = 1; p <= 3; ++p) take(first_part(header, part(0, 1)), p);
  BOOST_TEST(box->unfinished_bytes() == 13056u);
  BOOST_TEST(drain().empty());

  // A fourth: 17 408 > 13 056. 1 gives way and keeps 256 bytes of
  // bookkeeping: 13 312, still over; then 2: 9216.
  take(first_part(header, part(0, 1)), 4);
  using refusal = std::pair<peer_id, int>;
  const int over = int(wire_error::over_budget);
  BOOST_TEST(refusals(drain()) == (std::vector<refusal>{{1, over}, {2, over}}));
  BOOST_TEST(box->unfinished_bytes() == 9216u);
  BOOST_TEST(box->in_progress() == 4u);

  // 3 advances within its page (9216 still); 1's next part is dropped
  // unread and refused no more.
  take(continuation_part(1, 1, part(1, 999)), 3);
  take(continuation_part(1, 1, part(1, 999)), 1);
  BOOST_TEST(drain().empty());
  BOOST_TEST(box->unfinished_bytes() == 9216u);

  // 5 arrives with 20 000 bytes: 20 480 + 256 = 20 736, more than the
  // budget alone. Order 2 4 3 1 5: 2's bookkeeping goes (29 696), 4 and 3
  // give way (25 600, 21 504), 1's bookkeeping goes (21 248), and 5 stays.
  take(first_part(header, part(0, 20000)), 5);
  BOOST_TEST(refusals(drain()) == (std::vector<refusal>{{4, over}, {3, over}}));
  BOOST_TEST(box->unfinished_bytes() == 21248u);
  BOOST_TEST(box->in_progress() == 3u);
  BOOST_TEST(use->evicted.load() == 4u);

  // 5 completes whole; 2's next part belongs to no message now.
  take(continuation_part(1, 20000, part(20000, 80000)), 5);
  take(continuation_part(1, 1, part(1, 999)), 2);
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(got[0].from == 5u);
  BOOST_TEST(int(got[0].error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got[0].msg.payload, want));
  BOOST_TEST(got[1].from == 2u);
  BOOST_TEST(int(got[1].error) == int(wire_error::truncated));
  BOOST_TEST(box->unfinished_bytes() == 2 * entry);  // 4's and 3's bookkeeping, until partial_timeout
  box->expire(now + options.partial_timeout);
  BOOST_TEST(drain().empty());  // refused once already
  BOOST_TEST(box->unfinished_bytes() == 0u);
  BOOST_TEST(box->in_progress() == 0u);
}

BOOST_AUTO_TEST_CASE(connections_that_announce_a_gigabyte_and_leave_hold_a_page_each) {
  ::zmq::context_t syncer_context, learner_context;
  zeromq::server server(syncer_context, "tcp://127.0.0.1:*");
  zeromq::client honest(learner_context, server.endpoint(), 3, 1);
  const auto honest_payload = random_bytes(std::size_t{4} << 20, 4);

  // The syncer's thread: takes everything, checks the honest messages and
  // counts the refusals; payloads are dropped at once.
  std::atomic<int> honest_intact{0}, honest_damaged{0}, refused{0};
  std::jthread syncer([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      auto e = server.receive_for(10ms);
      if (!e) continue;
      if (e->error != wire_error::none)
        ++refused;
      else if (e->msg.header.learner == 3 && e->msg.header.kind == message_kind::layout)
        ++(same_bytes(e->msg.payload, honest_payload) ? honest_intact : honest_damaged);
    }
  });
  const auto send_honest = [&] { send_within(honest, syncer_peer, layout_of(honest_payload)); };
  // One honest message first, so that the pools hold what steady traffic
  // needs before memory is measured.
  send_honest();
  BOOST_TEST_REQUIRE(wait_for([&] { return honest_intact == 1; }, 10s));
  const long rss_before = resident_kib();
  const bool peak_known = reset_peak_rss();

  // 1 500 DEALER connections: a header announcing 2^30 − 1 bytes (within
  // the 1 GiB limit), one byte, then close. Halfway, an honest message.
  constexpr int attackers = 1500;
  message big;
  big.header.kind = message_kind::layout;
  big.header.codec = codec_id::bytes;
  big.header.learner = 66;
  big.header.element_count = (std::uint64_t{1} << 30) - 1;
  const auto header = wire::encode_header(big.header, {});
  const std::byte one{1};
  const auto attack_start = steady::now();
  {
    ::zmq::context_t attacker_context;
    attacker_context.set(::zmq::ctxopt::max_sockets, 2 * attackers);
    for (int i = 0; i < attackers; ++i) {
      ::zmq::socket_t s(attacker_context, ::zmq::socket_type::dealer);
      s.set(::zmq::sockopt::linger, 5000);  // closed at once; libzmq still delivers what it holds
      s.connect(server.endpoint());
      (void)s.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      (void)s.send(::zmq::buffer(&one, 1), ::zmq::send_flags::none);
      s.close();
      if (i == attackers / 2) send_honest();
    }
  }  // waits until every attacker's message is out
  const double attack_seconds = std::chrono::duration<double>(steady::now() - attack_start).count();
  // Each holds a page and its bookkeeping until `partial_timeout`: the
  // receiver cannot tell that its connection closed.
  constexpr std::uint64_t each = 4096 + entry;
  const bool all_held = wait_for([&] { return server.unfinished_bytes() == attackers * each; }, 30s);
  BOOST_TEST(all_held, "held " << server.unfinished_bytes() << " bytes, expected " << attackers * each);
  const long rss_after = resident_kib();
  const long peak = status_kib("VmHWM");
  BOOST_TEST(server.messages_evicted() == 0u);  // 6.5 MB: within the default 256 MiB

  send_honest();
  BOOST_TEST(wait_for([&] { return honest_intact == 3; }, 10s));
  syncer.request_stop();
  syncer.join();
  BOOST_TEST(honest_intact.load() == 3);
  BOOST_TEST(honest_damaged.load() == 0);
  BOOST_TEST(refused.load() == 0);  // nothing is refused before the partial timeout

  // What the attack left resident, beyond the 6.5 MB held: libzmq's memory
  // for connections that came and went, which malloc keeps. Before messages
  // grew as they arrived, each held a 2 MiB huge page: 3 GB.
  const double growth = mib(rss_after - rss_before);
  BOOST_TEST_MESSAGE("1500 connections in "
                     << attack_seconds << " s: RSS +" << growth << " MiB"
                     << (peak_known ? ", peak +" + std::to_string(mib(peak - rss_before)) : std::string())
                     << " MiB, held " << server.unfinished_bytes() << " bytes");
  // The peak also counts the attackers' own libzmq sockets, in this
  // process: reported, not bounded.
  if (rss_measures_the_program) BOOST_TEST(growth < 64.0);
}

BOOST_AUTO_TEST_CASE(past_the_budget_stalled_connections_give_way) {
  // A budget of 1 MiB: the 1 500 pages do not fit, and the oldest give way.
  ::zmq::context_t syncer_context, learner_context;
  zeromq::socket_options o;
  o.memory_bytes = std::uint64_t{1} << 20;
  zeromq::server server(syncer_context, "tcp://127.0.0.1:*", o);
  std::atomic<int> over_budget{0}, other{0};
  std::jthread syncer([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      auto e = server.receive_for(10ms);
      if (e) ++(e->error == wire_error::over_budget ? over_budget : other);
    }
  });
  constexpr int attackers = 1500;
  message big;
  big.header.kind = message_kind::layout;
  big.header.codec = codec_id::bytes;
  big.header.learner = 66;
  big.header.element_count = (std::uint64_t{1} << 30) - 1;
  const auto header = wire::encode_header(big.header, {});
  const std::byte one{1};
  {
    ::zmq::context_t attacker_context;
    attacker_context.set(::zmq::ctxopt::max_sockets, 2 * attackers);
    for (int i = 0; i < attackers; ++i) {
      ::zmq::socket_t s(attacker_context, ::zmq::socket_type::dealer);
      s.set(::zmq::sockopt::linger, 5000);
      s.connect(server.endpoint());
      (void)s.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      (void)s.send(::zmq::buffer(&one, 1), ::zmq::send_flags::none);
      s.close();
    }
  }
  // Each message is refused once: 4352 bytes each, at most 240 fit in
  // 1 MiB (1 044 480), so at least 1 260 gave way.
  BOOST_TEST(wait_for([&] { return server.messages_evicted() >= 1260u; }, 30s));
  const auto held = server.unfinished_bytes();
  BOOST_TEST(held <= o.memory_bytes);
  BOOST_TEST(wait_for([&] { return over_budget.load() == int(server.messages_evicted()); }, 5s));
  // An honest message still gets through whole.
  zeromq::client honest(learner_context, server.endpoint(), 3, 1, o);
  const auto want = random_bytes(std::size_t{3} << 20, 5);
  syncer.request_stop();
  syncer.join();
  send_within(honest, syncer_peer, layout_of(want));
  std::optional<envelope> got;
  const auto end = steady::now() + 10s;
  while (steady::now() < end) {
    got = server.receive_for(100ms);
    if (got && got->error == wire_error::none) break;
  }
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(int(got->error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got->msg.payload, want));
  BOOST_TEST(other.load() == 0);
  BOOST_TEST_MESSAGE("budget 1 MiB: " << server.messages_evicted() << " of 1500 evicted, " << held << " bytes held");
}

BOOST_AUTO_TEST_CASE(learners_that_never_read_share_one_budget_and_a_reader_gets_everything) {
  ::zmq::context_t syncer_context, learner_context;
  zeromq::socket_options o;  // the default budget: 256 MiB
  zeromq::server server(syncer_context, "tcp://127.0.0.1:*", o);
  constexpr std::size_t size = std::size_t{1} << 20;
  constexpr std::uint64_t message_bytes = size + wire::header_size;

  // Three raw DEALERs that join and never read.
  std::vector<::zmq::socket_t> sleepers;
  for (std::uint32_t l = 10; l < 13; ++l) {
    sleepers.emplace_back(learner_context, ::zmq::socket_type::dealer);
    sleepers.back().set(::zmq::sockopt::linger, 0);
    // Their own libzmq, in this process, reads little ahead of them: what
    // is measured is the syncer's memory.
    sleepers.back().set(::zmq::sockopt::rcvhwm, 1);
    sleepers.back().set(::zmq::sockopt::rcvbuf, 64 << 10);
    sleepers.back().connect(server.endpoint());
    const auto join = join_of(l);
    const auto h = wire::encode_header(join.header, {});
    (void)sleepers.back().send(::zmq::buffer(h.data(), h.size()), ::zmq::send_flags::none);
  }
  zeromq::client reader(learner_context, server.endpoint(), 3, 1, o);
  send_within(reader, syncer_peer, join_of(3));
  const auto peers = transport_test::peers_of_joins(server, 4, 3);
  const peer_id reading = peers.first;
  const std::vector<peer_id>& sleeping = peers.second;
  BOOST_TEST_REQUIRE(sleeping.size() == 3u);
  BOOST_TEST_REQUIRE(reading != 0u);

  constexpr int honest_messages = 64;
  transport_test::payload_checker checker(reader, honest_messages, size, 1000);  // on a thread of its own
  auto& intact = checker.intact;
  auto& damaged = checker.damaged;

  const long rss_before = resident_kib();
  const auto filled = [&](unsigned seed) {
    message m = layout_of({}, 0);
    m.header.element_count = size;
    m.payload = byte_buffer(size);
    std::memset(m.payload.data(), int(seed & 0xff), size);  // every page resident
    return m;
  };
  // Send to the sleepers until each refuses, then keep trying now and
  // then while the reader is served.
  std::uint64_t taken = 0;
  const auto feed_sleepers = [&] {
    for (const peer_id p : sleeping) {
      for (int i = 0; i < 4096; ++i) {
        auto m = filled(unsigned(i));
        const auto ec = server.try_send(p, m);
        if (ec == make_error_code(errc::queue_full)) break;
        BOOST_TEST_REQUIRE(!ec);
        taken += message_bytes;
      }
    }
  };
  const std::uint64_t most_queued =
      transport_test::send_honest(server, reading, honest_messages, size, 1000, feed_sleepers);
  BOOST_TEST(wait_for([&] { return intact + damaged == honest_messages; }, 20s));
  checker.thread.request_stop();
  checker.thread.join();
  const long rss_after = resident_kib();

  BOOST_TEST(intact.load() == honest_messages);
  BOOST_TEST(damaged.load() == 0);
  // At any time: the budget, plus one message per peer that had nothing
  // queued when it was given one.
  const std::uint64_t bound = o.memory_bytes + 4 * message_bytes;
  BOOST_TEST(most_queued <= bound);
  BOOST_TEST(server.queued_bytes() <= bound);
  BOOST_TEST(server.sends_over_budget() > 0u);
  // What libzmq holds of the sleepers' queues stays resident; the kernel's
  // socket buffers took the rest of what was taken.
  const double growth = mib(rss_after - rss_before);
  BOOST_TEST_MESSAGE("three sleepers took "
                     << taken / (1 << 20) << " MiB; queued now " << server.queued_bytes() / (1 << 20) << " MiB (most "
                     << most_queued / (1 << 20) << "); RSS +" << growth << " MiB; " << server.sends_over_budget()
                     << " sends over budget");
  if (rss_measures_the_program) BOOST_TEST(growth < mib(long(bound / 1024)) + 64.0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_zeromq_budget_test
