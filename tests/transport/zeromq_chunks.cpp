// ctest-labels: unit zeromq
// Chunked payloads over ZeroMQ (docs/protocol.md, "Framing"): the receiver's
// reassembly, part by part and against hostile parts, then whole transfers
// over real tcp sockets in both directions, with and without CURVE, and the
// send budget in bytes. Every wait is bounded.
//
// Not labelled `threads`: under ThreadSanitizer these MiB-sized transfers
// crawled (a 3 MiB exchange took over 100 s against 0.15 s without it, the
// receiver seemingly woken only by ZeroMQ's 1 s heartbeats) and the budget
// test ran into its bounds. The cross-thread part of sending (libzmq's
// release of lent parts, on its I/O thread) runs under TSan in
// transport_zeromq, whose payloads are one part each.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <thread>
#include <vector>

#include <diloco/transport/zeromq.hpp>

#include "support/messages.hpp"

namespace transport_zeromq_chunks_test {

using namespace std::chrono_literals;
using namespace diloco;
using transport_test::join_of;
using transport_test::layout_of;
using transport_test::random_bytes;
using transport_test::same_bytes;
using transport_test::send_within;
using zeromq::detail::continuation;
using zeromq::detail::encode_continuation;
using zeromq::detail::inbox;

/// The frames of a message as a sender splits it at `cuts` (offsets into the
/// payload, increasing): the header with the first part, then one
/// continuation per further part.
std::vector<std::vector<::zmq::message_t>> split(const message& m, std::vector<std::size_t> cuts) {
  const auto bytes = m.payload.bytes();
  const auto header = wire::encode_header(m.header, bytes);
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(bytes.size());
  std::vector<std::vector<::zmq::message_t>> out;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::vector<::zmq::message_t> frames;
    if (i == 0) {
      frames.emplace_back(header.data(), header.size());
    } else {
      const auto c = encode_continuation({static_cast<std::uint32_t>(i), cuts[i]});
      frames.emplace_back(c.data(), c.size());
    }
    frames.emplace_back(bytes.data() + cuts[i], cuts[i + 1] - cuts[i]);
    out.push_back(std::move(frames));
  }
  return out;
}

struct inbox_fixture {
  zeromq::socket_options options;
  inbox box{options};
  inbox::clock::time_point now = inbox::clock::now();

  void take(std::vector<::zmq::message_t>& frames, peer_id from = 1, const zeromq::learner_ids* owned = nullptr) {
    box.take(frames, from, owned, now);
  }
  /// Everything `box` has completed or refused so far.
  std::vector<envelope> drain() {
    std::vector<envelope> out;
    while (auto e = box.pop()) out.push_back(std::move(*e));
    return out;
  }
};

BOOST_AUTO_TEST_SUITE(transport_zeromq_chunks)

BOOST_FIXTURE_TEST_CASE(parts_of_any_size_reassemble_into_the_payload, inbox_fixture) {
  const auto want = random_bytes(10007, 1);
  for (const auto& cuts : std::vector<std::vector<std::size_t>>{{}, {1}, {4096, 8192}, {1, 2, 3, 10006}}) {
    auto parts = split(layout_of(want), cuts);
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      take(parts[i]);
      BOOST_TEST(drain().empty());  // nothing before the last part
    }
    take(parts.back());
    auto got = drain();
    BOOST_TEST_REQUIRE(got.size() == 1u);
    BOOST_TEST(int(got[0].error) == int(wire_error::none));
    BOOST_TEST(got[0].msg.header.element_count == want.size());
    BOOST_TEST(same_bytes(got[0].msg.payload, want));
    BOOST_TEST(box.in_progress() == 0u);
  }
}

BOOST_FIXTURE_TEST_CASE(two_peers_interleaved_reassemble_apart, inbox_fixture) {
  const auto a = random_bytes(3000, 2), b = random_bytes(2000, 3);
  auto pa = split(layout_of(a, 1), {1000, 2000}), pb = split(layout_of(b, 2), {500});
  take(pa[0], 1);
  take(pb[0], 2);
  take(pa[1], 1);
  take(pb[1], 2);
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(got[0].from == 2u);
  BOOST_TEST(same_bytes(got[0].msg.payload, b));
  take(pa[2], 1);
  got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(got[0].from == 1u);
  BOOST_TEST(same_bytes(got[0].msg.payload, a));
}

BOOST_FIXTURE_TEST_CASE(a_part_out_of_place_refuses_its_message_once, inbox_fixture) {
  const auto want = random_bytes(4000, 4);
  // Parts skipped, repeated, at the wrong offset, past the end, empty.
  std::vector<std::function<void(std::vector<std::vector<::zmq::message_t>>&)>> breaks{
      [](auto& p) { p.erase(p.begin() + 1); },
      [](auto& p) {
        std::vector<::zmq::message_t> again(2);
        again[0].copy(p[1][0]);
        again[1].copy(p[1][1]);
        p.insert(p.begin() + 2, std::move(again));
      },
      [](auto& p) {
        const auto c = encode_continuation({1, 999});
        p[1][0] = ::zmq::message_t(c.data(), c.size());
      },
      [](auto& p) { p[1][1] = ::zmq::message_t(std::size_t{3001}); },
      [](auto& p) { p[1][1] = ::zmq::message_t(); },
  };
  for (auto& broken : breaks) {
    auto parts = split(layout_of(want), {1000, 2000, 3000});
    broken(parts);
    for (auto& p : parts) take(p);
    auto got = drain();
    BOOST_TEST_REQUIRE(got.size() == 1u);  // once, however many parts followed
    BOOST_TEST(int(got[0].error) == int(wire_error::truncated));
    BOOST_TEST(got[0].msg.payload.empty());
    // The next message from that peer is fine.
    auto next = split(join_of(3), {});
    take(next[0]);
    got = drain();
    BOOST_TEST_REQUIRE(got.size() == 1u);
    BOOST_TEST(int(got[0].error) == int(wire_error::none));
    BOOST_TEST(box.in_progress() == 0u);
  }
}

BOOST_FIXTURE_TEST_CASE(a_part_of_no_message_and_a_damaged_part_are_refused, inbox_fixture) {
  const auto want = random_bytes(3000, 5);
  auto parts = split(layout_of(want), {1000});
  take(parts[1]);  // a continuation before any header
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::truncated));

  auto damaged = split(layout_of(want), {1000});
  static_cast<std::byte*>(damaged[1][1].data())[17] ^= std::byte{0x10};
  take(damaged[0]);
  take(damaged[1]);
  got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::bad_checksum));
}

BOOST_FIXTURE_TEST_CASE(a_new_message_ends_an_unfinished_one, inbox_fixture) {
  const auto first = random_bytes(3000, 6), second = random_bytes(100, 7);
  auto a = split(layout_of(first), {1000, 2000});
  auto b = split(layout_of(second), {});
  take(a[0]);
  take(a[1]);
  take(b[0]);  // the sender reconnected: the rest of `first` is not coming
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(int(got[0].error) == int(wire_error::truncated));
  BOOST_TEST(int(got[1].error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got[1].msg.payload, second));
  take(a[2]);  // a late part of the abandoned message belongs to no message
  got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::truncated));
}

BOOST_FIXTURE_TEST_CASE(a_stalled_message_is_refused_after_the_partial_timeout, inbox_fixture) {
  auto parts = split(layout_of(random_bytes(3000, 8)), {1000});
  take(parts[0]);
  box.expire(now + options.partial_timeout - 1ms);
  BOOST_TEST(drain().empty());
  BOOST_TEST(box.in_progress() == 1u);
  box.expire(now + options.partial_timeout);
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::truncated));
  BOOST_TEST(box.in_progress() == 0u);
}

BOOST_FIXTURE_TEST_CASE(an_unauthorized_message_is_refused_before_its_parts_are_read, inbox_fixture) {
  const auto owned = zeromq::learner_ids::parse("1-2");
  auto parts = split(layout_of(random_bytes(3000, 9), 7), {1000, 2000});
  for (auto& p : parts) take(p, 1, &owned);
  auto got = drain();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].error) == int(wire_error::unauthorized));
  BOOST_TEST(got[0].msg.header.learner == 7u);  // what it claimed, for the log
  BOOST_TEST(got[0].msg.payload.empty());
  BOOST_TEST(box.in_progress() == 0u);
}

BOOST_AUTO_TEST_CASE(large_payloads_cross_tcp_in_parts_both_ways) {
  ::zmq::context_t syncer_context, learner_context;
  zeromq::socket_options o;
  o.chunk_bytes = 64 << 10;
  zeromq::server server(syncer_context, "tcp://127.0.0.1:*", o);
  zeromq::client client(learner_context, server.endpoint(), 3, 1, o);
  send_within(client, syncer_peer, join_of(3));
  auto joined = server.receive_for(5s);
  BOOST_TEST_REQUIRE(joined.has_value());
  const peer_id learner = joined->from;

  // Around the chunk size, and a few MiB that are not a multiple of it.
  const std::vector<std::size_t> sizes{1, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, (3 << 20) + 12345};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto up = random_bytes(sizes[i], 100 + static_cast<unsigned>(i));
    const auto down = random_bytes(sizes[i], 200 + static_cast<unsigned>(i));
    send_within(client, syncer_peer, layout_of(up));
    send_within(server, learner, layout_of(down));
    auto at_syncer = server.receive_for(5s);
    auto at_learner = client.receive_for(5s);
    BOOST_TEST_REQUIRE(at_syncer.has_value());
    BOOST_TEST_REQUIRE(at_learner.has_value());
    BOOST_TEST(int(at_syncer->error) == int(wire_error::none));
    BOOST_TEST(int(at_learner->error) == int(wire_error::none));
    BOOST_TEST(same_bytes(at_syncer->msg.payload, up), "learner to syncer, " << sizes[i] << " bytes");
    BOOST_TEST(same_bytes(at_learner->msg.payload, down), "syncer to learner, " << sizes[i] << " bytes");
  }
}

BOOST_AUTO_TEST_CASE(a_sender_that_does_not_chunk_is_understood) {
  ::zmq::context_t context;
  zeromq::socket_options whole;
  whole.chunk_bytes = 0;
  zeromq::server server(context, "tcp://127.0.0.1:*");
  zeromq::client client(context, server.endpoint(), 3, 1, whole);
  const auto want = random_bytes((1 << 20) + 3, 11);
  send_within(client, syncer_peer, layout_of(want));
  auto got = server.receive_for(5s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(int(got->error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got->msg.payload, want));
}

BOOST_AUTO_TEST_CASE(parts_cross_curve_too) {
  ::zmq::context_t context;
  const auto syncer_keys = zeromq::generate_keypair();
  const auto learner_keys = zeromq::generate_keypair();
  zeromq::socket_options o;
  o.chunk_bytes = 32 << 10;
  zeromq::server server(context, "tcp://127.0.0.1:*", o,
                        zeromq::server_security{syncer_keys, {{learner_keys.public_key, zeromq::learner_ids::any()}}});
  zeromq::client client(context, server.endpoint(), 3, 1, o,
                        zeromq::client_security{learner_keys, syncer_keys.public_key});
  const auto want = random_bytes((1 << 20) + 77, 12);
  send_within(client, syncer_peer, layout_of(want));
  auto got = server.receive_for(5s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(int(got->error) == int(wire_error::none));
  BOOST_TEST(same_bytes(got->msg.payload, want));
}

BOOST_AUTO_TEST_CASE(the_send_budget_is_in_bytes_and_nothing_taken_is_lost) {
  ::zmq::context_t syncer_context, learner_context;
  zeromq::socket_options small;
  small.queue_bytes = 4 << 20;
  small.chunk_bytes = 64 << 10;
  zeromq::server server(syncer_context, "tcp://127.0.0.1:*", small);  // receive queue: 64 parts
  zeromq::client client(learner_context, server.endpoint(), 3, 1, small);
  send_within(client, syncer_peer, join_of(3));
  BOOST_TEST_REQUIRE(server.receive_for(5s).has_value());

  // The syncer reads nothing: its queue, both kernels' socket buffers, then
  // the learner's 4 MiB budget fill up, and sends are refused.
  constexpr std::size_t size = 1 << 20;
  std::vector<std::vector<std::byte>> sent;
  bool refused = false;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!refused && sent.size() < 200 && std::chrono::steady_clock::now() < end) {
    auto payload = random_bytes(size, 300 + static_cast<unsigned>(sent.size()));
    auto m = layout_of(payload);
    const auto ec = client.try_send(syncer_peer, m);
    if (ec == make_error_code(errc::queue_full)) {
      refused = true;
      BOOST_TEST(m.payload.size() == size);  // kept for a retry
    } else {
      BOOST_TEST_REQUIRE(!ec);
      sent.push_back(std::move(payload));
      if (sent.size() % 8 == 0) std::this_thread::sleep_for(5ms);  // let libzmq write what it can
    }
  }
  BOOST_TEST_REQUIRE(refused);
  BOOST_TEST(sent.size() >= small.queue_bytes / size);  // not refused before the budget is used
  BOOST_TEST(client.queued_bytes() <= small.queue_bytes);

  // Every message taken arrives, whole and in order.
  for (std::size_t i = 0; i < sent.size(); ++i) {
    auto got = server.receive_for(5s);
    BOOST_TEST_REQUIRE(got.has_value(), "message " << i << " of " << sent.size());
    BOOST_TEST_REQUIRE(int(got->error) == int(wire_error::none));
    BOOST_TEST(same_bytes(got->msg.payload, sent[i]));
  }
  BOOST_TEST(!server.receive_for(100ms).has_value());
  // libzmq lets go of the last part once it has written it.
  for (int i = 0; i < 200 && client.queued_bytes() > 0; ++i) std::this_thread::sleep_for(10ms);
  BOOST_TEST(client.queued_bytes() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_zeromq_chunks_test
