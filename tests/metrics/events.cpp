// ctest-labels: unit
// What learners and the syncer report through their hooks, and the trace
// lines written from it: every contribution sent is accepted and merged
// exactly once in a clean lock-step run, in H-step windows, and the learners'
// waiting time covers at least a round trip per round.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/metrics/trace.hpp>

#include "support/toy_model.hpp"

namespace metrics_events_test {

using namespace std::chrono_literals;
using namespace diloco;
using T = double;
using model_type = toy::linear_regression<T>;
using key = std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>;  // learner, incarnation, sequence

BOOST_AUTO_TEST_SUITE(metrics_events)

BOOST_AUTO_TEST_CASE(a_clean_lock_step_run_accounts_for_every_contribution) {
  constexpr std::uint32_t learners_count = 2, H = 5;
  constexpr std::uint64_t steps = 40;
  constexpr auto latency = 80ms, step_time = 50ms;  // answers take longer than a step
  sim::network net(3, sim::link_options{.latency = latency, .bytes_per_second = 1e8});
  model_type initial(4, 9);
  auto options = presets::diloco(learners_count, H);
  options.log = [](const std::string&) {};
  std::vector<key> accepted, merged;
  options.on_contribution = [&](const contribution_event& e) {
    BOOST_TEST(e.accepted);
    accepted.emplace_back(e.learner, e.incarnation, e.sequence);
  };
  options.on_update = [&](const update_event& e) {
    BOOST_TEST(e.contributions.size() == e.contributors);
    for (const auto& c : e.contributions) {
      merged.emplace_back(c.learner, c.incarnation, c.sequence);
      BOOST_TEST(c.staleness == 0u);  // lock-step: every base is the current revision
    }
  };
  syncer<outer::nesterov<T>, merge::token_weighted, sim::endpoint> s(initial.layout(), initial.parameters(),
                                                                     net.attach(syncer_peer), options);
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<learner<model_type, inner::sgd<T>, sim::endpoint>>> learners;
  std::vector<toy::teacher<T>> teachers;
  std::map<std::uint32_t, std::vector<learner_event>> events;
  for (std::uint32_t i = 0; i < learners_count; ++i) {
    models.push_back(std::make_unique<model_type>(4, 9));
    learner_options lo{.id = i};
    lo.on_event = [&events, i](const learner_event& e) { events[i].push_back(e); };
    learners.push_back(std::make_unique<learner<model_type, inner::sgd<T>, sim::endpoint>>(
        *models.back(), net.attach(i), lo, inner::sgd<T>({.learning_rate = 0.05})));
    teachers.emplace_back(4, 70 + i);
  }
  const std::vector<sim::learner_plan> plans(learners_count, sim::learner_plan{1.0, steps, {}});
  const auto report = sim::run(
      net, s, learners, plans, [&](std::size_t i) { return teachers[i].next(8); },
      [](std::size_t, const step_stats&, time_point) {}, sim::run_options{.step_time = step_time});
  BOOST_TEST_REQUIRE(report.completed);

  std::set<key> sent;
  for (std::uint32_t i = 0; i < learners_count; ++i) {
    const auto& ev = events[i];
    BOOST_TEST_REQUIRE(!ev.empty());
    // Joined first (after adopting the initial state), with revision 0.
    std::size_t joined = 0, first_sent = ev.size();
    std::uint64_t n_sent = 0;
    for (std::size_t k = 0; k < ev.size(); ++k) {
      if (ev[k].what == learner_event::kind::joined) {
        ++joined;
        BOOST_TEST(k < first_sent);
        BOOST_TEST(ev[k].revisions == std::vector<std::uint64_t>{0});
        BOOST_TEST(ev[k].steps == 0u);
      }
      if (ev[k].what == learner_event::kind::sent) {
        if (first_sent == ev.size()) first_sent = k;
        ++n_sent;
        // One fragment, H = 5: the n-th send follows the (5n)-th step; the
        // final one (at `finish`) may cover fewer.
        if (ev[k].steps % H == 0) BOOST_TEST(ev[k].steps == n_sent * H);
        sent.emplace(i, 1u, ev[k].sequence);
      }
    }
    BOOST_TEST(joined == 1u);
    BOOST_TEST(n_sent == learners[i]->metrics().contributions_sent);
    BOOST_TEST(n_sent == steps / H);
    // Waiting: a send leaves as its step starts and the answer is back no
    // earlier than two latencies later, one step time of which was computing;
    // every send but the last (at the final step) is waited for.
    const auto rounds = static_cast<std::int64_t>(steps / H - 1);
    BOOST_TEST(learners[i]->metrics().wait_ns >= static_cast<std::uint64_t>(rounds * (2 * latency - step_time) / 1ns));
    std::uint64_t waits = 0;
    for (const auto& e : ev)
      if (e.what == learner_event::kind::waited) waits += static_cast<std::uint64_t>(e.wait.count());
    BOOST_TEST(waits <= learners[i]->metrics().wait_ns);
  }
  BOOST_TEST(std::set<key>(accepted.begin(), accepted.end()) == sent);
  BOOST_TEST(accepted.size() == sent.size());
  BOOST_TEST(std::set<key>(merged.begin(), merged.end()) == sent);
  BOOST_TEST(merged.size() == sent.size());
  // Every learner given a revision got the same bytes: one CRC per (fragment, revision) over both learners, each
  // revision's its own (the values moved), none 0.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::set<std::uint32_t>> crcs;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t> adopters;
  for (const auto& [i, ev] : events)
    for (const auto& e : ev)
      if (e.what == learner_event::kind::adopted)
        crcs[{e.fragment, e.revision}].insert(e.payload_crc), ++adopters[{e.fragment, e.revision}];
  BOOST_TEST(crcs.size() >= steps / H);
  std::set<std::uint32_t> distinct;
  for (const auto& [revision, seen] : crcs) {
    BOOST_TEST(seen.size() == 1u);
    BOOST_TEST(adopters[revision] == learners_count);
    BOOST_TEST(*seen.begin() != 0u);
    distinct.insert(*seen.begin());
  }
  BOOST_TEST(distinct.size() == crcs.size());
}

BOOST_AUTO_TEST_CASE(trace_lines_are_whole_and_appended) {
  const auto path = std::filesystem::temp_directory_path() / ("diloco_trace_" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  {
    trace_writer a(path), b(path);  // two writers, as two processes would be
    a.learner(3, 2,
              learner_event{.what = learner_event::kind::sent,
                            .fragment = 1,
                            .sequence = 17,
                            .revision = 4,
                            .work = 25,
                            .steps = 50,
                            .waited_total = 1500us});
    b.contribution(contribution_event{3, 2, 17, 1, 4, false, reject_reason::stale});
    const std::vector<merged_contribution> m{{3, 2, 17, 0}, {1, 1, 9, 2}};
    a.merged(1, 5, m);
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::filesystem::remove(path);
  BOOST_TEST_REQUIRE(lines.size() == 3u);
  for (const auto& l : lines) {
    BOOST_TEST(l.rfind("{\"t\":", 0) == 0u);
    BOOST_TEST(l.back() == '}');
  }
  const auto tail = [](const std::string& l) { return l.substr(l.find(",\"src\"")); };
  BOOST_TEST(tail(lines[0]) ==
             ",\"src\":\"learner\",\"ev\":\"sent\",\"learner\":3,\"incarnation\":2,\"fragment\":1,"
             "\"sequence\":17,\"base\":4,\"work\":25,\"steps\":50,\"wait_us\":1500}");
  BOOST_TEST(tail(lines[1]) ==
             ",\"src\":\"syncer\",\"ev\":\"rejected\",\"learner\":3,\"incarnation\":2,\"sequence\":17,"
             "\"fragment\":1,\"base\":4,\"reason\":\"stale\"}");
  BOOST_TEST(tail(lines[2]) ==
             ",\"src\":\"syncer\",\"ev\":\"merged\",\"fragment\":1,\"revision\":5,"
             "\"contributions\":[[3,2,17],[1,1,9]],\"staleness\":[0,2]}");
  BOOST_TEST_MESSAGE("wall clock stamps are microseconds since the epoch: " << lines[0].substr(0, 22));
  const auto stamp = std::stoll(lines[0].substr(5));
  BOOST_TEST(stamp > 1'600'000'000'000'000LL);  // after 2020
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace metrics_events_test
