// ctest-labels: unit sim
// The goodput model against references computed here from closed forms of
// renewal processes (never from the simulator): no failure means goodput 1;
// data parallel with and without checkpoint loss; one learner is data
// parallel with a learner's restart; M learners are one learner with M times
// fewer chips; a quorum of two out of two; elastic data parallel with one
// slice, without pauses, with a short slice; chip-speed spread; seeds; and
// options that make no sense refused.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "simulator.hpp"

namespace {

using namespace diloco_goodput;

constexpr double year_s = 365.25 * 86400.0;

/// Failures per second of `chips` chips with a mean time between
/// interruptions of `mtbi_years` each.
double rate_of(double chips, double mtbi_years = 1.0) { return chips / (mtbi_years * year_s); }

/// Goodput of one unit that computes for Exp(rate) times, keeps whole
/// multiples of `interval` of each (the work up to its last checkpoint or
/// contribution) and is then down for `down` s. Renewal-reward: E[keep] / E[cycle]
/// with E[X − (X mod c)] = c · e^{−λc} / (1 − e^{−λc}) = c / (e^{λc} − 1).
double renewal_goodput(double rate, double down, double interval) {
  const double kept = interval > 0 ? interval / std::expm1(rate * interval) : 1.0 / rate;
  return kept / (1.0 / rate + down);
}

/// Share of time a unit that alternates Exp(rate) up and `down` s down is up.
double availability(double rate, double down) { return 1.0 / (1.0 + rate * down); }

run_options cell(method kind, std::uint64_t chips, std::uint32_t learners = 1, std::uint32_t quorum = 1) {
  run_options o;
  o.kind = kind;
  o.chips = chips;
  o.learners = learners;
  o.quorum = quorum;
  return o;
}

/// Standard normal distribution function.
double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(goodput_model)

BOOST_AUTO_TEST_CASE(no_failure_means_every_chip_second_counts) {
  for (const method kind : {method::data_parallel, method::elastic, method::decoupled}) {
    run_options o = cell(kind, 1'000'000, kind == method::decoupled ? 4 : 1, kind == method::decoupled ? 4 : 1);
    o.model.chip_mtbi_years = 1e12;  // about 10^-7 failures in 30 days
    o.model.speed_spread = kind == method::decoupled ? 0.2 : 0.0;
    o.horizon_days = 30;
    const result r = simulate(o);
    BOOST_TEST_INFO("method " << method_name(kind));
    BOOST_TEST(r.failures == 0u);
    BOOST_TEST(r.goodput == 1.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(r.uptime == 1.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(r.simulated_s == 30 * 86400.0);
  }
}

BOOST_AUTO_TEST_CASE(data_parallel_without_checkpoint_loss_is_one_over_one_plus_lambda_r) {
  run_options o = cell(method::data_parallel, 600'000);
  o.model.checkpoint_interval_s = 0;
  o.model.recovery_s = 72;
  const result r = simulate(o);
  const double expected = 1.0 / (1.0 + rate_of(600'000) * 72);  // 0.4219
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.005 / expected));
  BOOST_TEST(r.uptime == expected, boost::test_tools::tolerance(0.005 / expected));
  BOOST_TEST(std::abs(r.goodput - expected) < 4 * r.goodput_se + 1e-4);
}

BOOST_AUTO_TEST_CASE(data_parallel_loses_the_work_since_its_last_checkpoint) {
  // λC = 1.14 at 1.2M chips and C = 30 s: far from the C/2 approximation.
  run_options o = cell(method::data_parallel, 1'200'000);
  o.model.checkpoint_interval_s = 30;
  o.model.recovery_s = 20;
  const double lambda = rate_of(1'200'000);
  const double expected = renewal_goodput(lambda, 20, 30);
  const double half_interval_guess = 1.0 / (1.0 + lambda * (20 + 15));
  BOOST_TEST(std::abs(expected - half_interval_guess) > 0.03);  // the test tells the two apart
  const result r = simulate(o);
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.005 / expected));
  BOOST_TEST(r.uptime == availability(lambda, 20), boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(one_learner_is_data_parallel_with_a_learners_restart) {
  // Decoupled with M = 1 and data parallel with R_dp = R_l and C = H follow the same formula.
  run_options d = cell(method::decoupled, 300'000, 1, 1);
  run_options p = cell(method::data_parallel, 300'000);
  p.model.recovery_s = d.model.restart_s;
  p.model.checkpoint_interval_s = d.model.contribution_interval_s;
  p.seed = 99;
  const double expected = renewal_goodput(rate_of(300'000), d.model.restart_s, d.model.contribution_interval_s);
  const result rd = simulate(d), rp = simulate(p);
  BOOST_TEST(rd.goodput == expected, boost::test_tools::tolerance(0.004 / expected));
  BOOST_TEST(rp.goodput == expected, boost::test_tools::tolerance(0.004 / expected));
  BOOST_TEST(rd.uptime == availability(rate_of(300'000), d.model.restart_s), boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(m_learners_are_one_learner_with_m_times_fewer_chips) {
  for (const std::uint32_t m : {2u, 8u, 16u}) {
    const run_options o = cell(method::decoupled, 2'400'000, m, 1);
    const double expected =
        renewal_goodput(rate_of(2'400'000.0 / m), o.model.restart_s, o.model.contribution_interval_s);
    const result r = simulate(o);
    BOOST_TEST_INFO("M = " << m);
    BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.004 / expected));
    BOOST_TEST(r.uptime == 1.0 - std::pow(1.0 - availability(rate_of(2'400'000.0 / m), o.model.restart_s), m),
               boost::test_tools::tolerance(0.002));
  }
}

BOOST_AUTO_TEST_CASE(a_quorum_of_two_out_of_two_needs_both_learners) {
  // Each learner is up a share a of the time, independently: the global model
  // advances a² of it, and a contribution counts when the other is up (a).
  const run_options o = cell(method::decoupled, 2'400'000, 2, 2);
  const double lambda = rate_of(1'200'000), a = availability(lambda, o.model.restart_s);
  const result r = simulate(o);
  BOOST_TEST(r.uptime == a * a, boost::test_tools::tolerance(0.02));
  const double expected = renewal_goodput(lambda, o.model.restart_s, o.model.contribution_interval_s) * a;
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.02));
  run_options any = o;
  any.quorum = 1;
  BOOST_TEST(simulate(any).goodput > r.goodput + 0.2);
}

BOOST_AUTO_TEST_CASE(elastic_with_one_slice_waits_for_its_repair_and_the_upscale) {
  // One slice: a failure stops everything until the slice is back (T_rep > D)
  // and the job has taken it back (U). The slice is in the job, and may fail,
  // from its return: a cycle is Exp(λ) + T_rep long and computes for
  // (X − U)⁺, whose mean is e^{−λU} / λ.
  run_options o = cell(method::elastic, 100'000);
  o.model.slice_chips = 200'000;  // more than N: one slice of N chips
  o.model.downscale_s = 10;
  o.model.repair_s = 600;
  o.model.upscale_s = 9;
  const result r = simulate(o);
  const double lambda = rate_of(100'000);
  const double expected = std::exp(-lambda * 9) / (1.0 + lambda * 600);  // 0.3350
  BOOST_TEST(r.slices == 1u);
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.005 / expected));
  BOOST_TEST(r.uptime == expected, boost::test_tools::tolerance(0.005 / expected));
}

BOOST_AUTO_TEST_CASE(elastic_without_pauses_counts_the_slices_in_the_job) {
  // D = U = 0: each slice alternates Exp(S / Y) in the job and T_rep out of it.
  run_options o = cell(method::elastic, 1'000'000);
  o.model.slice_chips = 1000;
  o.model.downscale_s = o.model.upscale_s = 0;
  o.model.repair_s = 3600;
  const result r = simulate(o);
  const double expected = availability(rate_of(1000), 3600);  // 0.8976
  BOOST_TEST(r.slices == 1000u);
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.003 / expected));
  BOOST_TEST(r.uptime == 1.0, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(elastic_keeps_a_short_last_slice) {
  // N = 2500, S = 1000: slices of 1000, 1000 and 500 chips; the short one
  // fails half as often. With S · T_rep / Y = 1: availabilities 1/2 and 2/3.
  run_options o = cell(method::elastic, 2500);
  o.model.slice_chips = 1000;
  o.model.downscale_s = o.model.upscale_s = 0;
  o.model.repair_s = 3600;
  o.model.chip_mtbi_years = 1000 * 3600 / year_s;
  const result r = simulate(o);
  const double expected = (2 * 1000 * 0.5 + 500 * (2.0 / 3.0)) / 2500;  // 0.5333; 0.5 if all were full
  BOOST_TEST(r.slices == 3u);
  BOOST_TEST(r.goodput == expected, boost::test_tools::tolerance(0.005 / expected));
}

BOOST_AUTO_TEST_CASE(slower_learners_lose_more_time_per_failure) {
  // A learner at speed s contributes every H / s: its goodput is the renewal
  // formula with H / s. Averaged over the clamped normal speeds of 256 learners.
  run_options o = cell(method::decoupled, 2'560'000, 256, 1);
  o.model.contribution_interval_s = 600;
  o.model.speed_spread = 0.3;
  const double lambda = rate_of(10'000), r_l = o.model.restart_s, h = 600, sd = 0.3;
  auto g = [&](double s) { return renewal_goodput(lambda, r_l, h / s); };
  auto pdf = [&](double s) {
    return std::exp(-0.5 * (s - 1) * (s - 1) / (sd * sd)) / (sd * std::sqrt(2 * std::numbers::pi));
  };
  const double tail = normal_cdf(-0.5 / sd);  // mass clamped to each of 0.5 and 1.5
  double expected = tail * (g(0.5) + g(1.5));
  const int steps = 2000;  // Simpson's rule over [0.5, 1.5]
  for (int i = 0; i <= steps; ++i) {
    const double s = 0.5 + double(i) / steps, w = (i == 0 || i == steps) ? 1 : (i % 2 ? 4 : 2);
    expected += w * g(s) * pdf(s) / (3.0 * steps);
  }
  const result spread = simulate(o);
  o.model.speed_spread = 0;
  const result same = simulate(o);
  BOOST_TEST(same.goodput == g(1.0), boost::test_tools::tolerance(0.003));
  BOOST_TEST(g(1.0) - expected > 0.006);  // the spread costs something measurable
  BOOST_TEST(spread.goodput == expected, boost::test_tools::tolerance(0.005));
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_result) {
  for (const method kind : {method::data_parallel, method::elastic, method::decoupled}) {
    run_options o = cell(kind, 1'200'000, kind == method::decoupled ? 8 : 1, kind == method::decoupled ? 3 : 1);
    o.expected_failures = 2e4;
    o.seed = 5;
    const result a = simulate(o), b = simulate(o);
    o.seed = 6;
    const result c = simulate(o);
    BOOST_TEST_INFO("method " << method_name(kind));
    BOOST_TEST(a.goodput == b.goodput);  // exactly
    BOOST_TEST(a.events == b.events);
    BOOST_TEST(a.goodput != c.goodput);
  }
}

BOOST_AUTO_TEST_CASE(refuses_options_that_make_no_sense) {
  auto refused = [](run_options o) {
    try {
      o.check();
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  const run_options good = cell(method::decoupled, 1000, 8, 2);
  BOOST_TEST(!refused(good));
  auto with = [&](auto change) {
    run_options o = good;
    change(o);
    return o;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  BOOST_TEST(refused(with([](run_options& o) { o.chips = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.learners = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.learners = 1001; })));  // more learners than chips
  BOOST_TEST(refused(with([](run_options& o) { o.quorum = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.quorum = 9; })));
  BOOST_TEST(refused(with([](run_options& o) { o.kind = method::data_parallel; })));  // M = 8 for data parallel
  BOOST_TEST(refused(with([&](run_options& o) { o.model.chip_mtbi_years = nan; })));
  BOOST_TEST(refused(with([](run_options& o) { o.model.chip_mtbi_years = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.model.restart_s = -1; })));
  BOOST_TEST(refused(with([&](run_options& o) { o.model.repair_s = inf; })));
  BOOST_TEST(refused(with([](run_options& o) { o.model.contribution_interval_s = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.model.slice_chips = 0; })));
  BOOST_TEST(refused(with([](run_options& o) { o.model.speed_spread = 0.6; })));
  BOOST_TEST(refused(with([](run_options& o) { o.expected_failures = 2e8; })));
  BOOST_TEST(refused(with([](run_options& o) {
    o.chips = 10'000'000'000;
    o.horizon_days = 1e6;
  })));
  BOOST_CHECK_THROW(simulate(with([](run_options& o) { o.quorum = 9; })), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
