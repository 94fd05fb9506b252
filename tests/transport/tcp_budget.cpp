// ctest-labels: unit tcp
// ctest-timeout: 300
// The memory budget of diloco::tcp (`socket_options::memory_bytes`,
// docs/protocol.md, "Framing") over real loopback sockets: 1 500 raw
// connections that each announce a 1 GiB payload and send one byte (then
// close, or stall), and three peers that never read. Every wait is bounded.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <diloco/transport/tcp.hpp>

#include "support/messages.hpp"
#include "support/process_memory.hpp"

namespace transport_tcp_budget_test {

using namespace std::chrono_literals;
using namespace diloco;
using transport_test::join_of;
using transport_test::layout_of;
using transport_test::random_bytes;
using transport_test::same_bytes;
using transport_test::send_within;
using namespace process_memory;
using steady = std::chrono::steady_clock;

constexpr std::uint64_t entry = diloco::detail::unfinished_entry_bytes;  // 256
constexpr const char* loopback = "127.0.0.1";

/// A blocking POSIX socket connected to 127.0.0.1:`port` (-1 on failure),
/// with a receive buffer of `receive_buffer` bytes if not 0.
int connect_raw(std::uint16_t port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  ::inet_pton(AF_INET, loopback, &at.sin_addr);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

/// The 144-byte header announcing 2^30 − 1 bytes (within the 1 GiB limit)
/// and the first byte of its payload.
std::vector<std::byte> gigabyte_opening() {
  message big;
  big.header.kind = message_kind::layout;
  big.header.codec = codec_id::bytes;
  big.header.learner = 66;
  big.header.element_count = (std::uint64_t{1} << 30) - 1;
  const auto header = wire::encode_header(big.header, {});
  std::vector<std::byte> out(header.begin(), header.end());
  out.push_back(std::byte{1});
  return out;
}

/// Takes every message `server` receives on a thread of its own: counts
/// refusals by kind, and honest layouts from learner 3 equal to `want`.
struct syncer_thread {
  syncer_thread(tcp::server& s, std::span<const std::byte> w) : server(s), want(w) {}

  tcp::server& server;
  std::span<const std::byte> want;
  std::atomic<int> intact{0}, damaged{0}, truncated{0}, over_budget{0}, other{0};
  std::jthread thread{[this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      auto e = server.receive_for(10ms);
      if (!e) continue;
      if (e->error == wire_error::truncated)
        ++truncated;
      else if (e->error == wire_error::over_budget)
        ++over_budget;
      else if (e->error != wire_error::none)
        ++other;
      else if (e->msg.header.learner == 3 && e->msg.header.kind == message_kind::layout)
        ++(same_bytes(e->msg.payload, want) ? intact : damaged);
    }
  }};
};

BOOST_AUTO_TEST_SUITE(transport_tcp_budget)

BOOST_AUTO_TEST_CASE(connections_that_announce_a_gigabyte_and_leave_are_freed_when_they_close) {
  tcp::server server(loopback, 0);
  tcp::client honest(loopback, server.port());
  const auto want = random_bytes(std::size_t{4} << 20, 1);
  syncer_thread syncer(server, want);
  send_within(honest, syncer_peer, layout_of(want));  // primes the pools
  BOOST_TEST_REQUIRE(wait_for([&] { return syncer.intact == 1; }, 10s));
  const long rss_before = resident_kib();

  // 1 500 connections: header, one byte, close. Halfway, an honest message.
  constexpr int attackers = 1500;
  const auto opening = gigabyte_opening();
  const auto start = steady::now();
  for (int i = 0; i < attackers; ++i) {
    const int fd = connect_raw(server.port());
    BOOST_TEST_REQUIRE(fd >= 0);
    BOOST_TEST_REQUIRE(write_all(fd, opening));
    ::close(fd);
    if (i == attackers / 2) send_within(honest, syncer_peer, layout_of(want));
  }
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  // Each message is refused once, when its connection closes (or earlier,
  // for the budget), and freed.
  BOOST_TEST(wait_for([&] { return syncer.truncated + syncer.over_budget == attackers; }, 30s),
             syncer.truncated << " truncated + " << syncer.over_budget << " over budget of " << attackers);
  BOOST_TEST(wait_for([&] { return server.unfinished_bytes() == 0u; }, 5s));
  const long rss_after = resident_kib();
  send_within(honest, syncer_peer, layout_of(want));
  BOOST_TEST(wait_for([&] { return syncer.intact == 3; }, 10s));
  BOOST_TEST(syncer.damaged.load() == 0);
  BOOST_TEST(syncer.other.load() == 0);
  BOOST_TEST(int(server.messages_evicted()) == syncer.over_budget.load());
  const double growth = mib(rss_after - rss_before);
  BOOST_TEST_MESSAGE("1500 connections in " << seconds << " s: RSS +" << growth << " MiB, " << syncer.over_budget
                                            << " evicted");
  if (rss_measures_the_program) BOOST_TEST(growth < 64.0);
}

BOOST_AUTO_TEST_CASE(stalled_connections_past_the_budget_are_closed_least_recent_first) {
  tcp::server server(loopback, 0);  // the default budget: 256 MiB
  const auto want = random_bytes(std::size_t{3} << 20, 2);
  syncer_thread syncer(server, want);
  const long rss_before = resident_kib();

  // Each stalled message holds its first piece, 1 MiB, and 256 bytes of
  // bookkeeping: 1 048 832 bytes. 255 fit in 256 MiB (267 452 160), the
  // other 1 245 are refused and their connections closed.
  constexpr int attackers = 1500;
  constexpr std::uint64_t each = (std::uint64_t{1} << 20) + entry;
  const auto opening = gigabyte_opening();
  std::vector<int> fds;
  for (int i = 0; i < attackers; ++i) {
    fds.push_back(connect_raw(server.port()));
    BOOST_TEST_REQUIRE(fds.back() >= 0);
    BOOST_TEST_REQUIRE(write_all(fds.back(), opening));
  }
  const bool settled =
      wait_for([&] { return server.messages_evicted() == 1245u && server.unfinished_bytes() == 255 * each; }, 30s);
  BOOST_TEST(settled, server.messages_evicted() << " evicted, " << server.unfinished_bytes() << " bytes held");
  BOOST_TEST(wait_for([&] { return syncer.over_budget == 1245; }, 5s));
  const long rss_stalled = resident_kib();
  // The oldest went first: the first 1 245 connections are closed.
  int closed_early = 0;
  for (int i = 0; i < 1245; ++i) {
    char byte;
    if (::recv(fds[std::size_t(i)], &byte, 1, MSG_DONTWAIT) == 0) ++closed_early;
  }
  BOOST_TEST(closed_early == 1245);

  // An honest message still goes through, stalled ones giving way to it.
  tcp::client honest(loopback, server.port());
  send_within(honest, syncer_peer, layout_of(want));
  BOOST_TEST(wait_for([&] { return syncer.intact == 1; }, 10s));
  BOOST_TEST(server.unfinished_bytes() <= (std::uint64_t{256} << 20));

  for (const int fd : fds) ::close(fd);
  BOOST_TEST(wait_for([&] { return syncer.truncated + syncer.over_budget == attackers; }, 30s));
  BOOST_TEST(wait_for([&] { return server.unfinished_bytes() == 0u; }, 5s));
  BOOST_TEST(syncer.damaged.load() == 0);
  BOOST_TEST(syncer.other.load() == 0);
  // The buffers are 1 MiB each, but only the page the byte went to is
  // resident.
  const double growth = mib(rss_stalled - rss_before);
  BOOST_TEST_MESSAGE("1500 stalled connections: RSS +" << growth << " MiB with " << server.messages_evicted()
                                                       << " evicted");
  if (rss_measures_the_program) BOOST_TEST(growth < 64.0);
}

BOOST_AUTO_TEST_CASE(peers_that_never_read_share_one_budget_and_a_reader_gets_everything) {
  tcp::socket_options o;  // the default budget: 256 MiB
  tcp::server server(loopback, 0, o);
  constexpr std::size_t size = std::size_t{1} << 20;
  constexpr std::uint64_t message_bytes = size + wire::header_size;

  std::vector<int> sleepers;
  for (std::uint32_t l = 10; l < 13; ++l) {
    sleepers.push_back(connect_raw(server.port(), 64 << 10));
    BOOST_TEST_REQUIRE(sleepers.back() >= 0);
    const auto h = wire::encode_header(join_of(l).header, {});
    BOOST_TEST_REQUIRE(write_all(sleepers.back(), h));
  }
  tcp::client reader(loopback, server.port(), o);
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
  std::uint64_t taken = 0;
  const auto feed_sleepers = [&] {
    for (const peer_id p : sleeping) {
      for (int i = 0; i < 4096; ++i) {
        message m = layout_of({}, 0);
        m.header.element_count = size;
        m.payload = byte_buffer(size);
        std::memset(m.payload.data(), i & 0xff, size);  // every page resident
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
  const std::uint64_t bound = o.memory_bytes + 4 * message_bytes;
  BOOST_TEST(most_queued <= bound);
  BOOST_TEST(server.queued_bytes() <= bound);
  BOOST_TEST(server.sends_over_budget() > 0u);
  const double growth = mib(rss_after - rss_before);
  BOOST_TEST_MESSAGE("three sleepers took "
                     << taken / (1 << 20) << " MiB; queued now " << server.queued_bytes() / (1 << 20) << " MiB (most "
                     << most_queued / (1 << 20) << "); RSS +" << growth << " MiB; " << server.sends_over_budget()
                     << " sends over budget");
  if (rss_measures_the_program) BOOST_TEST(growth < mib(long(bound / 1024)) + 64.0);
  for (const int fd : sleepers) ::close(fd);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_tcp_budget_test
