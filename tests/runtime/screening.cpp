// The syncer's screening (runtime/screening.hpp): what it refuses to publish,
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

namespace {

using namespace std::chrono_literals;
using namespace diloco;
using syncer_test::fixture;
using syncer_test::test_syncer;
using syncer_test::values;

/// Outer Nesterov η = 0.7, μ = 0.9: a first step from zero momentum moves Θ
/// by −0.7·(Δ + 0.9·Δ) = −1.33·Δ.
using nesterov_syncer = syncer<outer::nesterov<double>, merge::average, inproc::endpoint>;

std::vector<double> minus(const std::vector<double>& a, double d) {
  std::vector<double> r(a);
  for (auto& v : r) v -= d;
  return r;
}

}  // namespace

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
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == initial[i] - 1.33, boost::test_tools::tolerance(1e-12));
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

BOOST_FIXTURE_TEST_CASE(a_learner_clipped_again_and_again_is_quarantined_until_it_rejoins, fixture) {
  auto o = options(1);
  o.scaling = partial_rounds::full_step;
  o.screening.quarantine_after = 2;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  std::uint64_t base = 0;
  for (std::uint64_t r = 0; r < 3; ++r, ++base) {  // history: three norms of √6
    send(1, contribution(1, std::vector<double>(6, 1.0), base, 1, 1 + r));
    deliver(s);
  }
  for (std::uint64_t r = 0; r < 2; ++r, ++base) {
    send(0, contribution(0, std::vector<double>(6, 1000.0), base, 1, 1 + r));
    deliver(s);
  }
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

BOOST_FIXTURE_TEST_CASE(learners_that_left_fade_out_of_partial_rounds, fixture) {
  // Four learners with equal weights; 2 and 3 leave. No step time is known,
  // so a period is one heartbeat timeout (10 s) and the half-life one period.
  // One half-life later each counts 1/2: a round of learner 0 brings
  // w / (w + w + w/2 + w/2) = 1/3 of Δ = 3 → Θ − 1. Ten half-lives later they
  // count 1/1024 each: w / (2w + 2w/1024) of Δ = 2.
  auto o = options(1);
  o.heartbeat_timeout = 10s;
  o.membership.absent_half_life = 1.0;
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

BOOST_FIXTURE_TEST_CASE(departed_learners_free_their_places, fixture) {
  // Three places. Three learners join and leave; a fourth still gets in (the
  // longest-gone place is freed), and after forget_after the rest go too.
  // Three live learners fill the table for good: a fourth is refused.
  auto o = options(1);
  o.max_learners = 3;
  o.heartbeat_timeout = 10s;             // a period, while no step time is known
  o.membership.absent_half_life = 1.0;   // 10 s
  o.membership.forget_after = 6.0;       // 60 s
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
