// ctest-labels: unit sim
// The paper's goodput table (Decoupled DiLoCo, arXiv:2604.21428; chip MTBI one
// year) reproduced within ±5 points by the default calibration, each cell with
// a standard error well under a point, and an uptime of at least 99 % for
// M ≥ 4 learners up to 2.4M chips. CTest runs this suite as goodput_simulator.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>

#include "simulator.hpp"

namespace {

using namespace diloco_goodput;

struct paper_cell {
  method kind;
  std::uint64_t chips;
  std::uint32_t learners;
  double goodput_percent;  ///< the paper's figure
};

constexpr paper_cell paper[] = {
    {method::data_parallel, 150'000, 1, 72},   {method::data_parallel, 300'000, 1, 57},
    {method::data_parallel, 600'000, 1, 38},   {method::data_parallel, 1'200'000, 1, 27},
    {method::data_parallel, 2'400'000, 1, 18}, {method::elastic, 150'000, 1, 88},
    {method::elastic, 300'000, 1, 80},         {method::elastic, 600'000, 1, 69},
    {method::elastic, 1'200'000, 1, 58},       {method::elastic, 2'400'000, 1, 40},
    {method::decoupled, 1'200'000, 8, 88},     {method::decoupled, 2'400'000, 8, 80},
    {method::decoupled, 1'200'000, 16, 93},    {method::decoupled, 2'400'000, 16, 86},
};

}  // namespace

BOOST_AUTO_TEST_SUITE(goodput_paper)

BOOST_AUTO_TEST_CASE(reproduces_the_papers_table_within_five_points) {
  for (const paper_cell& c : paper) {
    run_options o;
    o.kind = c.kind;
    o.chips = c.chips;
    o.learners = c.learners;
    const result r = simulate(o);
    BOOST_TEST_MESSAGE(method_name(c.kind) << " N=" << c.chips << " M=" << c.learners << ": goodput " << 100 * r.goodput
                                           << " % (paper " << c.goodput_percent << " %), se " << 100 * r.goodput_se);
    BOOST_TEST_INFO(method_name(c.kind) << " N=" << c.chips << " M=" << c.learners);
    BOOST_TEST(std::abs(100 * r.goodput - c.goodput_percent) <= 5.0);
    BOOST_TEST(100 * r.goodput_se < 0.25);
  }
}

BOOST_AUTO_TEST_CASE(four_or_more_learners_are_up_all_but_one_percent_of_the_time) {
  for (const std::uint32_t m : {4u, 8u, 16u})
    for (const std::uint64_t chips : {150'000ull, 300'000ull, 600'000ull, 1'200'000ull, 2'400'000ull}) {
      run_options o;
      o.kind = method::decoupled;
      o.chips = chips;
      o.learners = m;
      o.quorum = 1;
      const result r = simulate(o);
      BOOST_TEST_INFO("M=" << m << " N=" << chips);
      BOOST_TEST(r.uptime >= 0.99);
    }
}

BOOST_AUTO_TEST_SUITE_END()
