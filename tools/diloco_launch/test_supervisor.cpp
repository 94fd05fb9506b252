// ctest-labels: unit
// The supervisor with sh for its processes: a learner restarted with its next
// incarnation, restarts that run out, the grace periods after the syncer or
// the last learner ends, a SIGTERM passed on, output lines with their
// sources. Every run is bounded by its plan's short grace periods.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <diloco_tools/launch/supervisor.hpp>

namespace {

namespace launch = diloco_tools::launch;
using namespace std::chrono_literals;
using diloco_tools::exit_status;

struct run_result {
  launch::launch_report report;
  std::vector<std::string> out, err;  ///< "syncer: LINE", "learner 1.2: LINE" (id.incarnation)
  std::vector<std::string> notes;
  double seconds = 0;
};

launch::launch_plan plan_of(std::string syncer_script, std::string learner_script, std::uint32_t learners) {
  launch::launch_plan plan;
  if (!syncer_script.empty()) plan.syncer = {"sh", "-c", syncer_script};
  plan.learner = {"sh", "-c", learner_script};
  plan.endpoint = "tcp://127.0.0.1:5555";
  plan.learners = learners;
  plan.restart_delay = 50ms;
  plan.learner_grace = 300ms;
  plan.syncer_grace = 300ms;
  plan.kill_after = 300ms;
  return plan;
}

run_result run(const launch::launch_plan& plan) {
  run_result r;
  launch::launch_sinks sinks{[&](const launch::process_name& p, launch::stream s, std::string_view line) {
                               const auto who =
                                   p.syncer ? std::string("syncer")
                                            : "learner " + std::to_string(p.id) + "." + std::to_string(p.incarnation);
                               (s == launch::stream::out ? r.out : r.err).push_back(who + ": " + std::string(line));
                             },
                             [&](const std::string& note) { r.notes.push_back(note); }};
  const auto start = std::chrono::steady_clock::now();
  r.report = launch::run(plan, sinks);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

bool contains(const std::vector<std::string>& lines, const std::string& line) {
  for (const auto& l : lines)
    if (l == line) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_supervisor)

BOOST_AUTO_TEST_CASE(hands_out_placeholders_and_environment) {
  auto plan = plan_of("echo syncer $DILOCO_ENDPOINT {learners} ${{DILOCO_LEARNER_ID:-none}}",
                      "echo {id}/{incarnation} $DILOCO_LEARNER_ID/$DILOCO_INCARNATION/$DILOCO_LEARNERS {port}; "
                      "printf 'no newline' >&2",
                      2);
  // Every process ends by itself: the grace periods only bound the run, so
  // that whichever side ends first, the others are not terminated meanwhile.
  plan.learner_grace = plan.syncer_grace = 30s;
  const auto r = run(plan);
  BOOST_TEST(contains(r.out, "syncer: syncer tcp://127.0.0.1:5555 2 none"));
  BOOST_TEST(contains(r.out, "learner 0.1: 0/1 0/1/2 5555"));
  BOOST_TEST(contains(r.out, "learner 1.1: 1/1 1/1/2 5555"));
  BOOST_TEST(contains(r.err, "learner 1.1: no newline"));
  BOOST_TEST(launch::worst_status(r.report) == 0);
}

BOOST_AUTO_TEST_CASE(restarts_a_killed_learner_with_its_next_incarnation) {
  // Learner 1's first incarnation dies of SIGKILL, its second ends well.
  const auto r = run(plan_of("", "echo {incarnation}; [ {id}{incarnation} = 11 ] && kill -9 $$; exit 0", 2));
  BOOST_TEST(contains(r.out, "learner 1.1: 1"));
  BOOST_TEST(contains(r.out, "learner 1.2: 2"));
  BOOST_TEST_REQUIRE(r.report.learners.size() == 2u);
  BOOST_TEST(r.report.learners[0].restarts == 0u);
  BOOST_TEST(r.report.learners[1].restarts == 1u);
  BOOST_TEST(r.report.learners[1].incarnation == 2u);
  BOOST_TEST((r.report.learners[1].status == (exit_status{true, 0, 0})));
  BOOST_TEST(launch::worst_status(r.report) == 0);
}

BOOST_AUTO_TEST_CASE(restarts_run_out) {
  auto plan = plan_of("", "exit 3", 1);
  plan.endpoint = "ipc:///tmp/none";
  plan.max_restarts = 2;
  const auto r = run(plan);
  BOOST_TEST_REQUIRE(r.report.learners.size() == 1u);
  BOOST_TEST(r.report.learners[0].restarts == 2u);
  BOOST_TEST(r.report.learners[0].incarnation == 3u);
  BOOST_TEST(launch::worst_status(r.report) == 3);
  BOOST_TEST(r.seconds < 2.0);  // 50 ms + 100 ms of back-off
}

BOOST_AUTO_TEST_CASE(a_learner_that_outlives_the_syncer_is_terminated) {
  const auto r = run(plan_of("exit 0", "[ {id} = 0 ] && exec sleep 30; exit 0", 2));
  BOOST_TEST((r.report.syncer == (exit_status{true, 0, 0})));
  BOOST_TEST((r.report.learners[0].status == (exit_status{false, 0, SIGTERM})));
  BOOST_TEST(r.report.learners[0].restarts == 0u);  // no restart without a syncer
  BOOST_TEST(launch::worst_status(r.report) == 128 + SIGTERM);
  BOOST_TEST(r.seconds < 5.0);
}

BOOST_AUTO_TEST_CASE(a_syncer_that_outlives_the_learners_is_terminated_then_killed) {
  // The learners end once the syncer ignores SIGTERM (the file `ready`), at
  // most 3 s on: a SIGTERM before its trap would end it by that signal.
  char dir[] = "/tmp/diloco_launch_test_XXXXXX";
  BOOST_TEST_REQUIRE(mkdtemp(dir) != nullptr);
  const std::string ready = std::string(dir) + "/ready";
  const auto r = run(plan_of("trap '' TERM; touch " + ready + "; sleep 30 & wait; sleep 30",
                             "i=0; while [ ! -e " + ready +
                                 " ] && [ $i -lt 150 ]; do sleep 0.02; i=$((i+1)); done; "
                                 "exit 0",
                             2));
  std::remove(ready.c_str());
  rmdir(dir);
  BOOST_TEST((r.report.syncer == (exit_status{false, 0, SIGKILL})));  // it ignored SIGTERM
  BOOST_TEST(launch::worst_status(r.report) == 128 + SIGKILL);
  BOOST_TEST(r.seconds < 5.0);
}

BOOST_AUTO_TEST_CASE(passes_sigterm_on_and_exits_with_128_plus_it) {
  // A learner sends SIGTERM to the launcher (this process) as a user would,
  // once the syncer has set its trap: a signal that came before the trap
  // would end the syncer's shell without its "bye" (a CI run saw that race).
  char dir[] = "/tmp/diloco_launch_test_XXXXXX";
  BOOST_TEST_REQUIRE(mkdtemp(dir) != nullptr);
  const std::string ready = std::string(dir) + "/ready";
  auto plan = plan_of("trap 'echo bye; exit 0' TERM; touch " + ready + "; sleep 30 & wait",
                      "if [ {id} = 1 ]; then i=0; while [ ! -e " + ready +
                          " ] && [ $i -lt 150 ]; do "
                          "sleep 0.02; i=$((i+1)); done; kill -TERM $PPID; fi; exec sleep 30",
                      2);
  plan.kill_after = 5s;
  const auto r = run(plan);
  BOOST_TEST(r.report.interrupted_by == SIGTERM);
  BOOST_TEST(contains(r.out, "syncer: bye"));
  BOOST_TEST((r.report.syncer == (exit_status{true, 0, 0})));
  for (const auto& l : r.report.learners) {
    BOOST_TEST((l.status == (exit_status{false, 0, SIGTERM})));
    BOOST_TEST(l.restarts == 0u);
  }
  BOOST_TEST(launch::worst_status(r.report) == 128 + SIGTERM);
  BOOST_TEST(r.seconds < 4.0);  // ended by the signal, not by SIGKILL 5 s later
  std::remove(ready.c_str());
  rmdir(dir);
}

BOOST_AUTO_TEST_CASE(refuses_bad_plans_before_starting_anything) {
  auto refusal = [](const launch::launch_plan& plan) {
    try {
      launch::run(plan, {});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto plan = plan_of("exit 0", "exit 0", 2);
  plan.learner = {"diloco-no-such-program", "{id}"};
  BOOST_TEST(refusal(plan) == "the learner program 'diloco-no-such-program' is not found");
  plan = plan_of("exit 0", "exit 0", 2);
  plan.syncer = {"diloco-no-such-syncer"};
  BOOST_TEST(refusal(plan) == "the syncer program 'diloco-no-such-syncer' is not found");
  plan = plan_of("echo {id}", "exit 0", 2);
  BOOST_TEST(refusal(plan).starts_with("{id} has no value in the syncer command"));
  plan = plan_of("exit 0", "exit 0", 2);
  plan.ids = {2};
  BOOST_TEST(refusal(plan) == "learner id 2 is not below the number of learners (2)");
  plan.learners = 0;
  BOOST_TEST(refusal(plan) == "no learners (M = 0)");
}

BOOST_AUTO_TEST_SUITE_END()
