// `fashion_mnist --role all`: 1 syncer and M learner processes of this same
// program on this machine, connected over ZeroMQ TCP on a free loopback port,
// run by diloco_launch's supervisor (tools/support/diloco_tools/launch): a
// learner that dies is restarted with its next incarnation, SIGINT and SIGTERM
// reach every process, and every line they write comes prefixed with
// "[syncer] " or "[learner N] " — except the syncer's result, which is printed
// last, unprefixed, with the inner steps the learners counted.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <diloco_tools/launch/supervisor.hpp>
#include <diloco_tools/loopback.hpp>

#include "trainer.hpp"

namespace fashion {

inline int launch_all(int argc, char** argv, const settings& s) {
  namespace launch = diloco_tools::launch;
  launch::launch_plan plan;
  plan.endpoint =
      s.endpoint.empty() ? "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port()) : s.endpoint;
  plan.learners = s.learners;
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
    if (!own) common.push_back(launch::escape_braces(a));
  }
  plan.syncer = common;
  plan.syncer.insert(plan.syncer.end(), {"--role", "syncer", "--endpoint", "{endpoint}"});
  plan.learner = common;
  plan.learner.insert(plan.learner.end(), {"--role", "learner", "--endpoint", "{endpoint}", "--learner-id", "{id}",
                                           "--incarnation", "{incarnation}", "--progress", "0"});
  std::fprintf(stderr, "fashion_mnist: starting 1 syncer and %u learner processes on %s\n", s.learners,
               plan.endpoint.c_str());

  // The syncer's stdout is its result line, kept for the end; each learner's
  // last stdout line is its own result (inner steps), also shown.
  std::string result;
  std::map<std::uint32_t, std::string> learner_results;
  auto sinks = launch::prefixed_sinks("fashion_mnist");
  sinks.line = [print = sinks.line, &result, &learner_results](const launch::process_name& p, launch::stream stream,
                                                               std::string_view line) {
    if (stream == launch::stream::out && p.syncer) {
      if (!line.empty()) result = line;
      return;
    }
    if (stream == launch::stream::out && !line.empty()) learner_results[p.id] = line;
    print(p, stream, line);
  };
  const auto report = launch::run(plan, sinks);
  const int status = launch::worst_status(report);

  std::uint64_t inner_steps = 0;
  for (const auto& l : report.learners) {
    const auto line = nlohmann::json::parse(learner_results[l.id], nullptr, /*allow_exceptions=*/false);
    if (line.is_object() && line.contains("inner_steps") && line["inner_steps"].is_number_unsigned())
      inner_steps += line["inner_steps"].get<std::uint64_t>();
    else if (l.status && l.status->shell_code() == 0)
      std::fprintf(stderr, "fashion_mnist: learner %u printed no result line\n", l.id);
  }
  std::string restarts;
  for (const auto& l : report.learners)
    if (l.restarts > 0) restarts += " learner " + std::to_string(l.id) + " x" + std::to_string(l.restarts);
  std::fprintf(stderr, "fashion_mnist: every process ended, worst exit status %d; restarts:%s\n", status,
               restarts.empty() ? " none" : restarts.c_str());
  // The syncer's result line, with the inner steps the learners counted.
  auto line = nlohmann::ordered_json::parse(result, nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) {
    std::fprintf(stderr, "fashion_mnist: the syncer printed no result line\n");
    return status != 0 ? status : 1;
  }
  line["inner_steps"] = inner_steps;
  std::printf("%s\n", line.dump().c_str());
  return status;
}

}  // namespace fashion
