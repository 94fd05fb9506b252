// diloco::etcd against a real etcd (Debian's etcd-server, started by the
// test as a user would start it): keys created under leases, epochs that
// grow with every new leader, a leader that stops renewing replaced by a
// standby only after it has stopped trusting its lease, a leader that cannot
// reach etcd stepping down on time, and answers that are not etcd's refused
// with a clear error. The base64 of the gateway is checked against RFC
// 4648's test vectors.
#define BOOST_TEST_MODULE diloco_etcd
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <diloco/coordination/etcd.hpp>
#include <diloco/coordination/leader_lease.hpp>

#include "support/etcd_server.hpp"

namespace etcd_leases_test {

using namespace std::chrono_literals;
using diloco::clock;
namespace etcd = diloco::etcd;

/// An HTTP server on a loopback port that answers every request with
/// `response` (raw bytes: status line, headers, body), or never answers
/// when `response` is empty; for the client's checks of what it is told.
class fake_server {
 public:
  explicit fake_server(std::string response) : response_(std::move(response)) {
    acceptor_.listen();
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        boost::system::error_code ec;
        boost::asio::ip::tcp::socket socket(io_);
        acceptor_.accept(socket, ec);
        if (ec || stop.stop_requested()) return;
        boost::asio::streambuf request;
        boost::asio::read_until(socket, request, "\r\n\r\n", ec);
        if (response_.empty()) {
          held_.push_back(std::move(socket));  // silent: the client times out
          continue;
        }
        boost::asio::write(socket, boost::asio::buffer(response_), ec);
        socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      }
    });
  }
  ~fake_server() {
    thread_.request_stop();
    boost::system::error_code ec;
    // Wakes the accept with one last connection.
    boost::asio::ip::tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

 private:
  std::string response_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_, {boost::asio::ip::make_address("127.0.0.1"), 0}};
  std::vector<boost::asio::ip::tcp::socket> held_;
  std::jthread thread_;
};

std::string http_answer(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

/// Whether `f` throws an `etcd::error` whose message holds `needle`.
template <class F>
bool refused(F f, const std::string& needle) {
  try {
    f();
  } catch (const etcd::error& e) {
    BOOST_TEST_MESSAGE("refused: " << e.what());
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

/// A real etcd and two candidates for one leadership key, "primary" and
/// "standby", with leases of `ttl`.
struct candidates {
  test_support::etcd_server server;
  etcd::client c{server.url()};
  etcd::leader_lease primary, standby;
  explicit candidates(std::chrono::seconds ttl)
      : primary(c, "/diloco/run/shard/0/leader", "primary", {.ttl = ttl}),
        standby(c, "/diloco/run/shard/0/leader", "standby", {.ttl = ttl}) {}
};

BOOST_AUTO_TEST_SUITE(etcd_leases)

BOOST_AUTO_TEST_CASE(base64_follows_rfc_4648) {
  // RFC 4648, section 10.
  const std::vector<std::pair<std::string, std::string>> vectors{{"", ""},
                                                                 {"f", "Zg=="},
                                                                 {"fo", "Zm8="},
                                                                 {"foo", "Zm9v"},
                                                                 {"foob", "Zm9vYg=="},
                                                                 {"fooba", "Zm9vYmE="},
                                                                 {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    BOOST_TEST(etcd::detail::base64_encode(plain) == coded);
    BOOST_TEST(etcd::detail::base64_decode(coded).value_or("?") == plain);
  }
  const std::string bytes("\x00\xff\x10/+", 5);
  BOOST_TEST(etcd::detail::base64_decode(etcd::detail::base64_encode(bytes)).value_or("?") == bytes);
  for (const char* bad : {"Zm9", "Z=9v", "Zm9v=", "Zm9v====", "Zm=v", "Zm9*", "===="})
    BOOST_TEST(!etcd::detail::base64_decode(bad).has_value(), bad);
}

BOOST_AUTO_TEST_CASE(a_client_takes_http_host_port_only) {
  for (const char* bad : {"127.0.0.1:2379", "https://127.0.0.1:2379", "http://127.0.0.1", "http://:2379",
                          "http://127.0.0.1:23x9", "http://127.0.0.1:2379/v3", ""})
    BOOST_CHECK_THROW(etcd::client{bad}, std::invalid_argument);
  BOOST_CHECK_THROW(etcd::client("http://127.0.0.1:2379", 0ms), std::invalid_argument);
  BOOST_CHECK_NO_THROW(etcd::client{"http://127.0.0.1:2379/"});
}

BOOST_AUTO_TEST_CASE(keys_under_leases_and_growing_create_revisions) {
  test_support::etcd_server server;
  etcd::client c(server.url());
  const auto a = c.grant(5s), b = c.grant(5s);
  BOOST_TEST(a != b);
  const auto [created, first] = c.create("/diloco/run/shard/0/leader", "tcp://a:1", a);
  BOOST_TEST(created);
  BOOST_TEST(first.value == "tcp://a:1");
  BOOST_TEST(first.lease == a);
  BOOST_TEST(first.create_revision > 0);
  // Held: a second create changes nothing and says who holds it.
  const auto [again, seen] = c.create("/diloco/run/shard/0/leader", "tcp://b:1", b);
  BOOST_TEST(!again);
  BOOST_TEST(seen.value == "tcp://a:1");
  BOOST_TEST(seen.create_revision == first.create_revision);
  BOOST_TEST(c.keep_alive(a).count() == 5);
  // Revoking the lease deletes its key; the next holder's key is younger.
  c.revoke(a);
  BOOST_TEST(!c.get("/diloco/run/shard/0/leader").has_value());
  BOOST_TEST(c.keep_alive(a).count() == 0);
  BOOST_CHECK_NO_THROW(c.revoke(a));  // gone already: no error
  const auto [taken, second] = c.create("/diloco/run/shard/0/leader", "tcp://b:1", b);
  BOOST_TEST(taken);
  BOOST_TEST(second.create_revision > first.create_revision);
  BOOST_TEST(c.get("/diloco/run/shard/0/leader")->value == "tcp://b:1");
  c.erase("/diloco/run/shard/0/leader");
  BOOST_TEST(!c.get("/diloco/run/shard/0/leader").has_value());
}

BOOST_AUTO_TEST_CASE(a_standby_leads_after_a_resignation_with_a_larger_epoch) {
  candidates two(5s);
  auto &primary = two.primary, &standby = two.standby;
  BOOST_TEST(primary.campaign(clock::now()));
  BOOST_TEST(primary.held(clock::now()));
  BOOST_TEST(primary.epoch() > 0u);
  BOOST_TEST(!standby.campaign(clock::now()));
  BOOST_TEST(standby.epoch() == 0u);
  BOOST_TEST(standby.holder()->value == "primary");
  BOOST_TEST(static_cast<std::uint64_t>(standby.holder()->create_revision) == primary.epoch());
  primary.resign();
  BOOST_TEST(!primary.held(clock::now()));
  BOOST_TEST(primary.lost());
  BOOST_TEST(!primary.campaign(clock::now()));  // never again
  BOOST_TEST(standby.campaign(clock::now()));
  BOOST_TEST(standby.epoch() > primary.epoch());
}

BOOST_AUTO_TEST_CASE(a_leader_that_stops_renewing_stops_trusting_its_lease_before_the_standby_leads) {
  candidates two(2s);  // etcd's smallest TTL with default settings
  auto &primary = two.primary, &standby = two.standby;
  BOOST_TEST_REQUIRE(primary.campaign(clock::now()));
  // The primary stops renewing (a SIGSTOP, a hang); the standby tries every
  // 100 ms, at most 100 times, until the lease expires in etcd.
  bool led = false;
  for (int attempt = 0; attempt < 100 && !led; ++attempt) {
    std::this_thread::sleep_for(100ms);
    led = standby.campaign(clock::now());
    if (led) {
      // The moment the standby leads, the old primary trusts its lease no more.
      BOOST_TEST(!primary.held(clock::now()));
    }
  }
  BOOST_TEST_REQUIRE(led);
  BOOST_TEST(standby.epoch() > primary.epoch());
  // The old primary comes back: its renewal finds the lease gone; it has lost for good.
  BOOST_TEST(!primary.renew(clock::now() + 1h));
  BOOST_TEST(primary.lost());
  BOOST_TEST(primary.last_error().find("expired") != std::string::npos);
  BOOST_TEST(standby.renew(clock::now()));
}

BOOST_AUTO_TEST_CASE(a_leader_cut_off_from_etcd_stops_trusting_its_lease_on_time) {
  test_support::etcd_server server;
  etcd::client c(server.url(), 300ms);
  etcd::leader_lease primary(c, "/diloco/run/shard/0/leader", "primary", {.ttl = 2s, .renew_share = 0.1});
  const auto start = clock::now();
  BOOST_TEST_REQUIRE(primary.campaign(start));
  server.pause(true);
  // Renewals fail (no answer within 300 ms) and never throw; the lease is
  // trusted for 0.8 x 2 s from the start of the campaign, no longer.
  bool held_late = false;
  for (auto now = clock::now(); now < start + 2500ms; now = clock::now()) {
    const bool held = primary.renew(now);
    if (now >= start + 1600ms) held_late = held_late || held;
    std::this_thread::sleep_for(50ms);
  }
  server.pause(false);
  BOOST_TEST(!held_late);
  BOOST_TEST(primary.last_error().find("no answer within the timeout") != std::string::npos);
  BOOST_TEST(!primary.held(clock::now()));
}

BOOST_AUTO_TEST_CASE(answers_that_are_not_etcds_are_refused) {
  {
    fake_server s(http_answer(200, "[]"));
    BOOST_TEST(refused([&] { etcd::client(s.url()).get("k"); }, "not a JSON object"));
  }
  {
    fake_server s(http_answer(200, "{not json"));
    BOOST_TEST(refused([&] { etcd::client(s.url()).get("k"); }, "not a JSON object"));
  }
  {
    fake_server s(http_answer(500, R"({"error":"etcdserver: too many requests","code":14})"));
    BOOST_TEST(refused([&] { etcd::client(s.url()).grant(5s); }, "HTTP 500: etcdserver: too many requests"));
  }
  {
    fake_server s(http_answer(200, R"({"header":{}})"));
    etcd::client c(s.url());
    BOOST_TEST(refused([&] { c.keep_alive(7); }, "without a result"));
    BOOST_TEST(refused([&] { c.grant(5s); }, "lease grant refused"));
    BOOST_TEST(refused([&] { c.create("k", "v", 0); }, "without its responses"));
  }
  {
    fake_server s(http_answer(200, R"({"kvs":[{"key":"aw==","value":"not base64!","create_revision":"2"}]})"));
    BOOST_TEST(refused([&] { etcd::client(s.url()).get("k"); }, "not base64"));
  }
  {
    fake_server s(http_answer(200, R"({"kvs":[{"key":"aw==","value":"","create_revision":"2x"}]})"));
    BOOST_TEST(refused([&] { etcd::client(s.url()).get("k"); }, "\"create_revision\" is not an integer"));
  }
  {
    fake_server s("");  // accepts and never answers
    const auto start = clock::now();
    BOOST_TEST(refused([&] { etcd::client(s.url(), 200ms).get("k"); }, "no answer within the timeout"));
    BOOST_TEST((clock::now() - start < 5s));
  }
  // Nobody listening.
  BOOST_TEST(refused([&] { etcd::client("http://127.0.0.1:" + std::to_string(test_support::free_port())).get("k"); },
                     "etcd at http://127.0.0.1:"));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace etcd_leases_test
