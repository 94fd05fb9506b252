// The chaos report: the JSON-lines reader (trace.hpp) on valid and broken lines, and analyze() with its JSON
// (analyze.hpp, report_json.hpp) on hand-built traces whose expected numbers are worked out by hand in the comments
// next to them.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze.hpp"
#include "report_json.hpp"

using namespace diloco_chaos;

namespace {

void check(bool ok, const std::string& what) { BOOST_TEST(ok, what); }

void near(double got, double want, const std::string& what) {
  check(std::fabs(got - want) < 1e-9, what + ": got " + std::to_string(got) + ", want " + std::to_string(want));
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// All traces start at this wall time; ms(x) is the wall time x milliseconds into the run, in microseconds.
constexpr long long base_us = 1'700'000'000'000'000;
std::string ms(long long x) { return std::to_string(base_us + x * 1000); }

/// A trace line at x milliseconds: {"t":...,<body>}.
std::string at(long long x, const std::string& body) { return "{\"t\":" + ms(x) + "," + body + "}"; }

/// Writes `lines` to a temporary file and reads it back with read_trace().
trace load(const std::vector<std::string>& lines) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("diloco_report_test_" + std::to_string(getpid()) + ".jsonl");
  {
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << '\n';
  }
  trace t = read_trace(path);
  std::filesystem::remove(path);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chaos_report)

BOOST_AUTO_TEST_CASE(parser) {
  {
    const auto e =
        parse_line(R"({"t":5,"src":"a\"b\\c","ev":"x\/y\u0041","n":-42,"z":0,"f":-1.5e2,"g":1.25,"b":true,)"
                   R"("c":false,"rows":[[1,2,3],[-4,5,6]],"ints":[7,-8],"none":[],"big":9223372036854775807})");
    check(e.has_value(), "parser: a valid line parses");
    if (e) {
      check(e->t == 5 && e->src == "a\"b\\c" && e->ev == "x/yA", "parser: t, escaped src and ev");
      check(e->integer("n") == -42 && e->integer("z") == 0, "parser: negative integer and zero");
      near(e->number("f"), -150, "parser: negative float with exponent");
      near(e->number("g"), 1.25, "parser: float");
      near(e->number("n"), -42, "parser: number() of an integer");
      check(!e->integer("g").has_value(), "parser: a float is not an integer");
      check(e->flag("b") && !e->flag("c") && !e->flag("missing"), "parser: bools");
      check(e->rows("rows") == std::vector<std::vector<std::int64_t>>{{1, 2, 3}, {-4, 5, 6}}, "parser: nested arrays");
      check(e->integers("ints") == std::vector<std::int64_t>{7, -8}, "parser: integer array");
      check(e->integers("none").empty() && e->rows("none").empty() && e->fields.count("none"), "parser: empty array");
      check(e->integer("big") == 9223372036854775807LL, "parser: int64 max");
      check(e->text("missing").empty() && !e->integer("src").has_value(), "parser: absent fields");
    }
  }
  {
    // Unknown fields of types a value cannot hold are skipped; the line still counts.
    const auto e = parse_line(
        R"(  {"o":{"k":[1.5,null,{"x":"}"}]},"s":["x"],"fl":[1.5],"nu":null,"mix":[[1],2],"t":1,"src":"s","ev":"e"} )");
    check(e && e->fields.empty() && e->t == 1 && e->src == "s" && e->ev == "e",
          "parser: unrepresentable fields are skipped");
    const auto over = parse_line(R"({"t":1,"src":"s","ev":"e","x":9223372036854775808})");
    check(over && !over->integer("x") && over->number("x") > 9.2e18, "parser: int64 overflow reads as a float");
    const auto dup = parse_line(R"({"t":1,"src":"s","ev":"e","x":1,"x":2})");
    check(dup && dup->integer("x") == 2, "parser: a repeated key keeps its last value");
  }
  const std::string deep = R"({"t":1,"src":"s","ev":"e","x":)" + std::string(5000, '[');
  for (const std::string& bad : {std::string(),
                                 std::string("garbage"),
                                 std::string("{"),
                                 std::string("[1,2]"),
                                 std::string(R"({"t":1,"src":"s","ev":"e"} trailing)"),
                                 std::string(R"({"t":1.5,"src":"s","ev":"e"})"),
                                 std::string(R"({"t":"1","src":"s","ev":"e"})"),
                                 std::string(R"({"t":1,"src":"s"})"),
                                 std::string(R"({"t":01,"src":"s","ev":"e"})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e",})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e)"),
                                 std::string("{\"t\":1,\"src\":\"s\",\"ev\":\"e\x01\"}"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":[1,}")"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":-})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":1.})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":tru})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":"\q"})"),
                                 std::string(R"({"t":1,"src":"s","ev":"e","a":"\u12"})"),
                                 std::string(R"({"t":1 "src":"s","ev":"e"})"),
                                 deep})
    check(!parse_line(bad).has_value(), "parser: rejects " + bad.substr(0, 60));

  // read_trace: blank lines skipped, malformed counted, events sorted by t with ties in file order.
  const trace t = load({at(30, R"("src":"b","ev":"late")"), "", "  ", at(10, R"("src":"a","ev":"first")"),
                        "{\"t\":1,\"src\":\"lear", at(10, R"("src":"a","ev":"second")"), "nonsense"});
  check(t.malformed_lines == 2, "read_trace: 2 malformed lines, got " + std::to_string(t.malformed_lines));
  check(t.events.size() == 3 && t.events[0].ev == "first" && t.events[1].ev == "second" && t.events[2].ev == "late",
        "read_trace: sorted by t, stable");
  try {
    (void)read_trace("/nonexistent/diloco/trace.jsonl");
    check(false, "read_trace: a missing file throws");
  } catch (const std::runtime_error& e) {
    check(contains(e.what(), "/nonexistent/diloco/trace.jsonl"), "read_trace: the error names the file");
  }
}

namespace {

/// A work account as "computed C, merged M, ...", every field.
std::string describe(const work_account& a) {
  return "computed " + std::to_string(a.computed) + ", merged " + std::to_string(a.merged) + ", overwritten " +
         std::to_string(a.overwritten) + ", refused " + std::to_string(a.refused) + ", dropped " +
         std::to_string(a.dropped) + ", lost in flight " + std::to_string(a.lost_in_flight) + ", unsent " +
         std::to_string(a.unsent) + ", unmeasured incarnations " + std::to_string(a.unmeasured_incarnations);
}

void check_work(const work_account& got, const work_account& want, const std::string& what) {
  check(describe(got) == describe(want), what + ": got " + describe(got) + "; want " + describe(want));
}

bool same_spans(const std::vector<lane_span>& got, const std::vector<lane_span>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i].begin_s - want[i].begin_s) > 1e-9 || std::fabs(got[i].end_s - want[i].end_s) > 1e-9 ||
        got[i].state != want[i].state)
      return false;
  return true;
}

// The main scenario: M = 2, fragments 0 and 1, run window 0..10 s ("stopping" at 10 s), downtime bound 2 s.
// Lines are grouped per process (not in time order) so read_trace must sort them. The learners keep all their work
// (the default adoption rule): each inner step adds 1 to every fragment's counter, and a "sent" carries its
// fragment's steps since that fragment's previous send (`work`).
std::vector<std::string> main_trace() {
  const std::string L0 = R"("src":"learner","learner":0,"incarnation":0,)",
                    L0b = R"("src":"learner","learner":0,"incarnation":1,)";
  const std::string L1 = R"("src":"learner","learner":1,"incarnation":0,)", S = R"("src":"syncer",)";
  return {
      // runner
      at(0, R"("src":"runner","ev":"begin","learners":2,"mode":"decoupled","seed":7,"mtbf_s":4.5,"recovery_s":1.0,)"
            R"("duration_s":10.0)"),
      at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":100)"),
      at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":0,"pid":200)"),
      at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":1,"incarnation":0,"pid":300)"),
      at(2500, R"("src":"runner","ev":"pause","target":"learner","learner":0,"pid":200)"),
      at(3000, R"("src":"runner","ev":"resume","target":"learner","learner":0,"pid":200)"),
      at(3200, R"("src":"runner","ev":"kill","target":"syncer","pid":100)"),
      at(3300, R"("src":"runner","ev":"exit","target":"syncer","pid":100,"status":"signal 9")"),
      at(3400, R"("src":"runner","ev":"spawn","target":"syncer","pid":101)"),
      at(5500, R"("src":"runner","ev":"kill","target":"learner","learner":0,"pid":200)"),
      at(5600, R"("src":"runner","ev":"exit","target":"learner","learner":0,"pid":200,"status":"signal 9")"),
      at(6000, R"("src":"runner","ev":"kill","target":"learner","learner":1,"pid":300)"),
      at(6000, R"("src":"runner","ev":"exit","target":"learner","learner":1,"pid":300,"status":"signal 9")"),
      at(7000, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":1,"pid":201)"),
      at(10000, R"("src":"runner","ev":"stopping")"),
      at(10800, R"("src":"runner","ev":"exit","target":"learner","learner":0,"pid":201,"status":"exit 0")"),
      at(10950, R"("src":"runner","ev":"exit","target":"syncer","pid":101,"status":"exit 0")"),
      at(11000, R"("src":"runner","ev":"end")"),
      // learner 0, incarnation 0
      at(10, L0 + R"("ev":"start","pid":200)"),
      at(500, L0 + R"("ev":"joined","revisions":[0,0],"steps":0,"wait_us":300000)"),
      at(1200, L0 + R"("ev":"wait","begin":)" + ms(1000) + R"(,"end":)" + ms(1200)),
      at(2000, L0 + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":10,"steps":10,"wait_us":500000)"),
      at(2100, L0 + R"("ev":"verdict","fragment":0,"sequence":1,"accepted":true)"),
      at(2300, L0 + R"("ev":"adopted","fragment":0,"revision":1,"overwritten":0)"),
      at(3100, L0 + R"("ev":"sent","fragment":1,"sequence":2,"base":0,"work":20,"steps":20,"wait_us":500000)"),
      at(4500, L0 + R"("ev":"sent","fragment":0,"sequence":3,"base":1,"work":20,"steps":30,"wait_us":600000,)"
                    R"("future":{"x":[1.5]})"),
      at(4700, L0 + R"("ev":"adopted","fragment":0,"revision":2)"),
      // learner 0, incarnation 1
      at(7500, L0b + R"("ev":"joined","revisions":[2,0],"steps":0,"wait_us":100000)"),
      at(9000, L0b + R"("ev":"sent","fragment":1,"sequence":1,"base":0,"work":10,"steps":10,"wait_us":100000)"),
      at(9150, L0b + R"("ev":"adopted","fragment":1,"revision":1,"overwritten":0)"),
      at(10500, L0b + R"("ev":"sent","fragment":0,"sequence":2,"base":2,"work":20,"steps":20,"wait_us":400000)"),
      at(10700, L0b + R"("ev":"stop","steps":20,"wait_us":400000,"steps_computed":20,"steps_sent":30,)"
                      R"("steps_overwritten":0,"steps_refused":0,"steps_unsent":10)"),
      // learner 1
      at(1000, L1 + R"("ev":"joined","revisions":[0,0],"steps":0,"wait_us":0)"),
      at(1800, L1 + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":8,"steps":8,"wait_us":0)"),
      at(3500, L1 + R"("ev":"sent","fragment":1,"sequence":2,"base":0,"work":25,"steps":25,"wait_us":0)"),
      at(3650, L1 + R"("ev":"verdict","fragment":1,"sequence":2,"accepted":false,"reason":"stale")"),
      at(4300, L1 + R"("ev":"wait","begin":)" + ms(4000) + R"(,"end":)" + ms(4300)),
      at(4700, L1 + R"("ev":"adopted","fragment":0,"revision":2)"),
      at(4800, L1 + R"("ev":"adopted","fragment":0,"revision":1)"),
      at(5000, L1 + R"("ev":"sent","fragment":0,"sequence":3,"base":1,"work":32,"steps":40,"wait_us":300000)"),
      at(5100, L1 + R"("ev":"verdict","fragment":0,"sequence":3,"accepted":true)"),
      at(5200, L1 + R"("ev":"heartbeat","unknown_event":true)"),
      // syncer
      at(50, S + R"("ev":"start","pid":100,"restored":false,"revisions":[])"),
      at(1900, S + R"("ev":"accepted","learner":1,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
      at(2050, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
      at(2200, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[1,0,1],[0,0,1]],"staleness":[0,0])"),
      at(3150, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":2,"fragment":1,"base":0)"),
      at(3450, S + R"("ev":"start","pid":101,"restored":true,"revisions":[1,0])"),
      at(3600, S + R"("ev":"rejected","learner":1,"incarnation":0,"sequence":2,"fragment":1,"reason":"stale")"),
      at(4550, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":3,"fragment":0,"base":1)"),
      at(4600, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[[0,0,3]],"staleness":[2])"),
      at(9050, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":1,"fragment":1,"base":0)"),
      at(9100, S + R"("ev":"merged","fragment":1,"revision":1,"contributions":[[0,1,1]],"staleness":[1])"),
      at(10550, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":2,"fragment":0,"base":2)"),
      at(10600, S + R"("ev":"merged","fragment":0,"revision":3,"contributions":[[0,1,2]],"staleness":[0])"),
      at(10900, S + R"("ev":"stop")"),
      // damage
      R"({"t":)" + ms(5300) + R"(,"src":"learner","ev":"sen)",
      "not json at all",
  };
}

}  // namespace

BOOST_AUTO_TEST_CASE(main_scenario) {
  const trace tr = load(main_trace());
  check(tr.malformed_lines == 2, "main: 2 malformed lines");
  const report r = analyze(tr, {.downtime_bound_s = 2.0});
  check(r.mode == "decoupled" && r.seed == 7 && r.learners == 2 && r.begin_us == base_us, "main: begin fields");
  near(r.window_s, 10, "main: window");
  near(r.allocated_s, 20, "main: allocated = 2 learners x 10 s");

  // Goodput. Learner 0, incarnation 0 (joined 0.5 s at step 0, wait_us 0.3 s):
  //   sent 1 @2.0: window (0.5, 2.0] = 1.5, wait 0.5-0.3 = 0.2            -> busy 1.3; work 10, merged at 2.2
  //   sent 2 @3.1: window (2.0, 3.1] = 1.1, wait 0, paused 2.5..3.0 = 0.5 -> busy 0.6; work 20, accepted, syncer killed
  //   sent 3 @4.5: window (3.1, 4.5] = 1.4, wait 0.1                      -> busy 1.3; work 20, merged at 4.6
  //   N = 30 steps (its largest `steps`) - 0, P = 2: computed 60 fragment-steps (fragment 0: 0..10 and 10..30 sent,
  //   fragment 1: 0..20 sent, 20..30 never sent), merged 10 + 20 = 30 -> share 0.5: busy 3.2, good 1.6, lost 1.6.
  // Incarnation 1 (joined 7.5 s at step 0, wait_us 0.1 s):
  //   sent 1 @9.0: window (7.5, 9.0] = 1.5, wait 0                        -> busy 1.5; work 10, merged at 9.1
  //   sent 2 @10.5: window (9.0, 10.5] cut at 10.0 -> 1.0 of 1.5; wait 0.3 x 1/1.5 = 0.2 -> busy 0.8; work 20, merged
  //   N = 20 (its "stop"), P = 2: computed 40, merged 30 -> share 0.75: busy 2.3, good 1.725, lost 0.575.
  // Learner 0: busy 5.5, good 3.325, lost 2.175, waits deducted 0.2+0.1+0.2 = 0.5.
  // Learner 1 (joined 1.0 s at step 0, wait 0): sent 1 @1.8: 0.8, work 8, merged; sent 2 @3.5: 1.7, work 25,
  // rejected; sent 3 @5.0: 1.5 - 0.3 wait = 1.2, work 32 (fragment 0's steps 8..40), never answered -> busy 3.7;
  // N = 40, computed 80, merged 8 -> share 0.1: good 0.37, lost 3.33.
  // Goodput = (3.325 + 0.37) / 20 = 0.18475; the window rule (good iff merged) would give (4.9 + 0.8) / 20 = 0.285.
  check(r.per_learner.size() == 2, "main: 2 learners reported");
  if (r.per_learner.size() == 2) {
    const learner_report &a = r.per_learner[0], &b = r.per_learner[1];
    check(a.learner == 0 && b.learner == 1, "main: learner ids");
    check(a.incarnations == 2 && b.incarnations == 1, "main: incarnations");
    check(a.sent == 5 && a.merged == 4 && b.sent == 3 && b.merged == 1, "main: per-learner sent/merged");
    near(a.busy_s, 5.5, "main: learner 0 busy"), near(a.good_s, 3.325, "main: learner 0 good");
    near(a.lost_s, 2.175, "main: learner 0 lost"), near(a.wait_deducted_s, 0.5, "main: learner 0 wait deducted");
    near(b.busy_s, 3.7, "main: learner 1 busy"), near(b.good_s, 0.37, "main: learner 1 good");
    near(b.lost_s, 3.33, "main: learner 1 lost"), near(b.wait_deducted_s, 0.3, "main: learner 1 wait deducted");
    // Work, fragment-steps. Learner 0: computed 60 + 40; merged 30 + 30; lost in flight 20 ((0,0,2): accepted, the
    // syncer killed before merging it); unsent 60-30-20 = 10 and 40-30 = 10. Learner 1: computed 80; merged 8;
    // refused 25 ((1,0,2), stale); lost in flight 32 ((1,0,3), never answered by the syncer); unsent 80-8-25-32 = 15.
    check_work(a.work, {.computed = 100, .merged = 60, .lost_in_flight = 20, .unsent = 20}, "main: learner 0 work");
    check_work(b.work, {.computed = 80, .merged = 8, .refused = 25, .lost_in_flight = 32, .unsent = 15},
               "main: learner 1 work");
    // Learner 0: restarting 0..0.5, up 0.5..1.0, waiting 1.0..1.2, up 1.2..2.5, paused 2.5..3.0, up 3.0..5.5,
    // down 5.5..7.0, restarting 7.0..7.5, up 7.5..10  -> up 6.8, waiting 0.2, paused 0.5, down 1.5, restarting 1.0.
    near(a.up_s, 6.8, "main: learner 0 up"), near(a.waiting_s, 0.2, "main: learner 0 waiting");
    near(a.paused_s, 0.5, "main: learner 0 paused"), near(a.down_s, 1.5, "main: learner 0 down");
    near(a.restarting_s, 1.0, "main: learner 0 restarting");
    using enum lane_state;
    check(same_spans(a.spans, {{0, 0.5, restarting},
                               {0.5, 1.0, up},
                               {1.0, 1.2, waiting},
                               {1.2, 2.5, up},
                               {2.5, 3.0, paused},
                               {3.0, 5.5, up},
                               {5.5, 7.0, down},
                               {7.0, 7.5, restarting},
                               {7.5, 10, up}}),
          "main: learner 0 spans");
    // Learner 1: restarting 0..1, up 1..4, waiting 4..4.3, up 4.3..6, down 6..10.
    check(same_spans(b.spans, {{0, 1, restarting}, {1, 4, up}, {4, 4.3, waiting}, {4.3, 6, up}, {6, 10, down}}),
          "main: learner 1 spans");
    near(b.up_s, 4.7, "main: learner 1 up"), near(b.down_s, 4.0, "main: learner 1 down");
    check(same_spans(r.syncer_spans, {{0, 3.2, up}, {3.2, 3.4, down}, {3.4, 10, up}}), "main: syncer spans");
  }
  near(r.busy_s, 9.2, "main: busy"), near(r.good_s, 3.695, "main: good"), near(r.lost_s, 5.505, "main: lost");
  near(r.goodput, 0.18475, "main: goodput");
  check_work(r.work, {.computed = 180, .merged = 68, .refused = 25, .lost_in_flight = 52, .unsent = 35},
             "main: total work");

  // Downtime. Advances in the window: 2.2, 4.6, 9.1 (10.6 is after "stopping"). Syncer restart: kill 3.2 until the
  // first merge after the respawn at 3.4, i.e. 4.6 -> 1.4 s. Gaps: 2.2..4.6 minus the restart = 2.2..3.2 (1.0 s,
  // under the bound); 4.6..9.1 (4.5 s > 2): alive 4.6..6.0 (both learners) and 7.0..9.1 (learner 0 restarting, then
  // up), not 6.0..7.0 (nobody) -> downtime 3.5; 9.1..10 (0.9 s). Median of {2.4, 4.5} = 3.45.
  check(r.advances == 3, "main: 3 advances in the window");
  near(r.syncer_restart_s, 1.4, "main: syncer restart time");
  check(r.syncer_restarts.size() == 1 && r.syncer_restarts[0].recovered, "main: one recovered syncer restart");
  if (r.syncer_restarts.size() == 1)
    near(r.syncer_restarts[0].kill_s, 3.2, "main: restart kill"),
        near(r.syncer_restarts[0].recovered_s, 4.6, "main: recovery");
  check(r.gaps.size() == 1, "main: one gap over the bound");
  if (r.gaps.size() == 1)
    near(r.gaps[0].begin_s, 4.6, "main: gap begin"), near(r.gaps[0].end_s, 9.1, "main: gap end"),
        near(r.gaps[0].alive_s, 3.5, "main: gap alive");
  near(r.global_downtime_s, 3.5, "main: global downtime");
  near(r.longest_gap_s, 4.5, "main: longest gap");
  near(r.median_gap_s, 3.45, "main: median gap");
  near(r.downtime_bound_s, 2.0, "main: bound");

  // Accounting: 8 sent; accepted (1,0,1) (0,0,1) (0,0,2) (0,0,3) (0,1,1) (0,1,2) = 6, of which 5 merged and (0,0,2)
  // lost in the syncer restart; (1,0,2) rejected as stale; (1,0,3) unanswered, and its accepted verdict has no
  // syncer "accepted" -> 1 unaccounted.
  const accounting& a = r.counts;
  check(a.sent == 8 && a.accepted == 6 && a.merged == 5 && a.lost_in_syncer_restart == 1,
        "main: sent/accepted/merged/lost");
  check(a.rejected == 1 && a.rejected_by_reason.size() == 1 && a.rejected_by_reason.count("stale") &&
            a.rejected_by_reason.at("stale") == 1,
        "main: rejected by reason");
  check(a.unanswered == 1 && a.unaccounted == 1, "main: unanswered and unaccounted");
  check(a.unaccounted_keys.size() == 1 && contains(a.unaccounted_keys[0], "learner 1 incarnation 0 sequence 3"),
        "main: the unaccounted key is named");

  // Revisions: learner 1 adopted fragment 0 at revision 2, then 1 -> one violation. Learner 0's second incarnation
  // joins at [2, 0] after having seen fragment 0 at 2: no violation. Points: the first "joined" at 0.5 ([0, 0]),
  // merges at 2.2, 4.6, 9.1 and 10.6 (drawn at the window's end, 10), the restored syncer start at 3.45 ([1, 0]).
  // Staleness f0 {0,0,2,0}, f1 {1}.
  check(r.violations.size() == 1, "main: one revision violation, got " + std::to_string(r.violations.size()));
  if (r.violations.size() == 1) {
    const revision_violation& v = r.violations[0];
    check(v.learner == 1 && v.incarnation == 0 && v.fragment == 0 && v.from == 2 && v.to == 1,
          "main: violation fields");
    near(v.t_s, 4.8, "main: violation time");
  }
  check(r.fragments == 2 && r.revisions.size() == 8, "main: 2 fragments, 8 revision points");
  if (r.revisions.size() == 8) {
    check(r.revisions[0].fragment == 0 && r.revisions[0].revision == 0 && std::fabs(r.revisions[0].t_s - 0.5) < 1e-9 &&
              r.revisions[1].fragment == 1 && r.revisions[1].revision == 0,
          "main: first points from the first joined");
    check(r.revisions[2].fragment == 0 && r.revisions[2].revision == 1 && std::fabs(r.revisions[2].t_s - 2.2) < 1e-9,
          "main: first merge point");
    check(r.revisions[7].fragment == 0 && r.revisions[7].revision == 3 && std::fabs(r.revisions[7].t_s - 10) < 1e-9,
          "main: a merge after the window is drawn at its end");
  }
  check(r.per_fragment.size() == 2, "main: per fragment");
  if (r.per_fragment.size() == 2) {
    check(r.per_fragment[0].merges == 3 && r.per_fragment[0].final_revision == 3, "main: fragment 0 merges/final");
    check(r.per_fragment[1].merges == 1 && r.per_fragment[1].final_revision == 1, "main: fragment 1 merges/final");
    near(r.per_fragment[0].staleness_mean, 0.5, "main: f0 staleness mean"),
        near(r.per_fragment[0].staleness_max, 2, "main: f0 staleness max");
    near(r.per_fragment[1].staleness_mean, 1, "main: f1 staleness mean");
  }
  near(r.staleness_mean, 0.6, "main: staleness mean"), near(r.staleness_max, 2, "main: staleness max");

  // Invariants: downtime, unaccounted, violation -> 3 failures; malformed lines and unanswered are warnings.
  check(!r.ok && r.failures.size() == 3, "main: 3 failures, got " + std::to_string(r.failures.size()));
  check(r.warnings.size() == 2, "main: 2 warnings, got " + std::to_string(r.warnings.size()));
  check(r.malformed_lines == 2, "main: malformed lines carried into the report");

  const std::string json = to_json(r);
  check(nlohmann::json::accept(json), "main: to_json is one well-formed JSON value");
  for (const char* key :
       {R"("goodput": 0.18475)", R"("ok": false)", R"("unaccounted": 1)", R"("lost_in_syncer_restart": 1)",
        R"("stale": 1)", R"("global_downtime_s": 3.5)", R"("syncer_restart_s": 1.4)", R"("malformed_lines": 2)",
        R"("median_gap_s": 3.45)", R"("learner 1 incarnation 0 sequence 3)", R"("restarting_s": 1)"})
    check(contains(json, key), std::string("main: to_json has ") + key);

  const nlohmann::json parsed = nlohmann::json::parse(json);
  const nlohmann::json& work = parsed["work"];
  check(work["computed"] == 180 && work["merged"] == 68 && work["overwritten"] == 0 && work["refused"] == 25 &&
            work["dropped"] == 0 && work["lost_in_flight"] == 52 && work["unsent"] == 35 &&
            work["unmeasured_incarnations"] == 0,
        "main: to_json has the total work");
  check(parsed["per_learner"][1]["work"]["refused"] == 25 && parsed["per_learner"][1]["work"]["unsent"] == 15,
        "main: to_json has each learner's work");

  // What plot_timeline.py draws (its own test draws it): a lane per learner, then the syncer; a mark at the kill.
  const nlohmann::json t = parsed.at("timeline");
  check(t["lanes"].size() == 3 && t["lanes"][0]["label"] == "learner 0" && t["lanes"][2]["label"] == "syncer",
        "main: timeline lanes");
  check(t["marks_s"].size() == 1 && std::fabs(t["marks_s"][0].get<double>() - 3.2) < 1e-9,
        "main: timeline mark at the syncer kill");
  check(t["fragments"] == 2 && t["revisions"].size() == 8 && std::fabs(t["duration_s"].get<double>() - 10) < 1e-9,
        "main: timeline revisions");
  check(
      t["lanes"][0]["spans"].size() == 9 && t["lanes"][0]["spans"][4] == nlohmann::json::parse(R"([2.5, 3, "paused"])"),
      "main: timeline spans of learner 0 with their states");
}

namespace {

/// `lines` as a trace from before learners recorded their work: `work` and `overwritten` taken out of every line
/// that contains `who`.
std::vector<std::string> without_work(std::vector<std::string> lines, const std::string& who) {
  const std::regex field(R"re(,"(work|overwritten)":[0-9]+)re");
  for (std::string& l : lines)
    if (contains(l, who)) l = std::regex_replace(l, field, "");
  return lines;
}

}  // namespace

// The main scenario from before learners recorded `work`: every incarnation keeps the window rule (busy time is
// good iff the contribution ending it was merged), so the figures are those worked out in main_scenario for it:
// learner 0 busy 5.5 = good 1.3 + 1.3 + 1.5 + 0.8 = 4.9 + lost 0.6 (sent 2, lost in the syncer restart); learner 1
// busy 3.7 = good 0.8 (sent 1) + lost 1.7 + 1.2; goodput (4.9 + 0.8) / 20 = 0.285. No work is accounted: the three
// incarnations are unmeasured.
BOOST_AUTO_TEST_CASE(trace_without_work) {
  const std::vector<std::string> lines = without_work(main_trace(), R"("src":"learner")");
  check(std::none_of(lines.begin(), lines.end(), [](const std::string& l) { return contains(l, "work"); }),
        "old trace: no line carries work");
  const report r = analyze(load(lines), {.downtime_bound_s = 2.0});
  check(r.per_learner.size() == 2, "old trace: 2 learners reported");
  if (r.per_learner.size() == 2) {
    const learner_report &a = r.per_learner[0], &b = r.per_learner[1];
    near(a.busy_s, 5.5, "old trace: learner 0 busy"), near(a.good_s, 4.9, "old trace: learner 0 good");
    near(a.lost_s, 0.6, "old trace: learner 0 lost");
    near(b.busy_s, 3.7, "old trace: learner 1 busy"), near(b.good_s, 0.8, "old trace: learner 1 good");
    near(b.lost_s, 2.9, "old trace: learner 1 lost");
    check_work(a.work, {.unmeasured_incarnations = 2}, "old trace: learner 0 work unmeasured");
  }
  near(r.good_s, 5.7, "old trace: good"), near(r.lost_s, 3.5, "old trace: lost");
  near(r.goodput, 0.285, "old trace: goodput");
  check_work(r.work, {.unmeasured_incarnations = 3}, "old trace: no work accounted");

  // Learner 1's lines alone from before: learner 0 as in main_scenario (good 3.325, work 100 computed, 60 merged,
  // 20 lost in flight, 20 unsent), learner 1 by the window rule (good 0.8) -> goodput (3.325 + 0.8) / 20 = 0.20625.
  const report mixed = analyze(load(without_work(main_trace(), R"("learner":1,"incarnation":0,)")), {});
  near(mixed.good_s, 4.125, "mixed trace: good"), near(mixed.goodput, 0.20625, "mixed trace: goodput");
  check_work(mixed.work,
             {.computed = 100, .merged = 60, .lost_in_flight = 20, .unsent = 20, .unmeasured_incarnations = 1},
             "mixed trace: learner 0's work only");
}

// Adoptions that throw work away (the "overwrite" adoption rule): M = 1, P = 2, window 0..10 s. The learner joins at
// 1.0 s at step 0 and takes 10 steps a second, never waiting; every contribution it sends is merged 0.2 s later, and
// it adopts each answer 10 steps after sending, throwing away the 10 steps of that fragment since the send:
//   fragment 0: steps 0..20 sent @3.0 (work 20), 20..30 overwritten @4.0, 30..60 sent @7.0 (30), 60..70 overwritten
//               @8.0, 70..90 never sent;
//   fragment 1: steps 0..40 sent @5.0 (40), 40..50 overwritten @6.0, 50..80 sent @9.0 (30), 80..90 never sent.
// N = 90 (its "stop") - 0, computed 2 x 90 = 180 fragment-steps: merged 20+30+40+30 = 120, overwritten 30, unsent 30.
// Busy: windows (1, 3], (3, 5], (5, 7], (7, 9] = 8.0 s, every one ended by a merged contribution, so the window rule
// gives good 8.0 and goodput 0.8; with the work, good = 8.0 x 120/180 = 16/3, lost 8/3, goodput 16/3 / 10 = 8/15.
BOOST_AUTO_TEST_CASE(overwritten_work) {
  const std::string L = R"("src":"learner","learner":0,"incarnation":0,)", S = R"("src":"syncer",)";
  const std::vector<std::string> lines = {
      at(0, R"("src":"runner","ev":"begin","learners":1,"mode":"decoupled","seed":3)"),
      at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":10)"),
      at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":0,"pid":20)"),
      at(10000, R"("src":"runner","ev":"stopping")"),
      at(10100, R"("src":"runner","ev":"exit","target":"learner","learner":0,"pid":20,"status":"exit 0")"),
      at(1000, L + R"("ev":"joined","revisions":[0,0],"steps":0,"wait_us":0)"),
      at(3000, L + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":20,"steps":20,"wait_us":0)"),
      at(4000, L + R"("ev":"adopted","fragment":0,"revision":1,"overwritten":10,"steps":30,"wait_us":0)"),
      at(5000, L + R"("ev":"sent","fragment":1,"sequence":2,"base":0,"work":40,"steps":40,"wait_us":0)"),
      at(6000, L + R"("ev":"adopted","fragment":1,"revision":1,"overwritten":10,"steps":50,"wait_us":0)"),
      at(7000, L + R"("ev":"sent","fragment":0,"sequence":3,"base":1,"work":30,"steps":60,"wait_us":0)"),
      at(8000, L + R"("ev":"adopted","fragment":0,"revision":2,"overwritten":10,"steps":70,"wait_us":0)"),
      at(9000, L + R"("ev":"sent","fragment":1,"sequence":4,"base":1,"work":30,"steps":80,"wait_us":0)"),
      at(10000, L + R"("ev":"stop","steps":90,"wait_us":0,"steps_computed":90,"steps_sent":120,)"
                    R"("steps_overwritten":30,"steps_refused":0,"steps_unsent":30)"),
      at(50, S + R"("ev":"start","pid":10,"restored":false,"revisions":[])"),
      at(3100, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
      at(3200, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[0,0,1]],"staleness":[0])"),
      at(5100, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":2,"fragment":1,"base":0)"),
      at(5200, S + R"("ev":"merged","fragment":1,"revision":1,"contributions":[[0,0,2]],"staleness":[0])"),
      at(7100, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":3,"fragment":0,"base":1)"),
      at(7200, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[[0,0,3]],"staleness":[0])"),
      at(9100, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":4,"fragment":1,"base":1)"),
      at(9200, S + R"("ev":"merged","fragment":1,"revision":2,"contributions":[[0,0,4]],"staleness":[0])"),
  };
  const report r = analyze(load(lines), {});
  check(r.counts.sent == 4 && r.counts.accepted == 4 && r.counts.merged == 4 && r.ok,
        "overwritten: every contribution merged, the run ok");
  near(r.busy_s, 8.0, "overwritten: busy");
  near(r.good_s, 16.0 / 3, "overwritten: good"), near(r.lost_s, 8.0 / 3, "overwritten: lost");
  near(r.goodput, 8.0 / 15, "overwritten: goodput");
  check_work(r.work, {.computed = 180, .merged = 120, .overwritten = 30, .unsent = 30}, "overwritten: work");
  check(contains(to_json(r), R"("overwritten": 30)"), "overwritten: to_json says how much was overwritten");

  const report old = analyze(load(without_work(lines, R"("src":"learner")")), {});
  near(old.good_s, 8.0, "overwritten, old trace: good"), near(old.goodput, 0.8, "overwritten, old trace: goodput");
}

// Where sent work goes besides merged: M = 1, P = 1, window 0..4 s. Joined 0.5 s at step 0; sends at 1.5, 2.5 and
// 3.5 s, 10 steps each: the first is accepted, then its round dropped by the syncer ("dropped"); the second is
// merged; the third is rejected as stale. "stop" at step 35: N = 35, computed 35 = merged 10 + dropped 10 + refused
// 10 + unsent 5. Busy (0.5, 1.5] + (1.5, 2.5] + (2.5, 3.5] = 3.0 s; good = 3.0 x 10/35 = 6/7, lost 15/7; goodput
// 6/7 / 4 = 3/14.
BOOST_AUTO_TEST_CASE(dropped_and_refused_work) {
  const std::string L = R"("src":"learner","learner":0,"incarnation":0,)", S = R"("src":"syncer",)";
  const report r = analyze(
      load({
          at(0, R"("src":"runner","ev":"begin","learners":1,"mode":"decoupled","seed":5)"),
          at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":10)"),
          at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":0,"pid":20)"),
          at(4000, R"("src":"runner","ev":"stopping")"),
          at(500, L + R"("ev":"joined","revisions":[0],"steps":0,"wait_us":0)"),
          at(1500, L + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":10,"steps":10,"wait_us":0)"),
          at(1800, L + R"("ev":"adopted","fragment":0,"revision":0,"overwritten":0,"steps":13,"wait_us":0)"),
          at(2500, L + R"("ev":"sent","fragment":0,"sequence":2,"base":0,"work":10,"steps":20,"wait_us":0)"),
          at(3500, L + R"("ev":"sent","fragment":0,"sequence":3,"base":0,"work":10,"steps":30,"wait_us":0)"),
          at(4000, L + R"("ev":"stop","steps":35,"wait_us":0)"),
          at(1600, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
          at(1700, S + R"("ev":"dropped","fragment":0,"revision":0,"reason":"update_too_large",)"
                       R"("contributions":[[0,0,1]])"),
          at(2600, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":2,"fragment":0,"base":0)"),
          at(2700, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[0,0,2]],"staleness":[0])"),
          at(3550, S + R"("ev":"rejected","learner":0,"incarnation":0,"sequence":3,"fragment":0,"reason":"stale")"),
      }),
      {});
  near(r.busy_s, 3.0, "dropped: busy");
  near(r.good_s, 6.0 / 7, "dropped: good"), near(r.lost_s, 15.0 / 7, "dropped: lost");
  near(r.goodput, 3.0 / 14, "dropped: goodput");
  check_work(r.work, {.computed = 35, .merged = 10, .refused = 10, .dropped = 10, .unsent = 5}, "dropped: work");
}

// A learner unit of R = 2 ranks (docs/units.md): M = 1, P = 2, window 0..10 s; rank 0 speaks for fragment 0, rank 1
// for fragment 1, and each traces its own events with "rank" and "ranks", numbering its messages apart (rank 0: 1, 3,
// 5, ...; rank 1: 2, 4, 6, ...). Both ranks join at 1.0 s at step 0 and take 10 steps a second together:
//   rank 0 sends fragment 0 @3.0 (sequence 3, work 20) and @7.0 (sequence 5, work 40);
//   rank 1 sends fragment 1 @5.0 (sequence 4, work 40) and @9.0 (sequence 6, work 40);
// each accepted 0.1 s and merged 0.2 s later. A rank of the unit is killed at 9.5 s (the unit goes down); it is
// spawned again at 9.6 s and both ranks of incarnation 2 join at 9.8 s at step 80 (a checkpoint), each listing the
// other rank's fragment as it last heard of it, at revision 0: no violation, since a rank speaks only for its own.
// Time is rank 0's: windows (1, 3] and (3, 7] -> busy 6.0 s (every rank's sends as windows would give 8.0).
// Incarnation 1: N = 80 (its largest steps), computed 2 x 80 = 160, merged 20+40+40+40 = 140 (both ranks' work),
// unsent 20; good = 6.0 x 140/160 = 5.25. Incarnation 2: steps 80 -> 85 at its "stop", computed 10, unsent 10, no
// busy time. Goodput 5.25 / 10 = 0.525.
BOOST_AUTO_TEST_CASE(a_unit_of_two_ranks) {
  const std::string S = R"("src":"syncer",)";
  const auto rank = [](int inc, int r) {
    return R"("src":"learner","learner":0,"incarnation":)" + std::to_string(inc) + R"(,"rank":)" + std::to_string(r) +
           R"(,"ranks":2,)";
  };
  const report r = analyze(
      load({
          at(0, R"("src":"runner","ev":"begin","learners":1,"mode":"decoupled","seed":7)"),
          at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":10)"),
          at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":1,"pid":20)"),
          at(1000, rank(1, 0) + R"("ev":"joined","revisions":[0,0],"steps":0,"wait_us":0)"),
          at(1000, rank(1, 1) + R"("ev":"joined","revisions":[0,0],"steps":0,"wait_us":0)"),
          at(3000, rank(1, 0) + R"("ev":"sent","fragment":0,"sequence":3,"base":0,"work":20,"steps":20,"wait_us":0)"),
          at(3100, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":3,"fragment":0,"base":0)"),
          at(3150, rank(1, 0) + R"("ev":"verdict","fragment":0,"sequence":3,"accepted":true)"),
          at(3200, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[0,1,3]],"staleness":[0])"),
          at(3500, rank(1, 0) + R"("ev":"adopted","fragment":0,"revision":1,"overwritten":0,"steps":25,"wait_us":0)"),
          at(5000, rank(1, 1) + R"("ev":"sent","fragment":1,"sequence":4,"base":0,"work":40,"steps":40,"wait_us":0)"),
          at(5100, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":4,"fragment":1,"base":0)"),
          at(5150, rank(1, 1) + R"("ev":"verdict","fragment":1,"sequence":4,"accepted":true)"),
          at(5200, S + R"("ev":"merged","fragment":1,"revision":1,"contributions":[[0,1,4]],"staleness":[0])"),
          at(5500, rank(1, 1) + R"("ev":"adopted","fragment":1,"revision":1,"overwritten":0,"steps":45,"wait_us":0)"),
          at(7000, rank(1, 0) + R"("ev":"sent","fragment":0,"sequence":5,"base":1,"work":40,"steps":60,"wait_us":0)"),
          at(7100, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":5,"fragment":0,"base":1)"),
          at(7200, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[[0,1,5]],"staleness":[0])"),
          at(7500, rank(1, 0) + R"("ev":"adopted","fragment":0,"revision":2,"overwritten":0,"steps":65,"wait_us":0)"),
          at(9000, rank(1, 1) + R"("ev":"sent","fragment":1,"sequence":6,"base":1,"work":40,"steps":80,"wait_us":0)"),
          at(9100, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":6,"fragment":1,"base":1)"),
          at(9200, S + R"("ev":"merged","fragment":1,"revision":2,"contributions":[[0,1,6]],"staleness":[0])"),
          at(9500, R"("src":"runner","ev":"kill","target":"learner","learner":0,"pid":20,"rank_pid":22)"),
          at(9600, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":2,"pid":30)"),
          at(9800, rank(2, 0) + R"("ev":"joined","revisions":[2,0],"steps":80,"wait_us":0)"),
          at(9800, rank(2, 1) + R"("ev":"joined","revisions":[0,2],"steps":80,"wait_us":0)"),
          at(10000, R"("src":"runner","ev":"stopping")"),
          at(10000, rank(2, 0) + R"("ev":"stop","steps":85,"wait_us":0)"),
          at(10000, rank(2, 1) + R"("ev":"stop","steps":85,"wait_us":0)"),
      }),
      {.downtime_bound_s = 2.0});
  check(r.counts.sent == 4 && r.counts.accepted == 4 && r.counts.merged == 4 && r.counts.unaccounted == 0,
        "unit: every rank's contribution sent, accepted and merged, none unaccounted");
  check(r.violations.empty(), "unit: a rank's view of the other rank's fragments is no violation");
  check(r.ok, "unit: the run is ok");
  BOOST_TEST_REQUIRE(r.per_learner.size() == 1u);
  const learner_report& u = r.per_learner[0];
  check(u.incarnations == 2 && u.sent == 4 && u.merged == 4, "unit: one learner, 2 incarnations, 4 sent and merged");
  near(u.busy_s, 6.0, "unit: busy (rank 0's windows)");
  near(u.good_s, 5.25, "unit: good"), near(u.lost_s, 0.75, "unit: lost");
  near(r.goodput, 0.525, "unit: goodput");
  near(u.down_s, 0.1, "unit: down from the kill to the spawn");
  check_work(r.work, {.computed = 170, .merged = 140, .unsent = 30}, "unit: both ranks' work");
}

// M = 2, window 0..10, bound 10 s (no gap is downtime). Learner 1 finishes its steps and exits at 4.0 s
// ("finish"): from then its lane is finished, neither down nor allocated. By hand: learner 0 busy (0.2, 9.0] = 8.8 s,
// all of its 10 fragment-steps merged; learner 1 busy (0.2, 3.0] = 2.8 s, all 5 merged; good 11.6 s of
// 2 x 10 - 6 = 14 s allocated -> 11.6 / 14 (it would be 11.6 / 20 = 0.58 with the finished time allocated).
BOOST_AUTO_TEST_CASE(a_learner_that_finishes) {
  const std::string S = R"("src":"syncer",)";
  const auto learner = [](int l) {
    return R"("src":"learner","learner":)" + std::to_string(l) + R"(,"incarnation":1,)";
  };
  const auto spawn = [](int l, int pid) {
    return R"("src":"runner","ev":"spawn","target":"learner","learner":)" + std::to_string(l) +
           R"(,"incarnation":1,"pid":)" + std::to_string(pid);
  };
  const report r = analyze(
      load({
          at(0, R"("src":"runner","ev":"begin","learners":2,"mode":"decoupled","seed":7)"),
          at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":10)"),
          at(0, spawn(0, 20)),
          at(0, spawn(1, 21)),
          at(200, learner(0) + R"("ev":"joined","revisions":[0],"steps":0,"wait_us":0)"),
          at(200, learner(1) + R"("ev":"joined","revisions":[0],"steps":0,"wait_us":0)"),
          at(3000, learner(1) + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":5,"steps":5,"wait_us":0)"),
          at(3050, S + R"("ev":"accepted","learner":1,"incarnation":1,"sequence":1,"fragment":0,"base":0)"),
          at(3100, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[1,1,1]],"staleness":[0])"),
          at(3900, learner(1) + R"("ev":"stop","steps":5,"wait_us":0)"),
          at(4000, R"("src":"runner","ev":"finish","target":"learner","learner":1,"pid":21,"status":"exit 0")"),
          at(9000, learner(0) + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"work":10,"steps":10,"wait_us":0)"),
          at(9050, S + R"("ev":"accepted","learner":0,"incarnation":1,"sequence":1,"fragment":0,"base":0)"),
          at(9100, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[[0,1,1]],"staleness":[1])"),
          at(10000, R"("src":"runner","ev":"stopping")"),
          at(10000, learner(0) + R"("ev":"stop","steps":10,"wait_us":0)"),
      }),
      {.downtime_bound_s = 10.0});
  check(r.ok && r.counts.merged == 2 && r.counts.unaccounted == 0, "finished: ok, both contributions merged");
  near(r.allocated_s, 14.0, "finished: the finished time is not allocated");
  near(r.good_s, 11.6, "finished: good"), near(r.goodput, 11.6 / 14.0, "finished: goodput");
  BOOST_TEST_REQUIRE(r.per_learner.size() == 2u);
  const learner_report& done = r.per_learner[1];
  near(done.finished_s, 6.0, "finished: learner 1 finished from 4 s"), near(done.down_s, 0, "finished: not down");
  using enum lane_state;
  check(same_spans(done.spans, {{0, 0.2, restarting}, {0.2, 4.0, up}, {4.0, 10, finished}}), "finished: spans");
  const auto json = nlohmann::json::parse(to_json(r));
  check(json["per_learner"][1]["finished_s"].get<double>() == 6.0, "finished: per learner in the JSON");
}

// A standby run (one shard): the leader of epoch 5 is cut off at 2.0 s, its standby leads with epoch 7 at 4.0 s and
// publishes at 5.0 s. Meanwhile the cut-off leader still merges at 4.5 s (after epoch 7 began: one split-brain
// publication), and learner 0 adopts from it at 5.2 s after adopting epoch 7 at 5.1 s (one epoch regression); learner
// 1's adoption of epoch 5 at 4.6 s, before it heard of epoch 7, is none. Worked out by hand.
BOOST_AUTO_TEST_CASE(a_leader_cut_off) {
  const std::string S = R"("src":"syncer",)";
  const auto adopted = [](int l, int revision, int epoch) {
    return R"("src":"learner","learner":)" + std::to_string(l) +
           R"(,"incarnation":1,"ev":"adopted","fragment":0,"revision":)" + std::to_string(revision) + R"(,"epoch":)" +
           std::to_string(epoch) + R"(,"overwritten":0,"steps":10,"wait_us":0)";
  };
  const report r = analyze(
      load({
          at(0, R"("src":"runner","ev":"begin","learners":2,"mode":"decoupled","seed":7,"standby":true)"),
          at(100, S + R"("ev":"start","pid":10,"restored":false,"revisions":[],"epoch":5)"),
          at(1000, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[],"staleness":[],"epoch":5)"),
          at(1100, adopted(0, 1, 5)),
          at(2000, R"("src":"runner","ev":"cut","target":"syncer","slot":"a","pid":10)"),
          at(4000, S + R"("ev":"start","pid":11,"restored":true,"revisions":[1],"epoch":7)"),
          at(4500, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[],"staleness":[],"epoch":5)"),
          at(4600, adopted(1, 2, 5)),
          at(5000, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[],"staleness":[],"epoch":7)"),
          at(5100, adopted(0, 2, 7)),
          at(5200, adopted(0, 2, 5)),
          at(8000, R"("src":"runner","ev":"heal","target":"syncer","slot":"a")"),
          at(10000, R"("src":"runner","ev":"stopping")"),
      }),
      {});
  check(r.standby, "cut: a standby run");
  BOOST_TEST_REQUIRE(r.epochs.size() == 2u);
  check(r.epochs[0].epoch == 5 && r.epochs[1].epoch == 7, "cut: epochs 5 then 7");
  near(r.epochs[1].t_s, 4.0, "cut: epoch 7 began at 4 s");
  BOOST_TEST_REQUIRE(r.failovers.size() == 1u);
  const failover& f = r.failovers[0];
  check(f.fault == "cut" && f.shard == 0, "cut: one failover, of shard 0, after a cut");
  near(f.fault_s, 2.0, "cut: fault"), near(f.led_s, 4.0, "cut: led"), near(f.published_s, 5.0, "cut: published");
  check(r.split_brain == 1, "cut: the cut-off leader's merge after epoch 7 began is a split-brain publication");
  check(r.epoch_regressions == 1, "cut: learner 0 adopting epoch 5 after epoch 7 is a regression, learner 1's not");
  const auto json = nlohmann::json::parse(to_json(r));
  check(json["syncers"]["failovers"][0]["fault"] == "cut", "cut: the JSON names the fault");
  near(json["syncers"]["failovers"][0]["published_after_s"].get<double>(), 3.0, "cut: published 3 s after the cut");
}

// Fragment 0's revision 1 reaches learners 0 and 1 with the same payload (CRC 77), its revision 2 with two (77 and
// 91): one revision published twice with different contents, a failure. Rank 1 of a unit, adopting fragment 0 that
// it does not speak for, with yet another CRC, is left out. Learner 0's contribution 4 is in both merges.
BOOST_AUTO_TEST_CASE(a_revision_with_two_contents) {
  const auto adopted = [](int l, int revision, int crc, const std::string& rank = "") {
    return R"("src":"learner","learner":)" + std::to_string(l) + R"(,"incarnation":1,)" + rank +
           R"("ev":"adopted","fragment":0,"revision":)" + std::to_string(revision) + R"(,"crc":)" +
           std::to_string(crc) + R"(,"overwritten":0,"steps":10,"wait_us":0)";
  };
  const auto run = [&](int second_crc) {
    return analyze(
        load({
            at(0, R"("src":"runner","ev":"begin","learners":3,"mode":"decoupled","seed":7)"),
            at(100, R"("src":"syncer","ev":"merged","fragment":0,"revision":1,"contributions":[[0,1,4]])"),
            at(200, adopted(0, 1, 77)),
            at(300, adopted(1, 1, 77)),
            at(350, adopted(2, 1, 55, R"("rank":1,"ranks":2,)")),
            at(400, R"("src":"syncer","ev":"merged","fragment":0,"revision":2,"contributions":[[0,1,4],[1,1,2]])"),
            at(500, adopted(0, 2, 77)),
            at(600, adopted(1, 2, second_crc)),
            at(1000, R"("src":"runner","ev":"stopping")"),
        }),
        {});
  };
  const report twice = run(91), once = run(77);
  check(twice.revisions_with_two_contents == 1, "two contents: revision 2 of fragment 0");
  check(!twice.ok && contains(twice.failures.back(), "two different contents"), "two contents: a failure");
  check(once.revisions_with_two_contents == 0 && once.ok, "one content each: no failure");
  const auto json = nlohmann::json::parse(to_json(twice));
  check(json["revisions"]["with_two_contents"] == 1, "two contents: in the JSON");
  check(twice.counts.merged_again == 1 && json["accounting"]["merged_again"] == 1,
        "learner 0's contribution 4, in both merges: merged again, once");
}

// M = 1, bound 2 s, window 0..10. The learner is killed at 1.0 s, exactly at an advance, and respawned at 8.5 s,
// exactly at the next one: the 7.5 s gap has nobody alive, so it is listed with alive 0 and is not downtime.
// Goodput (a trace without `work`: the window rule): sent 1 (0.2, 0.9] = 0.7 and sent 2 (0.9, 0.99] = 0.09, both
// merged -> 0.79 / 10 = 0.079.
BOOST_AUTO_TEST_CASE(gap_without_learners) {
  const std::string L = R"("src":"learner","learner":0,"incarnation":0,)", S = R"("src":"syncer",)";
  const trace tr = load({
      at(0, R"("src":"runner","ev":"begin","learners":1,"mode":"decoupled","seed":1)"),
      at(0, R"("src":"runner","ev":"spawn","target":"syncer","pid":10)"),
      at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":0,"pid":20)"),
      at(1000, R"("src":"runner","ev":"kill","target":"learner","learner":0,"pid":20)"),
      at(8500, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":1,"pid":21)"),
      at(10000, R"("src":"runner","ev":"stopping")"),
      at(200, L + R"("ev":"joined","revisions":[0],"steps":0,"wait_us":0)"),
      at(900, L + R"("ev":"sent","fragment":0,"sequence":1,"base":0,"steps":5,"wait_us":0)"),
      at(990, L + R"("ev":"sent","fragment":0,"sequence":2,"base":0,"steps":6,"wait_us":0)"),
      at(8600, R"("src":"learner","learner":0,"incarnation":1,"ev":"joined","revisions":[2],"steps":0,"wait_us":0)"),
      at(50, S + R"("ev":"start","pid":10,"restored":false,"revisions":[])"),
      at(950, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
      at(995, S + R"("ev":"accepted","learner":0,"incarnation":0,"sequence":2,"fragment":0,"base":0)"),
      at(1000, S + R"("ev":"merged","fragment":0,"revision":1,"contributions":[[0,0,1]],"staleness":[0])"),
      at(8500, S + R"("ev":"merged","fragment":0,"revision":2,"contributions":[[0,0,2]],"staleness":[1])"),
  });
  const report r = analyze(tr, {.downtime_bound_s = 2.0});
  check(r.gaps.size() == 1, "idle gap: listed");
  if (r.gaps.size() == 1)
    near(r.gaps[0].begin_s, 1.0, "idle gap: begin"), near(r.gaps[0].end_s, 8.5, "idle gap: end"),
        near(r.gaps[0].alive_s, 0, "idle gap: alive");
  near(r.global_downtime_s, 0, "idle gap: no downtime");
  near(r.longest_gap_s, 7.5, "idle gap: longest"), near(r.median_gap_s, 7.5, "idle gap: median");
  near(r.goodput, 0.079, "idle gap: goodput");
  check(r.counts.accepted == 2 && r.counts.merged == 2 && r.counts.unanswered == 0 && r.counts.unaccounted == 0,
        "idle gap: accounting");
  check(r.ok && r.failures.empty() && r.warnings.empty(), "idle gap: ok, no failures, no warnings");
  if (!r.per_learner.empty()) {
    using enum lane_state;
    check(same_spans(r.per_learner[0].spans,
                     {{0, 0.2, restarting}, {0.2, 1.0, up}, {1.0, 8.5, down}, {8.5, 8.6, restarting}, {8.6, 10, up}}),
          "idle gap: learner spans");
  }
  // The same trace with the default 5 s bound: the gap is still over it; with a 10 s bound nothing is listed.
  check(analyze(tr, {}).gaps.size() == 1 && analyze(tr, {.downtime_bound_s = 10}).gaps.empty(),
        "idle gap: bound is honoured");
}

// No merge at all while a learner lives, an accepted contribution that is never merged without any syncer kill,
// and neither "begin" nor "stopping": window = first to last event (0..5 s), M = learner ids seen = 1.
BOOST_AUTO_TEST_CASE(no_progress) {
  const trace tr = load({
      at(0, R"("src":"runner","ev":"spawn","target":"learner","learner":0,"incarnation":0,"pid":20)"),
      at(100, R"("src":"learner","learner":0,"incarnation":0,"ev":"joined","revisions":[0],"steps":0,"wait_us":0)"),
      at(1000, R"("src":"learner","learner":0,"incarnation":0,"ev":"sent","fragment":0,"sequence":1,"base":0,)"
               R"("steps":5,"wait_us":0)"),
      at(1100, R"("src":"syncer","ev":"accepted","learner":0,"incarnation":0,"sequence":1,"fragment":0,"base":0)"),
      at(5000, R"("src":"learner","learner":0,"incarnation":0,"ev":"stop","steps":5,"wait_us":0)"),
  });
  const report r = analyze(tr, {});
  near(r.window_s, 5, "no progress: window from first to last event");
  check(r.learners == 1, "no progress: M from learner ids");
  check(r.advances == 0 && r.gaps.empty(), "no progress: no advances");
  check(r.counts.unaccounted == 1 && r.counts.unaccounted_keys.size() == 1 &&
            contains(r.counts.unaccounted_keys[0], "never merged"),
        "no progress: accepted, never merged -> unaccounted");
  check(!r.ok && r.failures.size() == 2, "no progress: 2 failures (no advance, unaccounted)");
  check(r.warnings.size() == 2, "no progress: warnings for the missing begin and stopping");
  near(r.goodput, 0, "no progress: goodput 0");

  const report empty = analyze(trace{}, {});
  check(!empty.ok && empty.failures.size() == 1, "empty trace: one failure");
  const std::string empty_json = to_json(empty);
  check(nlohmann::json::accept(empty_json), "empty trace: to_json is well-formed");
  check(nlohmann::json::parse(empty_json)["timeline"]["duration_s"].get<double>() > 0,
        "empty trace: timeline duration stays positive");
}

BOOST_AUTO_TEST_SUITE_END()
