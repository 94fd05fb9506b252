// The syncer's screening (runtime/syncer/screening.hpp): what it refuses to publish,
// what it clips, whom it quarantines, and how learners that left, died or
// never spoke count in partial rounds. Expected values are worked out by hand
// in the comments.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/syncer_fixture.hpp"

namespace runtime_screening_test {

using namespace std::chrono_literals;
using namespace diloco;
using syncer_test::fixture;
using syncer_test::test_syncer;
using syncer_test::values;

/// Outer Nesterov η = 0.7, μ = 0.9: a first step from zero momentum moves Θ
/// by −0.7·(Δ + 0.9·Δ) = −1.33·Δ.
using nesterov_syncer = syncer<outer::nesterov<double>, merge::average, inproc::endpoint>;

/// Token-weighted merging, outer SGD η = 1: weights are the tokens.
using weighted_syncer = syncer<outer::sgd<double>, merge::token_weighted, inproc::endpoint>;

std::vector<double> minus(const std::vector<double>& a, double d) {
  std::vector<double> r(a);
  for (auto& v : r) v -= d;
  return r;
}

BOOST_AUTO_TEST_SUITE(runtime_screening)

BOOST_FIXTURE_TEST_CASE(a_result_that_overflows_is_never_published, fixture) {
  // Δ = −1e308 is finite, but the outer step would make Θ = 1 + 1.33e308:
  // +inf. The round is dropped, Θ keeps its revision, the momentum it built
  // is forgotten, and the contributor is told with a resync.
  auto o = options(1);
  o.scaling = partial_rounds::full_step;
  nesterov_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  send(0, contribution(0, std::vector<double>(6, -1e308), 0, 1, 5));
  deliver(s);
  BOOST_TEST(s.revision(0) == 0u);
  BOOST_TEST(s.parameters() == initial, boost::test_tools::per_element());
  const auto& m = s.metrics();
  BOOST_TEST(m.rounds_dropped == 1u);
  BOOST_TEST(m.contributions_dropped == 1u);
  BOOST_TEST(m.contributions_accepted == m.contributions_merged + m.contributions_pending + m.contributions_dropped);
  const auto answers = fixture::of_kind(inbox(0), message_kind::update);
  BOOST_TEST_REQUIRE(answers.size() == 1u);
  BOOST_TEST(int(answers[0].header.status) == int(update_status::resync));
  BOOST_TEST(answers[0].header.answers == 5u);
  BOOST_TEST(values(answers[0]) == initial, boost::test_tools::per_element());

  // The next honest contribution takes a first step from zero momentum: had
  // the refused step's momentum (−1e308) survived, Θ would be ~1e308.
  send(1, contribution(1, std::vector<double>(6, 1.0), 0, 1, 6));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  const auto got = s.parameters();
  for (std::size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(got[i] == initial[i] - 1.33, boost::test_tools::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(an_update_beyond_the_ratio_bound_is_not_published, fixture) {
  // ‖Θ‖ = √(1+4+9+16+25+36) = √91 ≈ 9.54; bound 0.5 → 4.77. Δ = 4 moves Θ by
  // 4·√6 ≈ 9.80 (SGD, η = 1, a full step): refused. Δ = 1 moves it by 2.45.
  auto o = options(1);
  o.screening.max_update_ratio = 0.5;
  o.scaling = partial_rounds::full_step;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  send(0, contribution(0, std::vector<double>(6, 4.0), 0, 1, 1));
  deliver(s);
  BOOST_TEST(s.metrics().rounds_dropped == 1u);
  BOOST_TEST(s.parameters() == initial, boost::test_tools::per_element());
  send(0, contribution(0, std::vector<double>(6, 1.0), 0, 1, 2));  // a new sequence: not a replay
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.parameters() == minus(initial, 1.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(outlying_norms_are_clipped_to_the_history_median, fixture) {
  // Three rounds of Δ = 1 (norm √6) fill the fragment's history; Δ = 100
  // (norm 100√6, beyond 8 × the lower median √6) is an outlier and is cut to
  // the median itself: Δ = 1. Full steps, SGD η = 1: Θ − 3 − 1.
  auto o = options(1);
  o.scaling = partial_rounds::full_step;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  for (std::uint64_t r = 0; r < 3; ++r) {
    send(0, contribution(0, std::vector<double>(6, 1.0), r, 1, 1 + r));
    deliver(s);
  }
  BOOST_TEST(s.metrics().contributions_clipped == 0u);
  send(0, contribution(0, std::vector<double>(6, 100.0), 3, 1, 4));
  deliver(s);
  BOOST_TEST(s.metrics().contributions_clipped == 1u);
  const auto got = s.parameters();
  const auto want = minus(initial, 4.0);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

/// Two learners, quarantined at 2 strikes (`quarantine_after`), K = 1:
/// learner 1's three clean periods (Δ = 1, norm √6, 10 steps = H) are the
/// pace reference, and `clip(sequence, steps)` sends learner 0's next
/// contribution, Δ = 1000 (pace 1000 × the reference: clipped), carrying
/// `steps` steps.
struct quarantine_fixture : fixture {
  test_syncer s{layout, initial, syncer_end, [] {
                  auto o = fixture::options(1);
                  o.scaling = partial_rounds::full_step;
                  o.screening.quarantine_after = 2;
                  return o;
                }()};
  std::uint64_t base = 0;
  quarantine_fixture() {
    join_all(s, 2);
    for (std::uint64_t r = 0; r < 3; ++r, ++base) {
      send(1, contribution(1, std::vector<double>(6, 1.0), base, 1, 1 + r));
      deliver(s);
    }
  }
  void clip(std::uint64_t sequence, std::uint64_t steps = 10) {
    auto m = contribution(0, std::vector<double>(6, 1000.0), base++, 1, sequence);
    m.header.tokens = m.header.tokens * steps / m.header.steps;
    m.header.steps = steps;
    send(0, std::move(m));
    deliver(s);
  }
};

BOOST_FIXTURE_TEST_CASE(a_learner_clipped_again_and_again_is_quarantined_until_it_rejoins, quarantine_fixture) {
  clip(1);
  clip(2);
  BOOST_TEST(s.metrics().contributions_clipped == 2u);
  BOOST_TEST(s.metrics().quarantines == 1u);
  BOOST_TEST(s.quarantined(0));
  inbox(0);
  send(0, contribution(0, std::vector<double>(6, 1.0), base, 1, 3));  // even a modest one
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::quarantined) == 1u);
  const auto told = fixture::of_kind(inbox(0), message_kind::reject);
  BOOST_TEST_REQUIRE(told.size() == 1u);
  BOOST_TEST(int(told[0].header.reason) == int(reject_reason::quarantined));
  BOOST_TEST(s.revision(0) == base);

  send(0, join(0, 2));  // restarted: a new incarnation starts clean
  deliver(s);
  BOOST_TEST(!s.quarantined(0));
  send(0, contribution(0, std::vector<double>(6, 1.0), base, 2, 1));
  deliver(s);
  BOOST_TEST(s.revision(0) == base + 1);
}

BOOST_FIXTURE_TEST_CASE(a_quarantined_learner_may_still_leave, quarantine_fixture) {
  // Quarantined as above; its leave is taken, so that the run does not wait
  // for it to be declared dead.
  clip(1);
  clip(2);
  BOOST_TEST_REQUIRE(s.quarantined(0));
  send(0, heartbeat(0));  // refused, as everything else
  send(0, leave(0));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::quarantined) == 1u);
  BOOST_TEST(s.metrics().leaves == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_learner_clipped_after_an_outage_is_not_quarantined, quarantine_fixture) {
  // Learner 0's contributions carry twelve periods each (120 steps, H = 10),
  // as after an outage of the syncer: clipped, but no strike. Three in a
  // row, and its next period is still merged. (The same clips at 10 steps
  // quarantine it, in the test above.)
  for (std::uint64_t r = 1; r <= 3; ++r) clip(r, 12 * 10);
  BOOST_TEST(s.metrics().contributions_clipped == 3u);
  BOOST_TEST(s.metrics().quarantines == 0u);
  BOOST_TEST(!s.quarantined(0));
  send(0, contribution(0, std::vector<double>(6, 1.0), base, 1, 4));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::quarantined) == 0u);
  BOOST_TEST(s.revision(0) == base + 1);
}

BOOST_FIXTURE_TEST_CASE(a_dropped_round_of_many_periods_is_no_strike, fixture) {
  // One learner, quarantined at 2 strikes. Δ = 10^6 would move Θ by more
  // than max_update_ratio (100) × ‖Θ‖: each round is dropped, and the base
  // stays 0. Carrying 120 steps (H = 10), as a learner that ran ahead of a
  // syncer short of CPU, three drops in a row are no strike; carrying 10
  // steps, the third drop quarantines it (each is a strike of 2 points, less
  // the point its clean merge took off: 2, 3, then 4 points).
  auto o = options(1);
  o.scaling = partial_rounds::full_step;
  o.screening.quarantine_after = 2;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  auto huge = [&](std::uint64_t sequence, std::uint64_t steps) {
    auto m = contribution(0, std::vector<double>(6, 1e6), 0, 1, sequence);
    m.header.tokens = m.header.tokens * steps / m.header.steps;
    m.header.steps = steps;
    send(0, std::move(m));
    deliver(s);
  };
  for (std::uint64_t r = 1; r <= 3; ++r) huge(r, 12 * 10);
  BOOST_TEST(s.metrics().rounds_dropped == 3u);
  BOOST_TEST(!s.quarantined(0));
  huge(4, 10);
  huge(5, 10);
  BOOST_TEST(!s.quarantined(0));
  huge(6, 10);
  BOOST_TEST(s.metrics().rounds_dropped == 6u);
  BOOST_TEST(s.quarantined(0));
}

BOOST_FIXTURE_TEST_CASE(an_inflated_weight_is_capped_at_the_median, fixture) {
  // Four learners in one round (K = 4), token weights w = tokens²/steps.
  // Three honest ones: 640 tokens in 10 steps, Δ = 1, w = 40960. The fourth
  // claims 2^20 tokens per step (below max_tokens_per_step) and sends Δ = 0
  // to freeze the model: uncapped it would weigh 2^28·w and the merge ≈ 0.
  // Beyond 8 × the lower median (w), it is cut to the median: Δ = 3w / 4w.
  syncer<outer::sgd<double>, merge::token_weighted, inproc::endpoint> s(layout, initial, syncer_end, [] {
    auto o = fixture::options(4);
    o.scaling = partial_rounds::full_step;
    return o;
  }());
  join_all(s, 4);
  for (std::uint32_t i = 0; i < 3; ++i) send(i, contribution(i, std::vector<double>(6, 1.0)));
  auto heavy = contribution(3, std::vector<double>(6, 0.0));
  heavy.header.tokens = std::uint64_t{10} << 20;
  send(3, std::move(heavy));
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().weights_clipped == 1u);
  const auto got = s.parameters();
  const auto want = minus(initial, 3.0 / 4.0);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(a_learner_back_from_an_outage_is_cut_to_the_median_but_never_quarantined, fixture) {
  // Four learners, K = 4, token weights w = tokens²/steps. Three send a
  // period's work (640 tokens in 10 steps, w = 40960, Δ = 1); learner 3 sends
  // twelve periods at once, as a learner whose sends waited out an outage
  // does (7680 tokens in 120 steps: w = 12 × 40960, beyond 8 × the median;
  // Δ = 2). Each round cuts its weight to the median: Θ moves by (3 + 2) / 4
  // = 1.25. Four rounds in a row: four cuts, no quarantine (three strikes
  // would quarantine it), so its fifth contribution is still merged.
  syncer<outer::sgd<double>, merge::token_weighted, inproc::endpoint> s(layout, initial, syncer_end, [] {
    auto o = fixture::options(4);
    o.scaling = partial_rounds::full_step;
    return o;
  }());
  join_all(s, 4);
  auto heavy = [&](std::uint64_t base) {
    auto m = contribution(3, std::vector<double>(6, 2.0), base, 1, base + 1);
    m.header.tokens = 12 * 640;
    m.header.steps = 12 * 10;
    return m;
  };
  for (std::uint64_t base = 0; base < 4; ++base) {
    for (std::uint32_t i = 0; i < 3; ++i) send(i, contribution(i, std::vector<double>(6, 1.0), base, 1, base + 1));
    send(3, heavy(base));
    deliver(s);
  }
  BOOST_TEST(s.revision(0) == 4u);
  BOOST_TEST(s.metrics().weights_clipped == 4u);
  BOOST_TEST(s.metrics().quarantines == 0u);
  BOOST_TEST(!s.quarantined(3));
  const auto got = s.parameters();
  const auto want = minus(initial, 4 * 1.25);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
  for (std::uint32_t i = 0; i < 3; ++i) send(i, contribution(i, std::vector<double>(6, 1.0), 4, 1, 5));
  send(3, heavy(4));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::quarantined) == 0u);
  BOOST_TEST(s.revision(0) == 5u);
}

BOOST_FIXTURE_TEST_CASE(counters_a_learner_cannot_have_are_refused, fixture) {
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 1);
  auto overflowed = contribution(0, std::vector<double>(6, 1.0), 0, 1, 1);
  overflowed.header.tokens = std::numeric_limits<std::uint64_t>::max() - 200;  // 2^64 − 201
  send(0, std::move(overflowed));
  auto ahead = contribution(0, std::vector<double>(6, 1.0), 0, 1, 2);
  ahead.header.steps = 20;
  ahead.header.revision = 19;  // more steps than its local step
  ahead.header.tokens = 20 * 64;
  send(0, std::move(ahead));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::bad_counts) == 2u);
  BOOST_TEST(s.metrics().contributions_accepted == 0u);
  BOOST_TEST(s.parameters() == initial, boost::test_tools::per_element());
  send(0, contribution(0, std::vector<double>(6, 1.0), 0, 1, 3));  // the learner is still served
  deliver(s);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_forged_token_count_weighs_no_more_than_the_honest_learner, fixture) {
  // Learner 1 contributes first, alone: Δ = 0 with 10 · 2^24 tokens in 10
  // steps (the most the counts check allows). One weight, no reference: it
  // is merged (Θ unchanged) and its expected weight is 167 772 160 tokens.
  // Then learner 0: Δ = 3 with 640 tokens in 10 steps. The weights of the
  // two learners are 640 and 167 772 160: the reference is the lower, 640,
  // the bound 8 · 640 = 5120, so absent learner 1 counts 640 and the round's
  // scale is 640 / (640 + 640) = 1/2: Θ − 1.5. (Trusted, it would be
  // 640 / 167 772 800 ≈ 3.8e−6: the model would stop.)
  weighted_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 2);
  auto forged = contribution(1, std::vector<double>(6, 0.0), 0, 1, 1);
  forged.header.tokens = 10 * (std::uint64_t{1} << 24);
  send(1, std::move(forged));
  deliver(s);
  BOOST_TEST_REQUIRE(s.revision(0) == 1u);
  send(0, contribution(0, std::vector<double>(6, 3.0), 1, 1, 1));
  deliver(s);
  BOOST_TEST_REQUIRE(s.revision(0) == 2u);
  const auto got = s.parameters();
  const auto want = minus(initial, 1.5);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.metrics().weights_clipped == 1u);
}

BOOST_FIXTURE_TEST_CASE(forged_counts_cannot_end_the_run, fixture) {
  // End at 10^8 tokens. Learner 0 reports 1 ms steps and contributes 640
  // tokens in 10 steps (64 per step). A second later learner 1 claims
  // 2^39 steps (local step 2^39) and 2^63 tokens — 2^24 per step, within
  // the counts check. What counts as work: at most H + 8 · 1 s / 1 ms =
  // 10 + 8000 = 8010 steps (8 = clip_factor, the speed-up allowed over the
  // typical learner), at most 8 · 64 = 512 tokens per step: 4 101 120
  // tokens. Merged: 640 + 4 101 120 tokens and 10 + 8010 steps; the run
  // goes on.
  auto o = options(1);
  o.end.max_tokens = 100'000'000;
  weighted_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  send(0, heartbeat(0, 1ms));
  send(0, contribution(0, std::vector<double>(6, 0.0), 0, 1, 1));
  deliver(s);
  now += 1s;
  auto forged = contribution(1, std::vector<double>(6, 0.0), 1, 1, 1);
  forged.header.steps = std::uint64_t{1} << 39;
  forged.header.revision = std::uint64_t{1} << 39;
  forged.header.tokens = std::uint64_t{1} << 63;
  send(1, std::move(forged));
  deliver(s);
  s.poll(now);
  BOOST_TEST_REQUIRE(s.revision(0) == 2u);
  BOOST_TEST(s.metrics().tokens_merged == 640u + 4'101'120u);
  BOOST_TEST(s.metrics().steps_merged == 10u + 8010u);
  BOOST_TEST(s.metrics().counts_capped == 1u);
  BOOST_TEST(!s.ended().has_value());
  // The honest learner's own claims within its time count in full: 20
  // steps and 1280 tokens a second after its previous contribution.
  now += 1s;
  auto honest = contribution(0, std::vector<double>(6, 0.0), 2, 1, 2);
  honest.header.steps = 20;
  honest.header.tokens = 1280;
  send(0, std::move(honest));
  deliver(s);
  BOOST_TEST(s.metrics().tokens_merged == 640u + 4'101'120u + 1280u);
  BOOST_TEST(s.metrics().counts_capped == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_contribution_without_a_local_step_is_accepted, fixture) {
  // `revision` 0 on a contribution: a client that does not report its local
  // step (as the protocol allowed before it was added) is not refused.
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 1);
  auto c = contribution(0, std::vector<double>(6, 1.0), 0, 1, 1);
  c.header.revision = 0;
  send(0, std::move(c));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_total() == 0u);
  BOOST_TEST(s.revision(0) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_pace_ramped_round_after_round_is_clipped_against_the_others, fixture) {
  // Honest learner 0 sends Δ = 0.001 (pace p) once per round; learner 1
  // sends three contributions per round, at 1.9^k p in round k = 1, 2, …
  // Each contribution is merged alone (quorum 1). Learner 1 is judged by
  // learner 0's paces only (their median, p): its bound stays 8 p, so
  // rounds 1–3 (1.9, 3.61, 6.86 p) pass and round 4 (13.0 p) is clipped,
  // all three; the third clip quarantines it, and rounds 5 and 6 are
  // refused. Learner 0 is never clipped: learner 1's median is at least p.
  //
  // Judged by every pace together, its own included (the lower median of all
  // values), learner 1 would pass round 4: its 9 earlier paces outnumber
  // learner 0's 7, the lower median of the 17 values is 1.9 p and the bound
  // 15.2 p.
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 2);
  std::uint64_t sequence[2] = {0, 0};
  auto push = [&](std::uint32_t id, double v) {
    send(id, contribution(id, std::vector<double>(6, v), s.revision(0), 1, ++sequence[id]));
    deliver(s);
  };
  for (int k = 0; k < 3; ++k) push(0, 0.001);
  for (int k = 1; k <= 6; ++k) {
    push(0, 0.001);
    for (int copy = 0; copy < 3; ++copy) push(1, 0.001 * std::pow(1.9, k));
    if (k == 3) BOOST_TEST(s.metrics().contributions_clipped == 0u);
  }
  BOOST_TEST(s.metrics().contributions_clipped == 3u);
  BOOST_TEST(s.metrics().quarantines == 1u);
  BOOST_TEST(s.quarantined(1));
  BOOST_TEST(!s.quarantined(0));
  BOOST_TEST(s.metrics().rejected_for(reject_reason::quarantined) == 6u);
}

BOOST_FIXTURE_TEST_CASE(a_peer_with_small_paces_does_not_lower_the_others_bounds, fixture) {
  // Learners 0 and 1 send Δ = 0.001 (pace p); learner 2 sends Δ = 1e−5
  // (p/100), three times as often. Each learner counts once, by the median
  // of its paces, and a learner is judged by the upper median of the others':
  // learner 0's bound is 8 × the upper of (p, p/100) = 8 p, so its 5 p (a
  // noisy round) is not clipped. By every value, learner 2's would be the
  // lower median (it sent most of them) and the bound 0.08 p.
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 3);
  std::uint64_t sequence[3] = {0, 0, 0};
  auto push = [&](std::uint32_t id, double v) {
    send(id, contribution(id, std::vector<double>(6, v), s.revision(0), 1, ++sequence[id]));
    deliver(s);
  };
  for (int k = 0; k < 4; ++k) {
    push(0, 0.001);
    push(1, 0.001);
    for (int copy = 0; copy < 3; ++copy) push(2, 1e-5);
  }
  BOOST_TEST_REQUIRE(s.metrics().contributions_clipped == 0u);
  push(0, 0.005);
  BOOST_TEST(s.metrics().contributions_clipped == 0u);
  push(0, 0.009);  // beyond 8 p: clipped
  BOOST_TEST(s.metrics().contributions_clipped == 1u);
}

BOOST_FIXTURE_TEST_CASE(learners_that_left_fade_out_of_partial_rounds, fixture) {
  // Four learners with equal weights; 2 and 3 leave. No step time is known,
  // so a period is one heartbeat timeout (10 s) and the half-life one period.
  // One half-life later each counts 1/2: a round of learner 0 brings
  // w / (w + w + w/2 + w/2) = 1/3 of Δ = 3 → Θ − 1. Ten half-lives later they
  // count 1/1024 each: w / (2w + 2w/1024) of Δ = 2.
  // (Learner 1 stays live without contributing: it does not fade here,
  // `silent_after` is set beyond the test.)
  auto o = options(1);
  o.heartbeat_timeout = 10s;
  o.membership.absent_half_life = 1.0;
  o.membership.silent_after = 1e4;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 4);
  contribute_zero_once(s, 4);
  for (std::uint32_t i : {2u, 3u}) {
    send(i, leave(i));
  }
  deliver(s);
  now += 10s;
  for (std::uint32_t i : {0u, 1u}) send(i, fixture::heartbeat(i));
  deliver(s);
  send(0, contribution(0, std::vector<double>(6, 3.0), 4, 1, 1));
  deliver(s);
  auto got = s.parameters();
  auto want = minus(initial, 1.0);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));

  now += 90s;
  for (std::uint32_t i : {0u, 1u}) send(i, fixture::heartbeat(i));
  deliver(s);
  send(0, contribution(0, std::vector<double>(6, 2.0), 5, 1, 2));
  deliver(s);
  got = s.parameters();
  want = minus(initial, 1.0 + 2.0 / (2.0 + 2.0 / 1024.0));
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(a_live_learner_that_stops_contributing_fades_out_of_partial_rounds, fixture) {
  // Two learners with equal weights; both contribute once at t0, then only
  // learner 0 does. No step time is known: a period is one heartbeat timeout
  // (10 s). Learner 1 heartbeats (it stays live) and counts fully for
  // `silent_after` = 4 periods (40 s), then halves every `silent_half_life`
  // = 2 periods (20 s). At t0 + 30 s a round of learner 0 brings
  // w / (w + w) = 1/2 of Δ = 2 → Θ − 1; at t0 + 100 s, 60 s past the
  // patience, learner 1 counts 2^−3: w / (w + w/8) = 8/9 of Δ = 9 → Θ − 8.
  // A contribution of learner 1 makes it count fully again: at t0 + 101 s
  // learner 1 contributes Δ = 0 (merged alone: its own round's scale is
  // w / (w + w) = 1/2 of 0), then learner 0's Δ = 4 → Θ − 2.
  auto o = options(1);
  o.heartbeat_timeout = 10s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  contribute_zero_once(s, 2);
  auto beat_and_contribute = [&](std::uint32_t who, double delta, std::uint64_t sequence) {
    for (std::uint32_t i : {0u, 1u}) send(i, fixture::heartbeat(i));
    deliver(s);
    send(who, contribution(who, std::vector<double>(6, delta), s.revision(0), 1, sequence));
    deliver(s);
  };
  now += 30s;
  beat_and_contribute(0, 2.0, 1);
  auto want = minus(initial, 1.0);
  auto got = s.parameters();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
  for (int k = 0; k < 7; ++k) {  // heartbeats every 10 s keep learner 1 live
    now += 10s;
    for (std::uint32_t i : {0u, 1u}) send(i, fixture::heartbeat(i));
    deliver(s);
  }
  beat_and_contribute(0, 9.0, 2);
  want = minus(want, 8.0);
  got = s.parameters();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
  now += 1s;
  beat_and_contribute(1, 0.0, 3);
  beat_and_contribute(0, 4.0, 4);
  want = minus(want, 2.0);
  got = s.parameters();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-12));
}

BOOST_FIXTURE_TEST_CASE(departed_learners_free_their_places, fixture) {
  // Three places. Three learners join and leave; a fourth still gets in (the
  // longest-gone place is freed), and after forget_after the rest go too.
  // Three live learners fill the table for good: a fourth is refused.
  auto o = options(1);
  o.max_learners = 3;
  o.heartbeat_timeout = 10s;            // a period, while no step time is known
  o.membership.absent_half_life = 1.0;  // 10 s
  o.membership.forget_after = 6.0;      // 60 s
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    send(i, leave(i));
    deliver(s);
    now += 1s;
  }
  send(3, join(3));
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::too_many_learners) == 0u);
  BOOST_TEST(s.metrics().learners_forgotten == 1u);
  BOOST_TEST(s.known_learners() == 3u);
  now += 61s;
  send(3, fixture::heartbeat(3));
  deliver(s);
  s.poll(now);
  BOOST_TEST(s.known_learners() == 1u);
  BOOST_TEST(s.metrics().learners_forgotten == 3u);
  send(0, join(0, 2));
  send(1, join(1, 2));
  deliver(s);
  send(2, join(2, 2));  // the table holds 3, 0 and 1, all live
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::too_many_learners) == 1u);
}

BOOST_FIXTURE_TEST_CASE(an_old_incarnation_is_told_which_one_is_current, fixture) {
  test_syncer s(layout, initial, syncer_end, options(1));
  send(0, join(0, 3));
  deliver(s);
  inbox(0);
  send(4, join(0, 1));  // a process that restarted without knowing its incarnation
  deliver(s);
  BOOST_TEST(s.metrics().rejected_for(reject_reason::dead_incarnation) == 1u);
  const auto told = inbox(4);
  BOOST_TEST_REQUIRE(told.size() == 1u);
  BOOST_TEST(int(told[0].header.kind) == int(message_kind::reject));
  BOOST_TEST(int(told[0].header.reason) == int(reject_reason::dead_incarnation));
  BOOST_TEST(told[0].header.incarnation == 1u);  // addressed to the one that asked
  BOOST_TEST(told[0].header.revision == 3u);     // the current incarnation
}

BOOST_FIXTURE_TEST_CASE(an_absurd_step_time_cannot_stretch_departures_for_ever, fixture) {
  // Learners report their step times; one reports 2^62 ns (146 years). The
  // period used for fading departed learners is held at 1 h at most, so a
  // learner that left is forgotten after 10 half-lives of 20 periods: 200 h
  // (found by the fuzzer as an overflow of the deadline's arithmetic).
  test_syncer s(layout, initial, syncer_end, options(1));
  join_all(s, 2);
  send(0, heartbeat(0, std::chrono::nanoseconds(std::int64_t{1} << 62)));
  send(1, leave(1));
  deliver(s);
  const auto next = s.poll(now);
  BOOST_TEST_REQUIRE(next.has_value());
  BOOST_TEST(std::chrono::duration<double>(*next - now).count() <= 10.0);  // learner 0's heartbeat deadline
  now += std::chrono::hours(199);
  send(0, heartbeat(0));
  deliver(s);
  s.poll(now);
  BOOST_TEST(s.known_learners() == 2u);
  now += std::chrono::hours(2);
  send(0, heartbeat(0));
  deliver(s);
  s.poll(now);
  BOOST_TEST(s.known_learners() == 1u);
}

BOOST_FIXTURE_TEST_CASE(initial_parameters_must_be_finite, fixture) {
  auto poisoned = initial;
  poisoned[4] = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(test_syncer(layout, poisoned, syncer_end, options(1)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_pace_is_a_norm_per_three_quarter_power_of_the_steps) {
  // 16 steps: 16^(3/4) = 8. Steps beyond H = 16 count as 16.
  BOOST_TEST(pace(4.0, 16, 16) == 0.5, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(pace(4.0, 1000, 16) == 0.5, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(pace(4.0, 1, 16) == 4.0);
}

BOOST_AUTO_TEST_CASE(the_clipping_reference_is_the_lower_median) {
  screening_options s;  // clip_factor 8, min_reference 3
  std::vector<double> four{5.0, 1.0, 4.0, 2.0};
  const auto rule = clip_reference(four, s);
  BOOST_TEST(rule.reference == 2.0);  // sorted 1 2 4 5: the 2nd smallest
  BOOST_TEST(rule.outlier == 16.0);
  std::vector<double> two{1.0, 2.0};  // fewer than min_reference: nothing clipped
  BOOST_TEST(std::isinf(clip_reference(two, s).outlier));
  std::vector<double> zeros{0.0, 0.0, 3.0};  // a zero median is no reference
  BOOST_TEST(std::isinf(clip_reference(zeros, s).outlier));
  s.clip_factor = 0.0;
  std::vector<double> off{1.0, 2.0, 3.0};
  BOOST_TEST(std::isinf(clip_reference(off, s).reference));
}

BOOST_AUTO_TEST_CASE(an_update_is_too_large_beyond_the_ratio_of_the_fragment_or_its_floor) {
  screening_options s;
  s.max_update_ratio = 2.0;
  s.update_floor = 0.5;
  // ‖Θ‖ = 5 (3, 4): a change of norm 10 is within 2 × 5, of norm 10.05 not.
  const std::vector<double> before{3.0, 4.0};
  const std::vector<double> within{3.0 + 6.0, 4.0 + 8.0};
  const std::vector<double> beyond{3.0 + 6.03, 4.0 + 8.04};
  BOOST_TEST(!update_too_large<double>(before, within, s));
  BOOST_TEST(update_too_large<double>(before, beyond, s));
  // A zero fragment counts as 0.5 per element: max(0, 0.25 × 4) = 1, so
  // the bound is 2 × 1: a change of norm 2 passes, 2.2 does not.
  const std::vector<double> zero(4, 0.0);
  BOOST_TEST(!update_too_large<double>(zero, std::vector<double>{1.0, 1.0, 1.0, 1.0}, s));
  BOOST_TEST(update_too_large<double>(zero, std::vector<double>{1.1, 1.1, 1.1, 1.1}, s));
  s.max_update_ratio = 0.0;  // no bound
  BOOST_TEST(!update_too_large<double>(zero, std::vector<double>{1e9, 0.0, 0.0, 0.0}, s));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_screening_test
