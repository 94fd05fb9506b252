// ctest-labels: unit chaos
// The fault schedule: reproducible from its seed, each learner's faults
// independent of how many others there are, exponential up-times with the
// configured mean and the configured share of pauses, faults that respect
// recoveries and quiet windows, and options that make no sense refused.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule.hpp"

namespace {

using namespace diloco_chaos;

std::vector<fault> faults_of(const schedule& s, std::uint32_t learner) {
  std::vector<fault> out;
  for (const auto& f : s.learner_faults)
    if (f.learner == learner) out.push_back(f);
  return out;
}

schedule_options hour(std::uint32_t learners, std::uint64_t seed) {
  schedule_options o;
  o.learners = learners;
  o.duration_seconds = 3600;
  o.seed = seed;
  return o;
}

/// SplitMix64 written out again from Vigna's reference, to check the
/// documented seeding without the library's generator.
std::uint64_t splitmix_next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chaos_schedule)

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_schedule) {
  const auto a = make_schedule(hour(3, 7));
  const auto b = make_schedule(hour(3, 7));
  const auto c = make_schedule(hour(3, 8));
  // About 3 · (3600 − 20) / (60 + 10) ≈ 153 faults.
  BOOST_TEST(a.learner_faults.size() > 100u);
  BOOST_TEST(a.learner_faults.size() < 220u);
  BOOST_TEST((a.learner_faults == b.learner_faults));
  BOOST_TEST((a.learner_faults != c.learner_faults));
}

BOOST_AUTO_TEST_CASE(the_first_fault_follows_the_documented_draws) {
  // Learner i draws from SplitMix64 seeded with h(h(seed) xor i): gap, then kind.
  const auto options = hour(3, 42);
  const auto s = make_schedule(options);
  for (std::uint32_t learner = 0; learner < 3; ++learner) {
    std::uint64_t outer = options.seed;
    std::uint64_t inner = splitmix_next(outer) ^ learner;
    std::uint64_t state = splitmix_next(inner);
    const double u_gap = double(splitmix_next(state) >> 11) / 9007199254740992.0;
    const double u_kind = double(splitmix_next(state) >> 11) / 9007199254740992.0;
    const double expected_at = 5.0 - 60.0 * std::log(1.0 - u_gap);
    const auto mine = faults_of(s, learner);
    BOOST_TEST_REQUIRE(!mine.empty());
    BOOST_TEST(mine.front().at_seconds == expected_at, boost::test_tools::tolerance(1e-12));
    BOOST_TEST((mine.front().kind == (u_kind < 0.5 ? fault_kind::pause : fault_kind::kill)));
  }
}

BOOST_AUTO_TEST_CASE(adding_learners_leaves_the_others_unchanged) {
  const auto two = make_schedule(hour(2, 3));
  const auto five = make_schedule(hour(5, 3));
  for (std::uint32_t learner : {0u, 1u}) {
    BOOST_TEST(!faults_of(two, learner).empty());
    BOOST_TEST((faults_of(two, learner) == faults_of(five, learner)), "learner " << learner);
  }
  BOOST_TEST(!faults_of(five, 4).empty());
  BOOST_TEST((faults_of(five, 4) != faults_of(five, 3)));
}

BOOST_AUTO_TEST_CASE(up_times_are_exponential_with_the_configured_mean_and_pause_share) {
  schedule_options o;
  o.learners = 8;
  o.duration_seconds = 1e6;
  o.mtbf_seconds = 60;
  o.recovery_seconds = 10;
  o.pause_share = 0.3;
  o.seed = 11;
  const auto s = make_schedule(o);
  double gap_sum = 0;
  std::size_t gaps = 0, below_mean = 0, below_twice_mean = 0, pauses = 0;
  for (std::uint32_t learner = 0; learner < o.learners; ++learner) {
    const auto mine = faults_of(s, learner);
    // Renewal theory: one fault per mtbf + recovery of the window faults may start in.
    const double expected = (o.duration_seconds - o.quiet_start_seconds - o.quiet_end_seconds) / 70.0;
    BOOST_TEST(std::abs(double(mine.size()) / expected - 1) < 0.03, "learner " << learner << ": " << mine.size());
    double up_since = o.quiet_start_seconds;
    for (const auto& f : mine) {
      const double gap = f.at_seconds - up_since;
      gap_sum += gap;
      ++gaps;
      below_mean += gap < 60;
      below_twice_mean += gap < 120;
      pauses += f.kind == fault_kind::pause;
      up_since = f.at_seconds + f.recovery_seconds;
    }
  }
  BOOST_TEST_MESSAGE(gaps << " gaps, mean " << gap_sum / double(gaps) << " s, pause share "
                          << double(pauses) / double(gaps));
  BOOST_TEST(std::abs(gap_sum / double(gaps) / 60 - 1) < 0.03);
  // Exponential: P(gap < mean) = 1 − 1/e, P(gap < 2 mean) = 1 − 1/e².
  BOOST_TEST(std::abs(double(below_mean) / double(gaps) - (1 - std::exp(-1.0))) < 0.01);
  BOOST_TEST(std::abs(double(below_twice_mean) / double(gaps) - (1 - std::exp(-2.0))) < 0.01);
  BOOST_TEST(std::abs(double(pauses) / double(gaps) / 0.3 - 1) < 0.02);
  const auto counts = count_faults(s);
  BOOST_TEST(counts.pauses == pauses);
  BOOST_TEST(counts.kills == gaps - pauses);
  BOOST_TEST(counts.syncer_kills == 0u);
}

BOOST_AUTO_TEST_CASE(faults_respect_recoveries_and_quiet_windows) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    schedule_options o;
    o.learners = 4;
    o.duration_seconds = 300;
    o.mtbf_seconds = 15;
    o.recovery_seconds = 7;
    o.quiet_start_seconds = 20;
    o.quiet_end_seconds = 30;
    o.pause_share = seed % 3 == 0 ? 0.0 : seed % 3 == 1 ? 1.0 : 0.5;
    o.syncer_kills_at = {200, 50};
    o.syncer_pauses_at = {120};
    o.syncer_cuts_at = {160};
    o.syncer_recovery_seconds = 3;
    o.seed = seed;
    const auto s = make_schedule(o);
    BOOST_TEST_REQUIRE(s.learner_faults.size() > 10u);
    std::vector<double> back_at(o.learners, 0.0);
    double previous = 0;
    for (const auto& f : s.learner_faults) {
      BOOST_TEST(f.at_seconds >= previous, "seed " << seed << ": " << to_string(f));  // sorted
      previous = f.at_seconds;
      BOOST_TEST(f.at_seconds >= 20.0, to_string(f));
      BOOST_TEST(f.at_seconds + f.recovery_seconds <= 300.0 - 30.0, to_string(f));
      BOOST_TEST(f.recovery_seconds == 7.0);
      BOOST_TEST(f.at_seconds >= back_at[f.learner], "seed " << seed << ": overlaps: " << to_string(f));
      back_at[f.learner] = f.at_seconds + f.recovery_seconds;
    }
    const auto counts = count_faults(s);
    if (o.pause_share == 0.0) BOOST_TEST(counts.pauses == 0u);
    if (o.pause_share == 1.0) BOOST_TEST(counts.kills == 0u);
    BOOST_TEST_REQUIRE(s.syncer_faults.size() == 4u);
    BOOST_TEST(s.syncer_faults[0].at_seconds == 50.0);
    BOOST_TEST(s.syncer_faults[1].at_seconds == 120.0);
    BOOST_TEST(s.syncer_faults[2].at_seconds == 160.0);
    BOOST_TEST(s.syncer_faults[3].at_seconds == 200.0);
    BOOST_TEST(s.syncer_faults[3].recovery_seconds == 3.0);
    BOOST_TEST((s.syncer_faults[1].kind == fault_kind::pause));
    BOOST_TEST((s.syncer_faults[2].kind == fault_kind::cut));
    BOOST_TEST((s.syncer_faults[0].kind == fault_kind::kill && s.syncer_faults[3].kind == fault_kind::kill));
    BOOST_TEST(counts.syncer_kills == 2u);
    BOOST_TEST(counts.syncer_pauses == 1u);
    BOOST_TEST(counts.syncer_cuts == 1u);
  }
}

BOOST_AUTO_TEST_CASE(faults_print_as_one_line) {
  BOOST_TEST(to_string(fault{12.345, 3, fault_kind::pause, 10}) == "12.345 s: learner 3 pause for 10.000 s");
  BOOST_TEST(to_string(fault{0.5, 0, fault_kind::kill, 2.25}) == "0.500 s: learner 0 kill for 2.250 s");
  BOOST_TEST(to_string(syncer_fault{40, 2}) == "40.000 s: syncer kill for 2.000 s");
  BOOST_TEST(to_string(syncer_fault{41.5, 6, fault_kind::pause}) == "41.500 s: syncer pause for 6.000 s");
  BOOST_TEST(to_string(syncer_fault{42, 6, fault_kind::cut}) == "42.000 s: syncer cut for 6.000 s");
}

BOOST_AUTO_TEST_CASE(check_refuses_options_that_make_no_sense) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, std::function<void(schedule_options&)>>> cases = {
      {"learners", [](auto& o) { o.learners = 0; }},
      {"duration_seconds", [](auto& o) { o.duration_seconds = 0; }},
      {"duration_seconds", [&](auto& o) { o.duration_seconds = nan; }},
      {"mtbf_seconds", [](auto& o) { o.mtbf_seconds = 0; }},
      {"mtbf_seconds", [&](auto& o) { o.mtbf_seconds = inf; }},
      {"recovery_seconds", [](auto& o) { o.recovery_seconds = -1; }},
      {"pause_share", [](auto& o) { o.pause_share = 1.5; }},
      {"pause_share", [&](auto& o) { o.pause_share = nan; }},
      {"quiet_start_seconds", [](auto& o) { o.quiet_start_seconds = -0.5; }},
      {"quiet_end_seconds", [&](auto& o) { o.quiet_end_seconds = nan; }},
      {"quiet_start_seconds + quiet_end_seconds", [](auto& o) { o.quiet_start_seconds = o.quiet_end_seconds = 1801; }},
      {"syncer_recovery_seconds", [](auto& o) { o.syncer_recovery_seconds = -2; }},
      {"mtbf_seconds + recovery_seconds",
       [](auto& o) {
         o.mtbf_seconds = 1e-6;
         o.recovery_seconds = 0;
       }},
      {"syncer fault at 3 ",
       [](auto& o) {
         o.syncer_kills_at = {100, 3};
       }},
      {"syncer fault at 3594 ", [](auto& o) { o.syncer_kills_at = {3594}; }},
      {"syncer fault at 101 falls while the syncer is down from the fault at 100",
       [](auto& o) {
         o.syncer_kills_at = {101, 100};
       }},
      {"syncer fault at 101 falls while the syncer is down from the fault at 100",  // a pause counts too
       [](auto& o) {
         o.syncer_pauses_at = {101};
         o.syncer_kills_at = {100};
       }},
      {"syncer fault at 3594 ", [](auto& o) { o.syncer_pauses_at = {3594}; }},
      {"syncer fault at 101 falls while the syncer is down from the fault at 100",  // and a cut
       [](auto& o) { o.syncer_cuts_at = {101}; }},
      {"learner_kills_at: learner 1 at 20: there are only 1",
       [](auto& o) {
         o.learner_kills_at = {{20, 1}};
       }},
      {"learner_kills_at: learner 0 at 3 lies outside",
       [](auto& o) {
         o.learner_kills_at = {{3, 0}};
       }},
      // The last start: 3600 - 5 (quiet end) - 10 (recovery) = 3585.
      {"learner_kills_at: learner 0 at 3586 lies outside",
       [](auto& o) {
         o.learner_kills_at = {{3586, 0}};
       }},
      {"learner_kills_at: learner 0 at 105 falls while it is down from its kill at 100",
       [](auto& o) {
         o.learner_kills_at = {{105, 0}, {100, 0}};
       }},
  };
  BOOST_CHECK_NO_THROW(hour(1, 1).check());
  for (const auto& [field, spoil] : cases) {
    auto o = hour(1, 1);
    o.syncer_kills_at = {100, 3593};  // at the edge of the window: allowed
    spoil(o);
    try {
      make_schedule(o);
      BOOST_ERROR("not refused: " << field);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(field) != std::string::npos, e.what());
    }
  }
  auto edge = hour(1, 1);
  edge.syncer_kills_at = {100, 102, 3593};  // back to back is allowed
  edge.learner_kills_at = {{110, 0}, {100, 0}, {3585, 0}};
  BOOST_CHECK_NO_THROW(edge.check());
}

BOOST_AUTO_TEST_CASE(kills_at_set_times_replace_the_drawn_faults) {
  auto o = hour(3, 4);
  BOOST_TEST_REQUIRE(make_schedule(o).learner_faults.size() > 10u);  // an hour at the default MTBF of 60 s
  o.recovery_seconds = 7;
  o.learner_kills_at = {{900, 2}, {300, 1}, {300, 0}};
  const schedule s = make_schedule(o);
  const std::vector<fault> want{
      {300, 0, fault_kind::kill, 7}, {300, 1, fault_kind::kill, 7}, {900, 2, fault_kind::kill, 7}};
  std::string got;
  for (const fault& f : s.learner_faults) got += to_string(f) + "; ";
  BOOST_TEST((s.learner_faults == want), got);
}

BOOST_AUTO_TEST_SUITE_END()
