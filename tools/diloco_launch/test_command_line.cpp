// ctest-labels: unit
// diloco_launch's command line: what it makes of good flags, and every bad
// one refused with exit status 2 and a message naming the flag and value.
#include <boost/test/unit_test.hpp>

#include <initializer_list>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <diloco_tools/command_line_test.hpp>

#include "command_line.hpp"

namespace {

namespace dt = diloco_tools::testing;
using parsed = dt::parsed<diloco_launch::command>;
using dt::refused;

parsed parse(std::initializer_list<const char*> args) {
  return dt::parse_words<diloco_launch::command>(diloco_launch::parse_command_line, "diloco_launch", args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_command_line)

BOOST_AUTO_TEST_CASE(reads_a_full_command_line) {
  const auto p = parse({"--learners",
                        "8",
                        "--learner-ids",
                        "4-7",
                        "--syncer",
                        "my_syncer --bind {endpoint} --m {learners}",
                        "--syncer-endpoint",
                        "tcp://0.0.0.0:5555",
                        "--endpoint",
                        "tcp://host:5555",
                        "--max-restarts",
                        "5",
                        "--restart-delay",
                        "0.5",
                        "--learner-grace",
                        "2",
                        "--syncer-grace",
                        "4",
                        "--kill-after",
                        "3",
                        "--summary",
                        "--",
                        "python3",
                        "train.py",
                        "--id",
                        "{id}",
                        "--",
                        "x"});
  BOOST_TEST(!p.status.has_value());
  const auto& plan = p.c.plan;
  BOOST_TEST(plan.learners == 8u);
  BOOST_TEST(plan.ids == (std::vector<std::uint32_t>{4, 5, 6, 7}));
  BOOST_TEST(plan.syncer == (std::vector<std::string>{"my_syncer", "--bind", "{endpoint}", "--m", "{learners}"}));
  BOOST_TEST(plan.learner == (std::vector<std::string>{"python3", "train.py", "--id", "{id}", "--", "x"}));
  BOOST_TEST(plan.endpoint == "tcp://host:5555");
  BOOST_TEST(plan.syncer_endpoint == "tcp://0.0.0.0:5555");
  BOOST_TEST(plan.max_restarts == 5u);
  BOOST_TEST(plan.restart_delay.count() == 500);
  BOOST_TEST(plan.learner_grace.count() == 2000);
  BOOST_TEST(plan.syncer_grace.count() == 4000);
  BOOST_TEST(plan.kill_after.count() == 3000);
  BOOST_TEST(p.c.summary);
}

BOOST_AUTO_TEST_CASE(defaults) {
  const auto p = parse({"--learners", "2", "--", "./train"});
  BOOST_TEST(!p.status.has_value());
  BOOST_TEST(p.c.plan.endpoint.starts_with("tcp://127.0.0.1:"));
  BOOST_TEST(p.c.plan.ids.empty());  // all of them
  BOOST_TEST(p.c.plan.syncer.size() == 3u);
  BOOST_TEST(p.c.plan.syncer.front().ends_with("diloco_syncer"));
  BOOST_TEST(p.c.plan.max_restarts == 3u);
  const auto learners_only = parse({"--learners", "2", "--no-syncer", "--endpoint", "tcp://h:1", "--", "./train"});
  BOOST_TEST(!learners_only.status.has_value());
  BOOST_TEST(learners_only.c.plan.syncer.empty());
  // Every candidate of each shard (a primary and its standby), as the learners take them: passed on as written.
  const auto candidates = parse(
      {"--learners", "2", "--no-syncer", "--endpoint", "tcp://a:1|tcp://b:1,tcp://c:2|tcp://d:2", "--", "./train"});
  BOOST_TEST(!candidates.status.has_value());
  BOOST_TEST(candidates.c.plan.endpoint == "tcp://a:1|tcp://b:1,tcp://c:2|tcp://d:2");
}

BOOST_AUTO_TEST_CASE(refuses_bad_flags_naming_them) {
  BOOST_TEST(refused(parse({"--learners", "0", "--", "t"}), "bad value '0' for --learners"));
  BOOST_TEST(refused(parse({"--learners", "-1", "--", "t"}), "bad value '-1' for --learners"));
  BOOST_TEST(refused(parse({"--learners", "two", "--", "t"}), "bad value 'two' for --learners"));
  BOOST_TEST(refused(parse({"--", "t"}), "--learners is required"));
  BOOST_TEST(
      refused(parse({"--learners", "2", "--max-restarts", "-1", "--", "t"}), "bad value '-1' for --max-restarts"));
  BOOST_TEST(
      refused(parse({"--learners", "2", "--syncer-grace", "nan", "--", "t"}), "bad value 'nan' for --syncer-grace"));
  BOOST_TEST(refused(parse({"--learners", "2", "--learner-ids", "2", "--", "t"}), "bad value '2' for --learner-ids"));
  BOOST_TEST(refused(parse({"--learners", "2", "--syncer", "s 'x", "--", "t"}), "unclosed '"));
  BOOST_TEST(refused(parse({"--learners", "2", "--syncer", " ", "--", "t"}), "--syncer is empty"));
  BOOST_TEST(refused(parse({"--learners", "2", "--no-syncer", "--", "t"}), "--no-syncer needs --endpoint"));
  BOOST_TEST(refused(parse({"--learners", "2", "--no-syncer", "--syncer", "s", "--endpoint", "tcp://h:1", "--", "t"}),
                     "--no-syncer and --syncer exclude each other"));
  BOOST_TEST(refused(parse({"--learners", "2", "--frobnicate", "--", "t"}), "--frobnicate"));
  BOOST_TEST(refused(parse({"--learners", "2"}), "missing the learner command"));
  BOOST_TEST(refused(parse({"--learners", "2", "--"}), "missing the learner command after --"));
}

BOOST_AUTO_TEST_CASE(help_is_not_an_error) {
  const auto p = parse({"--help"});
  BOOST_TEST(p.status.value_or(-1) == 0);
  BOOST_TEST(p.output.find("--max-restarts") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
