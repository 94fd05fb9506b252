// A run with a world size M (the synchronous modes): nobody is welcomed
// before all M learners have joined, every round waits for every live one,
// a dead learner is waited for `loss_wait` and then either left out or the
// run fails, and `partial_rounds` counts rounds merged without everyone.
#include <boost/test/unit_test.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "support/syncer_fixture.hpp"

namespace runtime_world_test {

using namespace syncer_test;

/// Lock-step rounds (H = 10, one fragment) over a world of `m` learners.
syncer_options world_of(std::uint32_t m) {
  syncer_options o = fixture::options();
  o.training.lock_step = true;
  o.world.size = m;
  o.world.rendezvous_timeout = 60s;
  return o;
}

/// Contributions of every learner in `ids` against revision `base`, Δ = 1
/// everywhere (sequence `sequence`).
void contribute(fixture& f, test_syncer& s, std::vector<std::uint32_t> ids, std::uint64_t base,
                std::uint64_t sequence) {
  for (const auto id : ids) f.send(id, f.contribution(id, std::vector<double>(6, 1.0), base, 1, sequence));
  f.deliver(s);
}

BOOST_AUTO_TEST_SUITE(runtime_world)

BOOST_FIXTURE_TEST_CASE(nobody_is_welcomed_before_all_learners_have_joined, fixture) {
  test_syncer s(layout, initial, syncer_end, world_of(3));
  send(0, join(0));
  send(1, join(1));
  deliver(s);
  BOOST_TEST(inbox(0).empty());
  BOOST_TEST(inbox(1).empty());
  BOOST_TEST(!s.started());
  // A join repeated while waiting changes nothing.
  now += 1s;
  send(0, join(0));
  deliver(s);
  BOOST_TEST(inbox(0).empty());

  send(2, join(2));
  deliver(s);
  BOOST_TEST(s.started());
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto got = inbox(i);
    BOOST_TEST_REQUIRE(got.size() == 2u);  // the welcome, then the one fragment at revision 0
    BOOST_TEST(int(got[0].header.kind) == int(message_kind::welcome));
    BOOST_TEST(int(got[1].header.kind) == int(message_kind::update));
    BOOST_TEST(got[1].header.revision == 0u);
    BOOST_TEST(values(got[1]) == initial);
  }
  BOOST_TEST(s.metrics().joins == 3u);
}

BOOST_FIXTURE_TEST_CASE(a_learner_id_outside_the_world_is_refused, fixture) {
  test_syncer s(layout, initial, syncer_end, world_of(3));
  send(3, join(3));
  deliver(s);
  const auto got = inbox(3);
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(int(got[0].header.kind) == int(message_kind::reject));
  BOOST_TEST(got[0].header.reason == std::uint8_t(reject_reason::unknown_learner));
  BOOST_TEST(s.metrics().joins == 0u);
}

BOOST_FIXTURE_TEST_CASE(the_rendezvous_fails_after_its_timeout_naming_who_is_missing, fixture) {
  test_syncer s(layout, initial, syncer_end, world_of(4));
  send(0, join(0));
  send(2, join(2));
  deliver(s);
  // Joins repeated every second keep the waiting learners alive.
  for (int t = 1; t < 60; ++t) {
    now += 1s;
    send(0, join(0));
    send(2, join(2));
    deliver(s);
    (void)s.poll(now);
  }
  BOOST_TEST(!s.failure());
  now += 1s;  // 60 s after the first join
  (void)s.poll(now);
  BOOST_TEST_REQUIRE(s.failure().has_value());
  BOOST_TEST(s.failure()->find("2 of 4 learners joined") != std::string::npos, *s.failure());
  BOOST_TEST(s.failure()->find("missing learner ids: 1, 3") != std::string::npos, *s.failure());
}

BOOST_FIXTURE_TEST_CASE(a_round_waits_for_every_learner_of_the_world, fixture) {
  test_syncer s(layout, initial, syncer_end, world_of(3));
  join_all(s, 3);
  contribute(*this, s, {0, 1}, 0, 1);
  now += 5s;
  (void)s.poll(now);
  BOOST_TEST(s.revision(0) == 0u);  // two of three: the round stays open
  contribute(*this, s, {2}, 0, 1);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().partial_rounds == 0u);
  // Θ − η·mean(Δ) with η = 1 and every Δ = 1.
  for (std::size_t i = 0; i < initial.size(); ++i) BOOST_TEST(s.parameters()[i] == initial[i] - 1.0);
}

BOOST_FIXTURE_TEST_CASE(a_dead_learner_is_waited_for_loss_wait_then_left_out, fixture) {
  auto o = world_of(2);
  o.heartbeat_timeout = 10s;
  o.world.loss_wait = 5s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  // Learner 1 falls silent; learner 0 keeps heartbeating and contributes.
  contribute(*this, s, {0}, 0, 1);
  for (int t = 1; t <= 14; ++t) {
    now += 1s;
    send(0, heartbeat(0));
    deliver(s);
    (void)s.poll(now);
  }
  BOOST_TEST(s.metrics().declared_dead == 1u);  // at 10 s
  BOOST_TEST(s.revision(0) == 0u);              // 4 s dead: still waited for
  now += 1s;                                    // 5 s dead
  send(0, heartbeat(0));
  deliver(s);
  (void)s.poll(now);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().partial_rounds == 1u);
  BOOST_TEST(!s.failure());
}

BOOST_FIXTURE_TEST_CASE(under_fail_a_learner_dead_past_loss_wait_fails_the_run, fixture) {
  auto o = world_of(2);
  o.heartbeat_timeout = 10s;
  o.world.on_loss = lost_learner::fail;
  o.world.loss_wait = 2s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  for (int t = 1; t <= 11; ++t) {
    now += 1s;
    send(0, heartbeat(0));
    deliver(s);
    (void)s.poll(now);
  }
  BOOST_TEST(s.metrics().declared_dead == 1u);
  BOOST_TEST(!s.failure());  // dead for 1 s
  now += 1s;
  (void)s.poll(now);
  BOOST_TEST_REQUIRE(s.failure().has_value());
  BOOST_TEST(s.failure()->find("learner 1 has been dead") != std::string::npos, *s.failure());
}

BOOST_FIXTURE_TEST_CASE(a_restored_syncer_does_not_wait_for_a_rendezvous_again, fixture) {
  test_syncer s(layout, initial, syncer_end, world_of(2));
  join_all(s, 2);
  contribute(*this, s, {0, 1}, 0, 1);
  std::stringstream saved;
  s.save(saved);

  inproc::hub hub2;
  auto& end2 = hub2.attach(syncer_peer);
  auto& learner0 = hub2.attach(0);
  test_syncer restored(layout, initial, end2, world_of(2));
  restored.load(saved);
  BOOST_TEST(restored.started());
  auto rejoin = join(0);
  BOOST_TEST_REQUIRE(!learner0.try_send(syncer_peer, rejoin));
  while (auto e = end2.try_receive()) restored.handle(std::move(*e), now);
  auto first = learner0.try_receive();
  BOOST_TEST_REQUIRE(first.has_value());
  BOOST_TEST(int(first->msg.header.kind) == int(message_kind::welcome));
}

BOOST_FIXTURE_TEST_CASE(without_a_world_partial_rounds_counts_rounds_without_every_live_learner, fixture) {
  test_syncer s(layout, initial, syncer_end, fixture::options(1));  // quorum 1, no grace
  join_all(s, 2);
  contribute(*this, s, {0}, 0, 1);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().partial_rounds == 1u);
}

BOOST_AUTO_TEST_CASE(presets_set_the_world_and_decoupled_overlap_follows_h) {
  BOOST_TEST(presets::data_parallel(4).world.size == 4u);
  BOOST_TEST(presets::diloco(4, 50).world.size == 4u);
  BOOST_TEST(presets::streaming_diloco(4, 50, 2, 5).world.size == 4u);
  BOOST_TEST(presets::decoupled_diloco(50, 4).world.size == 0u);
  BOOST_TEST(presets::decoupled_diloco(50, 4).training.overlap == 5u);
  BOOST_TEST(presets::decoupled_diloco(3, 1).training.overlap == 2u);  // H − 1
  BOOST_TEST(presets::decoupled_diloco(1, 1).training.overlap == 0u);
  BOOST_TEST(presets::decoupled_diloco(50, 4, 1, 7).training.overlap == 7u);
}

BOOST_AUTO_TEST_CASE(bad_world_settings_are_refused) {
  world_options w;
  w.size = 2;
  w.rendezvous_timeout = 0s;
  BOOST_CHECK_THROW(w.check(), std::invalid_argument);
  w.rendezvous_timeout = 1s;
  w.loss_wait = -1s;
  BOOST_CHECK_THROW(w.check(), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_world_test
