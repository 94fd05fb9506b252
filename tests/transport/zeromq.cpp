// ctest-labels: unit zeromq threads
// The ZeroMQ transport over real sockets: inproc, ipc and tcp on an
// ephemeral loopback port. Every wait is bounded.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <diloco/transport/zeromq.hpp>

#include "support/messages.hpp"

namespace transport_zeromq_test {

using namespace std::chrono_literals;
using namespace diloco;
using transport_test::join_of;
using transport_test::send_within;
using transport_test::update_with;

template <class Endpoint>
std::optional<envelope> receive_within(Endpoint& e, std::chrono::milliseconds limit = 5s) {
  return e.receive_for(limit);
}

void round_trip(const std::string& address) {
  ::zmq::context_t context;
  zeromq::server server(context, address);
  zeromq::client client(context, server.endpoint(), 3, 1);

  send_within(client, syncer_peer, join_of(3));
  auto got = receive_within(server);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(int(got->error) == int(wire_error::none));
  BOOST_TEST(int(got->msg.header.kind) == int(message_kind::join));
  BOOST_TEST(got->msg.header.layout == 0xabcdefu);
  BOOST_TEST(got->msg.header.element_count == 1234u);
  const peer_id learner = got->from;

  auto update = update_with({1.5f, -2.5f, 3.0f});
  BOOST_TEST_REQUIRE(!server.try_send(learner, update));
  BOOST_TEST(update.payload.empty());  // handed to libzmq without a copy
  auto back = receive_within(client);
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST(back->from == syncer_peer);
  BOOST_TEST(back->msg.header.revision == 42u);
  const auto v = back->msg.payload.as<const float>();
  BOOST_TEST_REQUIRE(v.size() == 3u);
  BOOST_TEST(v[0] == 1.5f);
  BOOST_TEST(v[1] == -2.5f);
  BOOST_TEST(v[2] == 3.0f);
}

BOOST_AUTO_TEST_SUITE(transport_zeromq)

BOOST_AUTO_TEST_CASE(round_trip_over_inproc) { round_trip("inproc://diloco-test"); }

BOOST_AUTO_TEST_CASE(round_trip_over_ipc) {
  const auto path = std::filesystem::temp_directory_path() / ("diloco-test-" + std::to_string(::getpid()));
  round_trip("ipc://" + path.string());
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(round_trip_over_tcp_on_an_ephemeral_port) { round_trip("tcp://127.0.0.1:*"); }

BOOST_AUTO_TEST_CASE(each_learner_incarnation_is_its_own_peer) {
  ::zmq::context_t context;
  zeromq::server server(context, "inproc://peers");
  zeromq::client a(context, server.endpoint(), 1, 1), b(context, server.endpoint(), 2, 1),
      a2(context, server.endpoint(), 1, 2);
  send_within(a, syncer_peer, join_of(1));
  send_within(b, syncer_peer, join_of(2));
  send_within(a2, syncer_peer, join_of(1));
  std::vector<peer_id> peers;
  for (int i = 0; i < 3; ++i) {
    auto e = receive_within(server);
    BOOST_TEST_REQUIRE(e.has_value());
    peers.push_back(e->from);
  }
  std::sort(peers.begin(), peers.end());
  BOOST_TEST((std::adjacent_find(peers.begin(), peers.end()) == peers.end()));
  // Messages from the same socket keep their peer id.
  send_within(b, syncer_peer, join_of(2));
  auto again = receive_within(server);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(std::count(peers.begin(), peers.end(), again->from) == 1);
}

BOOST_AUTO_TEST_CASE(a_chosen_routing_id_displaces_no_connection) {
  ::zmq::context_t context;
  zeromq::server server(context, "tcp://127.0.0.1:*");
  zeromq::client honest(context, server.endpoint(), 3, 1);
  send_within(honest, syncer_peer, join_of(3));
  auto first = receive_within(server);
  BOOST_TEST_REQUIRE(first.has_value());
  const peer_id learner = first->from;

  // The routing id learners used to set: learner 3, incarnation 1, both u32
  // little-endian. One impostor takes it; a second one then claims the same.
  const std::string claimed{'\x03', '\0', '\0', '\0', '\x01', '\0', '\0', '\0'};
  auto impostor = [&] {
    ::zmq::socket_t s(context, ::zmq::socket_type::dealer);
    s.set(::zmq::sockopt::linger, 0);
    s.set(::zmq::sockopt::routing_id, claimed);
    s.connect(server.endpoint());
    return s;
  };
  auto a = impostor();
  auto b = impostor();
  const auto join = wire::encode_header(join_of(3).header, {});
  a.send(::zmq::buffer(join));
  auto from_a = receive_within(server);
  BOOST_TEST_REQUIRE(from_a.has_value());
  BOOST_TEST(from_a->from != learner);  // the honest learner's id was never 8 bytes
  const peer_id impostor_a = from_a->from;

  // b's connection is up (the TCP handshake and ZMTP greeting take a few
  // milliseconds on loopback) but nothing it sends is read; a and the honest
  // learner keep their peers, in both directions.
  const auto end = std::chrono::steady_clock::now() + 500ms;
  int honest_seen = 0, a_seen = 0;
  while (std::chrono::steady_clock::now() < end) {
    b.send(::zmq::buffer(join), ::zmq::send_flags::dontwait);
    a.send(::zmq::buffer(join), ::zmq::send_flags::dontwait);
    auto j = join_of(3);
    (void)honest.try_send(syncer_peer, j);
    while (auto e = server.receive_for(20ms)) {
      BOOST_TEST_REQUIRE((e->from == learner || e->from == impostor_a));
      ++(e->from == learner ? honest_seen : a_seen);
    }
  }
  BOOST_TEST(honest_seen > 5);
  BOOST_TEST(a_seen > 5);
  auto update = update_with({4.0f});
  BOOST_TEST_REQUIRE(!server.try_send(learner, update));
  auto back = receive_within(honest);  // the learner's socket had nothing else sent to it
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST(int(back->msg.header.kind) == int(message_kind::update));
  BOOST_TEST(back->msg.header.revision == 42u);
  BOOST_TEST(back->msg.payload.as<const float>()[0] == 4.0f);
  ::zmq::pollitem_t b_item{b.handle(), 0, ZMQ_POLLIN, 0};
  BOOST_TEST(::zmq::poll(&b_item, 1, 100ms) == 0);  // nothing was sent to it either
}

BOOST_AUTO_TEST_CASE(sending_to_an_unknown_or_vanished_peer_fails_and_keeps_the_message) {
  ::zmq::context_t context;
  zeromq::server server(context, "tcp://127.0.0.1:*");
  auto update = update_with({1.0f});
  BOOST_TEST(server.try_send(7, update) == make_error_code(errc::unknown_peer));
  BOOST_TEST(!update.payload.empty());

  peer_id learner = 0;
  {
    zeromq::client client(context, server.endpoint(), 3, 1);
    send_within(client, syncer_peer, join_of(3));
    auto e = receive_within(server);
    BOOST_TEST_REQUIRE(e.has_value());
    learner = e->from;
  }  // the learner's socket closes
  std::error_code ec;
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (!(ec = server.try_send(learner, update)) && std::chrono::steady_clock::now() < end) {
    update = update_with({1.0f});
    std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST(ec == make_error_code(errc::unknown_peer));
  BOOST_TEST(!update.payload.empty());
}

BOOST_AUTO_TEST_CASE(a_learner_send_before_the_syncer_is_up_waits_for_the_connection) {
  ::zmq::context_t context;
  // A free loopback port: taken, read, released; the syncer binds it later.
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_TEST_REQUIRE(holder >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_TEST_REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  BOOST_TEST_REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  ::close(holder);
  zeromq::client client(context, endpoint, 3, 1);
  auto m = update_with({1.0f, 2.0f});
  m.header.kind = message_kind::contribution;
  BOOST_TEST(client.try_send(5, m) == make_error_code(errc::unknown_peer));
  BOOST_TEST(m.payload.size() == 8u);            // kept
  BOOST_TEST(!client.try_send(syncer_peer, m));  // taken: it waits for the connection
  zeromq::server server(context, endpoint);
  const auto e = server.receive_for(10s);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->msg.header.kind) == int(message_kind::contribution));
  BOOST_TEST(e->msg.payload.size() == 8u);
}

BOOST_AUTO_TEST_CASE(what_the_syncer_sent_just_before_it_closed_reaches_a_waiting_learner) {
  // The learner waits in receive_for while the syncer answers and closes:
  // its answer must not go down with the connection (with ZMQ_IMMEDIATE,
  // libzmq dropped it in most tries).
  for (int attempt = 0; attempt < 30; ++attempt) {
    ::zmq::context_t learner_context;
    std::optional<zeromq::client> client;
    std::optional<envelope> back;
    std::thread reader;
    {
      ::zmq::context_t syncer_context;
      zeromq::server server(syncer_context, "tcp://127.0.0.1:*");
      client.emplace(learner_context, server.endpoint(), 3, 1);
      send_within(*client, syncer_peer, join_of(3));
      const auto got = receive_within(server);
      BOOST_TEST_REQUIRE(got.has_value());
      std::atomic<bool> waiting{false};
      reader = std::thread([&] {
        waiting = true;
        back = client->receive_for(10s);
      });
      while (!waiting) std::this_thread::yield();
      std::this_thread::sleep_for(20ms);  // into its wait (a shorter one only makes the case rarer)
      auto update = update_with({1.0f});
      BOOST_TEST_REQUIRE(!server.try_send(got->from, update));
    }  // the syncer's socket and context close: the update is written, then the connection ends
    reader.join();
    BOOST_TEST_REQUIRE(back.has_value(), "attempt " << attempt << ": the update was lost");
    BOOST_TEST(back->msg.header.revision == 42u);
  }
}

BOOST_AUTO_TEST_CASE(undecodable_messages_arrive_as_errors_and_the_socket_keeps_working) {
  ::zmq::context_t context;
  zeromq::server server(context, "inproc://raw");
  ::zmq::socket_t raw(context, ::zmq::socket_type::dealer);
  raw.set(::zmq::sockopt::linger, 0);
  raw.connect(server.endpoint());

  const auto good = wire::encode_header(join_of(3).header, {});
  auto bad_magic = good;
  bad_magic[0] = std::byte{'X'};
  auto contribution = update_with({1.0f, 2.0f});
  contribution.header.kind = message_kind::contribution;
  const auto contribution_header = wire::encode_header(contribution.header, contribution.payload.bytes());
  const float wrong[2] = {1.0f, 2.5f};

  auto expect = [&](wire_error error) {
    auto e = receive_within(server);
    BOOST_TEST_REQUIRE(e.has_value());
    BOOST_TEST(int(e->error) == int(error));
  };
  raw.send(::zmq::buffer(good.data(), 10));  // a short header
  expect(wire_error::truncated);
  raw.send(::zmq::buffer(good), ::zmq::send_flags::sndmore);  // a join does not carry frames
  raw.send(::zmq::str_buffer("x"), ::zmq::send_flags::sndmore);
  raw.send(::zmq::str_buffer("y"));
  expect(wire_error::truncated);
  raw.send(::zmq::buffer(bad_magic));
  expect(wire_error::bad_magic);
  raw.send(::zmq::buffer(contribution_header));  // payload missing
  expect(wire_error::truncated);
  raw.send(::zmq::buffer(contribution_header), ::zmq::send_flags::sndmore);
  raw.send(::zmq::buffer(wrong, sizeof wrong));  // payload that does not match its checksum
  expect(wire_error::bad_checksum);
  raw.send(::zmq::buffer(good));
  expect(wire_error::none);
}

BOOST_AUTO_TEST_CASE(a_learner_reconnects_by_itself_after_the_syncer_restarts) {
  ::zmq::context_t context;
  zeromq::socket_options fast;
  fast.reconnect_interval = 20ms;
  fast.reconnect_interval_max = 100ms;
  auto first = std::make_unique<zeromq::server>(context, "tcp://127.0.0.1:*", fast);
  const std::string endpoint = first->endpoint();
  zeromq::client client(context, endpoint, 3, 1, fast);
  send_within(client, syncer_peer, join_of(3));
  BOOST_TEST_REQUIRE(receive_within(*first).has_value());

  first.reset();  // the syncer goes away ...
  // ... and comes back on the same port, once libzmq's I/O thread has closed
  // the old listener (closing is asynchronous; a new process would not wait).
  std::unique_ptr<zeromq::server> restarted;
  for (const auto end = std::chrono::steady_clock::now() + 5s; !restarted;) {
    try {
      restarted = std::make_unique<zeromq::server>(context, endpoint, fast);
    } catch (const ::zmq::error_t& e) {
      BOOST_TEST_REQUIRE(e.num() == EADDRINUSE);
      BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < end));
      std::this_thread::sleep_for(20ms);
    }
  }
  auto& second = *restarted;
  // A message sent while the old connection was dying may be lost, as on any
  // network: the learner repeats its join until it is heard (as it does).
  std::optional<envelope> e;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!e && std::chrono::steady_clock::now() < end) {
    auto join = join_of(3);
    (void)client.try_send(syncer_peer, join);
    e = second.receive_for(100ms);
  }
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->msg.header.kind) == int(message_kind::join));
}

BOOST_AUTO_TEST_CASE(key_files_round_trip_and_bad_ones_are_named) {
  const auto dir = std::filesystem::temp_directory_path() / ("diloco-keys-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto keys = zeromq::generate_keypair();
  BOOST_TEST(keys.public_key.size() == 40u);
  BOOST_TEST(keys.secret_key.size() == 40u);
  zeromq::save_keypair(keys, dir / "a.key", dir / "a.pub");
  const auto back = zeromq::load_keypair(dir / "a.key");
  BOOST_TEST(back.public_key == keys.public_key);
  BOOST_TEST(back.secret_key == keys.secret_key);
  BOOST_TEST(zeromq::load_public_key(dir / "a.pub") == keys.public_key);
  const auto mode = std::filesystem::status(dir / "a.key").permissions();
  BOOST_TEST(((mode & std::filesystem::perms::group_read) == std::filesystem::perms::none));
  BOOST_TEST(((mode & std::filesystem::perms::others_read) == std::filesystem::perms::none));
  BOOST_CHECK_THROW(zeromq::load_keypair(dir / "a.pub"), std::runtime_error);  // no secret key in it
  BOOST_CHECK_THROW(zeromq::load_public_key(dir / "missing.pub"), std::runtime_error);
  std::ofstream(dir / "bad.pub") << "public-key = too-short\n";
  BOOST_CHECK_THROW(zeromq::load_public_key(dir / "bad.pub"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(curve_admits_allowed_learners_only) {
  ::zmq::context_t context;
  const auto syncer_keys = zeromq::generate_keypair();
  const auto allowed_keys = zeromq::generate_keypair();
  const auto stranger_keys = zeromq::generate_keypair();
  zeromq::server server(context, "tcp://127.0.0.1:*", {},
                        zeromq::server_security{syncer_keys, {{allowed_keys.public_key, zeromq::learner_ids::any()}}});

  zeromq::client allowed(context, server.endpoint(), 1, 1, {},
                         zeromq::client_security{allowed_keys, syncer_keys.public_key});
  send_within(allowed, syncer_peer, join_of(1));
  auto e = receive_within(server);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(e->msg.header.learner == 1u);
  BOOST_TEST(server.admitted() >= 1u);

  // A key not on the list, and no CURVE at all: the handshake never
  // completes, so nothing reaches the syncer.
  zeromq::client stranger(context, server.endpoint(), 2, 1, {},
                          zeromq::client_security{stranger_keys, syncer_keys.public_key});
  zeromq::client plain(context, server.endpoint(), 3, 1);
  const auto end = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < end) {
    auto a = join_of(2), b = join_of(3);
    (void)stranger.try_send(syncer_peer, a);
    (void)plain.try_send(syncer_peer, b);
    BOOST_TEST(!server.receive_for(50ms).has_value());
  }
  BOOST_TEST(server.denied() >= 1u);

  // The allowed learner still gets through.
  send_within(allowed, syncer_peer, join_of(1));
  BOOST_TEST(receive_within(server).has_value());
}

BOOST_AUTO_TEST_CASE(learner_ids_parse_ranges_and_any) {
  const auto ids = zeromq::learner_ids::parse(" 9-12, 0-3,7 ,2 , 13");
  for (std::uint32_t in : {0u, 1u, 2u, 3u, 7u, 9u, 10u, 12u, 13u}) BOOST_TEST(ids.contains(in), in);
  for (std::uint32_t out : {4u, 5u, 6u, 8u, 14u, 4294967295u}) BOOST_TEST(!ids.contains(out), out);
  BOOST_TEST(ids.to_string() == "0-3,7,9-13");  // 9-12 and 13 touch: one range
  BOOST_TEST(!ids.is_any());
  BOOST_TEST((zeromq::learner_ids::parse(ids.to_string()) == ids));

  const auto top = zeromq::learner_ids::parse("4294967294-4294967295");
  BOOST_TEST(top.contains(4294967295u));
  BOOST_TEST(!top.contains(0u));
  BOOST_TEST(zeromq::learner_ids::parse("5").to_string() == "5");

  const auto any = zeromq::learner_ids::parse(" * ");
  BOOST_TEST(any.is_any());
  BOOST_TEST(any.contains(0u));
  BOOST_TEST(any.contains(4294967295u));
  BOOST_TEST(any.to_string() == "*");

  BOOST_TEST(zeromq::learner_ids().empty());
  BOOST_TEST(!zeromq::learner_ids().contains(0u));

  for (const char* bad : {"", " ", "1,,2", "1,", "3-1", "a", "-1", "1-", "1-2-3", "4294967296", "*,3", "1 2", "+4"}) {
    BOOST_CHECK_THROW(zeromq::learner_ids::parse(bad), std::invalid_argument);
  }
  try {
    (void)zeromq::learner_ids::parse("0-3,5-4");
    BOOST_FAIL("a reversed range was accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'5-4'") != std::string::npos, e.what());
  }
}

struct temp_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("diloco-allow-" + std::to_string(::getpid()));
  temp_dir() { std::filesystem::create_directories(path); }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

/// The message of the `std::runtime_error` that loading `file` throws.
std::string load_error(const std::filesystem::path& file) {
  try {
    (void)zeromq::load_allow_list(file);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

BOOST_AUTO_TEST_CASE(allow_lists_bind_each_key_to_learner_ids) {
  const temp_dir dir;
  const auto a = zeromq::generate_keypair(), b = zeromq::generate_keypair();
  const auto list = zeromq::load_allow_list(
      dir.write("two.allow", "# learners of site A\npublic-key = " + a.public_key +
                                 "\n\n  learners = 0-3, 7\n#\npublic-key = " + b.public_key + "\nlearners = *\n"));
  BOOST_TEST_REQUIRE(list.size() == 2u);
  BOOST_TEST(list[0].public_key == a.public_key);
  BOOST_TEST(list[0].learners.to_string() == "0-3,7");
  BOOST_TEST(list[1].public_key == b.public_key);
  BOOST_TEST(list[1].learners.is_any());

  // A .pub file written with learner ids is an allow-list of one entry.
  zeromq::save_keypair(a, dir.path / "a.key", dir.path / "a.pub", zeromq::learner_ids::parse("4,2-3"));
  const auto one = zeromq::load_allow_list(dir.path / "a.pub");
  BOOST_TEST_REQUIRE(one.size() == 1u);
  BOOST_TEST(one[0].public_key == a.public_key);
  BOOST_TEST(one[0].learners.to_string() == "2-4");
  BOOST_TEST(zeromq::load_public_key(dir.path / "a.pub") == a.public_key);
  BOOST_CHECK_THROW(zeromq::save_keypair(a, dir.path / "n.key", dir.path / "n.pub", zeromq::learner_ids()),
                    std::invalid_argument);

  const std::string key_a = "public-key = " + a.public_key + "\n", key_b = "public-key = " + b.public_key + "\n";
  struct bad_case {
    std::string text, expected;
  };
  const std::vector<bad_case> cases{
      {key_a, "bare.allow:1: the key has no 'learners = ...' line"},
      {key_a + key_b + "learners = 1\n", "x.allow:1: the key has no 'learners = ...' line"},
      {"# only a comment\n", "has no 'public-key = ...' line"},
      {key_a + "learners = 1-\n", "x.allow:2: learner ids '1-'"},
      {"public-key = tooshort\nlearners = 1\n", "x.allow:1: 'tooshort' is not a public key"},
      {"learners = 1\n" + key_a, "x.allow:1: 'learners' before any 'public-key'"},
      {key_a + "learners = 1\nlearners = 2\n", "x.allow:3: a second 'learners' line for the key on line 1"},
      {key_a + "learners = 1\n" + key_a + "learners = 2\n", "x.allow:3: this key is already listed on line 1"},
      {key_a + "secret-key = " + a.secret_key + "\n", "x.allow:2: a secret key has no place"},
      {key_a + "learner = 1\n", "x.allow:2: unknown field 'learner'"},
      {key_a + "learners 1\n", "x.allow:2: expected 'name = value'"},
  };
  for (const auto& c : cases) {
    const auto message = load_error(dir.write(c.expected.rfind("bare", 0) == 0 ? "bare.allow" : "x.allow", c.text));
    BOOST_TEST(message.find(c.expected) != std::string::npos, message << "\n  expected: " << c.expected);
  }
  BOOST_TEST(load_error(dir.write("bare.allow", key_a)).find("'learners = *'") != std::string::npos);
  BOOST_TEST(load_error(dir.path / "missing.allow").find("cannot read") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(curve_keys_speak_only_for_their_learner_ids) {
  ::zmq::context_t context;
  const auto syncer_keys = zeromq::generate_keypair();
  const auto one = zeromq::generate_keypair(), any = zeromq::generate_keypair();
  zeromq::server_security security{syncer_keys, {}};
  security.allowed.emplace_back(one.public_key, zeromq::learner_ids::parse("1"));
  security.allowed.emplace_back(any.public_key, zeromq::learner_ids::any());
  zeromq::server server(context, "tcp://127.0.0.1:*", {}, security);
  zeromq::client first(context, server.endpoint(), 1, 1, {}, zeromq::client_security{one, syncer_keys.public_key});
  zeromq::client anyone(context, server.endpoint(), 7, 1, {}, zeromq::client_security{any, syncer_keys.public_key});

  auto contribution_of = [](std::uint32_t learner) {
    auto m = update_with({1.0f, 2.0f}, learner);
    m.header.kind = message_kind::contribution;
    m.header.sequence = 5;
    return m;
  };
  send_within(first, syncer_peer, contribution_of(1));
  auto own = receive_within(server);
  BOOST_TEST_REQUIRE(own.has_value());
  BOOST_TEST(int(own->error) == int(wire_error::none));
  BOOST_TEST(own->msg.header.learner == 1u);
  BOOST_TEST(own->msg.payload.size() == 8u);

  send_within(first, syncer_peer, contribution_of(2));
  auto claimed = receive_within(server);
  BOOST_TEST_REQUIRE(claimed.has_value());
  BOOST_TEST(int(claimed->error) == int(wire_error::unauthorized));
  BOOST_TEST(claimed->from == own->from);
  BOOST_TEST(claimed->msg.header.learner == 2u);  // who was claimed, for the count and the log
  BOOST_TEST(int(claimed->msg.header.kind) == int(message_kind::contribution));
  BOOST_TEST(claimed->msg.header.sequence == 5u);
  BOOST_TEST(claimed->msg.payload.empty());

  for (std::uint32_t learner : {7u, 1u, 4294967295u}) {
    send_within(anyone, syncer_peer, contribution_of(learner));
    auto e = receive_within(server);
    BOOST_TEST_REQUIRE(e.has_value());
    BOOST_TEST(int(e->error) == int(wire_error::none));
    BOOST_TEST(e->msg.header.learner == learner);
    BOOST_TEST(e->from != own->from);
  }

  // The first key is still held to learner 1 after the other key's traffic.
  send_within(first, syncer_peer, contribution_of(7));
  auto again = receive_within(server);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(int(again->error) == int(wire_error::unauthorized));
  BOOST_TEST(again->msg.header.learner == 7u);
}

BOOST_AUTO_TEST_CASE(without_curve_any_learner_id_gets_through) {
  ::zmq::context_t context;
  zeromq::server server(context, "tcp://127.0.0.1:*");
  zeromq::client client(context, server.endpoint(), 1, 1);
  for (std::uint32_t learner : {1u, 2u}) {
    send_within(client, syncer_peer, join_of(learner));
    auto e = receive_within(server);
    BOOST_TEST_REQUIRE(e.has_value());
    BOOST_TEST(int(e->error) == int(wire_error::none));
    BOOST_TEST(e->msg.header.learner == learner);
  }
}

/// CPU time (user + system, all threads) that process `pid` has used, in
/// seconds, from /proc/<pid>/stat (fields 14 and 15, in clock ticks).
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // from field 3 on: the name may hold spaces
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
  if (f.size() < 13) return -1.0;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// A line from `fd`, waiting at most `limit`; empty if none came.
std::string read_line(int fd, std::chrono::milliseconds limit) {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + limit;
  for (char c = 0; c != '\n';) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    ::pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0 || ::read(fd, &c, 1) != 1) return {};
    if (c != '\n') line += c;
  }
  return line;
}

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
}

/// A plain TCP connection to 127.0.0.1:`port`, or -1.
int connect_raw(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return s;
  if (s >= 0) ::close(s);
  return -1;
}

/// Whether the server closed (or reset) connection `s`; it never sends.
bool closed_by_peer(int s) {
  char c;
  const auto n = ::recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/// The child of `out_of_descriptors_...`: a server with 8 descriptors to
/// spare that answers every message with an ack carrying the sender's peer
/// id, until `control` closes (or 60 s), then reports its counts on
/// `report`. Never returns.
[[noreturn]] void serve_with_few_descriptors(int control, int report) {
  int code = 1;
  try {
    ::zmq::context_t context;
    zeromq::socket_options options;
    options.linger = 0ms;
    zeromq::server server(context, "tcp://127.0.0.1:*", options);
    std::size_t open = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++open;
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = open + 8;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(3);
    write_line(report, server.endpoint());
    for (const auto end = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < end;) {
      ::pollfd p{control, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) break;
      auto e = server.receive_for(100ms);
      if (!e || e->error != wire_error::none) continue;
      message ack;
      ack.header.kind = message_kind::ack;
      ack.header.learner = e->msg.header.learner;
      ack.header.incarnation = e->msg.header.incarnation;
      ack.header.answers = e->from;
      (void)server.try_send(e->from, ack);
    }
    write_line(report, std::to_string(server.accept_failures()) + " " + std::to_string(server.connections_shed()) +
                           " " + std::to_string(server.listener_pauses()));
    code = 0;
  } catch (...) {
  }
  ::_exit(code);
}

/// Kills and reaps a child process on every way out of a test.
struct child_process {
  pid_t pid;
  ~child_process() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  /// The exit status once it exits by itself within `limit`, or -1.
  int wait_for(std::chrono::milliseconds limit) {
    for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
};

/// Sends a join from `client` until an ack comes back within `limit`;
/// returns the peer id the server saw it as, or 0.
peer_id peer_seen_by_server(zeromq::client& client, std::chrono::milliseconds limit) {
  for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
    auto join = join_of(3);
    (void)client.try_send(syncer_peer, join);
    if (auto e = client.receive_for(100ms); e && int(e->msg.header.kind) == int(message_kind::ack))
      return static_cast<peer_id>(e->msg.header.answers);
  }
  return 0;
}

// Label `fork`: it forks a multi-threaded process, which ThreadSanitizer does not
// support, so the ThreadSanitizer build leaves it out (tests/CMakeLists.txt).
BOOST_AUTO_TEST_CASE(out_of_descriptors_the_server_sheds_new_connections_instead_of_spinning,
                     *boost::unit_test::label("fork")) {
  int control[2], report[2];
  BOOST_TEST_REQUIRE(::pipe2(control, O_CLOEXEC) == 0);
  BOOST_TEST_REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  child_process child{::fork()};
  BOOST_TEST_REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    ::close(control[1]);
    ::close(report[0]);
    serve_with_few_descriptors(control[0], report[1]);
  }
  ::close(control[0]);
  ::close(report[1]);
  const std::string endpoint = read_line(report[0], 10s);
  BOOST_TEST_REQUIRE(!endpoint.empty());
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));

  ::zmq::context_t context;
  zeromq::socket_options fast;
  fast.reconnect_interval = 20ms;
  fast.reconnect_interval_max = 200ms;
  fast.linger = 0ms;
  zeromq::client established(context, endpoint, 3, 1, fast);
  const peer_id before = peer_seen_by_server(established, 5s);
  BOOST_TEST_REQUIRE(before != 0u);

  // 40 connections against at most 9 free descriptors (8, and the one the
  // child's count of its own descriptors held): most cannot be accepted.
  // Those the server closes are opened again at once, so that new
  // connections keep waiting on the listener for the whole measurement.
  std::vector<int> raw;
  for (int i = 0; i < 40; ++i) raw.push_back(connect_raw(port));
  std::this_thread::sleep_for(300ms);
  const double cpu_before = cpu_seconds(child.pid);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 2s) {
    for (auto& s : raw)
      if (s < 0 || closed_by_peer(s)) {
        if (s >= 0) ::close(s);
        s = connect_raw(port);
      }
    std::this_thread::sleep_for(50ms);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double busy = (cpu_seconds(child.pid) - cpu_before) / wall;
  BOOST_TEST_MESSAGE("server process CPU while out of descriptors: " << busy * 100 << " % of one core");
  BOOST_TEST(cpu_before >= 0.0);
  BOOST_TEST(busy < 0.25, "the server used " << busy * 100 << " % of a core");

  // The connection made before keeps working, as the same peer.
  BOOST_TEST(peer_seen_by_server(established, 5s) == before);

  // Once the connections go, a new learner gets in.
  for (int s : raw)
    if (s >= 0) ::close(s);
  zeromq::client late(context, endpoint, 4, 1, fast);
  const peer_id newcomer = peer_seen_by_server(late, 10s);
  BOOST_TEST(newcomer != 0u);
  BOOST_TEST(newcomer != before);

  ::close(control[1]);
  std::istringstream counts(read_line(report[0], 10s));
  std::uint64_t failures = 0, shed = 0, pauses = 99;
  counts >> failures >> shed >> pauses;
  BOOST_TEST(child.wait_for(10s) == 0);
  ::close(report[0]);
  BOOST_TEST(failures > 0u);
  BOOST_TEST(shed >= 31u);   // at least 40 - 9 of the first round
  BOOST_TEST(pauses == 0u);  // shedding never failed: no need to let libzmq wait
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace transport_zeromq_test
