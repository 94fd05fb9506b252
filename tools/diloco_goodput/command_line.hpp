// diloco_goodput's command line, read with CLI11 into a `command`:
//   diloco_goodput --method dp|elastic|decoupled --chips N [--learners M --quorum K]
//                  [--mtbi-years Y] [--seed S] [--json] [model options]
// Numbers are checked against their ranges, a model option against the
// method it belongs to, and the cell as a whole by run_options::check; a bad
// one is refused with exit status 2, naming the flag and the value.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <diloco_tools/cli.hpp>

#include "simulator.hpp"

namespace diloco_goodput {

/// What diloco_goodput was asked to do.
struct command {
  run_options run;
  bool json = false;  ///< --json: a JSON line on stdout after the human one
};

/// Reads the command line into `c`. Returns nothing to go on, or the exit
/// status to end with: 0 after `--help`, 2 for a bad command line (the reason
/// on stderr).
inline std::optional<int> parse_command_line(int argc, const char* const* argv, command& c) {
  using diloco_tools::add_number;
  using diloco_tools::interval;
  using diloco_tools::shown;
  CLI::App app(
      "Simulates the goodput and uptime of data parallel, elastic data parallel or Decoupled DiLoCo on N chips that "
      "fail as independent Poisson processes (docs/goodput.md). Prints one line, and with --json a JSON line after "
      "it.\n\n  diloco_goodput --method dp|elastic|decoupled --chips N [--learners M --quorum K] [options]",
      "diloco_goodput");
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  run_options& r = c.run;
  model_options& m = r.model;
  std::uint32_t learners = 8, quorum = 1;
  const interval<double> seconds{0.0, 1e9};

  diloco_tools::add_choice(
      app, "--method", r.kind,
      {{"dp", method::data_parallel}, {"elastic", method::elastic}, {"decoupled", method::decoupled}}, "method",
      "dp (data parallel), elastic (elastic data parallel) or decoupled (Decoupled DiLoCo)")
      ->required();
  add_number<std::uint64_t>(app, "--chips", r.chips, {1, 10'000'000'000ull}, "N: chips in all", "N")->required();
  auto* learners_opt = add_number<std::uint32_t>(app, "--learners", learners, {1, run_options::max_learners},
                                                 "decoupled: M, learners of N / M chips each (8)", "M");
  auto* quorum_opt = add_number<std::uint32_t>(app, "--quorum", quorum, {1, run_options::max_learners},
                                               "decoupled: K, learners up for the global model to advance (1)", "K");
  add_number<double>(app, "--mtbi-years", m.chip_mtbi_years, {.min = 0.0, .max = 1e12, .open_min = true},
                     "Y: each chip's mean time between interruptions, years (" + shown(m.chip_mtbi_years) + ")", "Y");
  add_number<std::uint64_t>(app, "--seed", r.seed, {0}, "seed of std::mt19937_64 (1)", "S");
  add_number<double>(
      app, "--failures", r.expected_failures, {1.0, run_options::max_expected_failures},
      "horizon: the time in which the N chips see this many failures on average (" + shown(r.expected_failures) + ")",
      "F");
  add_number<double>(app, "--days", r.horizon_days, {.min = 0.0, .max = 1e9, .open_min = true},
                     "horizon in simulated days instead of --failures", "D");
  app.add_flag("--json", c.json, "print a JSON line after the human one");

  // The model's parameters, each for one method.
  struct model_flag {
    CLI::Option* option;
    method applies_to;
  };
  std::vector<model_flag> model_flags{
      {add_number(app, "--recovery", m.recovery_s, seconds,
                  "dp: R_dp, from a failure until the job computes again, s (" + shown(m.recovery_s) + ")", "SEC"),
       method::data_parallel},
      {add_number(app, "--checkpoint", m.checkpoint_interval_s, seconds,
                  "dp: C, computing time between checkpoints, s (" + shown(m.checkpoint_interval_s) + ")", "SEC"),
       method::data_parallel},
      {add_number<std::uint64_t>(app, "--slice-chips", m.slice_chips, {1, 10'000'000'000ull},
                                 "elastic: S, chips per slice (" + std::to_string(m.slice_chips) + ")", "S"),
       method::elastic},
      {add_number(app, "--downscale", m.downscale_s, seconds,
                  "elastic: D, pause to drop a failed slice, s (" + shown(m.downscale_s) + ")", "SEC"),
       method::elastic},
      {add_number(app, "--upscale", m.upscale_s, seconds,
                  "elastic: U, pause to take a repaired slice back, s (" + shown(m.upscale_s) + ")", "SEC"),
       method::elastic},
      {add_number(app, "--repair", m.repair_s, seconds,
                  "elastic: T_rep, a failed slice's time out of the job, s (" + shown(m.repair_s) + ")", "SEC"),
       method::elastic},
      {add_number(app, "--restart", m.restart_s, seconds,
                  "decoupled: R_l, from a failure until the learner computes again, s (" + shown(m.restart_s) + ")",
                  "SEC"),
       method::decoupled},
      {add_number(app, "--contribution", m.contribution_interval_s, {.min = 0.0, .max = 1e9, .open_min = true},
                  "decoupled: H, computing time between a learner's contributions, s (" +
                      shown(m.contribution_interval_s) + ")",
                  "SEC"),
       method::decoupled},
      {add_number(app, "--speed-spread", m.speed_spread, {0.0, 0.5},
                  "decoupled: standard deviation of a learner's speed around 1 (" + shown(m.speed_spread) + ")", "SD"),
       method::decoupled},
      {learners_opt, method::decoupled},
      {quorum_opt, method::decoupled},
  };

  app.final_callback([&] {
    for (const auto& f : model_flags)
      if (f.option->count() > 0 && f.applies_to != r.kind)
        throw CLI::ValidationError(f.option->get_name() + " applies to --method " + method_name(f.applies_to) +
                                   " only");
    r.learners = r.kind == method::decoupled ? learners : 1;
    r.quorum = r.kind == method::decoupled ? quorum : 1;
    try {
      r.check();
    } catch (const std::invalid_argument& e) {
      std::string why = e.what();
      const std::string prefix = "diloco_goodput::run_options: ";
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
      throw CLI::ValidationError(why);
    }
  });
  return diloco_tools::parse(app, argc, argv);
}

}  // namespace diloco_goodput
