// diloco_launch: starts a syncer and M learner processes of the user's program
// on this machine, restarts learners that die, and exits with the worst status
// (docs/launch.md).
//
//   diloco_launch --learners 4 --syncer "diloco_syncer --endpoint {endpoint} --H 50" -- ./train --id {id}

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "command_line.hpp"

namespace {

namespace launch = diloco_tools::launch;

/// The --summary line: each learner's last incarnation, restarts and how its
/// last process ended; the syncer's end; the exit status.
nlohmann::ordered_json summary(const launch::launch_report& r, int exit_status) {
  auto status = [](const std::optional<diloco_tools::exit_status>& s) {
    return s ? nlohmann::ordered_json(s->to_string()) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json learners = nlohmann::ordered_json::array();
  for (const auto& l : r.learners)
    learners.push_back(
        {{"id", l.id}, {"incarnation", l.incarnation}, {"restarts", l.restarts}, {"status", status(l.status)}});
  return {{"exit_status", exit_status},
          {"syncer", r.has_syncer ? status(r.syncer) : nlohmann::ordered_json("none")},
          {"learners", std::move(learners)},
          {"interrupted_by", r.interrupted_by}};
}

}  // namespace

int main(int argc, char** argv) {
  diloco_launch::command c;
  if (const auto status = diloco_launch::parse_command_line(argc, argv, c)) return *status;
  try {
    const auto report = launch::run(c.plan, launch::prefixed_sinks("diloco_launch"));
    const int status = launch::worst_status(report);
    std::string restarts;
    for (const auto& l : report.learners)
      if (l.restarts > 0)
        restarts += (restarts.empty() ? "" : ", ") + std::string("learner ") + std::to_string(l.id) + " " +
                    std::to_string(l.restarts) + "x";
    std::fprintf(stderr, "diloco_launch: done, exit status %d (restarts: %s)\n", status,
                 restarts.empty() ? "none" : restarts.c_str());
    if (c.summary) std::printf("%s\n", summary(report, status).dump().c_str());
    return status;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "diloco_launch: error: %s\n", e.what());
    return diloco_tools::bad_usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_launch: error: %s\n", e.what());
    return 1;
  }
}
