// ctest-labels: unit zeromq
// A learner's connection to a shard with a standby (zeromq::failover_client)
// over real ZeroMQ sockets: it finds the candidate that is bound, moves to
// the other one when the leader's socket closes (a killed leader) or when
// the leader stays silent, and counts the moves to a new leader.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <diloco/transport/zeromq.hpp>
#include <diloco/transport/zeromq/failover.hpp>

namespace runtime_zeromq_failover_test {

using namespace std::chrono_literals;
using namespace diloco;

/// A loopback endpoint nobody is bound to (a server bound it, and closed).
std::string unbound_endpoint(::zmq::context_t& context) {
  zeromq::server probe(context, "tcp://127.0.0.1:*");
  return probe.endpoint();
}

message of_kind(message_kind kind, std::uint64_t sequence = 1) {
  message m;
  m.header.kind = kind;
  m.header.learner = 0;
  m.header.incarnation = 1;
  m.header.sequence = sequence;
  m.header.answers = kind == message_kind::ack ? sequence : 0;
  return m;
}

/// Waits (at most 10 s, in steps of 10 ms) for the client to probe again.
bool probes_again(zeromq::failover_client& c) {
  for (int i = 0; i < 1000 && !c.probing(); ++i) {
    (void)c.receive_for(10ms);
  }
  return c.probing();
}

/// The server's next message within 10 s, answered with an ack.
std::optional<envelope> answer(zeromq::server& s) {
  auto e = s.receive_for(10s);
  if (!e) return e;
  auto ack = of_kind(message_kind::ack, e->msg.header.sequence);
  BOOST_TEST(!s.try_send(e->from, ack));
  return e;
}

BOOST_AUTO_TEST_SUITE(runtime_zeromq_failover)

BOOST_AUTO_TEST_CASE(finds_the_bound_candidate_and_moves_when_its_socket_closes) {
  ::zmq::context_t context;
  const auto b = unbound_endpoint(context);
  std::optional<zeromq::server> leader(std::in_place, context, "tcp://127.0.0.1:*");
  const auto a = leader->endpoint();
  // A silence of a minute: only the closed socket can move it here.
  zeromq::failover_client c(context, {b, a}, 0, 1, {}, std::nullopt, 60s);
  BOOST_TEST(c.probing());
  auto join = of_kind(message_kind::join);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, join));
  BOOST_TEST_REQUIRE(answer(*leader).has_value());
  const auto got = c.receive_for(10s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST((got->msg.header.kind == message_kind::ack));
  BOOST_TEST(!c.probing());
  BOOST_TEST(c.endpoint() == a);
  BOOST_TEST(c.reconnections() == 0u);

  // The leader dies; a standby binds the other endpoint. Leaving the leader
  // counts at once: the learner's join, sent now, waits for the standby.
  leader.reset();
  BOOST_TEST_REQUIRE(probes_again(c));
  BOOST_TEST(c.reconnections() == 1u);
  auto early = of_kind(message_kind::join, 2);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, early));
  zeromq::server standby(context, b);
  const auto seen = answer(standby);
  BOOST_TEST_REQUIRE(seen.has_value());
  BOOST_TEST(seen->msg.header.sequence == 2u);
  BOOST_TEST_REQUIRE(c.receive_for(10s).has_value());
  BOOST_TEST(c.endpoint() == b);
  BOOST_TEST(c.reconnections() == 1u);
}

BOOST_AUTO_TEST_CASE(a_leader_silent_past_the_bound_is_left_and_found_again) {
  ::zmq::context_t context;
  const auto b = unbound_endpoint(context);
  zeromq::server leader(context, "tcp://127.0.0.1:*");
  zeromq::failover_client c(context, {leader.endpoint(), b}, 0, 1, {}, std::nullopt, 200ms);
  auto join = of_kind(message_kind::join);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, join));
  BOOST_TEST_REQUIRE(answer(leader).has_value());
  BOOST_TEST_REQUIRE(c.receive_for(10s).has_value());
  BOOST_TEST(c.endpoint() == leader.endpoint());
  // A heartbeat wants no answer: no silence counts from it.
  auto beat = of_kind(message_kind::heartbeat, 2);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, beat));
  BOOST_TEST_REQUIRE(leader.receive_for(10s).has_value());
  (void)c.receive_for(400ms);
  BOOST_TEST(!c.probing());
  // A join left unanswered: after 200 ms the client probes; the same leader
  // answering the copy it gets is found again, counted as a move.
  auto unanswered = of_kind(message_kind::join, 3);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, unanswered));
  BOOST_TEST_REQUIRE(leader.receive_for(10s).has_value());  // read, not answered
  BOOST_TEST_REQUIRE(probes_again(c));
  BOOST_TEST(c.reconnections() == 1u);
  auto retry = of_kind(message_kind::join, 4);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, retry));
  BOOST_TEST_REQUIRE(answer(leader).has_value());
  BOOST_TEST_REQUIRE(c.receive_for(10s).has_value());
  BOOST_TEST(!c.probing());
  BOOST_TEST(c.endpoint() == leader.endpoint());
  BOOST_TEST(c.reconnections() == 1u);
}

// While probing, each message goes to every candidate; the copy for one that
// nobody binds yet waits in its queue. Once another answers, that queue is
// dropped: a standby that binds later (taking over) must not receive the
// learner's old join, which would stand for the one the learner sends it
// then. Closed with the socket's default linger (1 s), the copy went out as
// soon as the standby bound.
BOOST_AUTO_TEST_CASE(a_candidate_left_behind_gets_nothing_sent_before) {
  ::zmq::context_t context;
  const auto b = unbound_endpoint(context);
  zeromq::server leader(context, "tcp://127.0.0.1:*");
  const zeromq::socket_options options;
  zeromq::failover_client c(context, {b, leader.endpoint()}, 0, 1, options, std::nullopt, 60s);
  auto join = of_kind(message_kind::join);
  BOOST_TEST_REQUIRE(!c.try_send(syncer_peer, join));
  BOOST_TEST_REQUIRE(answer(leader).has_value());
  BOOST_TEST_REQUIRE(c.receive_for(10s).has_value());
  BOOST_TEST_REQUIRE(c.endpoint() == leader.endpoint());
  zeromq::server standby(context, b);
  // Twice the linger: a lingering copy would have been delivered by then.
  BOOST_TEST(!standby.receive_for(2 * options.linger + 1s).has_value());
}

BOOST_AUTO_TEST_CASE(refuses_no_endpoint_and_a_silence_that_is_not_positive) {
  ::zmq::context_t context;
  BOOST_CHECK_THROW(zeromq::failover_client(context, {}, 0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(zeromq::failover_client(context, {"tcp://127.0.0.1:1"}, 0, 1, {}, std::nullopt, 0s),
                    std::invalid_argument);
  zeromq::failover_client one(context, {"tcp://127.0.0.1:1"}, 0, 1);
  BOOST_TEST(!one.probing());  // one endpoint: connected to it, never left
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_failover_test
