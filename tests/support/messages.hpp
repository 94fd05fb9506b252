// Messages and sends shared by the network transports' tests
// (tests/transport/: tcp, zeromq, their chunks and memory budgets).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stop_token>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <diloco/protocol/message.hpp>

namespace transport_test {

/// A join from `learner` (incarnation 1) with a made-up layout.
inline diloco::message join_of(std::uint32_t learner) {
  diloco::message m;
  m.header.kind = diloco::message_kind::join;
  m.header.learner = learner;
  m.header.incarnation = 1;
  m.header.layout = 0xabcdef;
  m.header.element_count = 1234;
  return m;
}

/// An f32 update to `learner` at revision 42 carrying `values`.
inline diloco::message update_with(std::vector<float> values, std::uint32_t learner = 3) {
  diloco::message m;
  m.header.kind = diloco::message_kind::update;
  m.header.codec = diloco::codec_id::f32;
  m.header.learner = learner;
  m.header.incarnation = 1;
  m.header.revision = 42;
  m.header.element_count = values.size();
  m.payload = diloco::byte_buffer(values.size() * sizeof(float));
  std::memcpy(m.payload.data(), values.data(), m.payload.size());
  return m;
}

/// `n` bytes from a fixed seed: the reference a received payload must equal.
inline std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

/// A layout message (codec `bytes`, so any length goes) from `learner`
/// carrying `payload`.
inline diloco::message layout_of(std::span<const std::byte> payload, std::uint32_t learner = 3) {
  diloco::message m;
  m.header.kind = diloco::message_kind::layout;
  m.header.codec = diloco::codec_id::bytes;
  m.header.learner = learner;
  m.header.incarnation = 1;
  m.header.element_count = payload.size();
  m.payload = diloco::byte_buffer(payload.size());
  if (!payload.empty()) std::memcpy(m.payload.data(), payload.data(), payload.size());
  return m;
}

/// Whether a received payload is `want`, byte for byte.
inline bool same_bytes(const diloco::byte_buffer& got, std::span<const std::byte> want) {
  return got.size() == want.size() && (want.empty() || std::memcmp(got.data(), want.data(), want.size()) == 0);
}

/// Sends until the transport takes it (a fresh connection may not be up yet).
template <class Endpoint>
void send_within(Endpoint& e, diloco::peer_id to, diloco::message m,
                 std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::error_code ec;
  while ((ec = e.try_send(to, m)) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  BOOST_TEST_REQUIRE(!ec, "send failed: " << ec.message());
}

/// Who sent the next `joins` joins that `server` receives (5 s each at
/// most): the peer of learner `reader`, and the others' in order.
template <class Server>
std::pair<diloco::peer_id, std::vector<diloco::peer_id>> peers_of_joins(Server& server, int joins,
                                                                        std::uint32_t reader) {
  std::pair<diloco::peer_id, std::vector<diloco::peer_id>> out{0, {}};
  for (int i = 0; i < joins; ++i) {
    auto e = server.receive_for(std::chrono::seconds(5));
    BOOST_TEST_REQUIRE(e.has_value());
    if (e->msg.header.learner == reader)
      out.first = e->from;
    else
      out.second.push_back(e->from);
  }
  return out;
}

/// Reads `client` on a thread of its own until `expected` messages came,
/// each counted intact if it is `random_bytes(size, first_seed + k)`, the
/// k-th, and damaged otherwise.
template <class Client>
struct payload_checker {
  payload_checker(Client& client, int expected, std::size_t size, unsigned first_seed)
      : thread([&client, this, expected, size, first_seed](std::stop_token stop) {
          while (!stop.stop_requested() && intact + damaged < expected) {
            auto e = client.receive_for(std::chrono::milliseconds(10));
            if (!e) continue;
            const auto want = random_bytes(size, first_seed + unsigned(intact + damaged));
            ++(e->error == diloco::wire_error::none && same_bytes(e->msg.payload, want) ? intact : damaged);
          }
        }) {}

  std::atomic<int> intact{0}, damaged{0};
  std::jthread thread;  ///< last: started once the counters exist
};

/// Sends `count` honest messages (`layout_of(random_bytes(size, first_seed
/// + k), 3)`) from `server` to `reading`, each retried for up to 10 s,
/// calling `between()` before the first and after every 16th (to keep other
/// peers' queues full); returns the most `server.queued_bytes()` seen.
template <class Server, class Between>
std::uint64_t send_honest(Server& server, diloco::peer_id reading, int count, std::size_t size, unsigned first_seed,
                          Between&& between) {
  between();
  std::uint64_t most = server.queued_bytes();
  for (int i = 0; i < count; ++i) {
    auto m = layout_of(random_bytes(size, first_seed + unsigned(i)), 3);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::error_code ec;
    while ((ec = server.try_send(reading, m)) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    BOOST_TEST_REQUIRE(!ec, "honest message " << i << ": " << ec.message());
    most = std::max(most, server.queued_bytes());
    if (i % 16 == 0) between();
    most = std::max(most, server.queued_bytes());
  }
  return most;
}

}  // namespace transport_test
