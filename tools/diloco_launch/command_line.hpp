// diloco_launch's command line, read with CLI11 into a `launch_plan`:
//   diloco_launch [OPTIONS] -- LEARNER COMMAND ...
// Everything after the first "--" is the learner command, word for word;
// the options before it are checked (numbers against their ranges, flags
// against each other) and a bad one is refused naming the flag and value.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <diloco_tools/cli.hpp>
#include <diloco_tools/launch/command.hpp>
#include <diloco_tools/launch/supervisor.hpp>
#include <diloco_tools/loopback.hpp>

namespace diloco_launch {

/// What diloco_launch was asked to do.
struct command {
  diloco_tools::launch::launch_plan plan;
  bool summary = false;  ///< --summary: a JSON line on stdout at the end
};

/// The diloco_syncer installed beside this program, else the one in PATH.
inline std::string default_syncer_program() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "diloco_syncer";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "diloco_syncer";
}

/// Reads the command line into `c`. Returns nothing to go on, or the exit
/// status to end with: 0 after `--help`, 2 for a bad command line (the
/// reason on stderr, naming the flag and the value).
inline std::optional<int> parse_command_line(int argc, const char* const* argv, command& c) {
  using diloco_tools::interval;
  namespace launch = diloco_tools::launch;
  CLI::App app(
      "Starts a syncer and M learner processes on this machine, hands each its endpoint, learner id and incarnation "
      "(placeholders {endpoint} {port} {learners} {id} {incarnation} in the commands; environment variables "
      "DILOCO_ENDPOINT DILOCO_LEARNERS DILOCO_LEARNER_ID DILOCO_INCARNATION), restarts a learner that dies, "
      "passes SIGINT and SIGTERM on, prefixes every output line with [syncer] or [learner N], and exits with the "
      "worst status (docs/launch.md).\n\n  diloco_launch [OPTIONS] -- LEARNER COMMAND ...",
      "diloco_launch");
  app.get_formatter()->column_width(30);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  // Everything after the first "--" is the learner command; CLI11 reads the rest.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--") {
      split = i;
      break;
    }
  auto& p = c.plan;
  std::string ids_text, syncer_text, endpoint;
  bool no_syncer = false;
  double restart_delay = 1.0, learner_grace = 30.0, syncer_grace = 90.0, kill_after = 10.0;
  auto* learners = diloco_tools::add_number<std::uint32_t>(app, "--learners", p.learners, {1, 65536},
                                                           "M: the number of learners, ids 0 .. M-1", "M");
  learners->required();
  app.add_option("--learner-ids", ids_text,
                 "the learners started here, e.g. 4-7 or 0,2,5 (all M); for learners spread over machines")
      ->type_name("LIST");
  app.add_option("--endpoint", endpoint,
                 "where the learners reach the syncer, {endpoint} (tcp://127.0.0.1 on a free port)")
      ->type_name("URL");
  app.add_option("--syncer", syncer_text,
                 "the syncer's command, one string split as sh does (diloco_syncer beside diloco_launch with "
                 "--endpoint {endpoint})")
      ->type_name("COMMAND");
  app.add_flag("--no-syncer", no_syncer, "start no syncer: learners only, of a syncer elsewhere (needs --endpoint)");
  app.add_option("--syncer-endpoint", p.syncer_endpoint,
                 "the syncer's {endpoint}, where it binds, e.g. tcp://0.0.0.0:5555 (--endpoint)")
      ->type_name("URL");
  diloco_tools::add_number<std::uint32_t>(app, "--max-restarts", p.max_restarts, {0},
                                          "restarts of each learner after a signal or a non-zero exit (3)", "N");
  diloco_tools::add_number<double>(app, "--restart-delay", restart_delay, {0.0, 3600.0},
                                   "seconds before a learner's first restart, doubled for each next one, at most 30 "
                                   "(1)",
                                   "SEC");
  diloco_tools::add_number<double>(app, "--learner-grace", learner_grace, {0.0, 86400.0},
                                   "seconds learners get to end by themselves after the syncer ended, before SIGTERM "
                                   "(30)",
                                   "SEC");
  diloco_tools::add_number<double>(app, "--syncer-grace", syncer_grace, {0.0, 86400.0},
                                   "seconds the syncer gets to end by itself after the last learner ended, before "
                                   "SIGTERM (90)",
                                   "SEC");
  diloco_tools::add_number<double>(app, "--kill-after", kill_after, {0.0, 3600.0},
                                   "seconds between SIGTERM (or a SIGINT passed on) and SIGKILL (10)", "SEC");
  app.add_flag("--summary", c.summary,
               "print a JSON line on stdout at the end: each learner's restarts and exit status, the syncer's");

  app.final_callback([&] {
    auto refuse = [](const std::string& why) { throw CLI::ValidationError(why); };
    if (split == argc)
      refuse("missing the learner command: put it after --, e.g. diloco_launch --learners 4 -- ./train");
    if (split + 1 == argc) refuse("missing the learner command after --");
    p.learner.assign(argv + split + 1, argv + argc);
    if (no_syncer && !syncer_text.empty()) refuse("--no-syncer and --syncer exclude each other");
    if (no_syncer && endpoint.empty()) refuse("--no-syncer needs --endpoint: where the syncer runs");
    if (!p.syncer_endpoint.empty() && no_syncer) refuse("--syncer-endpoint needs a syncer (not --no-syncer)");
    try {
      if (!ids_text.empty()) p.ids = launch::parse_ids(ids_text, p.learners, "--learner-ids");
      if (!no_syncer) {
        p.syncer = syncer_text.empty() ? std::vector<std::string>{default_syncer_program(), "--endpoint", "{endpoint}"}
                                       : launch::split_command(syncer_text);
        if (p.syncer.empty()) refuse("--syncer is empty");
      }
    } catch (const std::invalid_argument& e) {
      refuse(e.what());
    }
    p.endpoint = endpoint.empty() ? "tcp://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port()) : endpoint;
    auto ms = [](double seconds) {
      return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
    };
    p.restart_delay = ms(restart_delay);
    p.learner_grace = ms(learner_grace);
    p.syncer_grace = ms(syncer_grace);
    p.kill_after = ms(kill_after);
  });
  return diloco_tools::parse(app, split, argv);
}

}  // namespace diloco_launch
