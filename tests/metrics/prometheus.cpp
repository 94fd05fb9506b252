// The syncer's counters in the Prometheus text format: the exact lines of a
// known set of counters, and every sample line in the `name{labels} value`
// form a scraper parses, each after the `# TYPE` of its family.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstddef>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/metrics/prometheus.hpp>

namespace metrics_prometheus_test {

using namespace diloco;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line(const std::vector<std::string>& lines, const std::string& line) {
  for (const auto& l : lines)
    if (l == line) return true;
  return false;
}

syncer_metrics known_counters() {
  syncer_metrics m;
  m.outer_updates = 12;
  m.contributions_accepted = 30;
  m.contributions_merged = 27;
  m.contributions_pending = 3;
  m.staleness_max = 4;
  m.tokens_merged = 123456789012ull;
  m.losses_ignored = 2;
  m.contributions_replayed = 4;
  m.payload_bytes_received = 1040;
  m.rejected[static_cast<std::size_t>(reject_reason::bad_magic)] = 4;
  m.rejected[static_cast<std::size_t>(reject_reason::quarantined)] = 1;
  return m;
}

BOOST_AUTO_TEST_SUITE(metrics_prometheus)

BOOST_AUTO_TEST_CASE(known_counters_give_the_expected_lines) {
  syncer_gauges g;
  g.live_learners = 3;
  g.known_learners = 5;
  g.training_loss = 0.25;
  g.revisions = {7, 9};
  g.steps_computed = 4000;
  g.compute_efficiency = 0.96875;
  const auto lines = lines_of(prometheus_text(known_counters(), g));
  for (const std::string expected : {
           "# HELP diloco_syncer_outer_updates_total Outer updates applied (revisions created), all fragments "
           "together.",
           "# TYPE diloco_syncer_outer_updates_total counter",
           "diloco_syncer_outer_updates_total 12",
           "diloco_syncer_contributions_accepted_total 30",
           "diloco_syncer_contributions_merged_total 27",
           "# TYPE diloco_syncer_contributions_pending gauge",
           "diloco_syncer_contributions_pending 3",
           "# TYPE diloco_syncer_staleness_max gauge",
           "diloco_syncer_staleness_max 4",
           "diloco_syncer_tokens_merged_total 123456789012",
           "diloco_syncer_rounds_dropped_total 0",
           "diloco_syncer_contributions_replayed_total 4",
           "diloco_syncer_losses_ignored_total 2",
           "diloco_syncer_payload_bytes_received_total 1040",
           "diloco_syncer_payload_bytes_sent_total 0",
           "# TYPE diloco_syncer_rejected_total counter",
           "diloco_syncer_rejected_total{reason=\"bad_magic\"} 4",
           "diloco_syncer_rejected_total{reason=\"quarantined\"} 1",
           "diloco_syncer_rejected_total{reason=\"stale\"} 0",
           "# TYPE diloco_syncer_live_learners gauge",
           "diloco_syncer_live_learners 3",
           "diloco_syncer_known_learners 5",
           "# TYPE diloco_syncer_training_loss gauge",
           "diloco_syncer_training_loss 0.25",
           "# TYPE diloco_syncer_steps_computed gauge",
           "diloco_syncer_steps_computed 4000",
           "# TYPE diloco_syncer_compute_efficiency gauge",
           "diloco_syncer_compute_efficiency 0.96875",
           "diloco_syncer_revision{fragment=\"0\"} 7",
           "diloco_syncer_revision{fragment=\"1\"} 9",
       })
    BOOST_TEST(has_line(lines, expected), expected);
}

BOOST_AUTO_TEST_CASE(every_sample_line_parses_and_follows_its_type) {
  syncer_gauges g;
  g.revisions = {1, 2, 3};
  g.training_loss = 1.0 / 3.0;
  const auto lines = lines_of(prometheus_text(known_counters(), g));
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"\})? (NaN|[+-]Inf|-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$)");
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n\\]+$)");
  std::string family;
  std::set<std::string> families;
  std::size_t samples = 0;
  for (const auto& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, type)) {
      family = m[1];
      BOOST_TEST(families.insert(family).second, "family " << family << " declared twice");
      BOOST_TEST((m[2] == "counter") == family.ends_with("_total"), line);
    } else if (std::regex_match(line, m, help)) {
      continue;
    } else {
      BOOST_TEST_REQUIRE(std::regex_match(line, m, sample), "not a sample line: '" << line << "'");
      BOOST_TEST(m[1] == family, line << " after # TYPE " << family);
      ++samples;
    }
  }
  // Every counter, every refusal reason, three learner gauges, two of
  // computed work, a revision per fragment.
  BOOST_TEST(samples == syncer_counter_count + reject_reason_count + 3 + 2 + 3);
  BOOST_TEST(has_line(lines, "diloco_syncer_training_loss 0.3333333333333333"));  // reads back as 1/3
}

BOOST_AUTO_TEST_CASE(an_unknown_loss_is_nan_and_the_prefix_is_the_callers) {
  const auto lines = lines_of(prometheus_text(syncer_metrics{}, syncer_gauges{}, "trainer_"));
  BOOST_TEST(has_line(lines, "trainer_training_loss NaN"));
  BOOST_TEST(has_line(lines, "trainer_compute_efficiency NaN"));
  BOOST_TEST(has_line(lines, "trainer_outer_updates_total 0"));
  BOOST_TEST(!has_line(lines, "diloco_syncer_outer_updates_total 0"));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace metrics_prometheus_test
