// ctest-labels: unit tcp threads
// The TCP transport over real loopback sockets on ephemeral ports: framing,
// order, limits, refusal of malformed streams, reconnection, backpressure, and
// a syncer served with Asio timers training two learners. Every wait is
// bounded.
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <diloco/inner/adamw.hpp>
#include <diloco/merge/weighted_mean.hpp>
#include <diloco/outer/nesterov.hpp>
#include <diloco/runtime/learner.hpp>
#include <diloco/runtime/presets.hpp>
#include <diloco/runtime/syncer.hpp>
#include <diloco/transport/tcp.hpp>

#include "support/messages.hpp"
#include "support/toy_model.hpp"

namespace transport_tcp_test {

using namespace std::chrono_literals;
using namespace diloco;
using transport_test::join_of;
using transport_test::send_within;
using transport_test::update_with;

constexpr auto loopback = "127.0.0.1";

/// The byte at `i` of message `sequence`'s payload.
std::byte pattern(std::uint64_t sequence, std::size_t i) {
  return std::byte(static_cast<unsigned char>(sequence * 31 + i * 7 + (i >> 12)));
}

/// A message of `kind` (contribution or update) with `bytes` bytes of payload
/// (a multiple of 4) filled with `pattern(sequence, ·)`.
message patterned(message_kind kind, std::uint64_t sequence, std::size_t bytes) {
  message m;
  m.header.kind = kind;
  m.header.codec = codec_id::f32;
  m.header.learner = 3;
  m.header.incarnation = 1;
  m.header.steps = 1;
  m.header.sequence = sequence;
  m.header.element_count = bytes / 4;
  if (bytes) {
    m.payload = byte_buffer(bytes);
    auto* p = m.payload.data();
    for (std::size_t i = 0; i < bytes; ++i) p[i] = pattern(sequence, i);
  }
  return m;
}

bool has_pattern(const message& m, std::uint64_t sequence) {
  const auto* p = m.payload.data();
  for (std::size_t i = 0; i < m.payload.size(); ++i)
    if (p[i] != pattern(sequence, i)) return false;
  return true;
}

template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds limit = 5s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

/// A port nobody listens on any more.
std::uint16_t closed_port() {
  tcp::server gone(loopback, 0);
  return gone.port();
}

/// A plain blocking socket that writes whatever bytes a test wants.
struct raw_peer {
  explicit raw_peer(std::uint16_t port) {
    socket.connect(::asio::ip::tcp::endpoint(::asio::ip::make_address(loopback), port));
  }

  void write(std::span<const std::byte> bytes) { ::asio::write(socket, ::asio::buffer(bytes.data(), bytes.size())); }
  void end_stream() { socket.shutdown(::asio::ip::tcp::socket::shutdown_send); }

  /// Whether the other side closed the connection within `limit`.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{socket.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      std::array<char, 256> sink;
      std::error_code ec;
      socket.read_some(::asio::buffer(sink), ec);
      if (ec) return true;  // end of stream or reset
    }
  }

  ::asio::io_context io;
  ::asio::ip::tcp::socket socket{io};
};

/// Re-computes the header CRC after a test edited a header.
void reseal(std::array<std::byte, wire::header_size>& h) {
  const std::uint32_t crc = crc32c(std::span<const std::byte>(h.data(), wire::offset::header_crc));
  std::memcpy(h.data() + wire::offset::header_crc, &crc, 4);
}

std::optional<envelope> receive_error_from(tcp::server& server, std::span<const std::byte> bytes, bool end = false) {
  raw_peer raw(server.port());
  raw.write(bytes);
  if (end) raw.end_stream();
  return server.receive_for(5s);
}

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

BOOST_AUTO_TEST_SUITE(transport_tcp)

BOOST_AUTO_TEST_CASE(a_join_and_an_update_make_the_round_trip) {
  tcp::server server(loopback, 0);
  BOOST_TEST(server.port() != 0);
  tcp::client client(loopback, server.port());

  send_within(client, syncer_peer, join_of(3));
  auto got = server.receive_for(5s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(int(got->error) == int(wire_error::none));
  BOOST_TEST(got->from == 1u);  // the first connection accepted
  BOOST_TEST(int(got->msg.header.kind) == int(message_kind::join));
  BOOST_TEST(got->msg.header.learner == 3u);
  BOOST_TEST(got->msg.header.layout == 0xabcdefu);
  BOOST_TEST(got->msg.header.element_count == 1234u);

  auto update = update_with({1.5f, -2.5f, 3.0f});
  BOOST_TEST_REQUIRE(!server.try_send(got->from, update));
  BOOST_TEST(update.payload.empty());  // moved into the send queue
  auto back = client.receive_for(5s);
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST(int(back->error) == int(wire_error::none));
  BOOST_TEST(back->from == syncer_peer);
  BOOST_TEST(int(back->msg.header.kind) == int(message_kind::update));
  BOOST_TEST(back->msg.header.revision == 42u);
  const auto v = back->msg.payload.as<const float>();
  BOOST_TEST_REQUIRE(v.size() == 3u);
  BOOST_TEST(v[0] == 1.5f);
  BOOST_TEST(v[1] == -2.5f);
  BOOST_TEST(v[2] == 3.0f);
}

BOOST_AUTO_TEST_CASE(a_client_resolves_a_host_name_and_tries_each_address) {
  tcp::server server(loopback, 0);  // IPv4 only; "localhost" may resolve to ::1 first
  tcp::client client("localhost", server.port());
  send_within(client, syncer_peer, join_of(5));
  auto got = server.receive_for(5s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(got->msg.header.learner == 5u);
  BOOST_TEST(client.connects() == 1u);
}

BOOST_AUTO_TEST_CASE(peers_are_numbered_in_accept_order_and_keep_their_number) {
  tcp::server server(loopback, 0);
  tcp::client a(loopback, server.port());
  send_within(a, syncer_peer, join_of(1));
  auto first = server.receive_for(5s);
  BOOST_TEST_REQUIRE(first.has_value());
  tcp::client b(loopback, server.port());
  send_within(b, syncer_peer, join_of(2));
  auto second = server.receive_for(5s);
  BOOST_TEST_REQUIRE(second.has_value());
  BOOST_TEST(first->from == 1u);
  BOOST_TEST(second->from == 2u);
  BOOST_TEST(server.connections() == 2u);
  send_within(a, syncer_peer, join_of(1));
  auto again = server.receive_for(5s);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(again->from == 1u);
  BOOST_TEST(again->msg.header.learner == 1u);
}

BOOST_AUTO_TEST_CASE(many_messages_of_many_sizes_arrive_whole_and_in_order_both_ways) {
  tcp::server server(loopback, 0);
  tcp::client client(loopback, server.port());
  const std::vector<std::size_t> sizes{0, 4, 1020, 65536, std::size_t{1} << 20, (std::size_t{16} << 20) + 4, 8};
  constexpr int rounds = 3;
  std::uint64_t sequence = 0;
  for (int r = 0; r < rounds; ++r)
    for (auto bytes : sizes) {
      ++sequence;
      send_within(client, syncer_peer, patterned(message_kind::contribution, sequence, bytes));
    }

  peer_id learner = 0;
  std::uint64_t expected = 0;
  for (int r = 0; r < rounds; ++r)
    for (auto bytes : sizes) {
      ++expected;
      auto e = server.receive_for(10s);
      BOOST_TEST_REQUIRE(e.has_value(), "message " << expected << " did not arrive");
      BOOST_TEST_REQUIRE(int(e->error) == int(wire_error::none));
      BOOST_TEST(e->msg.header.sequence == expected);
      BOOST_TEST(e->msg.payload.size() == bytes);
      BOOST_TEST(has_pattern(e->msg, expected));
      learner = e->from;
      // And back, as updates, from the server's end.
      auto echo = std::move(e->msg);
      echo.header.kind = message_kind::update;
      send_within(server, learner, std::move(echo));
    }
  for (std::uint64_t s = 1; s <= expected; ++s) {
    auto e = client.receive_for(10s);
    BOOST_TEST_REQUIRE(e.has_value(), "echo " << s << " did not arrive");
    BOOST_TEST_REQUIRE(int(e->error) == int(wire_error::none));
    BOOST_TEST(int(e->msg.header.kind) == int(message_kind::update));
    BOOST_TEST(e->msg.header.sequence == s);
    BOOST_TEST(e->msg.payload.size() == sizes[(s - 1) % sizes.size()]);
    BOOST_TEST(has_pattern(e->msg, s));
  }
  BOOST_TEST(!server.try_receive().has_value());
  BOOST_TEST(!client.try_receive().has_value());
}

BOOST_AUTO_TEST_CASE(compressed_payloads_of_each_block_scaled_codec_make_the_round_trip) {
  tcp::server server(loopback, 0);
  tcp::client client(loopback, server.port());
  // 100 values in blocks of 64: a whole block and a tail of 36, each with its
  // 4-byte scale; int8 and fp8 take a byte a value, int4 half a byte (rounded up).
  struct compressed {
    codec_id codec;
    std::size_t bytes;
  };
  const std::vector<compressed> cases{{codec_id::int8, (4 + 64) + (4 + 36)},
                                      {codec_id::fp8, (4 + 64) + (4 + 36)},
                                      {codec_id::int4, (4 + 32) + (4 + 18)}};
  std::uint64_t sequence = 0;
  for (const auto& c : cases) {
    auto m = patterned(message_kind::contribution, ++sequence, 0);
    m.header.codec = c.codec;
    m.header.block = 64;
    m.header.element_count = 100;
    m.payload = byte_buffer(c.bytes);
    for (std::size_t i = 0; i < c.bytes; ++i) m.payload.data()[i] = pattern(sequence, i);
    BOOST_TEST_CONTEXT("codec " << int(c.codec)) { send_within(client, syncer_peer, std::move(m)); }
    auto e = server.receive_for(5s);
    BOOST_TEST_REQUIRE(e.has_value());
    BOOST_TEST_REQUIRE(int(e->error) == int(wire_error::none));
    BOOST_TEST(int(e->msg.header.codec) == int(c.codec));
    BOOST_TEST(e->msg.header.block == 64u);
    BOOST_TEST(e->msg.payload.size() == c.bytes);
    BOOST_TEST(has_pattern(e->msg, sequence));
  }
}

BOOST_AUTO_TEST_CASE(sending_to_an_unknown_or_vanished_peer_fails_and_keeps_the_message) {
  tcp::server server(loopback, 0);
  auto update = update_with({1.0f});
  BOOST_TEST(server.try_send(7, update) == make_error_code(errc::unknown_peer));
  BOOST_TEST(update.payload.size() == 4u);

  peer_id learner = 0;
  {
    tcp::client client(loopback, server.port());
    send_within(client, syncer_peer, join_of(3));
    auto e = server.receive_for(5s);
    BOOST_TEST_REQUIRE(e.has_value());
    learner = e->from;
    BOOST_TEST(!server.try_send(learner, update));
    update = update_with({1.0f});
  }  // the learner's connection closes
  BOOST_TEST(eventually([&] { return server.connections() == 0; }));
  BOOST_TEST(server.try_send(learner, update) == make_error_code(errc::unknown_peer));
  BOOST_TEST(update.payload.size() == 4u);
}

BOOST_AUTO_TEST_CASE(without_a_connection_a_learner_send_is_refused_and_the_message_kept) {
  tcp::client client(loopback, closed_port());
  auto m = patterned(message_kind::contribution, 9, 8);
  for (int i = 0; i < 5; ++i) {
    BOOST_TEST(client.try_send(syncer_peer, m) == make_error_code(errc::queue_full));
    std::this_thread::sleep_for(20ms);  // across a few refused connection attempts
  }
  BOOST_TEST(m.payload.size() == 8u);
  BOOST_TEST(m.header.sequence == 9u);
  BOOST_TEST(has_pattern(m, 9));
  BOOST_TEST(!client.connected());
  BOOST_TEST(client.connects() == 0u);
  BOOST_TEST(client.try_send(5, m) == make_error_code(errc::unknown_peer));
}

BOOST_AUTO_TEST_CASE(a_short_header_then_the_end_of_the_stream_is_truncated) {
  tcp::server server(loopback, 0);
  const auto good = wire::encode_header(join_of(3).header, {});
  auto e = receive_error_from(server, std::span<const std::byte>(good.data(), 10), true);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::truncated));
  BOOST_TEST(e->from == 1u);
  auto m = join_of(3);
  BOOST_TEST(server.try_send(e->from, m) == make_error_code(errc::unknown_peer));
}

BOOST_AUTO_TEST_CASE(a_payload_cut_short_is_truncated) {
  tcp::server server(loopback, 0);
  auto contribution = patterned(message_kind::contribution, 1, 8);
  const auto header = wire::encode_header(contribution.header, contribution.payload.bytes());
  raw_peer raw(server.port());
  raw.write(header);
  raw.write(contribution.payload.bytes().first(4));
  raw.end_stream();
  auto e = server.receive_for(5s);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::truncated));
  BOOST_TEST(raw.closed_within(5s));
}

BOOST_AUTO_TEST_CASE(an_undecodable_header_is_refused_and_the_connection_closed) {
  tcp::server server(loopback, 0);
  const auto good = wire::encode_header(join_of(3).header, {});
  auto bad_magic = good;
  bad_magic[0] = std::byte{'X'};
  auto bad_crc = good;
  bad_crc[wire::offset::learner] ^= std::byte{1};
  auto bad_kind = good;
  bad_kind[wire::offset::kind] = std::byte{99};
  reseal(bad_kind);

  const std::pair<std::array<std::byte, wire::header_size>, wire_error> cases[] = {
      {bad_magic, wire_error::bad_magic}, {bad_crc, wire_error::bad_checksum}, {bad_kind, wire_error::bad_header}};
  for (const auto& [header, error] : cases) {
    raw_peer raw(server.port());
    raw.write(header);
    raw.write(good);  // never read: the stream is lost after a bad header
    auto e = server.receive_for(5s);
    BOOST_TEST_REQUIRE(e.has_value());
    BOOST_TEST(int(e->error) == int(error));
    BOOST_TEST(raw.closed_within(5s));
    auto m = join_of(3);
    BOOST_TEST(server.try_send(e->from, m) == make_error_code(errc::unknown_peer));
    BOOST_TEST(!server.receive_for(50ms).has_value());
  }
}

BOOST_AUTO_TEST_CASE(a_bad_payload_checksum_is_refused_and_the_stream_goes_on) {
  tcp::server server(loopback, 0);
  auto contribution = patterned(message_kind::contribution, 1, 8);
  const auto header = wire::encode_header(contribution.header, contribution.payload.bytes());
  auto corrupt = patterned(message_kind::contribution, 1, 8);
  corrupt.payload.data()[5] ^= std::byte{0x40};
  raw_peer raw(server.port());
  raw.write(header);
  raw.write(corrupt.payload.bytes());
  auto e = server.receive_for(5s);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::bad_checksum));
  BOOST_TEST(e->msg.payload.empty());
  // The length was right, so the next message is framed correctly.
  raw.write(wire::encode_header(join_of(3).header, {}));
  auto next = server.receive_for(5s);
  BOOST_TEST_REQUIRE(next.has_value());
  BOOST_TEST(int(next->error) == int(wire_error::none));
  BOOST_TEST(next->from == e->from);
  BOOST_TEST(int(next->msg.header.kind) == int(message_kind::join));
}

BOOST_AUTO_TEST_CASE(an_oversized_announcement_is_refused_before_any_allocation) {
  tcp::server server(loopback, 0);
  auto m = patterned(message_kind::contribution, 1, 0);
  m.header.element_count = std::uint64_t{1} << 61;  // 8 EiB of f32: no allocation could succeed
  auto e = receive_error_from(server, wire::encode_header(m.header, {}));
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::oversized));
  BOOST_TEST(server.pool().allocations() == 0u);
  BOOST_TEST(server.pool().reuses() == 0u);
  auto probe = join_of(3);
  BOOST_TEST(server.try_send(e->from, probe) == make_error_code(errc::unknown_peer));
}

BOOST_AUTO_TEST_CASE(the_payload_limit_is_configurable_and_inclusive) {
  tcp::socket_options options;
  options.max_payload_bytes = std::uint64_t{1} << 20;
  tcp::server server(loopback, 0, options);
  raw_peer raw(server.port());

  auto at_limit = patterned(message_kind::contribution, 1, std::size_t{1} << 20);
  raw.write(wire::encode_header(at_limit.header, at_limit.payload.bytes()));
  raw.write(at_limit.payload.bytes());
  auto e = server.receive_for(5s);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::none));
  BOOST_TEST(e->msg.payload.size() == std::size_t{1} << 20);

  auto over = patterned(message_kind::contribution, 2, 0);
  over.header.element_count = (std::uint64_t{1} << 18) + 1;  // 4 bytes past the limit
  raw.write(wire::encode_header(over.header, {}));
  e = server.receive_for(5s);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->error) == int(wire_error::oversized));
  BOOST_TEST(raw.closed_within(5s));
  BOOST_TEST(server.pool().allocations() == 1u);  // the message at the limit only
}

BOOST_AUTO_TEST_CASE(a_full_receive_queue_stops_reading_and_a_full_send_queue_refuses) {
  constexpr std::size_t message_bytes = std::size_t{1} << 20;
  tcp::socket_options server_options;
  server_options.receive_queue_bytes = 2 * message_bytes;
  tcp::server server(loopback, 0, server_options);
  tcp::socket_options client_options;
  client_options.send_queue_bytes = 4 * message_bytes;
  client_options.linger = 0ms;
  tcp::client client(loopback, server.port(), client_options);
  BOOST_TEST_REQUIRE(eventually([&] { return client.connected(); }));

  // Nobody receives at the server: its queue fills, then the kernel's socket
  // buffers, then the client's send queue.
  std::uint64_t sent = 0;
  std::error_code refused;
  auto m = patterned(message_kind::contribution, 1, message_bytes);
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (sent < 400 && std::chrono::steady_clock::now() < end) {
    if ((refused = client.try_send(syncer_peer, m))) {
      if (eventually([&] { return !(refused = client.try_send(syncer_peer, m)); }, 300ms)) {
        ++sent;
        m = patterned(message_kind::contribution, sent + 1, message_bytes);
        continue;
      }
      break;  // refused for 300 ms: the pipeline is full
    }
    ++sent;
    m = patterned(message_kind::contribution, sent + 1, message_bytes);
  }
  BOOST_TEST_REQUIRE(refused == make_error_code(errc::queue_full), "sent " << sent << " MiB without backpressure");
  BOOST_TEST_MESSAGE("refused after " << sent << " MiB; " << server.receive_queue_bytes()
                                      << " bytes wait at the server");
  BOOST_TEST(m.payload.size() == message_bytes);  // kept for a retry
  BOOST_TEST(has_pattern(m, sent + 1));
  // At most one message past the budget waits at the server.
  BOOST_TEST(server.receive_queue_bytes() <= 3 * (message_bytes + wire::header_size));
  BOOST_TEST(server.receive_queue_bytes() >= 2 * message_bytes);

  // Draining the server lets everything through, in order.
  for (std::uint64_t s = 1; s <= sent; ++s) {
    auto e = server.receive_for(10s);
    BOOST_TEST_REQUIRE(e.has_value(), "message " << s << " of " << sent << " did not arrive");
    BOOST_TEST_REQUIRE(e->msg.header.sequence == s);
  }
  BOOST_TEST(!client.try_send(syncer_peer, m));
  auto last = server.receive_for(10s);
  BOOST_TEST_REQUIRE(last.has_value());
  BOOST_TEST(last->msg.header.sequence == sent + 1);
  BOOST_TEST(has_pattern(last->msg, sent + 1));
}

BOOST_AUTO_TEST_CASE(a_learner_reconnects_by_itself_after_the_syncer_restarts) {
  tcp::socket_options fast;
  fast.reconnect_interval = 20ms;
  fast.reconnect_interval_max = 100ms;
  auto first = std::make_unique<tcp::server>(loopback, 0, fast);
  const std::uint16_t port = first->port();
  tcp::client client(loopback, port, fast);
  send_within(client, syncer_peer, join_of(3));
  BOOST_TEST_REQUIRE(first->receive_for(5s).has_value());
  BOOST_TEST(client.connects() == 1u);

  first.reset();  // the syncer goes away ...
  BOOST_TEST(eventually([&] { return !client.connected(); }));
  auto m = join_of(3);
  BOOST_TEST(client.try_send(syncer_peer, m) == make_error_code(errc::queue_full));

  // ... and comes back on the same port.
  std::unique_ptr<tcp::server> restarted;
  for (const auto end = std::chrono::steady_clock::now() + 5s; !restarted;) {
    try {
      restarted = std::make_unique<tcp::server>(loopback, port, fast);
    } catch (const std::system_error& e) {
      BOOST_TEST_REQUIRE((e.code() == ::asio::error::address_in_use), e.what());
      BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < end));
      std::this_thread::sleep_for(20ms);
    }
  }
  // A message sent while the old connection was dying may be lost: the
  // learner repeats its join until it is heard (as it does).
  std::optional<envelope> e;
  for (const auto end = std::chrono::steady_clock::now() + 10s; !e && std::chrono::steady_clock::now() < end;) {
    auto join = join_of(3);
    (void)client.try_send(syncer_peer, join);
    e = restarted->receive_for(50ms);
  }
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->msg.header.kind) == int(message_kind::join));
  BOOST_TEST(client.connects() == 2u);
}

BOOST_AUTO_TEST_CASE(two_learners_train_through_a_syncer_served_with_asio_timers) {
  using T = float;
  constexpr std::size_t features = 8;
  constexpr int steps = 1200;

  toy::linear_regression<T> initial(features, 3);
  tcp::server server(loopback, 0);
  auto options = presets::decoupled_diloco(20, 2, 1, 3);
  options.log = [](const std::string&) {};
  using syncer_type = syncer<outer::nesterov<T>, merge::token_weighted, tcp::server>;
  syncer_type s(initial.layout(), initial.parameters(), server, options);

  std::atomic<double> serve_cpu{0.0};
  const auto started = std::chrono::steady_clock::now();
  std::jthread serving([&](std::stop_token stop) {
    const double before = thread_cpu_seconds();
    tcp::serve(s, stop);
    serve_cpu = thread_cpu_seconds() - before;
  });

  using learner_type = learner<toy::linear_regression<T>, inner::adamw<T>, tcp::client>;
  struct outcome {
    int steps = 0;
    std::error_code error;
    learner_metrics metrics;
  };
  std::vector<outcome> outcomes(2);
  {
    std::vector<std::jthread> learners;
    for (std::uint32_t i = 0; i < 2; ++i)
      learners.emplace_back([&, i] {
        tcp::client client(loopback, server.port());
        toy::linear_regression<T> model(features, 3);
        toy::teacher<T> teacher(features, 50 + i);
        // AdamW's steps are about the learning rate in size even at the
        // optimum: at 0.01 the weights wandered by up to 0.08 around the
        // teacher's (3 of 8 runs past the bound below); at 0.003, 0.008-0.023.
        learner_type l(model, client, learner_options{.id = i, .heartbeat_interval = 100ms, .join_timeout = 10s},
                       inner::adamw<T>({.learning_rate = 0.003, .weight_decay = 0.0}));
        auto& out = outcomes[i];
        for (; out.steps < steps; ++out.steps) {
          auto r = l.step(teacher.next(16));
          if (!r) {
            out.error = r.error();
            break;
          }
          std::this_thread::sleep_for(1ms);  // a step that takes time, as real ones do
        }
        l.finish(clock::now());
        out.metrics = l.metrics();
      });  // the client's destructor waits for its queue to be written
  }
  // Both connections have ended, so everything they sent has been read.
  BOOST_TEST(eventually([&] { return server.connections() == 0; }));
  serving.request_stop();
  serving.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  for (const auto& out : outcomes) {
    BOOST_TEST(!out.error, out.error.message());
    BOOST_TEST(out.steps == steps);
    BOOST_TEST(out.metrics.updates_adopted > 2u);
  }
  const auto& m = s.metrics();
  BOOST_TEST(m.joins == 2u);
  BOOST_TEST(m.leaves == 2u);
  BOOST_TEST(m.contributions_accepted >= 2u * 2u * (steps / 20 - 1));
  BOOST_TEST(m.contributions_accepted == m.contributions_merged);
  BOOST_TEST(m.contributions_pending == 0u);
  BOOST_TEST(m.outer_updates > 0u);
  BOOST_TEST(m.rejected[static_cast<std::size_t>(reject_reason::wrong_peer)] == 0u);
  // The serving thread slept while nothing happened.
  BOOST_TEST(serve_cpu.load() < 0.5 * wall, "serve used " << serve_cpu.load() << " s of CPU in " << wall << " s");

  // The global model learned the teacher (w_k = ±(k+1)/8, b = 0.5).
  const auto global = s.parameters();
  toy::teacher<T> teacher(features, 0);
  double worst = std::abs(global[features] - 0.5);
  for (std::size_t k = 0; k < features; ++k) worst = std::max<double>(worst, std::abs(global[k] - teacher.weight(k)));
  BOOST_TEST_MESSAGE("served " << m.contributions_accepted << " contributions, " << m.outer_updates
                               << " outer updates in " << wall << " s with " << serve_cpu.load()
                               << " s of CPU; largest error " << worst);
  for (std::size_t k = 0; k < features; ++k) BOOST_TEST(std::abs(global[k] - teacher.weight(k)) < 0.05);
  BOOST_TEST(std::abs(global[features] - 0.5f) < 0.05);
}

BOOST_AUTO_TEST_CASE(serve_returns_promptly_when_stopped) {
  toy::linear_regression<float> initial(4, 1);
  tcp::server server(loopback, 0);
  auto options = presets::decoupled_diloco(10, 1);
  options.log = [](const std::string&) {};
  syncer<outer::nesterov<float>, merge::token_weighted, tcp::server> s(initial.layout(), initial.parameters(), server,
                                                                       options);
  std::stop_source already;
  already.request_stop();
  const auto t0 = std::chrono::steady_clock::now();
  tcp::serve(s, already.get_token());
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 1s));

  std::jthread serving([&](std::stop_token stop) { tcp::serve(s, stop); });
  std::this_thread::sleep_for(50ms);
  const auto t1 = std::chrono::steady_clock::now();
  serving.request_stop();
  serving.join();
  BOOST_TEST((std::chrono::steady_clock::now() - t1 < 1s));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_tcp_test
