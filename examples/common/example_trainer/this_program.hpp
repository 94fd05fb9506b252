// `--role all` of an example trainer: 1 syncer and M learner processes of
// this same program on this machine, connected over ZeroMQ TCP on a free
// loopback port, run by diloco_launch's supervisor (supervisor.hpp): a
// learner that dies is restarted with its next incarnation, SIGINT and
// SIGTERM reach every process, and every line they write comes prefixed with
// "[syncer] " or "[learner N] " — except the syncer's result, which is
// printed last, unprefixed, with the inner steps the learners counted.
//
// The program must take `--role syncer|learner`, `--endpoint`,
// `--learner-id`, `--incarnation` and `--progress`, print its result as one
// JSON line on stdout, and, as a learner, a JSON line with "inner_steps".
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <diloco_tools/launch/supervisor.hpp>
#include <diloco_tools/loopback.hpp>
#include <nlohmann/json.hpp>

namespace example_trainer {

/// Runs this program (`argv`, minus the options each process gets its own
/// value of) as 1 syncer and `learners` learners on `endpoint` (empty: a
/// free loopback port); messages name `program`. Returns the worst exit
/// status.
inline int run_this_program(int argc, char** argv, const std::string& program, std::uint32_t learners,
                            const std::string& endpoint) {
  using namespace diloco_tools::launch;
  using diloco_tools::free_loopback_port;
  launch_plan plan;
  plan.endpoint = endpoint.empty() ? "tcp://127.0.0.1:" + std::to_string(free_loopback_port()) : endpoint;
  plan.learners = learners;
  // The syncer ends by itself once every learner has left, or 30 s after the
  // last one went silent (a lost leave: 10 s of heartbeat timeout first).
  plan.syncer_grace = std::chrono::seconds(60);
  // Every option but the ones each process gets its own value of, in both
  // spellings ("--role all" and "--role=all"), braces escaped from the
  // placeholders.
  std::vector<std::string> common{std::filesystem::read_symlink("/proc/self/exe").string()};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    bool own = false;
    for (const std::string_view flag : {"--role", "--endpoint", "--learner-id", "--incarnation"}) {
      if (a == flag) {
        own = true;
        ++i;
      } else if (a.starts_with(flag) && a.substr(flag.size()).starts_with("=")) {
        own = true;
      }
    }
    if (!own) common.push_back(escape_braces(a));
  }
  plan.syncer = common;
  plan.syncer.insert(plan.syncer.end(), {"--role", "syncer", "--endpoint", "{endpoint}"});
  plan.learner = common;
  plan.learner.insert(plan.learner.end(), {"--role", "learner", "--endpoint", "{endpoint}", "--learner-id", "{id}",
                                           "--incarnation", "{incarnation}", "--progress", "0"});
  std::fprintf(stderr, "%s: starting 1 syncer and %u learner processes on %s\n", program.c_str(), learners,
               plan.endpoint.c_str());

  // The syncer's stdout is its result line, kept for the end; each learner's
  // last stdout line is its own result (inner steps), also shown.
  std::string result;
  std::map<std::uint32_t, std::string> learner_results;
  auto sinks = prefixed_sinks(program);
  sinks.line = [print = sinks.line, &result, &learner_results](const process_name& p, stream s, std::string_view line) {
    if (s == stream::out && p.syncer) {
      if (!line.empty()) result = line;
      return;
    }
    if (s == stream::out && !line.empty()) learner_results[p.id] = line;
    print(p, s, line);
  };
  const auto report = run(plan, sinks);
  const int status = worst_status(report);

  std::uint64_t inner_steps = 0;
  for (const auto& l : report.learners) {
    const auto line = nlohmann::json::parse(learner_results[l.id], nullptr, /*allow_exceptions=*/false);
    if (line.is_object() && line.contains("inner_steps") && line["inner_steps"].is_number_unsigned())
      inner_steps += line["inner_steps"].get<std::uint64_t>();
    else if (l.status && l.status->shell_code() == 0)
      std::fprintf(stderr, "%s: learner %u printed no result line\n", program.c_str(), l.id);
  }
  std::string restarts;
  for (const auto& l : report.learners)
    if (l.restarts > 0) restarts += " learner " + std::to_string(l.id) + " x" + std::to_string(l.restarts);
  std::fprintf(stderr, "%s: every process ended, worst exit status %d; restarts:%s\n", program.c_str(), status,
               restarts.empty() ? " none" : restarts.c_str());
  // The syncer's result line, with the inner steps the learners counted.
  auto line = nlohmann::ordered_json::parse(result, nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) {
    std::fprintf(stderr, "%s: the syncer printed no result line\n", program.c_str());
    return status != 0 ? status : 1;
  }
  line["inner_steps"] = inner_steps;
  std::printf("%s\n", line.dump().c_str());
  return status;
}

}  // namespace example_trainer
