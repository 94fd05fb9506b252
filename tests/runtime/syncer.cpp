// The syncer driven message by message: joins, quorum, grace window,
// partial-round scaling, liveness, and every reason to refuse a message —
// each refusal counted on its own and changing nothing else.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/syncer_fixture.hpp"

namespace runtime_syncer_test {

using namespace std::chrono_literals;
using namespace diloco;
using syncer_test::fixture;
using syncer_test::test_syncer;
using syncer_test::values;

/// K = 1, τ = 4, γ = 0.5, max_grace 5 s: the grace window tests' settings.
syncer_options grace_options() {
  auto o = syncer_test::fixture::options(1);
  o.training.overlap = 4;
  o.grace_factor = 0.5;
  o.max_grace = 5s;
  return o;
}

BOOST_AUTO_TEST_SUITE(runtime_syncer)

BOOST_FIXTURE_TEST_CASE(join_gets_configuration_and_full_state, fixture) {
  auto o = options();
  o.training.sync_period = 25;
  o.training.overlap = 3;
  test_syncer s(layout, initial, syncer_end, o);
  send(0, join(0));
  deliver(s);
  const auto got = inbox(0);
  BOOST_TEST_REQUIRE(got.size() == 2u);  // welcome, then P = 1 update
  BOOST_TEST(int(got[0].header.kind) == int(message_kind::welcome));
  BOOST_TEST(got[0].header.sync_period == 25u);
  BOOST_TEST(got[0].header.overlap == 3u);
  BOOST_TEST(got[0].header.fragment_count == 1u);
  BOOST_TEST(got[0].header.layout == layout.fingerprint());
  BOOST_TEST(int(got[1].header.kind) == int(message_kind::update));
  BOOST_TEST(got[1].header.revision == 0u);
  BOOST_TEST(values(got[1]) == initial, boost::test_tools::per_element());
  BOOST_TEST(s.live_learners() == 1u);
  BOOST_TEST(s.metrics().joins == 1u);
}

BOOST_FIXTURE_TEST_CASE(every_message_carries_the_syncers_epoch, fixture) {
  auto o = options();
  o.epoch = 42;  // the epoch of its leadership (a standby that took over)
  test_syncer s(layout, initial, syncer_end, o);
  send(0, join(0));
  send(1, join(1));
  deliver(s);
  std::vector<message> got = inbox(0);
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}, 0, 1, 2));  // accepted, merged (quorum 1)
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}, 7, 1, 3));  // a future base: refused
  send(1, contribution(0, {1, 1, 1, 1, 1, 1}, 0, 1, 4));  // not its connection: refused
  deliver(s);
  s.poll(now);
  for (auto& m : inbox(0)) got.push_back(std::move(m));
  for (auto& m : inbox(1)) got.push_back(std::move(m));
  std::set<int> kinds;
  for (const auto& m : got) {
    kinds.insert(int(m.header.kind));
    BOOST_TEST(m.header.epoch == 42u, "kind " << int(m.header.kind));
  }
  BOOST_TEST((kinds == std::set<int>{int(message_kind::welcome), int(message_kind::update), int(message_kind::ack),
                                     int(message_kind::reject)}));
  // Without leadership: 0.
  test_syncer alone(layout, initial, syncer_end, options());
  send(2, join(2));
  deliver(alone);
  for (const auto& m : inbox(2)) BOOST_TEST(m.header.epoch == 0u);
}

BOOST_FIXTURE_TEST_CASE(round_waits_for_quorum_then_merges_the_mean, fixture) {
  test_syncer s(layout, initial, syncer_end, options(2));
  join_all(s, 2);
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}, 0, 1, 7));
  deliver(s);
  BOOST_TEST(s.revision(0) == 0u);  // one of two
  const auto verdict = inbox(0);    // accepted, not merged yet
  BOOST_TEST_REQUIRE(verdict.size() == 1u);
  BOOST_TEST(int(verdict[0].header.kind) == int(message_kind::ack));
  BOOST_TEST(verdict[0].header.answers == 7u);
  send(1, contribution(1, {3, 3, 3, 3, 3, 5}, 0, 1, 9));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  // Θ − mean: 1 − 2, 2 − 2, ..., 6 − (1 + 5)/2
  const std::vector<double> expected{-1, 0, 1, 2, 3, 3};
  BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
  const auto a = of_kind(inbox(0), message_kind::update);
  const auto b = of_kind(inbox(1), message_kind::update);
  BOOST_TEST_REQUIRE(a.size() == 1u);
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(a[0].header.revision == 1u);
  BOOST_TEST(a[0].header.answers == 7u);  // each learner's own contribution
  BOOST_TEST(b[0].header.answers == 9u);
  BOOST_TEST(values(a[0]) == expected, boost::test_tools::per_element());
  BOOST_TEST(s.metrics().contributions_merged == 2u);
}

BOOST_FIXTURE_TEST_CASE(partial_rounds_are_scaled_by_the_expected_weight_of_all_learners, fixture) {
  // Four learners that have each contributed once (equal weights); one
  // contributes Δ = 4: with "all_share" the round brings 1 of 4 expected
  // weights, so Θ moves by 4/4 = 1.
  {
    test_syncer s(layout, initial, syncer_end, options(1));
    join_all(s, 4);
    contribute_zero_once(s, 4);
    send(0, contribution(0, {4, 4, 4, 4, 4, 4}, 4));
    deliver(s);
    BOOST_TEST(s.revision(0) == 5u);
    const std::vector<double> expected{0, 1, 2, 3, 4, 5};
    BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
  }
  // Learners that joined but never contributed count for nothing: the same
  // contribution from the only one that ever spoke is a whole round (200
  // silent joins must not shrink every round to 1/201).
  {
    test_syncer s(layout, initial, syncer_end, options(1));
    join_all(s, 4);
    send(0, contribution(0, {4, 4, 4, 4, 4, 4}));
    deliver(s);
    const std::vector<double> expected{-3, -2, -1, 0, 1, 2};
    BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
  }
  // "full_step" takes the whole Δ.
  {
    auto o = options(1);
    o.scaling = partial_rounds::full_step;
    test_syncer s(layout, initial, syncer_end, o);
    join_all(s, 4);
    send(0, contribution(0, {4, 4, 4, 4, 4, 4}));
    deliver(s);
    const std::vector<double> expected{-3, -2, -1, 0, 1, 2};
    BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
  }
  // "live_share" ignores learners that left: 2 of 4 left, so Δ/2.
  {
    auto o = options(1);
    o.scaling = partial_rounds::live_share;
    test_syncer s(layout, initial, syncer_end, o);
    join_all(s, 4);
    contribute_zero_once(s, 4);
    for (std::uint32_t i : {2u, 3u}) {
      send(i, leave(i));
    }
    deliver(s);
    send(0, contribution(0, {4, 4, 4, 4, 4, 4}, 4));
    deliver(s);
    const std::vector<double> expected{-1, 0, 1, 2, 3, 4};
    BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
  }
}

BOOST_FIXTURE_TEST_CASE(a_contribution_cut_short_keeps_its_share, fixture) {
  // Token weights, H = 10, four learners of batch 64. Learner 0 brings a full
  // period (640 tokens in 10 steps), learner 1 one cut short by an adoption
  // (128 tokens in 2 steps). At the same 64 tokens per step both count as a
  // full period, (64·10)²/10, so each round is one learner of four: Δ/4 each,
  // 4/4 + 2/4 in all. (Sharing by each contribution's own weight would give
  // the short one 128²/2 = 8192 against 40960 expected: a different share.)
  syncer<outer::sgd<double>, merge::token_weighted, inproc::endpoint> s(layout, initial, syncer_end, options(1));
  for (std::uint32_t i = 0; i < 4; ++i) send(i, join(i));
  while (auto e = syncer_end.try_receive()) s.handle(std::move(*e), now);
  contribute_zero_once(s, 4);
  send(0, contribution(0, {4, 4, 4, 4, 4, 4}, 4));
  auto cut_short = contribution(1, {2, 2, 2, 2, 2, 2}, 4);
  cut_short.header.tokens = 128;
  cut_short.header.steps = 2;
  send(1, std::move(cut_short));
  while (auto e = syncer_end.try_receive()) s.handle(std::move(*e), now);
  BOOST_TEST(s.revision(0) == 6u);
  const std::vector<double> expected{-0.5, 0.5, 1.5, 2.5, 3.5, 4.5};
  BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(new_revisions_go_to_every_live_learner_or_only_to_contributors, fixture) {
  for (auto recipients : {update_recipients::live_learners, update_recipients::contributors}) {
    inproc::hub h;
    auto& end = h.attach(syncer_peer);
    std::vector<inproc::endpoint*> e{&h.attach(0), &h.attach(1), &h.attach(2)};
    auto o = options(1);
    o.recipients = recipients;
    test_syncer s(layout, initial, end, o);
    for (std::uint32_t i = 0; i < 3; ++i) {
      auto j = join(i);
      BOOST_TEST_REQUIRE(!e[i]->try_send(syncer_peer, j));
    }
    auto c = contribution(0, {1, 1, 1, 1, 1, 1});
    BOOST_TEST_REQUIRE(!e[0]->try_send(syncer_peer, c));
    while (auto m = end.try_receive()) s.handle(std::move(*m), now);
    std::vector<std::size_t> updates(3, 0);
    for (std::uint32_t i = 0; i < 3; ++i)
      while (auto m = e[i]->try_receive())
        if (m->msg.header.kind == message_kind::update && m->msg.header.revision == 1) ++updates[i];
    const std::size_t others = recipients == update_recipients::live_learners ? 1 : 0;
    BOOST_TEST(updates[0] == 1u);
    BOOST_TEST(updates[1] == others);
    BOOST_TEST(updates[2] == others);
  }
}

BOOST_FIXTURE_TEST_CASE(grace_window_collects_a_late_contribution, fixture) {
  // τ = 4 steps of 1 s, nothing else known: slack = 4 s, γ = 0.5 → 2 s.
  test_syncer s(layout, initial, syncer_end, grace_options());
  join_all(s, 3);
  contribute_zero_once(s, 3);
  for (std::uint32_t i = 0; i < 3; ++i) send(i, heartbeat(i, 1s));
  deliver(s);
  BOOST_TEST(s.grace().count() == std::chrono::nanoseconds(2s).count());

  const time_point t0 = now;
  send(0, contribution(0, {2, 2, 2, 2, 2, 2}, 3));
  deliver(s);
  BOOST_TEST(s.revision(0) == 3u);  // quorum, but learners 1 and 2 are live and not in
  const auto deadline = s.poll(now);
  BOOST_TEST_REQUIRE(deadline.has_value());
  BOOST_TEST((*deadline - t0).count() == std::chrono::nanoseconds(2s).count());

  now = t0 + 1s;  // inside the window
  send(1, contribution(1, {4, 4, 4, 4, 4, 4}, 3));
  deliver(s);
  BOOST_TEST(s.revision(0) == 3u);
  now = t0 + 2s;  // the window closes: Δ = mean(2, 4) = 3, scaled by 2 of 3 expected weights
  s.poll(now);
  BOOST_TEST(s.revision(0) == 4u);
  const std::vector<double> expected{-1, 0, 1, 2, 3, 4};
  BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(the_first_contribution_already_sizes_the_grace_window, fixture) {
  // No heartbeat yet: the contribution's own step time (1 s) gives
  // γ · τ · ξ_step = 0.5 · 4 · 1 s = 2 s, so a burst of contributions is merged
  // as one round rather than as stale single ones.
  test_syncer s(layout, initial, syncer_end, grace_options());
  join_all(s, 3);
  BOOST_TEST(s.grace().count() == 0);
  auto c = contribution(0, {2, 2, 2, 2, 2, 2});
  c.header.step_time_ns = std::chrono::nanoseconds(1s).count();
  send(0, std::move(c));
  deliver(s);
  BOOST_TEST(s.revision(0) == 0u);
  BOOST_TEST(s.grace().count() == std::chrono::nanoseconds(2s).count());
}

BOOST_FIXTURE_TEST_CASE(one_learner_lying_about_its_step_time_cannot_stretch_the_grace_window, fixture) {
  // Step times of 10 ms (learners 0 and 1) and 1000 s (learner 2, a liar):
  // ξ_step is their lower median, 10 ms, so the window is
  // γ · τ · ξ_step = 0.5 · 4 · 10 ms = 20 ms, not max_grace (5 s) as a mean
  // would make it. A liar can pick ξ_step only among values at or below the
  // honest ones: reporting 1 ns, it makes the window 0.5 · 4 · 10 ms still
  // (the lower median of 1 ns, 10 ms, 10 ms).
  test_syncer s(layout, initial, syncer_end, grace_options());
  join_all(s, 3);
  send(0, heartbeat(0, 10ms));
  send(1, heartbeat(1, 10ms));
  send(2, heartbeat(2, 1000s));
  deliver(s);
  BOOST_TEST(s.grace().count() == std::chrono::nanoseconds(20ms).count());
  send(2, heartbeat(2, 1ns));
  deliver(s);
  BOOST_TEST(s.grace().count() == std::chrono::nanoseconds(20ms).count());
  // Alone with one honest learner (learner 1 left), the liar's 1000 s give
  // the lower of the two: 10 ms.
  send(1, leave(1));
  send(2, heartbeat(2, 1000s));
  deliver(s);
  BOOST_TEST(s.grace().count() == std::chrono::nanoseconds(20ms).count());
}

BOOST_FIXTURE_TEST_CASE(round_closes_early_once_every_live_learner_is_in, fixture) {
  auto o = options(1);
  o.training.overlap = 4;
  o.grace_factor = 0.5;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  for (std::uint32_t i = 0; i < 2; ++i) send(i, heartbeat(i, 1s));
  deliver(s);
  send(0, contribution(0, {2, 2, 2, 2, 2, 2}));
  send(1, contribution(1, {2, 2, 2, 2, 2, 2}));
  deliver(s);  // no time passes: closed because nobody else is live
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(silent_learners_are_declared_dead_and_revived, fixture) {
  auto o = options(1);
  o.heartbeat_timeout = 5s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  BOOST_TEST(s.live_learners() == 2u);
  const auto deadline = s.poll(now);
  BOOST_TEST_REQUIRE(deadline.has_value());
  BOOST_TEST((*deadline - now).count() == std::chrono::nanoseconds(5s).count());
  now += 3s;
  send(1, heartbeat(1));
  deliver(s);
  now += 2s;  // learner 0 silent for 5 s, learner 1 for 2 s
  s.poll(now);
  BOOST_TEST(s.live_learners() == 1u);
  BOOST_TEST(s.metrics().declared_dead == 1u);
  send(0, heartbeat(0));
  deliver(s);
  BOOST_TEST(s.live_learners() == 2u);
  BOOST_TEST(s.metrics().revived == 1u);
}

// The training loss is a lower median of the live learners' latest finite
// reports, each weighing the steps of its work merged: a report of a learner
// that merged nothing has no say beside one that did.
BOOST_FIXTURE_TEST_CASE(the_training_loss_is_a_median_of_the_live_learners_latest_finite_reports, fixture) {
  auto o = options(1);
  std::vector<std::optional<double>> at_updates;
  o.on_update = [&](const update_event& e) { at_updates.push_back(e.training_loss); };
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 3);
  BOOST_TEST(!s.training_loss().has_value());  // nobody reported one yet
  auto report = [&](std::uint32_t id, std::optional<double> loss) {
    auto m = heartbeat(id);
    m.header.loss = loss;
    send(id, std::move(m));
    deliver(s);
  };
  report(0, 2.5);
  report(1, 1.0);
  report(2, 0.25);
  BOOST_TEST(*s.training_loss() == 1.0);  // the middle of 0.25, 1, 2.5
  report(1, std::nan(""));
  report(2, std::numeric_limits<double>::infinity());
  report(0, -std::numeric_limits<double>::infinity());
  BOOST_TEST(s.metrics().losses_ignored == 3u);
  BOOST_TEST(*s.training_loss() == 1.0);  // the last finite reports stand
  BOOST_TEST(s.live_learners() == 3u);    // a bad loss costs the report, not the heartbeat
  BOOST_TEST(s.metrics().rejected_total() == 0u);
  report(0, std::nullopt);  // no step since its last heartbeat: its report stands
  BOOST_TEST(*s.training_loss() == 1.0);
  report(0, 0.5);
  BOOST_TEST(*s.training_loss() == 0.5);  // the middle of 0.25, 0.5, 1
  send(2, leave(2));
  deliver(s);
  BOOST_TEST(*s.training_loss() == 0.5);  // the lower of 0.5 and 1: learner 2 left
  report(1, -1e30);
  BOOST_TEST(*s.training_loss() == -1e30);  // two learners, no work merged: the lower one
  // Learner 0's work is merged (10 steps): from then on only it has a say.
  send(0, contribution(0, std::vector<double>(6, 0.0), 0, 1, 100));
  deliver(s);
  BOOST_TEST_REQUIRE(at_updates.size() == 1u);
  BOOST_TEST_REQUIRE(at_updates[0].has_value());
  BOOST_TEST(*at_updates[0] == 0.5);
  report(1, 1.7e308);
  BOOST_TEST(*s.training_loss() == 0.5);
}

BOOST_FIXTURE_TEST_CASE(a_leave_is_answered_so_the_learner_knows_it_was_read, fixture) {
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 2);
  // Learner 1 leaves (sequence `sequence`); returns the answers of `kind` it got.
  auto leave_as = [&](std::uint64_t sequence, message_kind kind) {
    auto m = leave(1);
    m.header.sequence = sequence;
    send(1, std::move(m));
    deliver(s);
    return of_kind(inbox(1), kind);
  };
  const auto answers = leave_as(42, message_kind::ack);
  BOOST_TEST_REQUIRE(answers.size() == 1u);
  BOOST_TEST(answers[0].header.answers == 42u);
  BOOST_TEST(s.metrics().leaves == 1u);
  // A second leave of the same incarnation is refused, and the refusal answers it.
  const auto refusals = leave_as(43, message_kind::reject);
  BOOST_TEST_REQUIRE(refusals.size() == 1u);
  BOOST_TEST(refusals[0].header.answers == 43u);
  BOOST_TEST(s.metrics().leaves == 1u);
  BOOST_TEST(of_kind(inbox(0), message_kind::ack).empty());  // the others hear nothing of it
}

BOOST_FIXTURE_TEST_CASE(compute_efficiency_is_the_merged_share_of_the_steps_the_learners_computed, fixture) {
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 2);
  BOOST_TEST(!s.compute_efficiency().has_value());  // nothing reported yet
  auto report = [&](message m, std::uint64_t steps, std::uint32_t incarnation = 1) {
    const auto id = m.header.learner;
    m.header.incarnation = incarnation;
    m.header.steps = steps;
    send(id, std::move(m));
    deliver(s);
  };
  report(heartbeat(0), 30);
  report(heartbeat(1), 20);
  BOOST_TEST(s.steps_computed() == 50u);
  send(0, contribution(0, std::vector<double>(6, 0.0), 0, 1, 7));  // 10 steps of work, one fragment
  deliver(s);
  BOOST_TEST(s.metrics().steps_merged == 10u);
  BOOST_TEST(*s.compute_efficiency() == 10.0 / 50.0);
  report(heartbeat(0), 25);  // a late, smaller report lowers nothing
  BOOST_TEST(s.steps_computed() == 50u);
  report(leave(1), 40);  // a leave carries the total
  BOOST_TEST(s.steps_computed() == 70u);
  // Learner 0 restarts: what its first incarnation computed stays counted.
  send(0, join(0, 2));
  deliver(s);
  report(heartbeat(0), 5, 2);
  BOOST_TEST(s.steps_computed() == 75u);
  BOOST_TEST(s.metrics().steps_reported_earlier == 30u);
  // A report is the learner's word: an absurd one saturates the sum, no more.
  report(heartbeat(0), std::numeric_limits<std::uint64_t>::max(), 2);
  BOOST_TEST(s.steps_computed() == std::numeric_limits<std::uint64_t>::max());
  BOOST_TEST(s.metrics().rejected_total() == 0u);
}

BOOST_FIXTURE_TEST_CASE(the_evaluation_hook_sees_the_global_model_every_n_outer_updates, fixture) {
  auto o = options(1);
  o.training.fragments = 2;
  o.evaluate_every = 2;
  struct seen {
    std::uint64_t outer_updates;
    std::vector<double> parameters;
    std::vector<std::uint64_t> revisions;
    std::optional<double> loss;
  };
  std::vector<seen> calls;
  std::vector<std::vector<double>> global_then;
  const test_syncer* self = nullptr;
  o.on_evaluate = [&](const evaluation_context& c) {
    const auto p = c.parameters_as<double>();
    calls.push_back({c.outer_updates, {p.begin(), p.end()}, {c.revisions.begin(), c.revisions.end()}, c.training_loss});
    global_then.push_back(self->parameters());
  };
  test_syncer s(layout, initial, syncer_end, o);
  self = &s;
  join_all(s, 1);
  auto hb = heartbeat(0);
  hb.header.loss = 0.4;
  send(0, std::move(hb));
  deliver(s);
  // Five rounds, alternating fragments, each Δ = 1 on every element of its
  // fragment: outer SGD with η = 1 moves that fragment by −1.
  for (std::uint64_t k = 0; k < 5; ++k) {
    const std::uint32_t p = std::uint32_t(k % 2);
    auto m = contribution(0, std::vector<double>(s.plan()[p].size(), 1.0), s.revision(p), 1, 10 + k);
    m.header.fragment = p;
    send(0, std::move(m));
    deliver(s);
  }
  BOOST_TEST(s.total_revisions() == 5u);
  BOOST_TEST_REQUIRE(calls.size() == 2u);  // at 2 and 4, not at 1, 3, 5
  BOOST_TEST(calls[0].outer_updates == 2u);
  BOOST_TEST(calls[1].outer_updates == 4u);
  // After 2 updates every element moved by −1 (both fragments once), after 4 by −2.
  std::vector<double> minus_one, minus_two;
  for (double v : initial) {
    minus_one.push_back(v - 1);
    minus_two.push_back(v - 2);
  }
  BOOST_TEST(calls[0].parameters == minus_one, boost::test_tools::per_element());
  BOOST_TEST(calls[1].parameters == minus_two, boost::test_tools::per_element());
  BOOST_TEST(calls[0].parameters == global_then[0], boost::test_tools::per_element());
  BOOST_TEST(calls[1].parameters == global_then[1], boost::test_tools::per_element());
  BOOST_TEST(calls[0].revisions == (std::vector<std::uint64_t>{1, 1}), boost::test_tools::per_element());
  BOOST_TEST(calls[1].revisions == (std::vector<std::uint64_t>{2, 2}), boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(calls[1].loss.has_value());
  BOOST_TEST(*calls[1].loss == 0.4);
}

BOOST_FIXTURE_TEST_CASE(a_learner_that_joins_again_from_a_new_peer_moves_there, fixture) {
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 1);
  ends[0]->close();  // its old connection is gone
  send(3, join(0));  // learner 0, same incarnation, from endpoint 3 (a TCP reconnect)
  deliver(s);
  // Gone is confirmed by a second failed send at least 100 ms later: the
  // learner's next join retry (one second later) moves it.
  BOOST_TEST(s.metrics().reconnects == 0u);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::peer_conflict) == 1u);
  inbox(3);
  now += 1s;
  send(3, join(0));
  deliver(s);
  BOOST_TEST(s.metrics().reconnects == 1u);
  const auto again = inbox(3);  // welcomed again there, with the full state
  BOOST_TEST_REQUIRE(again.size() == 2u);
  BOOST_TEST(int(again[0].header.kind) == int(message_kind::welcome));
  BOOST_TEST(int(again[1].header.kind) == int(message_kind::update));
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}));  // the old connection no longer speaks for it
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::wrong_peer) == 1u);
  send(3, contribution(0, {1, 1, 1, 1, 1, 1}));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_second_connection_never_displaces_a_live_learner, fixture) {
  auto o = options(1);
  o.heartbeat_timeout = 5s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  send(3, join(0));  // someone else claims learner 0 while its connection is open
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::peer_conflict) == 1u);
  BOOST_TEST(s.metrics().reconnects == 0u);
  const auto claimer = inbox(3);
  BOOST_TEST_REQUIRE(claimer.size() == 1u);  // no welcome, no state: only the refusal
  BOOST_TEST(int(claimer[0].header.kind) == int(message_kind::reject));
  BOOST_TEST(int(claimer[0].header.reason) == int(reject_reason::peer_conflict));
  const auto owner = inbox(0);  // the learner is told that someone claimed it
  BOOST_TEST_REQUIRE(owner.size() == 1u);
  BOOST_TEST(int(owner[0].header.reason) == int(reject_reason::peer_conflict));
  BOOST_TEST(owner[0].header.answers == 0u);
  send(3, contribution(0, {1, 1, 1, 1, 1, 1}));  // and it cannot contribute in its name
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::wrong_peer) == 1u);
  send(0, contribution(0, {2, 2, 2, 2, 2, 2}));  // the learner itself still can
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.parameters()[0] == -1.0);

  // Once the learner has been silent long enough to be declared dead, a new
  // connection may take its place (it is the learner, back after a network
  // change, or nobody is harmed).
  now += 5s;
  s.poll(now);
  BOOST_TEST(s.live_learners() == 0u);
  send(3, join(0));
  deliver(s);
  BOOST_TEST(s.metrics().reconnects == 1u);
  BOOST_TEST(s.live_learners() == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_leave_closes_the_round_it_was_blocking, fixture) {
  test_syncer s(layout, initial, syncer_end, options(2));
  join_all(s, 2);
  send(0, contribution(0, {2, 2, 2, 2, 2, 2}));
  deliver(s);
  BOOST_TEST(s.revision(0) == 0u);
  send(1, leave(1));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(every_bad_message_is_refused_for_its_own_reason_and_changes_nothing, fixture) {
  auto o = options(1);
  o.max_staleness = 1;
  o.quorum = 3;  // keep accepted contributions pending, so a refused one could not hide
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 3);
  // Two accepted-and-merged rounds first, so that base 0 becomes stale (S = 1).
  for (std::uint64_t r = 0; r < 2; ++r) {
    for (std::uint32_t i = 0; i < 3; ++i) send(i, contribution(i, {1, 1, 1, 1, 1, 1}, r, 1, 10 + r));
    deliver(s);
  }
  BOOST_TEST_REQUIRE(s.revision(0) == 2u);
  for (std::uint32_t i = 0; i < 3; ++i) inbox(i);
  const auto params_before = s.parameters();
  const auto metrics_before = s.metrics();

  auto expect = [&](reject_reason why, std::uint32_t endpoint, message m) {
    const auto before = s.metrics().rejected_for(why);
    const auto total = s.metrics().rejected_total();
    send(endpoint, std::move(m));
    deliver(s);
    BOOST_TEST(s.metrics().rejected_for(why) == before + 1, to_string(why));
    BOOST_TEST(s.metrics().rejected_total() == total + 1, to_string(why));
  };

  message update_from_learner = contribution(0, {1, 1, 1, 1, 1, 1}, 2);
  update_from_learner.header.kind = message_kind::update;
  expect(reject_reason::unexpected_kind, 0, std::move(update_from_learner));
  expect(reject_reason::unknown_learner, 4, contribution(4, {1, 1, 1, 1, 1, 1}, 2));
  expect(reject_reason::wrong_peer, 1, contribution(0, {1, 1, 1, 1, 1, 1}, 2));
  expect(reject_reason::unknown_incarnation, 0, contribution(0, {1, 1, 1, 1, 1, 1}, 2, 2));
  message stranger = join(3);
  stranger.header.layout ^= 1;
  expect(reject_reason::layout_mismatch, 3, std::move(stranger));
  message bad_fragment = contribution(0, {1, 1, 1, 1, 1, 1}, 2);
  bad_fragment.header.fragment = 1;
  expect(reject_reason::bad_fragment, 0, std::move(bad_fragment));
  message short_payload = contribution(0, {1, 1, 1, 1, 1}, 2);
  short_payload.header.element_count = 6;
  expect(reject_reason::bad_size, 0, std::move(short_payload));
  expect(reject_reason::bad_size, 0, contribution(0, {1, 1, 1, 1, 1, 1, 1}, 2));
  message float_payload = contribution(0, {1, 1, 1, 1, 1, 1}, 2);
  float_payload.header.codec = codec_id::f32;
  expect(reject_reason::bad_codec, 0, std::move(float_payload));
  message no_steps = contribution(0, {1, 1, 1, 1, 1, 1}, 2);
  no_steps.header.steps = 0;
  expect(reject_reason::no_work, 0, std::move(no_steps));
  expect(reject_reason::future_base, 0, contribution(0, {1, 1, 1, 1, 1, 1}, 3));
  expect(reject_reason::stale, 0, contribution(0, {1, 1, 1, 1, 1, 1}, 0, 1, 50));
  // Endpoint 0 was told why each of its messages was refused, an update it
  // sent and a contribution of an incarnation that never joined included
  // (the one that claimed to be learner 0 from another endpoint was answered
  // to that endpoint).
  auto told = inbox(0);
  std::vector<int> reasons;
  for (const auto& m : told)
    if (m.header.kind == message_kind::reject) reasons.push_back(m.header.reason);
  const std::vector<int> expected_reasons{int(reject_reason::unexpected_kind),
                                          int(reject_reason::unknown_incarnation),
                                          int(reject_reason::bad_fragment),
                                          int(reject_reason::bad_size),
                                          int(reject_reason::bad_size),
                                          int(reject_reason::bad_codec),
                                          int(reject_reason::no_work),
                                          int(reject_reason::future_base),
                                          int(reject_reason::stale)};
  BOOST_TEST(reasons == expected_reasons, boost::test_tools::per_element());
  // Refusals for a future and for a stale base send the learner the current
  // fragment (a resync), answering the refused message.
  const auto resync = of_kind(std::move(told), message_kind::update);
  BOOST_TEST_REQUIRE(resync.size() == 2u);
  for (const auto& r : resync) {
    BOOST_TEST(int(r.header.status) == int(update_status::resync));
    BOOST_TEST(r.header.revision == 2u);
  }
  BOOST_TEST(resync[1].header.answers == 50u);
  // An already merged contribution, replayed.
  expect(reject_reason::duplicate, 1, contribution(1, {1, 1, 1, 1, 1, 1}, 1, 1, 11));

  BOOST_TEST(s.parameters() == params_before, boost::test_tools::per_element());
  BOOST_TEST(s.revision(0) == 2u);
  BOOST_TEST(s.metrics().contributions_accepted == metrics_before.contributions_accepted);
  BOOST_TEST(s.live_learners() == 3u);

  // A learner that restarted: its old incarnation is dead from then on.
  send(2, join(2, 2));
  deliver(s);
  BOOST_TEST(s.metrics().rejoins == 1u);
  expect(reject_reason::dead_incarnation, 2, contribution(2, {1, 1, 1, 1, 1, 1}, 2, 1));

  // Well-behaved learners are still served.
  for (std::uint32_t i = 0; i < 2; ++i) send(i, contribution(i, {3, 3, 3, 3, 3, 3}, 2, 1, 20));
  send(2, contribution(2, {3, 3, 3, 3, 3, 3}, 2, 2, 20));
  deliver(s);
  BOOST_TEST(s.revision(0) == 3u);
  std::vector<double> expected = params_before;
  for (auto& v : expected) v -= 3;
  BOOST_TEST(s.parameters() == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(non_finite_outer_gradients_are_refused_before_they_poison_the_model, fixture) {
  auto o = options(1);
  o.screening.quarantine_after = 0;  // three refusals in a row would quarantine it (tests/runtime/screening.cpp)
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    send(0, contribution(0, {1, 1, bad, 1, 1, 1}));
    deliver(s);
  }
  BOOST_TEST(s.metrics().rejected_for(reject_reason::non_finite) == 3u);
  BOOST_TEST(s.revision(0) == 0u);
  BOOST_TEST(s.parameters() == initial, boost::test_tools::per_element());
  // The refusals recorded no idempotency key: the same base is still usable.
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_refused_contribution_does_not_count_as_a_sign_of_life, fixture) {
  auto o = options(1);
  o.heartbeat_timeout = 5s;
  o.training.overlap = 4;
  o.grace_factor = 0.5;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  now += 6s;
  s.poll(now);
  BOOST_TEST(s.live_learners() == 0u);
  auto refused = contribution(0, {1, 1, 1, 1, 1, 1});
  refused.header.steps = 0;  // no_work
  refused.header.step_time_ns = std::chrono::nanoseconds(1s).count();
  send(0, std::move(refused));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::no_work) == 1u);
  BOOST_TEST(s.live_learners() == 0u);  // not revived
  BOOST_TEST(s.grace().count() == 0);   // its timing was not taken
}

BOOST_FIXTURE_TEST_CASE(the_number_of_learner_ids_is_bounded, fixture) {
  auto o = options(1);
  o.max_learners = 2;
  test_syncer s(layout, initial, syncer_end, o);
  for (std::uint32_t i = 0; i < 3; ++i) send(i, join(i));
  deliver(s);
  BOOST_TEST(s.metrics().joins == 2u);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::too_many_learners) == 1u);
  send(0, join(0, 2));  // a known learner may still rejoin
  deliver(s);
  BOOST_TEST(s.metrics().rejoins == 1u);
}

BOOST_FIXTURE_TEST_CASE(flush_merges_open_rounds_so_nothing_accepted_is_lost, fixture) {
  test_syncer s(layout, initial, syncer_end, options(3));
  join_all(s, 3);
  send(0, contribution(0, {6, 6, 6, 6, 6, 6}));
  deliver(s);
  BOOST_TEST(s.metrics().contributions_pending == 1u);
  s.flush(now);
  BOOST_TEST(s.metrics().contributions_pending == 0u);
  BOOST_TEST(s.metrics().contributions_merged == s.metrics().contributions_accepted);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(verdicts_name_a_reason_only_when_they_refuse, fixture) {
  auto o = options(1);
  std::vector<contribution_event> verdicts;
  o.on_contribution = [&verdicts](const contribution_event& e) { verdicts.push_back(e); };
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}, 0, 1, 5));
  send(0, contribution(0, {1, 1, 1, 1, 1, 1}, 5, 1, 6));  // a base from the future
  deliver(s);
  BOOST_TEST_REQUIRE(verdicts.size() == 2u);
  BOOST_TEST(verdicts[0].accepted);
  BOOST_TEST(to_string(verdicts[0].reason) == "none");
  BOOST_TEST(!verdicts[1].accepted);
  BOOST_TEST(to_string(verdicts[1].reason) == "future_base");
  BOOST_TEST(s.metrics().rejected_total() == 1u);
}

BOOST_FIXTURE_TEST_CASE(log_lines_go_to_the_sink_the_user_passes_and_nowhere_by_default, fixture) {
  BOOST_TEST(!syncer_options{}.log);  // no sink: the syncer writes nothing
  {
    test_syncer silent(layout, initial, syncer_end, syncer_options{});  // no sink: refusals still counted
    send(0, leave(9));
    deliver(silent);
    BOOST_TEST(silent.metrics().rejected_for(reject_reason::unknown_learner) == 1u);
  }
  auto o = options(1);
  std::vector<std::string> lines;
  o.log = [&lines](const std::string& line) { lines.push_back(line); };
  test_syncer s(layout, initial, syncer_end, o);
  send(0, leave(9));  // never joined
  deliver(s);
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST(lines[0].find("unknown_learner") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(timeouts_come_from_one_setting_and_contradictions_are_refused) {
  const auto t = timeouts::from(2s);
  BOOST_TEST(t.join_retry.count() == std::chrono::nanoseconds(2s).count());
  BOOST_TEST(t.dead_after.count() == std::chrono::nanoseconds(20s).count());
  BOOST_TEST(t.rejoin_after.count() == std::chrono::nanoseconds(20s).count());
  BOOST_TEST(t.answer_timeout.count() == std::chrono::nanoseconds(120s).count());
  BOOST_CHECK_NO_THROW(t.check());
  BOOST_TEST(fixture::options(1).with(t).heartbeat_timeout.count() == std::chrono::nanoseconds(20s).count());
  BOOST_TEST(learner_options{}.with(t).rejoin_after.count() == std::chrono::nanoseconds(20s).count());
  auto broken = [&](auto edit) {
    auto u = t;
    edit(u);
    return u;
  };
  BOOST_CHECK_THROW(broken([](timeouts& u) { u.dead_after = 5s; }).check(), std::invalid_argument);    // < 3 heartbeats
  BOOST_CHECK_THROW(broken([](timeouts& u) { u.join_retry = 30s; }).check(), std::invalid_argument);   // > rejoin_after
  BOOST_CHECK_THROW(broken([](timeouts& u) { u.rejoin_after = 3s; }).check(), std::invalid_argument);  // < 2 heartbeats
  BOOST_CHECK_THROW(broken([](timeouts& u) { u.answer_timeout = 10s; }).check(),
                    std::invalid_argument);  // < rejoin_after
  BOOST_CHECK_THROW(broken([](timeouts& u) { u.heartbeat = 0s; }).check(), std::invalid_argument);
  BOOST_CHECK_THROW(fixture::options(1).with(broken([](timeouts& u) { u.dead_after = 1s; })), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(inconsistent_options_are_refused_at_construction) {
  parameter_layout layout;
  layout.add("w", 4);
  std::vector<double> initial(4, 0.0);
  inproc::hub hub;
  auto& end = hub.attach(syncer_peer);
  auto make = [&](auto edit) {
    auto o = fixture::options(1);
    edit(o);
    test_syncer s(layout, initial, end, o);
  };
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.quorum = 0; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.training.sync_period = 0; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.training.overlap = 10; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.training.mixing = 1.0; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.training.fragments = 5; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.grace_factor = 1.0; }), std::invalid_argument);
  BOOST_CHECK_THROW(make([](syncer_options& o) { o.max_grace = o.heartbeat_timeout; }), std::invalid_argument);
  BOOST_CHECK_THROW(test_syncer(layout, std::vector<double>(3, 0.0), end, fixture::options(1)), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_syncer_test
