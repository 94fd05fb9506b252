// ctest-labels: unit
// diloco_goodput's command line: what it makes of good flags, and every bad
// one refused with exit status 2 and a message naming the flag and value.
#include <boost/test/unit_test.hpp>

#include <initializer_list>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <diloco_tools/command_line_test.hpp>

#include "command_line.hpp"

namespace {

namespace dt = diloco_tools::testing;
using parsed = dt::parsed<diloco_goodput::command>;
using dt::refused;

parsed parse(std::initializer_list<const char*> args) {
  return dt::parse_words<diloco_goodput::command>(diloco_goodput::parse_command_line, "diloco_goodput", args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(goodput_command_line)

BOOST_AUTO_TEST_CASE(reads_a_decoupled_cell) {
  const auto p = parse({"--method", "decoupled", "--chips", "1200000", "--learners", "16", "--quorum", "2",
                        "--mtbi-years", "0.5", "--seed", "7", "--json", "--restart", "30", "--speed-spread", "0.1"});
  BOOST_TEST(!p.status.has_value());
  const auto& r = p.c.run;
  BOOST_TEST((r.kind == diloco_goodput::method::decoupled));
  BOOST_TEST(r.chips == 1'200'000u);
  BOOST_TEST(r.learners == 16u);
  BOOST_TEST(r.quorum == 2u);
  BOOST_TEST(r.model.chip_mtbi_years == 0.5);
  BOOST_TEST(r.seed == 7u);
  BOOST_TEST(p.c.json);
  BOOST_TEST(r.model.restart_s == 30.0);
  BOOST_TEST(r.model.speed_spread == 0.1);
}

BOOST_AUTO_TEST_CASE(data_parallel_is_one_learner) {
  const auto p = parse({"--method", "dp", "--chips", "150000", "--checkpoint", "0"});
  BOOST_TEST(!p.status.has_value());
  BOOST_TEST(p.c.run.learners == 1u);
  BOOST_TEST(p.c.run.quorum == 1u);
  BOOST_TEST(p.c.run.model.checkpoint_interval_s == 0.0);
  BOOST_TEST(!p.c.json);
}

BOOST_AUTO_TEST_CASE(help_ends_with_status_zero) { BOOST_TEST((parse({"--help"}).status == 0)); }

BOOST_AUTO_TEST_CASE(refuses_bad_values_with_status_two) {
  BOOST_TEST(refused(parse({"--chips", "1000"}), "--method is required"));
  BOOST_TEST(refused(parse({"--method", "dp"}), "--chips is required"));
  BOOST_TEST(refused(parse({"--method", "sync", "--chips", "10"}), "unknown method 'sync'"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "-1"}), "bad value '-1' for --chips"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "0"}), "bad value '0' for --chips"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "1e6"}), "bad value '1e6' for --chips"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "10", "--mtbi-years", "0"}), "--mtbi-years"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "10", "--mtbi-years", "nan"}), "bad value 'nan'"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "10", "--seed", "-3"}), "--seed"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "10", "--days", "-1"}), "--days"));
  BOOST_TEST(refused(parse({"--method", "decoupled", "--chips", "100", "--learners", "0"}), "--learners"));
  BOOST_TEST(refused(parse({"--method", "decoupled", "--chips", "100", "--learners", "8", "--quorum", "9"}),
                     "quorum (9) must be at most learners (8)"));
  BOOST_TEST(refused(parse({"--method", "decoupled", "--chips", "4", "--learners", "8"}),
                     "learners (8) must be at most chips"));
  BOOST_TEST(refused(parse({"--method", "decoupled", "--chips", "100", "--speed-spread", "0.7"}), "--speed-spread"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "100", "--learners", "4"}),
                     "--learners applies to --method decoupled only"));
  BOOST_TEST(refused(parse({"--method", "decoupled", "--chips", "100", "--slice-chips", "64"}),
                     "--slice-chips applies to --method elastic only"));
  BOOST_TEST(refused(parse({"--method", "elastic", "--chips", "100", "--checkpoint", "5"}),
                     "--checkpoint applies to --method dp only"));
  BOOST_TEST(refused(parse({"--method", "dp", "--chips", "10000000000", "--days", "100000"}), "at most 1e8"));
}

BOOST_AUTO_TEST_SUITE_END()
