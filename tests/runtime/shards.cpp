// A sharded syncer (syncer_options::shard) and the learner's side of it
// (transport/shards.hpp): S syncers, each owning the fragments p with
// p mod S = s, and learners connected to all of them through `sharded`.
// Driven step by step in one thread on in-process transports, one hub per
// shard, so that runs are deterministic and can be compared bit for bit.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/transport/shards.hpp>

#include "support/toy_model.hpp"

namespace runtime_shards_test {

using namespace std::chrono_literals;
using namespace diloco;
using T = float;
constexpr std::size_t features = 10;
constexpr std::uint32_t fragments = 5;  // shards of 3 and 2 fragments with S = 2

using setup_type = decltype(presets::decoupled_diloco<T>(4, fragments));
using shard_type = setup_type::syncer_type<inproc::endpoint>;
using learner_type = learner<toy::linear_regression<T>, inner::adamw<T>, sharded<inproc::endpoint>>;

/// Decoupled DiLoCo, rounds of two learners closed as soon as the second
/// arrives: no grace window, whose length comes from timing statistics the
/// syncer gathers over all its fragments (so over fewer when sharded).
setup_type configuration(std::uint32_t index, std::uint32_t count) {
  auto s = presets::decoupled_diloco<T>(/*H=*/4, fragments, /*quorum=*/2, /*overlap=*/1);
  s.grace_factor = 0.0;
  s.shard = {index, count};
  s.log = [](const std::string&) {};
  s.heartbeat_timeout = 2s;
  return s;
}

/// S shards, each on a hub of its own, and three learners connected to all.
struct sharded_world {
  std::uint32_t count;
  std::vector<std::unique_ptr<inproc::hub>> hubs;
  std::vector<inproc::endpoint*> syncer_ends;
  std::vector<std::unique_ptr<shard_type>> shards;
  std::vector<bool> up;
  std::vector<std::unique_ptr<toy::linear_regression<T>>> models;
  std::vector<std::unique_ptr<sharded<inproc::endpoint>>> links;
  std::vector<std::unique_ptr<learner_type>> learners;
  std::vector<toy::teacher<T>> teachers;
  toy::linear_regression<T> initial{features, 7};
  time_point now{};

  explicit sharded_world(std::uint32_t s) : count(s) {
    for (std::uint32_t i = 0; i < s; ++i) {
      hubs.push_back(std::make_unique<inproc::hub>());
      syncer_ends.push_back(&hubs.back()->attach(syncer_peer));
      shards.push_back(make_shard(i));
      up.push_back(true);
    }
    for (std::uint32_t id = 0; id < 3; ++id) {
      std::vector<inproc::endpoint*> ends;
      for (std::uint32_t i = s; i-- > 0;) ends.push_back(&hubs[i]->attach(id));  // any order will do
      links.push_back(std::make_unique<sharded<inproc::endpoint>>(ends));
      models.push_back(std::make_unique<toy::linear_regression<T>>(features, 100 + id));
      // Heartbeats every 100 ms: a learner whose contribution a dead shard
      // swallowed joins again after 1 s and sends anyway after 6 s.
      learners.push_back(std::make_unique<learner_type>(*models.back(), *links.back(),
                                                        learner_options{.id = id}.with(timeouts::from(100ms)),
                                                        inner::adamw<T>({.learning_rate = 0.02})));
      teachers.emplace_back(features, 200 + id);
    }
  }

  std::unique_ptr<shard_type> make_shard(std::uint32_t i) {
    const auto c = configuration(i, count);
    return std::make_unique<shard_type>(initial.layout(), std::span<const T>(initial.parameters()), *syncer_ends[i], c,
                                        c.outer, c.merge);
  }

  /// One tick of 10 ms: every learner that may step takes one step, then
  /// every shard that is up handles what arrived.
  void tick() {
    for (std::size_t i = 0; i < learners.size(); ++i)
      if (learners[i]->poll(now)) learners[i]->train_step(teachers[i].next(8), now);
    for (std::uint32_t s = 0; s < count; ++s) {
      if (!up[s]) {
        while (syncer_ends[s]->try_receive()) {
        }  // a dead process reads nothing
        continue;
      }
      while (auto e = syncer_ends[s]->try_receive()) shards[s]->handle(std::move(*e), now);
      shards[s]->poll(now);
    }
    now += 10ms;
  }

  std::uint64_t revision(std::uint32_t p) const { return shards[p % count]->revision(p); }

  /// The global model: each fragment from the shard that owns it.
  std::vector<T> global() const {
    std::vector<T> flat(initial.layout().size());
    const auto& plan = shards[0]->plan();
    for (std::uint32_t p = 0; p < fragments; ++p)
      plan.scatter<T>(p, shards[p % count]->fragment_values(p), std::span<T>(flat));
    return flat;
  }
};

BOOST_AUTO_TEST_SUITE(runtime_shards)

BOOST_AUTO_TEST_CASE(two_shards_train_the_model_one_syncer_would) {
  // The same learners, batches and clock against one syncer (S = 1, the
  // learners still through `sharded`) and against two shards: every fragment
  // is merged from the same contributions at the same times, so the global
  // models are equal bit for bit.
  sharded_world one(1), two(2);
  for (int t = 0; t < 300; ++t) {
    one.tick();
    two.tick();
  }
  for (std::uint32_t p = 0; p < fragments; ++p) {
    BOOST_TEST(two.revision(p) == one.revision(p));
    BOOST_TEST(one.revision(p) >= 300u / 4 - 2);  // rounds of 2 of the 3 learners, each sending once per H = 4 steps
  }
  BOOST_TEST(two.global() == one.global(), boost::test_tools::per_element());
  // Each shard merged only its own fragments: fragment 1 never moved on shard 0.
  BOOST_TEST(two.shards[0]->revision(1) == 0u);
  BOOST_TEST(two.shards[1]->revision(0) == 0u);
  BOOST_TEST(two.shards[0]->metrics().outer_updates + two.shards[1]->metrics().outer_updates ==
             one.shards[0]->metrics().outer_updates);
  for (const auto& link : two.links) {
    BOOST_TEST((link->error() == shard_error::none));
    BOOST_TEST(link->misrouted() == 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_dead_shard_stops_only_its_own_fragments_and_catches_up_after_a_restart) {
  sharded_world w(2);
  for (int t = 0; t < 100; ++t) w.tick();
  std::ostringstream checkpoint;
  w.shards[1]->save(checkpoint);
  std::vector<std::uint64_t> at_kill;
  for (std::uint32_t p = 0; p < fragments; ++p) at_kill.push_back(w.revision(p));
  std::vector<std::uint64_t> steps_at_kill;
  for (const auto& l : w.learners) steps_at_kill.push_back(l->local_step());

  // Shard 1 dies: 200 ticks = 2 s without it.
  w.up[1] = false;
  for (int t = 0; t < 200; ++t) w.tick();
  for (std::uint32_t p = 0; p < fragments; ++p) {
    if (p % 2 == 0)
      BOOST_TEST(w.revision(p) >= at_kill[p] + 200 / 4 - 2);  // shard 0's fragments kept their pace
    else
      BOOST_TEST(w.revision(p) == at_kill[p]);
  }
  for (std::size_t i = 0; i < w.learners.size(); ++i)
    BOOST_TEST(w.learners[i]->local_step() == steps_at_kill[i] + 200);  // no learner waited

  // Shard 1 restarts from its checkpoint; learners rejoin it (their
  // contributions went unanswered) and its fragments move again.
  w.shards[1] = w.make_shard(1);
  std::istringstream in(checkpoint.str());
  w.shards[1]->load(in, w.now);
  w.up[1] = true;
  for (int t = 0; t < 1000; ++t) w.tick();  // 10 s: past the learners' answer timeout (6 s)
  for (std::uint32_t p = 1; p < fragments; p += 2) BOOST_TEST(w.revision(p) > at_kill[p] + 10);
  for (const auto& l : w.learners) BOOST_TEST(!l->error());
}

BOOST_AUTO_TEST_CASE(sharded_routes_contributions_to_the_owner_and_checks_welcomes) {
  inproc::hub a, b;
  auto& shard_a = a.attach(syncer_peer);
  auto& shard_b = b.attach(syncer_peer);
  sharded<inproc::endpoint> link({&a.attach(0), &b.attach(0)});
  message c;
  c.header.kind = message_kind::contribution;
  c.header.fragment = 3;
  // Before any welcome nobody owns fragment 3.
  BOOST_TEST((link.try_send(syncer_peer, c) == make_error_code(errc::unknown_peer)));
  BOOST_TEST(!link.owner_of(3));

  auto welcome = [](std::uint32_t index, std::uint32_t count) {
    message w;
    w.header.kind = message_kind::welcome;
    w.header.fragment = index;
    w.header.steps = count;
    return w;
  };
  message w1 = welcome(1, 2), w0 = welcome(0, 2);
  BOOST_TEST_REQUIRE(!shard_a.try_send(0, w1));  // connection a serves shard 1
  BOOST_TEST_REQUIRE(!shard_b.try_send(0, w0));
  BOOST_TEST(link.try_receive().has_value());
  BOOST_TEST(link.try_receive().has_value());
  BOOST_TEST((link.owner_of(3) == std::optional<std::size_t>(0)));  // 3 mod 2 = 1: connection a
  BOOST_TEST((link.owner_of(4) == std::optional<std::size_t>(1)));
  BOOST_TEST(!link.try_send(syncer_peer, c));
  BOOST_TEST(shard_a.try_receive().has_value());
  BOOST_TEST(!shard_b.try_receive().has_value());

  // A heartbeat goes to both.
  message h;
  h.header.kind = message_kind::heartbeat;
  BOOST_TEST(!link.try_send(syncer_peer, h));
  BOOST_TEST(shard_a.try_receive().has_value());
  BOOST_TEST(shard_b.try_receive().has_value());

  // A shard whose connection refuses (here: closed) gets its messages queued,
  // in order, and the other shard is not held up behind them.
  shard_b.close();
  message to_b;
  to_b.header.kind = message_kind::contribution;
  to_b.header.fragment = 4;  // shard 0: connection b
  BOOST_TEST(!link.try_send(syncer_peer, to_b));
  BOOST_TEST(link.pending(1) == 1u);
  BOOST_TEST(!link.try_send(syncer_peer, c));  // fragment 3, shard 1: connection a
  BOOST_TEST(shard_a.try_receive().has_value());
  message beat;
  beat.header.kind = message_kind::heartbeat;
  BOOST_TEST(!link.try_send(syncer_peer, beat));
  BOOST_TEST(shard_a.try_receive().has_value());
  BOOST_TEST(link.pending(1) == 1u);  // a heartbeat is not kept for later
  BOOST_TEST(link.deferred() == 1u);
  BOOST_TEST(link.dropped() == 1u);

  // An update of fragment 4 from connection a (shard 1) is not its to send.
  message u;
  u.header.kind = message_kind::update;
  u.header.fragment = 4;
  BOOST_TEST_REQUIRE(!shard_a.try_send(0, u));
  BOOST_TEST(!link.try_receive().has_value());
  BOOST_TEST(link.misrouted() == 1u);

  // A welcome from a syncer of three shards, or a second shard 0, is refused.
  message w3 = welcome(0, 3);
  BOOST_TEST_REQUIRE(!shard_a.try_send(0, w3));
  BOOST_TEST(!link.try_receive().has_value());
  BOOST_TEST((link.error() == shard_error::count_mismatch));
  message again = welcome(0, 2);
  BOOST_TEST_REQUIRE(!shard_a.try_send(0, again));
  BOOST_TEST(!link.try_receive().has_value());
  BOOST_TEST((link.error() == shard_error::index_conflict));
}

BOOST_AUTO_TEST_CASE(a_shard_refuses_other_shards_fragments_and_bad_shard_options) {
  sharded_world w(2);
  for (int t = 0; t < 20; ++t) w.tick();  // everyone joined
  BOOST_TEST_REQUIRE(w.learners[0]->joined());
  // A contribution of fragment 1 sent to shard 0 directly: refused.
  message c;
  c.header.kind = message_kind::contribution;
  c.header.learner = 0;
  c.header.incarnation = 1;
  c.header.sequence = 1000;
  c.header.fragment = 1;
  c.header.codec = codec_id::f32;
  c.header.element_count = w.shards[0]->plan()[1].size();
  c.header.steps = 1;
  c.header.revision = 1000;
  c.payload = byte_buffer(c.header.element_count * sizeof(T));
  const auto before = w.shards[0]->metrics().rejected_for(reject_reason::bad_fragment);
  BOOST_TEST_REQUIRE(
      !w.links[0]->connections()[1]->try_send(syncer_peer, c));  // connections built in reverse: [1] is hub 0
  while (auto e = w.syncer_ends[0]->try_receive()) w.shards[0]->handle(std::move(*e), w.now);
  BOOST_TEST(w.shards[0]->metrics().rejected_for(reject_reason::bad_fragment) == before + 1);

  toy::linear_regression<T> model(features, 1);
  inproc::hub hub;
  auto& end = hub.attach(syncer_peer);
  BOOST_CHECK_THROW(configuration(2, 2).make_syncer(model.layout(), std::span<const T>(model.parameters()), end),
                    std::invalid_argument);  // index ≥ count
  BOOST_CHECK_THROW(configuration(0, 6).make_syncer(model.layout(), std::span<const T>(model.parameters()), end),
                    std::invalid_argument);  // more shards than fragments
  BOOST_CHECK_THROW(configuration(0, 0).make_syncer(model.layout(), std::span<const T>(model.parameters()), end),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_shard_that_starts_over_without_the_model_gets_it_from_learners_already_welcomed) {
  // A shard's new leader with no checkpoint (its standby had none) asks the
  // learners for the model while the other shard runs on: the learners,
  // welcomed long ago, send their current state, to that shard alone.
  sharded_world w(2);
  for (int t = 0; t < 50; ++t) w.tick();
  BOOST_TEST_REQUIRE(w.learners[0]->joined());
  w.up[1] = false;
  for (int t = 0; t < 5; ++t) w.tick();  // what was under way to shard 1 is lost with it
  bootstrap<T, inproc::endpoint> fresh(*w.syncer_ends[1], configuration(1, 2).training);
  const auto refused_before = w.shards[0]->metrics().rejected_for(reject_reason::unexpected_kind);
  // The learners join again (their answers from shard 1 overdue, 1 s), are
  // asked for the model, and send it.
  for (int t = 0; t < 300 && !fresh.ready(); ++t) {
    for (std::size_t i = 0; i < w.learners.size(); ++i)
      if (w.learners[i]->poll(w.now)) w.learners[i]->train_step(w.teachers[i].next(8), w.now);
    while (auto e = w.syncer_ends[0]->try_receive()) w.shards[0]->handle(std::move(*e), w.now);
    w.shards[0]->poll(w.now);
    while (auto e = w.syncer_ends[1]->try_receive()) fresh.handle(std::move(*e), w.now);
    w.now += 10ms;
  }
  BOOST_TEST_REQUIRE(fresh.ready());
  BOOST_TEST(fresh.layout().fingerprint() == w.initial.layout().fingerprint());
  // The model sent is a learner's current one, not the initial: it trained meanwhile.
  const std::vector<T> sent(fresh.initial().begin(), fresh.initial().end());
  const auto start = w.initial.parameters();
  BOOST_TEST(!std::equal(sent.begin(), sent.end(), start.begin(), start.end()));
  // Shard 0, which has the model, was not sent it.
  BOOST_TEST(w.shards[0]->metrics().rejected_for(reject_reason::unexpected_kind) == refused_before);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_shards_test
