// ctest-labels: unit zeromq threads
// A syncer over real ZeroMQ TCP sockets under attack: truncated frames, a
// wrong magic, a wrong version, a bad checksum, an oversized element count,
// an unknown learner, a replayed contribution and one from a dead
// incarnation. Each is refused for its own counted reason, the well-behaved
// learners are still served, and the global parameters come out bit for bit
// as in the same run without the attack.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/transport/zeromq.hpp>

namespace runtime_zeromq_hostile_test {

using namespace std::chrono_literals;
using namespace diloco;
using T = double;
using test_syncer = syncer<outer::sgd<T>, merge::average, zeromq::server>;

constexpr std::size_t size = 5;
constexpr std::uint64_t round_count = 6;

/// A scripted learner: joins, then each round sends a known outer gradient
/// against the revision it last received.
struct scripted {
  zeromq::client socket;
  std::uint32_t id, incarnation;
  std::uint64_t sequence = 1, revision = 0;
  bool welcomed = false;
  message last;  ///< a copy of its latest contribution, for the replay

  scripted(::zmq::context_t& c, const std::string& endpoint, std::uint32_t learner, std::uint32_t inc)
      : socket(c, endpoint, learner, inc), id(learner), incarnation(inc) {}

  message header(message_kind kind) {
    message m;
    m.header.kind = kind;
    m.header.learner = id;
    m.header.incarnation = incarnation;
    m.header.sequence = sequence++;
    return m;
  }

  message contribution(std::uint64_t round) {
    message m = header(message_kind::contribution);
    m.header.codec = codec_id::f64;
    m.header.base_revision = revision;
    m.header.tokens = 32;
    m.header.steps = 4;
    m.header.revision = 4 * (round + 1);  // the learner's local step
    m.header.element_count = size;
    m.payload = byte_buffer(size * sizeof(T));
    auto v = m.payload.as<T>();
    for (std::size_t k = 0; k < size; ++k) v[k] = T(0.01) * T(id + 1) * T(round + 1) + T(0.001) * T(k);
    return m;
  }

  void read() {
    while (auto e = socket.try_receive()) {
      if (e->msg.header.kind == message_kind::welcome) welcomed = true;
      if (e->msg.header.kind == message_kind::update) revision = std::max(revision, e->msg.header.revision);
    }
  }
};

message copy_of(const message& m) {
  message c;
  c.header = m.header;
  c.payload = byte_buffer(m.payload.size());
  std::memcpy(c.payload.data(), m.payload.data(), m.payload.size());
  return c;
}

/// Sends raw frames from a socket that is not a learner.
void raw(::zmq::socket_t& s, std::initializer_list<std::span<const std::byte>> frames) {
  std::size_t i = 0;
  for (auto f : frames) {
    const bool more = ++i < frames.size();
    s.send(::zmq::buffer(f.data(), f.size()), more ? ::zmq::send_flags::sndmore : ::zmq::send_flags::none);
  }
}

struct outcome {
  std::vector<T> parameters;
  syncer_metrics metrics;
};

outcome run(bool attack) {
  ::zmq::context_t context;
  zeromq::server server(context, "tcp://127.0.0.1:*");
  parameter_layout layout;
  layout.add("w", size);
  const std::vector<T> initial{1, 2, 3, 4, 5};
  syncer_options options;
  options.training = training_config{.fragments = 1, .sync_period = 4, .overlap = 0, .mixing = 0.0, .lock_step = false};
  options.quorum = 2;  // every round holds both learners: arrival order cannot matter
  options.grace_factor = 0.0;
  options.log = [](const std::string&) {};
  test_syncer s(layout, initial, server, options);

  // Learner 0 is in its second incarnation; learner 1 in its first.
  scripted a(context, server.endpoint(), 0, 2), b(context, server.endpoint(), 1, 1);
  auto pump = [&](auto until) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!until() && std::chrono::steady_clock::now() < end) {
      if (auto e = server.receive_for(5ms)) s.handle(std::move(*e), clock::now());
      s.poll(clock::now());
      a.read();
      b.read();
    }
    BOOST_TEST_REQUIRE(until());
  };
  auto must_send = [](scripted& l, message m) {
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (l.socket.try_send(syncer_peer, m) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(5ms);
  };
  for (auto* l : {&a, &b}) {
    message j = l->header(message_kind::join);
    j.header.layout = layout.fingerprint();
    j.header.element_count = size;
    must_send(*l, std::move(j));
  }
  pump([&] { return s.live_learners() == 2 && a.welcomed && b.welcomed; });

  ::zmq::socket_t stranger(context, ::zmq::socket_type::dealer);
  stranger.set(::zmq::sockopt::linger, 0);
  stranger.connect(server.endpoint());
  scripted ghost(context, server.endpoint(), 0, 1);   // learner 0's dead first incarnation
  scripted nobody(context, server.endpoint(), 9, 1);  // never joined

  for (std::uint64_t r = 0; r < round_count; ++r) {
    auto ca = a.contribution(r);
    auto cb = b.contribution(r);
    const auto replay = r > 0 ? copy_of(b.last) : message{};
    b.last = copy_of(cb);
    must_send(a, std::move(ca));
    if (attack && r == 2) {
      const auto good = wire::encode_header(cb.header, cb.payload.bytes());
      auto bad_magic = good, bad_version = good;
      auto oversized = cb.header;
      bad_magic[0] = std::byte{'X'};
      bad_version[4] = std::byte{9};
      auto damaged = copy_of(cb);
      damaged.payload.data()[3] ^= std::byte{0x40};
      oversized.element_count = std::uint64_t{1} << 40;
      const auto oversized_header = wire::encode_header(oversized, {});
      raw(stranger, {std::span<const std::byte>(good).first(17)});  // truncated
      raw(stranger, {bad_magic, cb.payload.bytes()});               // wrong magic
      raw(stranger, {bad_version, cb.payload.bytes()});             // wrong version
      raw(stranger, {good, damaged.payload.bytes()});               // bad checksum
      raw(stranger, {oversized_header});                            // oversized element count
      must_send(nobody, nobody.contribution(r));                    // unknown learner
      auto late = ghost.contribution(r);                            // dead incarnation
      late.header.base_revision = a.revision;
      must_send(ghost, std::move(late));
    }
    if (attack && r > 0) must_send(b, copy_of(replay));  // replayed (already merged) contribution
    must_send(b, std::move(cb));
    pump([&] { return s.revision(0) == r + 1 && a.revision == r + 1 && b.revision == r + 1; });
  }
  // Let every refusal of the last round arrive.
  if (attack) pump([&] { return s.metrics().rejected_for(reject_reason::duplicate) == round_count - 1; });
  return {s.parameters(), s.metrics()};
}

BOOST_AUTO_TEST_SUITE(runtime_zeromq_hostile)

BOOST_AUTO_TEST_CASE(bad_messages_are_refused_for_their_own_reasons_and_change_nothing) {
  const auto clean = run(false);
  const auto attacked = run(true);

  BOOST_TEST(clean.metrics.rejected_total() == 0u);
  for (auto reason :
       {reject_reason::truncated, reject_reason::bad_magic, reject_reason::bad_version, reject_reason::bad_checksum,
        reject_reason::oversized, reject_reason::unknown_learner, reject_reason::dead_incarnation})
    BOOST_TEST(attacked.metrics.rejected_for(reason) == 1u, to_string(reason));
  BOOST_TEST(attacked.metrics.rejected_for(reject_reason::duplicate) == round_count - 1);
  BOOST_TEST(attacked.metrics.rejected_total() == 7u + (round_count - 1));

  // The same rounds were merged, to the bit.
  BOOST_TEST(attacked.metrics.outer_updates == round_count);
  BOOST_TEST(attacked.metrics.contributions_merged == clean.metrics.contributions_merged);
  BOOST_TEST_REQUIRE(attacked.parameters.size() == clean.parameters.size());
  BOOST_TEST(std::memcmp(attacked.parameters.data(), clean.parameters.data(), clean.parameters.size() * sizeof(T)) ==
             0);
  // And they moved: Θ − Σ_r mean(Δ_a, Δ_b), Δ_i,r[k] = 0.01(i+1)(r+1) + 0.001k.
  double expected0 = 1.0;
  for (std::uint64_t r = 0; r < round_count; ++r)
    expected0 -= (0.01 * 1 * double(r + 1) + 0.01 * 2 * double(r + 1)) / 2;
  BOOST_TEST(clean.parameters[0] == expected0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_hostile_test
