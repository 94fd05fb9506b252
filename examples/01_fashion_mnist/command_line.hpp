// fashion_mnist's command line, read with CLI11 into `fashion::settings`.
// Every number is checked against the values its option takes, and a bad one
// is refused with a message that names the option, the value and what it
// takes; settings that contradict each other are refused after the parse.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <diloco_tools/cli.hpp>
#include <example_trainer/command_line.hpp>

#include "trainer.hpp"

namespace fashion {

/// What `fashion_mnist` was asked to do.
struct command {
  settings run;
  example_trainer::parsed_run parsed;       ///< `--role all`, `--fragments`
  std::vector<std::string> evaluate_files;  ///< `--evaluate FILE...`: only evaluate the parameters in each FILE
  std::vector<std::string> shard_files;     ///< `--evaluate-shards FILE...`: evaluate one model saved in shards
};

using diloco_tools::add_choice;
using diloco_tools::add_number;
using diloco_tools::interval;
using diloco_tools::parse_number;
using diloco_tools::shown;
using diloco_tools::split_list;

/// Refuses settings that contradict each other; fills in the defaults that
/// depend on the mode.
inline void check(command& c, std::optional<std::uint64_t> checkpoint_every) {
  settings& s = c.run;
  auto refuse = [](const std::string& why) { throw CLI::ValidationError(why); };
  example_trainer::check_run_settings(s, c.parsed);
  if (s.stall && s.stall->learner >= s.learners) refuse("--stall names a learner that does not exist");
  if (s.leave && s.leave->count >= s.learners) refuse("--leave needs fewer leavers than learners");
  if (s.screening.clip_factor != 0.0 && s.screening.clip_factor < 1.0) refuse("--clip must be 0 (off) or at least 1");
  if (s.endpoint.find(',') != std::string::npos && s.part != role::learner)
    refuse("only --role learner takes several endpoints (one per syncer shard)");
  if (!s.endpoint.empty() &&
      (s.endpoint.front() == ',' || s.endpoint.back() == ',' || s.endpoint.find(",,") != std::string::npos))
    refuse("--endpoint has an empty entry");
  if (!s.checkpoint_dir.empty() && s.part != role::learner) refuse("--checkpoint-dir is for --role learner");
  if (checkpoint_every && s.checkpoint_dir.empty()) refuse("--checkpoint-every needs --checkpoint-dir");
  if (checkpoint_every) s.checkpoint_every = *checkpoint_every;
  if (s.gpu_learners > s.learners) refuse("--gpu-learners must not exceed --learners");
  if (s.gpu_learners > 0 && s.run_mode == mode::data_parallel)
    refuse(
        "--gpu-learners needs --mode diloco or decoupled (GPU learners take AdamW inner steps; data parallel "
        "learners take SGD ones)");
  // A process that will run a GPU learner (or, with --role all, start one)
  // needs a usable device; the syncer does not.
  const bool runs_gpu = c.parsed.launch_all       ? s.gpu_learners > 0
                        : s.part == role::syncer  ? false
                        : s.part == role::learner ? s.learner_id < s.gpu_learners
                                                  : s.gpu_learners > 0;
  if (runs_gpu)
    if (const auto why = gpu_unavailable()) refuse("--gpu-learners: " + *why);
  if (s.ranks_per_unit > 1) {
#ifndef FASHION_MNIST_MPI
    refuse("--ranks-per-unit above 1 needs a build with MPI (CMake option DILOCO_WITH_MPI)");
#endif
    if (s.part != role::learner) refuse("--ranks-per-unit is for --role learner (started by mpirun or srun)");
#ifdef FASHION_MNIST_MPI
    // A unit below --gpu-learners trains on GPUs, one per rank, over NCCL.
    if (s.learner_id < s.gpu_learners)
      if (const auto why = gpu_units_unavailable()) refuse("--ranks-per-unit with --gpu-learners: " + *why);
#endif
  }
  if (!s.snapshot_dir.empty() && s.part == role::learner)
    refuse("--snapshot-dir is for the syncer, not --role learner");
  if (!s.snapshot_dir.empty() && s.eval_every == 0) refuse("--snapshot-dir needs --eval-every N above 0");
}

/// Reads the command line into `c`. Returns nothing to go on, or the exit
/// status to end with: 0 after `--help` (the options on stdout), 2 for a bad
/// command line (the reason on stderr).
inline std::optional<int> parse_command_line(int argc, char** argv, command& c) {
  CLI::App app(
      "Trains a 784-256-256-10 MLP on Fashion-MNIST with M learners and prints one JSON line with the test "
      "accuracy of the final global model.",
      "fashion_mnist");
  app.get_formatter()->column_width(34);
  // Repeated options: the last one counts (`--role all` appends to the
  // command line it passes on).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();  // to name an unknown option in our own words below

  settings& s = c.run;
  std::optional<std::uint64_t> checkpoint_every;
  using u32 = std::uint32_t;
  using u64 = std::uint64_t;
  constexpr double real_max = std::numeric_limits<double>::max();

  example_trainer::add_run_shape(app, s, c.parsed);
  add_number<u32>(app, "--gpu-learners", s.gpu_learners, {0, 1024},
                  "learners 0..N-1 train on the GPU, the others on the CPU (0; needs a build with CUDA and a device)",
                  "N");
  add_number<u32>(app, "--ranks-per-unit", s.ranks_per_unit, {1, 4096},
                  "role learner: this learner is a unit of R MPI ranks, started by mpirun -np R or srun (1); each "
                  "rank trains on --batch examples per step and speaks for 1/R of the fragments",
                  "R");
  add_number<u32>(app, "--batch", s.batch, {1}, "examples per inner step (64)", "B");
  app.add_option_function<std::string>(
         "--stall",
         [&](const std::string& v) {
           const auto parts = split_list(v, ':');
           if (parts.size() != 3) throw CLI::ValidationError("--stall takes LEARNER:AFTER:STEPS");
           s.stall =
               stall_plan{parse_number<u32>("--stall", parts[0], {0}), parse_number<u64>("--stall", parts[1], {0}),
                          parse_number<u64>("--stall", parts[2], {0})};
         },
         "learner L freezes after its step AFTER for STEPS of its steps")
      ->type_name("L:AFTER:STEPS");
  app.add_option_function<std::string>(
         "--leave",
         [&](const std::string& v) {
           const auto parts = split_list(v, ':');
           if (parts.size() != 2) throw CLI::ValidationError("--leave takes COUNT:AFTER");
           s.leave =
               leave_plan{parse_number<u32>("--leave", parts[0], {0}), parse_number<u64>("--leave", parts[1], {1})};
         },
         "the last N learners leave for good after AFTER (>= 1) of their steps")
      ->type_name("N:AFTER");
  example_trainer::add_transport(app, s);
  add_number<double>(app, "--sim-latency", s.sim_latency_ms, {0.0, 60e3},
                     "simulator: one-way delay of every link, in ms (1)", "MS");
  add_number<double>(app, "--sim-bandwidth", s.sim_bandwidth_mbit, {1e-3, 1e6},
                     "simulator: rate of every link each way, in Mbit/s (8000)", "MBIT");
  add_choice(app, "--merge", s.merge,
             {{"tokens", merge_rule::token_weighted},
              {"average", merge_rule::average},
              {"rda", merge_rule::radial_directional},
              {"trimmed", merge_rule::trimmed_mean},
              {"median", merge_rule::coordinate_median}},
             "merge rule",
             "merge rule (tokens; trimmed: coordinate-wise 25 % trimmed mean, median: coordinate-wise median, both "
             "robust to outlying learners)");
  add_number<double>(
      app, "--clip", s.screening.clip_factor, {0.0, real_max},
      "clip outer gradients and weights above C x the median, C >= 1 (" + shown(s.screening.clip_factor) + "; 0: off)",
      "C");
  add_number<u32>(app, "--quarantine-after", s.screening.quarantine_after, {0},
                  "quarantine a learner after N norm-clipped or refused contributions in a row (" +
                      std::to_string(s.screening.quarantine_after) + "; 0: never)",
                  "N");
  example_trainer::add_partial_rounds(app, s);
  example_trainer::add_codecs(app, s);
  add_number<double>(app, "--lr", s.lr, {0.0, real_max}, "AdamW learning rate (1e-3)", "LR");
  add_number<double>(app, "--weight-decay", s.weight_decay, {0.0, real_max}, "AdamW weight decay (0.01)", "WD");
  example_trainer::add_outer(app, s);
  add_number<u64>(app, "--seed", s.seed, {}, "seed of initialization, sharding and sampling (1)", "SEED");
  app.add_option("--data-dir", s.data_dir, "Fashion-MNIST files (" + s.data_dir + ")")->type_name("DIR");
  example_trainer::add_processes(app, s, c.parsed,
                                 "the syncer's ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 (all: a free loopback "
                                 "port); role learner of a sharded syncer: every shard's, comma-separated; of a "
                                 "shard with standbys: every candidate's, URL|URL (whichever leads)",
                                 "URL[|URL][,URL...]");
  example_trainer::add_progress(app, s);
  add_number<u64>(app, "--eval-every", s.eval_every, {0},
                  "print the test accuracy of the global model on stderr every N outer updates, 0 for never (" +
                      std::to_string(s.eval_every) + ")",
                  "N");
  app.add_option("--snapshot-dir", s.snapshot_dir,
                 "instead of evaluating every --eval-every outer updates, save the global model to "
                 "DIR/update_N.f32 and its time to DIR/snapshots.jsonl (evaluate them afterwards with --evaluate)")
      ->type_name("DIR");
  app.add_option("--trace", s.trace_file, "role learner: append its events to FILE as JSON lines (docs/chaos.md)")
      ->type_name("FILE");
  add_number<double>(app, "--stop-at", s.stop_at, {0.0, real_max},
                     "role learner: finish (final contributions, leave) at this wall time, seconds since the epoch",
                     "UNIX_SECONDS");
  app.add_option("--checkpoint-dir", s.checkpoint_dir,
                 "role learner: resume from the newest learner checkpoint in DIR, if any, and save one there every "
                 "--checkpoint-every steps (a unit: each rank in DIR/rank-R, all resuming at a step all saved)")
      ->type_name("DIR");
  app.add_option_function<std::string>(
         "--checkpoint-every",
         [&](const std::string& v) { checkpoint_every = parse_number<u64>("--checkpoint-every", v, {1}); },
         "role learner: inner steps between two learner checkpoints (" + std::to_string(s.checkpoint_every) + ")")
      ->type_name("N");
  app.add_option("--evaluate", c.evaluate_files,
                 "only evaluate the parameters in each FILE (raw little-endian f32, as diloco_syncer --save and "
                 "--snapshot-dir write them) on the test set: one JSON line per file")
      ->type_name("FILE...")
      ->expected(1, 1 << 20)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--evaluate-shards", c.shard_files,
                 "only evaluate the model a sharded syncer saved: FILE k is shard k's diloco_syncer --save of S "
                 "shards, fragment p (of --fragments) is shard p mod S's; one JSON line")
      ->type_name("FILE...")
      ->expected(1, 4096)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes("--evaluate");

  app.final_callback([&] {
    example_trainer::refuse_extras(app);
    check(c, checkpoint_every);
  });
  return diloco_tools::parse(app, argc, argv);
}

}  // namespace fashion
