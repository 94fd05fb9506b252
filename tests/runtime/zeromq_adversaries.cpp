// ctest-labels: zeromq slow threads
// ctest-timeout: 300
// One bad peer against a syncer over real ZeroMQ TCP loopback sockets, while
// an honest learner — the real `diloco::learner` on the toy linear
// regression, inner AdamW — trains against it (issue 8: a syncer that one
// learner cannot poison, freeze or lock out). Each case runs the same honest
// learner with and without the attack and checks that (i) the honest learner
// is still served: it finishes its steps and keeps adopting new revisions
// while the attack is under way; (ii) the global model stays finite and as
// good as without the attack; (iii) the defence is counted under its own
// counter or reason; (iv) the test process's memory and the syncer thread's
// CPU time stay bounded.
//
// Why the comparison can be strict: the honest learner runs in lock-step
// with τ = 0 (it waits for the answer to each contribution before its next
// inner step) and alone, so every round merges its contribution only and the
// run does not depend on timing: two clean runs give the same global
// parameters to the bit (checked first): the clean run's spread is zero.
// Attacks whose messages are all refused must therefore leave the global
// bit-identical to the clean run. The one attack whose contributions are
// merged (clipped), case 1, is held to a bound instead: it may cost at most
// 1 % of what training achieves.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/adversary_harness.hpp"

namespace runtime_zeromq_adversaries_test {

using namespace adversary;

/// Case 1's attacker: a learner that joins properly and then, at every new
/// revision it hears of, contributes ±3e38 in every element (finite f32,
/// valid CRC, plausible counters: 160 tokens in 10 steps) from the honest
/// learner's step `from_step` until its step 400, at most 40 times.
struct huge_values {
  outcome run;
  std::uint64_t sent = 0;
};

huge_values huge_values_run(std::uint64_t from_step) {
  huge_values result;
  harness h;
  result.run = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 66;
    BOOST_TEST_REQUIRE(bad.send(bad.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          bad.read();
          return bad.welcomes == 1 && bad.updates >= 1;
        },
        5s));
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= from_step; }, 20s));
    x.attack_began();
    std::vector<T> huge(features + 1);
    for (std::size_t k = 0; k < huge.size(); ++k) huge[k] = k % 2 ? -3e38f : 3e38f;
    std::uint64_t base = std::numeric_limits<std::uint64_t>::max();
    const auto end = steady::now() + 20s;
    while (result.sent < 40 && x.honest_steps() < 400 && !x.honest_done() && steady::now() < end) {
      bad.read();
      if (bad.revision == base) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      base = bad.revision;
      ++result.sent;
      BOOST_TEST_REQUIRE(bad.send(contribution_of(id, 1, ++bad.sequences[id], base, 160, 10, 10 * result.sent, huge)));
    }
    x.attack_ended();
  });
  report("huge values from step " + std::to_string(from_step), result.run);
  const auto& m = result.run.metrics;
  BOOST_TEST_MESSAGE("  sent " << result.sent << ", clipped " << m.contributions_clipped << ", weights clipped "
                               << m.weights_clipped << ", rounds dropped " << m.rounds_dropped << ", quarantines "
                               << m.quarantines << ", refused as quarantined "
                               << m.rejected_for(reject_reason::quarantined) << ", merged " << m.contributions_merged
                               << "; loss " << result.run.loss / clean_run().loss << " x the clean run's");
  return result;
}

/// Log lines per category: the refusal reason that ends a refusal line, or
/// "summary" for the limiter's "held back ..." lines.
std::map<std::string, std::size_t> log_categories(const std::vector<std::string>& lines) {
  std::map<std::string, std::size_t> n;
  for (const auto& line : lines) {
    if (line.rfind("held back", 0) == 0)
      ++n["summary"];
    else if (const auto colon = line.rfind(": "); line.rfind("refused", 0) == 0 && colon != std::string::npos)
      ++n[line.substr(colon + 2)];
    else
      ++n["other"];
  }
  return n;
}

BOOST_AUTO_TEST_SUITE(runtime_zeromq_adversaries)

// The reference for every case. Lock-step with τ = 0 makes the honest run
// independent of timing: two clean runs end with the same parameters to the
// bit, so the spread of the clean run is zero and refused attacks must leave
// the global bit-identical to it.
BOOST_AUTO_TEST_CASE(clean_runs_are_deterministic_and_learn) {
  const auto& a = clean_run();
  harness h;
  const auto b = h.run([](harness& x) { x.start_learner(); });
  report("clean, again", b);
  for (const auto* o : {&a, &b}) {
    check_served(*o, 0);
    check_costs(*o);
    BOOST_TEST(o->metrics.rejected_total() == 0u);
    // One round per H = 10 steps, each merging the honest learner alone at
    // full scale (w / w = 1).
    BOOST_TEST(o->rounds.size() == inner_steps / period);
    for (const auto& r : o->rounds) BOOST_TEST((r.contributors == 1u && r.scale == 1.0));
  }
  BOOST_TEST(a.global == b.global, boost::test_tools::per_element());
  const double initial = evaluation_loss(initial_parameters());
  BOOST_TEST_MESSAGE("initial loss " << initial << ", clean final loss " << a.loss);
  // It learns: the teacher is linear, so the loss falls by orders of
  // magnitude [0.77 -> 8.9e-5].
  BOOST_TEST(a.loss < 0.01 * initial);
}

// Case 1. The huge contributions arrive once the fragment has a history of
// honest outer-gradient norms (from step 100: 10 rounds). Each is an outlier
// (beyond `clip_factor` x the lower median norm) and is cut to the median
// norm, merged at half scale (equal token weights), and counts as a strike;
// after `quarantine_after` (3) in a row the learner is quarantined and
// everything else it sends is refused. The attack may cost at most 1 % of
// what training achieves: final loss <= clean + 0.01 x (initial − clean)
// [bound 0.0078; measured 5.0e-4 against the clean run's 8.9e-5. With
// outliers cut to 8x the median instead of to the median, and quarantine
// after 8, the eight pushes, integrated by the outer Nesterov momentum, left
// the loss at 0.27 — this test's first version found it].
BOOST_AUTO_TEST_CASE(finite_but_huge_contributions_are_clipped_then_quarantined) {
  const auto [o, sent] = huge_values_run(100);
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST(all_finite(o.global));
  BOOST_TEST(sent > quarantine_after);
  BOOST_TEST(o.metrics.contributions_clipped == quarantine_after);  // each push, and no honest one
  BOOST_TEST(o.metrics.weights_clipped == 0u);                      // equal tokens: nothing to cut
  BOOST_TEST(o.metrics.rounds_dropped == 0u);                       // clipped, the results are finite
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::quarantined) == sent - quarantine_after);
  BOOST_TEST(o.metrics.contributions_merged == inner_steps / period + quarantine_after);
  BOOST_TEST(o.metrics.rejected_total() == sent - quarantine_after);
  const auto& clean = clean_run();
  const double initial = evaluation_loss(initial_parameters());
  BOOST_TEST(o.loss <= clean.loss + 0.01 * (initial - clean.loss));
}

// Case 2a. 200 learners join (distinct ids, over 8 connections) and never
// contribute; half heartbeat every 100 ms, half go silent and are declared
// dead after 1 s. A learner that never contributed has expected weight 0, so
// the honest learner's rounds keep scale w / (w + 200 x 0) = 1 exactly — not
// 1/201 — and the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(silent_members_do_not_shrink_the_honest_rounds) {
  constexpr std::uint32_t silent = 200, first_id = 1000, sockets = 8;
  harness h(run_settings{.step_pause = 2ms});  // ~1.5 s of training: the silent half dies during it
  const auto o = h.run([&](harness& x) {
    std::vector<std::unique_ptr<peer>> peers;
    for (std::uint32_t k = 0; k < sockets; ++k) peers.push_back(std::make_unique<peer>(x.context(), x.endpoint()));
    for (std::uint32_t i = 0; i < silent; ++i)
      BOOST_TEST_REQUIRE(peers[i % sockets]->send(peers[i % sockets]->join(first_id + i, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_joins() >= silent; }, 10s));
    x.start_learner();
    x.attack_began();
    auto next_beat = steady::now();
    const auto end = steady::now() + 30s;
    while (!x.honest_done() && steady::now() < end) {
      if (steady::now() >= next_beat) {
        for (std::uint32_t i = 0; i < silent; i += 2) {
          auto& p = *peers[i % sockets];
          BOOST_TEST_REQUIRE(p.send(p.next(message_kind::heartbeat, first_id + i, 1)));
        }
        next_beat += 100ms;
      }
      for (auto& p : peers) p->read();
      std::this_thread::sleep_for(5ms);
    }
    x.attack_ended();
  });
  report("200 silent members", o);
  BOOST_TEST_MESSAGE("  declared dead " << o.metrics.declared_dead << ", updates sent " << o.metrics.updates_sent
                                        << ", send failures " << o.metrics.send_failures);
  check_served(o, 50);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.joins == silent + 1);
  BOOST_TEST(o.metrics.declared_dead >= silent / 2);
  for (const auto& r : o.rounds)
    BOOST_TEST((r.contributors == 1u && r.scale == 1.0), "revision " << r.revision << " scale " << r.scale);
}

// Case 2b. With room for 64 learners, thousands of learners join and leave
// at once, over one connection, before and while a new honest learner joins
// and trains. Each departed place is freed for the next joiner (the longest
// gone first), so the honest learner is never refused `too_many_learners`.
BOOST_AUTO_TEST_CASE(join_leave_flood_does_not_lock_out_a_new_learner) {
  constexpr std::uint32_t table = 64, first_id = 20000;
  harness h(run_settings{.max_learners = table});
  std::uint32_t flood = 0;
  const auto o = h.run([&](harness& x) {
    raw_dealer joiner(x.context(), x.endpoint());
    const model_type model(features, model_seed);
    const auto end = steady::now() + 30s;
    // At least 4096 pairs, and on until the honest learner is half way.
    for (; (flood < 4096 || (x.honest_steps() < inner_steps / 2 && !x.honest_done())) && flood < 20000 &&
           steady::now() < end;
         ++flood) {
      message j = make(message_kind::join, first_id + flood, 1, 1);
      j.header.layout = model.layout().fingerprint();
      j.header.element_count = model.layout().size();
      BOOST_TEST_REQUIRE(joiner.send(j));
      BOOST_TEST_REQUIRE(joiner.send(make(message_kind::leave, first_id + flood, 1, 2)));
      if (flood == 2048) {
        x.start_learner();
        x.attack_began();
      }
      if (flood % 64 == 63) {
        // Paced (64 pairs per 2 ms, at most 512 ahead of the syncer), so
        // that the flood lasts while the honest learner trains.
        (void)joiner.drain();
        std::this_thread::sleep_for(2ms);
        BOOST_TEST_REQUIRE(harness::wait_until([&] { return flood < x.syncer_leaves() + 512; }, 10s));
      }
    }
    x.attack_ended();
    x.expect_leaves(flood + 1);
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          (void)joiner.drain();
          return x.syncer_leaves() >= flood;
        },
        10s));
  });
  report("join/leave flood of " + std::to_string(flood), o);
  BOOST_TEST_MESSAGE("  too_many_learners " << o.metrics.rejected_for(reject_reason::too_many_learners)
                                            << ", learners forgotten " << o.metrics.learners_forgotten << ", joins "
                                            << o.metrics.joins << ", send failures " << o.metrics.send_failures);
  check_served(o, 5);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(flood >= 4096u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::too_many_learners) == 0u);
  BOOST_TEST(o.metrics.joins == flood + 1);
  BOOST_TEST(o.metrics.leaves == flood + 1);
  BOOST_TEST(o.metrics.learners_forgotten >= flood + 1 - table);
}

// Case 3. Quorum 2: the honest learner and a bad one that claims
// 2^64 − 201 tokens in 10 steps (far above `max_tokens_per_step` = 2^24 per
// step): refused as `bad_counts`, a strike each.
//
// How the honest rounds can close: `advance_round` requires
// min(K, possible) distinct contributors, where `possible` counts every
// learner that has not left and is not quarantined — a joined learner that
// never had a contribution accepted still counts (being declared dead does
// not remove it either). So the honest learner's first round waits (it stays
// at step H in lock-step) until the bad learner's eighth refusal quarantines
// it; from then on `possible` = 1 and every honest round closes alone. The
// bad learner never contributed, so it weighs nothing in the scale: the run
// is the clean one to the bit.
BOOST_AUTO_TEST_CASE(overflowing_counters_are_refused) {
  harness h(run_settings{.quorum = 2});
  std::uint64_t sent = 0, blocked_at = 0;
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 77;
    BOOST_TEST_REQUIRE(bad.send(bad.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          bad.read();
          return bad.welcomes == 1;
        },
        5s));
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= period; }, 20s));
    std::this_thread::sleep_for(200ms);
    blocked_at = x.honest_steps();
    x.attack_began();
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    while (x.honest_steps() < 300 && !x.honest_done() && sent < 200 && steady::now() < end) {
      bad.read();
      ++sent;
      constexpr std::uint64_t tokens = std::numeric_limits<std::uint64_t>::max() - 200;  // 2^64 − 201
      BOOST_TEST_REQUIRE(
          bad.send(contribution_of(id, 1, ++bad.sequences[id], bad.revision, tokens, 10, 10 * sent, small)));
      std::this_thread::sleep_for(10ms);
    }
    x.attack_ended();
  });
  report("overflowing counters", o);
  BOOST_TEST_MESSAGE("  honest at step " << blocked_at << " 200 ms after its first send; sent " << sent
                                         << ", bad_counts " << o.metrics.rejected_for(reject_reason::bad_counts)
                                         << ", quarantined " << o.metrics.rejected_for(reject_reason::quarantined));
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(blocked_at == period);
  BOOST_TEST(sent > quarantine_after);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_counts) == quarantine_after);
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::quarantined) == sent - quarantine_after);
  BOOST_TEST(o.metrics.rejected_total() == sent);
}

// Case 4. A syncer without a model (bootstrap, as tools/diloco_syncer runs
// it; patience 300 ms here, the service's is 10 s). The first learner to
// join is asked for the model and answers with a valid layout and states
// holding a NaN and an infinity: both refused. Once its patience is over the
// next joiner, the honest learner, is asked; the model is its own initial
// parameters, bit for bit, and the run is the clean one.
BOOST_AUTO_TEST_CASE(poisoned_start_is_refused) {
  harness h(run_settings{.bootstrap = true});
  std::uint64_t asked = 0;
  const auto o = h.run([&](harness& x) {
    peer poisoner(x.context(), x.endpoint());
    constexpr std::uint32_t id = 5;
    BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          poisoner.read();
          return poisoner.state_requests >= 1;
        },
        5s));
    const model_type model(features, model_seed);
    const auto description = wire::encode_layout(model.layout());
    message l = poisoner.next(message_kind::layout, id, 1);
    l.header.codec = codec_id::bytes;
    l.header.element_count = description.size();
    l.header.layout = model.layout().fingerprint();
    l.payload = byte_buffer(description.size());
    std::memcpy(l.payload.data(), description.data(), description.size());
    BOOST_TEST_REQUIRE(poisoner.send(std::move(l)));
    for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
      std::vector<T> values(features + 1, T(0.5));
      values[3] = bad;
      message st = contribution_of(id, 1, ++poisoner.sequences[id], 0, 0, 0, 0, values);
      st.header.kind = message_kind::state;
      BOOST_TEST_REQUIRE(poisoner.send(std::move(st)));
    }
    x.attack_began();
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_serving(); }, 10s));
    x.attack_ended();
    poisoner.read();
    asked = poisoner.state_requests;
  });
  report("poisoned start", o);
  BOOST_TEST_MESSAGE("  bootstrap refused " << o.bootstrap_refused << ", poisoner asked " << asked
                                            << " time(s), honest states sent " << o.honest.states_sent);
  check_served(o, 0);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.bootstrapped);
  BOOST_TEST(o.bootstrap_refused == 2u);
  BOOST_TEST(asked == 1u);
  BOOST_TEST(o.honest.states_sent == 1u);
  BOOST_TEST(o.bootstrap_initial == initial_parameters(), boost::test_tools::per_element());
}

// Case 5 (a) and (b), without CURVE. (a) A raw DEALER announces the
// old-style routing id of the honest learner (u32 learner, u32 incarnation,
// little-endian) and speaks in its name: the ROUTER names connections itself,
// the honest learner's connection is bound, so every message is refused as
// `wrong_peer` (answered to the spoofer, which receives nothing else).
// (b) A client joins claiming the honest learner's id and incarnation:
// refused `peer_conflict`, never welcomed, the honest learner is told (one
// `peer_conflict` notice per claim), and contributions in its name are
// `wrong_peer`. Nothing changes: the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(impersonation_without_curve_is_refused) {
  harness h;
  std::uint64_t spoofed = 0, claims = 0, claimed_contributions = 0;
  std::map<message_kind, std::uint64_t> spoof_got;
  std::uint64_t claimant_welcomes = 0, claimant_updates = 0, claimant_conflicts = 0, claimant_wrong_peer = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 50; }, 20s));
    x.attack_began();
    std::string routing_id(8, '\0');
    const std::uint32_t words[2] = {honest_id, honest_incarnation};
    std::memcpy(routing_id.data(), words, sizeof words);
    raw_dealer spoof(x.context(), x.endpoint(), routing_id);
    peer claimant(x.context(), x.endpoint());
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    std::uint64_t sequence = 1000000;
    for (int i = 0; x.honest_steps() < 400 && !x.honest_done() && steady::now() < end; ++i) {
      BOOST_TEST_REQUIRE(spoof.send(make(message_kind::heartbeat, honest_id, honest_incarnation, ++sequence)));
      BOOST_TEST_REQUIRE(spoof.send(
          contribution_of(honest_id, honest_incarnation, ++sequence, claimant.revision, 160, 10, 1000, small)));
      spoofed += 2;
      if (i % 5 == 0) {
        BOOST_TEST_REQUIRE(claimant.send(claimant.join(honest_id, honest_incarnation)));
        ++claims;
        BOOST_TEST_REQUIRE(claimant.send(contribution_of(honest_id, honest_incarnation, ++claimant.sequences[honest_id],
                                                         claimant.revision, 160, 10, 1000, small)));
        ++claimed_contributions;
      }
      for (const auto& [kind, n] : spoof.drain()) spoof_got[kind] += n;
      claimant.read();
      std::this_thread::sleep_for(10ms);
    }
    x.attack_ended();
    BOOST_TEST(harness::wait_until(
        [&] {
          for (const auto& [kind, n] : spoof.drain()) spoof_got[kind] += n;
          claimant.read();
          return spoof_got[message_kind::reject] >= spoofed &&
                 claimant.rejected(reject_reason::wrong_peer) + claimant.rejected(reject_reason::peer_conflict) >=
                     claims + claimed_contributions;
        },
        5s));
    claimant_welcomes = claimant.welcomes;
    claimant_updates = claimant.updates;
    claimant_conflicts = claimant.rejected(reject_reason::peer_conflict);
    claimant_wrong_peer = claimant.rejected(reject_reason::wrong_peer);
  });
  report("impersonation without CURVE", o);
  BOOST_TEST_MESSAGE("  spoofed " << spoofed << ", claims " << claims << " (+" << claimed_contributions
                                  << " contributions); wrong_peer " << o.metrics.rejected_for(reject_reason::wrong_peer)
                                  << ", peer_conflict " << o.metrics.rejected_for(reject_reason::peer_conflict)
                                  << ", honest learner told " << o.honest.identity_conflicts << " time(s)");
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::wrong_peer) == spoofed + claimed_contributions);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::peer_conflict) == claims);
  BOOST_TEST(o.metrics.rejected_total() == spoofed + claims + claimed_contributions);
  BOOST_TEST(o.honest.identity_conflicts == claims);
  // (a) got its refusals and nothing meant for the honest learner.
  BOOST_TEST(spoof_got[message_kind::reject] == spoofed);
  BOOST_TEST(spoof_got[message_kind::update] == 0u);
  BOOST_TEST(spoof_got[message_kind::welcome] == 0u);
  // (b) likewise.
  BOOST_TEST(claimant_welcomes == 0u);
  BOOST_TEST(claimant_updates == 0u);
  BOOST_TEST(claimant_conflicts == claims);
  BOOST_TEST(claimant_wrong_peer == claimed_contributions);
}

// Case 5 (c), without CURVE. A client joins as (honest id, incarnation + 1)
// and then leaves. Without CURVE nothing tells it from the honest learner
// restarted elsewhere, so this is an accepted takeover: it is welcomed (a
// rejoin), and the honest learner's next message (a heartbeat within 100 ms,
// or its contribution) is refused `dead_incarnation`, answered to its
// connection. The honest learner is TOLD: it stops with `errc::superseded`
// instead of idling. (With CURVE, an allow-list entry that does not own the
// id refuses the takeover as `unauthorized`.)
BOOST_AUTO_TEST_CASE(takeover_without_curve_is_told_to_the_displaced_learner) {
  harness h;  // the usurper's leave is the one the syncer must see
  double told_after_s = -1;
  std::uint64_t usurper_welcomes = 0, usurper_updates = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 100; }, 20s));
    x.attack_began();
    peer usurper(x.context(), x.endpoint());
    BOOST_TEST_REQUIRE(usurper.send(usurper.join(honest_id, honest_incarnation + 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          usurper.read();
          return usurper.welcomes >= 1;
        },
        5s));
    BOOST_TEST_REQUIRE(usurper.send(usurper.next(message_kind::leave, honest_id, honest_incarnation + 1)));
    const auto left = steady::now();
    BOOST_TEST(harness::wait_until([&] { return x.honest_done(); }, 5s));
    told_after_s = seconds_since(left);
    x.attack_ended();
    usurper.read();
    usurper_welcomes = usurper.welcomes;
    usurper_updates = usurper.updates;
  });
  report("takeover without CURVE", o);
  BOOST_TEST_MESSAGE("  honest learner stopped (" << o.honest_error.message() << ") " << told_after_s
                                                  << " s after the takeover, at step " << o.honest_steps);
  check_costs(o);
  BOOST_TEST(o.honest_error == make_error_code(errc::superseded));
  BOOST_TEST(told_after_s < 1.0);  // a heartbeat is due every 100 ms [measured 0.01 s]
  BOOST_TEST(o.honest_steps < inner_steps);
  BOOST_TEST(o.metrics.rejoins == 1u);
  BOOST_TEST(o.metrics.leaves == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::dead_incarnation) >= 1u);
  BOOST_TEST(usurper_welcomes == 1u);
  BOOST_TEST(usurper_updates >= 1u);
  BOOST_TEST(all_finite(o.global));
}

// Case 5 with CURVE. An intruder holds a key on the allow-list, bound to
// learner 9 only. It joins as 9 (welcomed: it owns that id), then claims the
// honest learner in every way (c) and (b) did without CURVE — a join of the
// next incarnation, its current one, a contribution, a leave: every message
// naming the honest learner is refused as `unauthorized`, none displaces it,
// and the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(with_curve_a_key_speaks_only_for_its_own_learners) {
  harness h(run_settings{.curve = true});
  std::uint64_t claims = 0, intruder_welcomes = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 50; }, 20s));
    x.attack_began();
    peer intruder(x.context(), x.endpoint(), keys().client(keys().intruder));
    BOOST_TEST_REQUIRE(intruder.send(intruder.join(curve_keys::intruder_id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          intruder.read();
          return intruder.welcomes >= 1;
        },
        5s));
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    for (int i = 0; x.honest_steps() < 400 && !x.honest_done() && steady::now() < end; ++i) {
      BOOST_TEST_REQUIRE(intruder.send(intruder.join(honest_id, honest_incarnation + 1 + i)));
      BOOST_TEST_REQUIRE(intruder.send(intruder.join(honest_id, honest_incarnation)));
      BOOST_TEST_REQUIRE(intruder.send(contribution_of(honest_id, honest_incarnation, ++intruder.sequences[honest_id],
                                                       intruder.revision, 160, 10, 1000, small)));
      BOOST_TEST_REQUIRE(intruder.send(intruder.next(message_kind::leave, honest_id, honest_incarnation + 1 + i)));
      claims += 4;
      intruder.read();
      std::this_thread::sleep_for(20ms);
    }
    x.attack_ended();
    intruder.read();
    intruder_welcomes = intruder.welcomes;
  });
  report("impersonation with CURVE", o);
  BOOST_TEST_MESSAGE("  " << claims << " messages claiming the honest learner, "
                          << o.metrics.rejected_for(reject_reason::unauthorized) << " refused unauthorized");
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(claims > 0u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::unauthorized) == claims);
  BOOST_TEST(o.metrics.rejoins == 0u);
  BOOST_TEST(intruder_welcomes == 1u);  // as itself, learner 9
}

// Case 6. A stranger sends 30 000 messages while the honest learner trains:
// 6 000 each of one-frame junk (1..143 bytes), three-frame messages, a wrong
// magic, a wrong header CRC, and well-formed contributions from a learner that
// never joined. Every one is refused and counted under its reason; the log
// gets at most 5 lines per reason plus 5 per 10 s of refill, and a summary
// line per 10 s; the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(log_flood_is_counted_not_written) {
  harness h;
  constexpr std::uint64_t flood = 30000;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 100; }, 20s));
    x.attack_began();
    raw_dealer stranger(x.context(), x.endpoint());
    splitmix64 rng(7);
    const std::vector<T> small(features + 1, T(0.01));
    const auto heartbeat = wire::encode_header(make(message_kind::heartbeat, 4242, 1, 1).header, {});
    std::vector<std::byte> junk(143);
    for (std::uint64_t i = 0; i < flood; ++i) {
      for (auto& b : junk) b = std::byte(rng.next() & 0xff);
      bool ok = true;
      switch (i % 5) {
        case 0:  // truncated: one frame of 1..143 random bytes
          ok = stranger.send({std::span<const std::byte>(junk).first(1 + rng.next() % 143)});
          break;
        case 1:  // truncated: three frames
          ok = stranger.send({std::span<const std::byte>(heartbeat), std::span<const std::byte>(junk).first(8),
                              std::span<const std::byte>(junk).first(16)});
          break;
        case 2: {  // bad_magic
          auto bytes = heartbeat;
          bytes[0] = std::byte{'X'};
          ok = stranger.send({std::span<const std::byte>(bytes)});
          break;
        }
        case 3: {  // bad_checksum: one bit of the header CRC flipped
          const auto c = contribution_of(4242, 1, i, 0, 160, 10, 10, small);
          auto bytes = wire::encode_header(c.header, c.payload.bytes());
          bytes[wire::offset::header_crc] ^= std::byte{1};
          ok = stranger.send({std::span<const std::byte>(bytes), c.payload.bytes()});
          break;
        }
        default:  // unknown_learner: well-formed, from a learner that never joined
          ok = stranger.send(contribution_of(4242, 1, i, 0, 160, 10, 10, small));
          break;
      }
      BOOST_TEST_REQUIRE(ok);
      if (i % 1000 == 999) {
        (void)stranger.drain();
        std::this_thread::sleep_for(15ms);  // spread over ~0.5 s of the honest run
      }
    }
    BOOST_TEST(harness::wait_until(
        [&] {
          (void)stranger.drain();
          return x.syncer_rejected() >= flood;
        },
        20s));
    x.attack_ended();
  });
  report("log flood", o);
  const auto lines = log_categories(o.log_lines);
  for (const auto& [category, n] : lines) BOOST_TEST_MESSAGE("  log lines " << category << ": " << n);
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::truncated) == 2 * flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_magic) == flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_checksum) == flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::unknown_learner) == flood / 5);
  BOOST_TEST(o.metrics.rejected_total() == flood);
  // The limiter: a burst of 5 per category, refilled at 5 per 10 s.
  const auto per_category = std::size_t(5 + 0.5 * o.wall_s);
  for (const char* reason : {"truncated", "bad_magic", "bad_checksum", "unknown_learner"}) {
    BOOST_TEST(lines.count(reason) == 1u, reason);                                  // visible in the log...
    if (lines.count(reason)) BOOST_TEST(lines.at(reason) <= per_category, reason);  // ...but not flooded
  }
  BOOST_TEST(lines.count("summary") == 1u);
  if (lines.count("summary")) BOOST_TEST(lines.at("summary") <= std::size_t(1 + o.wall_s / 10));
  BOOST_TEST(lines.count("other") == 0u);
  BOOST_TEST(o.log_lines.size() <= 200u);
  BOOST_TEST(o.syncer_cpu_s / double(flood) < 50e-6);  // per refused message [~1.2 µs]
}

// Case 1 before the clipping reference exists (fewer than `min_reference`
// = 3 norms in the fragment's history and round): the attack starts after
// the honest learner's first round. The huge contribution cannot be clipped
// yet; the outer step's result, ±0.7 × 1.9 × 1.5e38 ≈ ±2e38, is finite, but
// moves the fragment far beyond `max_update_ratio` × its norm, so the round
// is dropped (update_too_large) instead of published. (The first version of
// this test found it published, the honest learner's steps overflowing, and
// the honest learner quarantined.)
BOOST_AUTO_TEST_CASE(a_huge_contribution_before_the_clipping_reference_is_not_published) {
  const auto [o, sent] = huge_values_run(period);
  BOOST_TEST(o.metrics.rounds_dropped >= 1u);
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(!o.honest_error, o.honest_error.message());
  BOOST_TEST(o.honest_steps == inner_steps);
  BOOST_TEST(all_finite(o.global));
  BOOST_TEST(o.loss < evaluation_loss(initial_parameters()));
}

// Case 4 with a persistent poisoner: it joins every millisecond and answers
// every request for the model with a NaN state. A learner whose state was
// refused is never asked again, so the honest learner (joining every 100 ms)
// provides the model. (The first version of this test found the poisoner
// asked 27 times in 8 s and the honest learner never.)
BOOST_AUTO_TEST_CASE(a_persistent_poisoner_cannot_hold_the_bootstrap) {
  harness h(run_settings{.bootstrap = true});
  bool served = false;
  std::uint64_t asked = 0;
  const auto o = h.run([&](harness& x) {
    peer poisoner(x.context(), x.endpoint());
    constexpr std::uint32_t id = 5;
    const model_type model(features, model_seed);
    const auto description = wire::encode_layout(model.layout());
    BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          poisoner.read();
          return poisoner.state_requests >= 1;
        },
        5s));
    x.start_learner();
    const auto began = steady::now();
    for (std::uint64_t answered = 0; !x.syncer_serving() && seconds_since(began) < 8.0;) {
      BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
      poisoner.read();
      for (; answered < poisoner.state_requests; ++answered) {
        message l = poisoner.next(message_kind::layout, id, 1);
        l.header.codec = codec_id::bytes;
        l.header.element_count = description.size();
        l.header.layout = model.layout().fingerprint();
        l.payload = byte_buffer(description.size());
        std::memcpy(l.payload.data(), description.data(), description.size());
        BOOST_TEST_REQUIRE(poisoner.send(std::move(l)));
        message st = contribution_of(id, 1, ++poisoner.sequences[id], 0, 0, 0, 0,
                                     std::vector<T>(features + 1, std::numeric_limits<T>::quiet_NaN()));
        st.header.kind = message_kind::state;
        BOOST_TEST_REQUIRE(poisoner.send(std::move(st)));
      }
      std::this_thread::sleep_for(1ms);
    }
    served = x.syncer_serving();
    asked = poisoner.state_requests;
  });
  BOOST_TEST_MESSAGE("persistent poisoner: serving within 8 s: " << served << "; poisoner asked " << asked << " times");
  BOOST_TEST(served);
  BOOST_TEST(asked == 1u);
}

// Quorum 2: learner A contributes (its round waits for a second learner)
// and leaves; learner B joins and heartbeats but never contributes. A stays
// in the open round, so it cannot be forgotten past its forget deadline; the
// syncer must not wake for that deadline (the first version of this test
// found it returned by `poll` while already past: the syncer thread spun at
// ~100 % of a core). A's contribution reports a 1 µs step time so that
// forget_after (10 half-lives of 20 periods of H steps) is 2 ms. (That B
// alone freezes every quorum-2 round is the quorum's definition.)
BOOST_AUTO_TEST_CASE(an_open_round_past_its_forget_deadline_does_not_spin) {
  harness h(run_settings{.quorum = 2});
  const auto o = h.run([&](harness& x) {
    peer a(x.context(), x.endpoint()), b(x.context(), x.endpoint());
    BOOST_TEST_REQUIRE(a.send(a.join(41, 1)));
    BOOST_TEST_REQUIRE(b.send(b.join(42, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          a.read();
          b.read();
          return a.welcomes == 1 && b.welcomes == 1;
        },
        5s));
    auto c = contribution_of(41, 1, ++a.sequences[41], 0, 160, 10, 10, std::vector<T>(features + 1, T(0.01)));
    c.header.step_time_ns = 1000;
    BOOST_TEST_REQUIRE(a.send(std::move(c)));
    BOOST_TEST_REQUIRE(a.send(a.next(message_kind::leave, 41, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_leaves() >= 1; }, 5s));
    for (const auto began = steady::now(); seconds_since(began) < 1.0; std::this_thread::sleep_for(100ms)) {
      BOOST_TEST_REQUIRE(b.send(b.next(message_kind::heartbeat, 42, 1)));
      b.read();
    }
  });
  report("open round past its forget deadline", o);
  check_costs(o);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_adversaries_test
