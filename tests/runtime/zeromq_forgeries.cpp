// ctest-labels: zeromq slow threads
// ctest-timeout: 300
// Learners that lie over real ZeroMQ TCP loopback sockets, while an honest
// learner — the real `diloco::learner` on the toy linear regression — trains
// against the syncer (tests/support/adversary_harness.hpp): forged token and
// step counts that would freeze the rounds or end the run, a pace ramped
// round after round to drag the clipping bound up, and lying reports of the
// training loss and of step times. Each attack is held to what a run without
// it achieves: the honest learner finishes its steps and the final loss is
// within 1 % of the progress training makes (the bound of
// zeromq_adversaries.cpp); the run is not ended; what the syncer reports
// stays within the honest learner's range.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "support/adversary_harness.hpp"

namespace runtime_zeromq_forgeries_test {

using namespace adversary;

/// The bound on an attacked run's final loss: within 1 % of what training
/// achieves in `clean`.
double loss_bound(const outcome& clean) {
  const double initial = evaluation_loss(initial_parameters());
  return clean.loss + 0.01 * (initial - clean.loss);
}

/// Joins `n` learners from `first` over `bad`, waits for their welcomes.
void join_all(peer& bad, std::uint32_t first, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(bad.send(bad.join(first + i, 1)));
  BOOST_TEST_REQUIRE(harness::wait_until(
      [&] {
        bad.read();
        return bad.welcomes >= n;
      },
      5s));
}

/// Heartbeats from learners first … first + n − 1 every 100 ms (the test
/// timeouts declare a learner dead after 1 s of silence) until the honest
/// learner is done, with `loss` when given.
void keep_alive(harness& x, peer& bad, std::uint32_t first, std::uint32_t n, const std::vector<double>& losses = {}) {
  const auto end = steady::now() + 60s;
  for (std::size_t beat = 0; !x.honest_done() && steady::now() < end; ++beat) {
    for (std::uint32_t i = 0; i < n; ++i) {
      message m = bad.next(message_kind::heartbeat, first + i, 1);
      if (!losses.empty()) m.header.loss = losses[beat % losses.size()];
      BOOST_TEST_REQUIRE(bad.send(std::move(m)));
    }
    bad.read();
    std::this_thread::sleep_for(100ms);
  }
}

/// `ids` learners each contribute Δ = 0 once with the most tokens the
/// counts check allows (2^24 per step, 10 steps), before the honest learner
/// starts, then only heartbeat: the attack of a peer that wants every later
/// round scaled to nothing.
outcome forged_weights_run(std::uint32_t ids) {
  harness h;
  constexpr std::uint32_t first = 300;
  auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    join_all(bad, first, ids);
    for (std::uint32_t i = 0; i < ids; ++i) {
      BOOST_TEST_REQUIRE(harness::wait_until(
          [&] {
            bad.read();
            return bad.acks == i;
          },
          5s));
      auto c = contribution_of(first + i, 1, ++bad.sequences[first + i], bad.revision, 10 * (std::uint64_t{1} << 24),
                               10, 10, std::vector<T>(features + 1, T(0)));
      BOOST_TEST_REQUIRE(bad.send(std::move(c)));
    }
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          bad.read();
          return bad.acks >= ids;
        },
        5s));
    x.start_learner();
    x.attack_began();
    keep_alive(x, bad, first, ids);
    x.attack_ended();
  });
  report("forged weights from " + std::to_string(ids) + " id(s)", o);
  std::string scales;
  for (std::size_t k = 0; k < o.rounds.size(); k += 6) scales += " " + std::to_string(o.rounds[k].scale);
  BOOST_TEST_MESSAGE("  weights clipped " << o.metrics.weights_clipped << "; scale every 6th revision:" << scales);
  return o;
}

BOOST_AUTO_TEST_SUITE(runtime_zeromq_forgeries)

// Attack 1. One learner contributes Δ = 0 once with 10 · 2^24 tokens in 10
// steps, alone (no reference yet: it is merged at full weight), then only
// heartbeats. Trusted, its expected weight (2^24 times the honest one's)
// would scale every honest round to ~1e-6 and the model would stop. Its
// weight is cut to the honest learner's (the lower of two), and once it has
// contributed nothing for 4 periods it fades (halving every 2): the scale
// starts at 1/2 and climbs back to 1.
BOOST_AUTO_TEST_CASE(a_forged_token_count_cannot_freeze_the_rounds) {
  const auto o = forged_weights_run(1);
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST_REQUIRE(!o.rounds.empty());
  BOOST_TEST(o.rounds[1].scale >= 0.5);  // the first honest round
  BOOST_TEST(o.rounds.back().scale > 0.99);
  BOOST_TEST(o.metrics.weights_clipped >= 1u);
  BOOST_TEST(o.loss <= loss_bound(clean_run()));
}

// Attack 1 with 20 forged ids: each is cut to the honest weight, so the
// first honest rounds take 1/21 of a step, and all of them fade as above.
BOOST_AUTO_TEST_CASE(twenty_forged_token_counts_fade_out) {
  const auto o = forged_weights_run(20);
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST_REQUIRE(o.rounds.size() > 20u);
  BOOST_TEST(o.rounds.back().scale > 0.99);
  BOOST_TEST(o.loss <= loss_bound(clean_run()));
}

// Attack 2. The syncer ends the run at 10^8 tokens merged (the honest
// learner trains 600 steps of 16 tokens: 9 600). Once the honest learner is
// at step 100, a second learner contributes Δ = 0 claiming 2^39 steps (local
// step 2^39) and 2^63 tokens. Credited is what the time since it joined
// allows at 8x the honest learner's speed and batch: the run goes on and
// ends only when the honest learner leaves.
BOOST_AUTO_TEST_CASE(a_forged_count_cannot_end_the_run) {
  harness h(run_settings{.max_tokens = 100'000'000});
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 77;
    join_all(bad, id, 1);
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 100; }, 20s));
    x.attack_began();
    bad.read();
    auto c = contribution_of(id, 1, ++bad.sequences[id], bad.revision, std::uint64_t{1} << 63, std::uint64_t{1} << 39,
                             std::uint64_t{1} << 39, std::vector<T>(features + 1, T(0)));
    BOOST_TEST_REQUIRE(bad.send(std::move(c)));
    keep_alive(x, bad, id, 1);
    x.attack_ended();
  });
  report("forged counts against max_tokens", o);
  BOOST_TEST_MESSAGE("  tokens merged " << o.metrics.tokens_merged << ", steps merged " << o.metrics.steps_merged
                                        << ", counts capped " << o.metrics.counts_capped);
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST(!o.ended.has_value(), o.ended.value_or(""));
  BOOST_TEST(o.metrics.counts_capped == 1u);
  BOOST_TEST(o.metrics.tokens_merged < 100'000'000u);
  BOOST_TEST(o.loss <= loss_bound(clean_run()));
}

// Attack 4. A learner contributes three times at every revision it hears
// of, with a pace ramped by 1.9x per revision from about the honest one. Judged by
// the honest learner's paces only, it is clipped as soon as it passes 8x
// them, three clips quarantine it, and the model is as good as without it.
BOOST_AUTO_TEST_CASE(a_ramped_pace_is_clipped_and_quarantined) {
  harness h;
  std::uint64_t sent = 0;
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 88;
    join_all(bad, id, 1);
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 50; }, 20s));
    // It starts at the size of the global model's last step, about the
    // honest learner's outer gradient.
    BOOST_TEST_REQUIRE(harness::wait_until(
        [&] {
          bad.read();
          return !bad.previous.empty() && bad.previous.size() == bad.fragment.size();
        },
        5s));
    double size = 0.0;
    for (std::size_t k = 0; k < bad.fragment.size(); ++k)
      size += double(bad.fragment[k] - bad.previous[k]) * double(bad.fragment[k] - bad.previous[k]);
    size = std::sqrt(size / double(bad.fragment.size())) / 1.9;
    BOOST_TEST_MESSAGE("  the attacker starts at " << 1.9 * size << " per element");
    x.attack_began();
    std::uint64_t base = std::numeric_limits<std::uint64_t>::max();
    const auto end = steady::now() + 20s;
    while (!x.honest_done() && x.syncer_quarantines() == 0 && steady::now() < end) {
      bad.read();
      if (bad.revision == base) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      base = bad.revision;
      size *= 1.9;
      for (int copy = 0; copy < 3; ++copy, ++sent) {
        std::vector<T> push(features + 1);
        for (std::size_t k = 0; k < push.size(); ++k) push[k] = T(k % 2 ? -size : size);
        BOOST_TEST_REQUIRE(bad.send(contribution_of(id, 1, ++bad.sequences[id], base, 160, 10, 10 * sent + 10, push)));
      }
    }
    x.attack_ended();
  });
  report("ramped pace", o);
  BOOST_TEST_MESSAGE("  sent " << sent << ", clipped " << o.metrics.contributions_clipped << ", quarantines "
                               << o.metrics.quarantines);
  check_served(o, 0);                   // the attack is over at the quarantine, a few revisions in
  BOOST_TEST(sent > quarantine_after);  // it was merged before it passed the bound
  check_costs(o);
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(o.metrics.contributions_clipped >= quarantine_after);
  BOOST_TEST(all_finite(o.global));
  BOOST_TEST(o.loss <= loss_bound(clean_run()));
}

// Attack 6. A learner that never contributes reports training losses of
// −1e30 and 1.7e308 in its heartbeats. The syncer's training loss at every
// revision stays finite and in the honest learner's range (its losses fall
// from about the initial loss, 0.77, towards 0): the liar merged no work,
// so it has no say beside the honest learner.
BOOST_AUTO_TEST_CASE(lying_loss_reports_do_not_move_the_training_loss) {
  harness h;
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 99;
    join_all(bad, id, 1);
    x.start_learner();
    x.attack_began();
    keep_alive(x, bad, id, 1, {-1e30, 1.7e308, 1.7e308});
    x.attack_ended();
  });
  report("lying loss reports", o);
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  const double initial = evaluation_loss(initial_parameters());
  std::size_t reported = 0;
  for (const auto& r : o.rounds) {
    if (!r.training_loss) continue;
    ++reported;
    BOOST_TEST((std::isfinite(*r.training_loss) && *r.training_loss >= 0.0 && *r.training_loss <= 10 * initial),
               "revision " << r.revision << ": training loss " << *r.training_loss);
  }
  BOOST_TEST(reported > o.rounds.size() / 2);
}

// Attack 7. Decoupled (not lock-step, τ = 2, grace factor 0.5, max_grace
// 0.9 s, just under the test's heartbeat timeout): a learner that never
// contributes reports a step time of 1000 s in its heartbeats. Every honest
// round waits for it for the grace window; a mean of the reports would pin
// the window at 0.9 s (about 1 revision a second). The lower median of the two reports is the honest learner's, so
// the revisions per run are at least half of a run without the liar.
BOOST_AUTO_TEST_CASE(lying_step_times_cannot_slow_the_rounds) {
  const training_config decoupled{
      .fragments = 1, .sync_period = period, .overlap = 2, .mixing = 0.0, .lock_step = false};
  harness clean_h(run_settings{.training = decoupled, .max_grace = 900ms});
  const auto clean = clean_h.run([](harness& x) { x.start_learner(); });
  report("decoupled, clean", clean);
  harness h(run_settings{.training = decoupled, .max_grace = 900ms});
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 111;
    join_all(bad, id, 1);
    x.start_learner();
    x.attack_began();
    const auto end = steady::now() + 60s;
    while (!x.honest_done() && steady::now() < end) {
      message m = bad.next(message_kind::heartbeat, id, 1);
      m.header.step_time_ns = 1'000'000'000'000;
      BOOST_TEST_REQUIRE(bad.send(std::move(m)));
      bad.read();
      std::this_thread::sleep_for(100ms);
    }
    x.attack_ended();
  });
  report("lying step times", o);
  BOOST_TEST_MESSAGE("  revisions: " << o.metrics.outer_updates << " against " << clean.metrics.outer_updates
                                     << " clean; wall " << o.wall_s << " s against " << clean.wall_s << " s");
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST(2 * o.metrics.outer_updates >= clean.metrics.outer_updates);
  BOOST_TEST(o.loss <= clean.loss + 0.01 * (evaluation_loss(initial_parameters()) - clean.loss));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_zeromq_forgeries_test
