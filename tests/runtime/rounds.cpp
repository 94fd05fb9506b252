// The syncer's round decisions as pure functions: quorum, grace window,
// absent learners' fading, expected weights and the partial-round scale,
// each checked against values worked out by hand.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <diloco/runtime/syncer/rounds.hpp>

namespace runtime_rounds_test {

using namespace std::chrono_literals;
using namespace diloco;
using rounds::round_member;
using seconds_d = std::chrono::duration<double>;
using time_point = std::chrono::steady_clock::time_point;

constexpr double unknown = std::numeric_limits<double>::quiet_NaN();

BOOST_AUTO_TEST_SUITE(runtime_rounds)

BOOST_AUTO_TEST_CASE(the_quorum_is_lowered_to_the_learners_that_can_still_contribute) {
  static_assert(rounds::required_contributors(3, 5) == 3);
  BOOST_TEST(rounds::required_contributors(3, 5) == 3u);
  BOOST_TEST(rounds::required_contributors(3, 2) == 2u);  // one of three left
  BOOST_TEST(rounds::required_contributors(1, 4) == 1u);
  BOOST_TEST(rounds::required_contributors(4, 0) == 1u);  // never 0: a round needs a contribution
}

BOOST_AUTO_TEST_CASE(the_grace_window_is_a_share_of_the_slack_within_its_bounds) {
  // τ = 5 steps of 2 ms: 10 ms until the answer is needed; the quorum took
  // 3 ms and a transfer takes 1 ms, so the slack is 6 ms and γ = 0.5 waits 3 ms.
  rounds::grace_inputs in{
      .overlap = 5, .grace_factor = 0.5, .step_ns = 2e6, .quorum_ns = 3e6, .transfer_ns = 1e6, .max_grace = 1s};
  BOOST_TEST(rounds::grace_window(in).count() == 3'000'000);
  // Held at max_grace.
  in.max_grace = 2ms;
  BOOST_TEST(rounds::grace_window(in).count() == 2'000'000);
  // A slack that is gone (the quorum took 12 ms, or a transfer 20 ms) still
  // waits γ of one step, 1 ms: contributions sent together arrive together.
  in.max_grace = 1s;
  in.quorum_ns = 12e6;
  BOOST_TEST(rounds::grace_window(in).count() == 1'000'000);
  in.quorum_ns = 3e6;
  in.transfer_ns = 20e6;
  BOOST_TEST(rounds::grace_window(in).count() == 1'000'000);
  in.transfer_ns = 1e6;
  // No window before any step time is known, without overlap, or with γ = 0.
  in.quorum_ns = 3e6;
  auto unknown_step = in;
  unknown_step.step_ns.reset();
  BOOST_TEST(rounds::grace_window(unknown_step).count() == 0);
  auto no_overlap = in;
  no_overlap.overlap = 0;
  BOOST_TEST(rounds::grace_window(no_overlap).count() == 0);
  auto no_grace = in;
  no_grace.grace_factor = 0.0;
  BOOST_TEST(rounds::grace_window(no_grace).count() == 0);
}

BOOST_AUTO_TEST_CASE(an_absent_learner_halves_every_half_life_of_periods) {
  // H = 50 steps of 2 ms: a period of 0.1 s; 20 periods are 2 s.
  BOOST_TEST(rounds::absent_half_life(2e6, 50, 10s, 20.0).count() == 2.0, boost::test_tools::tolerance(1e-12));
  // No step time yet: one heartbeat timeout (10 s) per period.
  BOOST_TEST(rounds::absent_half_life(std::nullopt, 50, 10s, 20.0).count() == 200.0,
             boost::test_tools::tolerance(1e-12));
  // A reported step time that would make a period shorter than 1 ms, or
  // longer than 1 h, is held there.
  BOOST_TEST(rounds::absent_half_life(1.0, 1, 10s, 20.0).count() == 0.02, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(rounds::absent_half_life(1e15, 50, 10s, 2.0).count() == 7200.0, boost::test_tools::tolerance(1e-12));

  const time_point now{100s};
  const seconds_d half(2.0);
  BOOST_TEST(rounds::presence(true, std::optional<time_point>(now - 50s), now, half) == 1.0);  // live
  BOOST_TEST(rounds::presence(false, std::optional<time_point>(), now, half) == 1.0);          // never gone
  BOOST_TEST(rounds::presence(false, std::optional<time_point>(now - 4s), now, half) == 0.25,
             boost::test_tools::tolerance(1e-15));  // two half-lives
  BOOST_TEST(rounds::presence(false, std::optional<time_point>(now - 1s), now, half) == 1.0 / std::sqrt(2.0),
             boost::test_tools::tolerance(1e-15));
  BOOST_TEST(rounds::presence(false, std::optional<time_point>(now + 5s), now, half) == 1.0);  // not gone yet
}

BOOST_AUTO_TEST_CASE(an_expected_weight_falls_back_to_the_mean_of_the_known_ones) {
  const std::vector<double> some{unknown, 3.0, 5.0};
  BOOST_TEST(rounds::expected_weight(some, 1) == 3.0);
  BOOST_TEST(rounds::expected_weight(some, 0) == 4.0);  // (3 + 5) / 2
  const std::vector<double> never{unknown, unknown};
  BOOST_TEST(rounds::expected_weight(never, 0) == 0.0);  // never contributed: counts for nothing
}

BOOST_AUTO_TEST_CASE(period_tokens_scale_to_a_full_period_and_saturate) {
  BOOST_TEST(rounds::period_tokens(640, 10, 50) == 3200u);  // 64 tokens a step × 50 steps
  BOOST_TEST(rounds::period_tokens(7, 2, 4) == 14u);        // 3.5 × 4
  BOOST_TEST(rounds::period_tokens(std::numeric_limits<std::uint64_t>::max(), 1, 50) == std::uint64_t{1} << 63);
}

BOOST_AUTO_TEST_CASE(a_partial_round_takes_its_share_of_the_expected_weight) {
  // A contributor of weight 2; a live absent learner expecting 2; one gone
  // for a half-life (presence 0.5) expecting 4; a quarantined one expecting 8.
  const std::vector<round_member> table{
      {.in_round = true, .weight = 2.0, .live = true},
      {.in_round = false, .weight = 2.0, .live = true},
      {.in_round = false, .weight = 4.0, .live = false, .presence = 0.5},
      {.in_round = false, .weight = 8.0, .live = true, .quarantined = true},
  };
  const double no_cap = std::numeric_limits<double>::infinity();
  // all_share: 2 / (2 + 2 + 4 × 0.5) = 1/3.
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::all_share, table, no_cap) == 1.0 / 3.0,
             boost::test_tools::tolerance(1e-15));
  // live_share leaves out the one that is gone: 2 / (2 + 2).
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::live_share, table, no_cap) == 0.5);
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::full_step, table, no_cap) == 1.0);
  // Capped at 1.5: 1.5 / (1.5 + 1.5 + 1.5 × 0.5) = 0.4.
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::all_share, table, 1.5) == 0.4,
             boost::test_tools::tolerance(1e-15));
  // Every learner in: a full step, never more.
  const std::vector<round_member> all_in{{.in_round = true, .weight = 3.0}, {.in_round = true, .weight = 1.0}};
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::all_share, all_in, no_cap) == 1.0);
  // Nothing expected (weights of 0): a full step rather than a division by 0.
  const std::vector<round_member> weightless{{.in_round = true, .weight = 0.0}, {.in_round = false, .weight = 0.0}};
  BOOST_TEST(rounds::partial_round_scale(partial_rounds::all_share, weightless, no_cap) == 1.0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_rounds_test
