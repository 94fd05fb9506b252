// The command-line options every example trainer takes (settings.hpp's
// `run_settings`), in groups a trainer adds to its CLI11 app among its own,
// and the checks that tie them together. Numbers are checked as cli.hpp
// checks them; every refusal names the option.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <diloco_tools/cli.hpp>
#include <example_trainer/settings.hpp>

namespace example_trainer {

using diloco_tools::add_choice;
using diloco_tools::add_number;
using diloco_tools::parse_number;
using diloco_tools::shown;
using diloco_tools::split_list;

/// What the options leave for `check_run_settings`: fragments given or not
/// (their default depends on the mode), and `--role all`.
struct parsed_run {
  std::optional<std::uint32_t> fragments;
  bool launch_all = false;  ///< `--role all`: 1 syncer and M learner processes of this program
};

/// --mode, --learners, --steps, --H, --fragments, --quorum, --overlap,
/// --alpha, --adopt, --speeds.
inline void add_run_shape(CLI::App& app, run_settings& s, parsed_run& p) {
  using u32 = std::uint32_t;
  add_choice(app, "--mode", s.run_mode,
             {{"dp", mode::data_parallel}, {"diloco", mode::diloco}, {"decoupled", mode::decoupled}}, "mode",
             "data parallel, DiLoCo or Decoupled DiLoCo (decoupled)");
  add_number<u32>(app, "--learners", s.learners, {1, 1024},
                  "learner units (" + std::to_string(s.learners) + "; or DILOCO_LEARNERS)", "M")
      ->envname("DILOCO_LEARNERS");
  add_number<std::uint64_t>(app, "--steps", s.steps, {1}, "inner steps per learner (" + std::to_string(s.steps) + ")",
                            "N");
  add_number<u32>(app, "--H", s.sync_period, {1},
                  "inner steps between two sends of a fragment (" + std::to_string(s.sync_period) + ")", "H");
  app.add_option_function<std::string>(
         "--fragments", [&p](const std::string& v) { p.fragments = parse_number<u32>("--fragments", v, {1}); },
         "fragments (decoupled: 8; dp and diloco: 1)")
      ->type_name("P");
  app.add_option_function<std::string>(
         "--quorum", [&s](const std::string& v) { s.quorum = parse_number<u32>("--quorum", v, {1}); },
         "learners a round waits for (decoupled: 1; others: M)")
      ->type_name("K");
  app.add_option_function<std::string>(
         "--overlap", [&s](const std::string& v) { s.overlap = parse_number<u32>("--overlap", v, {0}); },
         "steps between a send and the use of its answer, below H (decoupled: H/10)")
      ->type_name("TAU");
  add_number<double>(app, "--alpha", s.alpha, {0.0, 1.0, false, true},
                     "mixing on adoption, lock-step modes and --adopt overwrite; 0 overwrites (0)", "A");
  add_choice(app, "--adopt", s.adopt,
             {{"rebase", diloco::adoption_rule::rebase},
              {"lazy", diloco::adoption_rule::lazy},
              {"overwrite", diloco::adoption_rule::overwrite}},
             "rule",
             "decoupled: how learners take in global fragments: rebase (keep every step), lazy (rebase at the next "
             "send), overwrite (drop the work since the last send) (" +
                 std::string(diloco::name(s.adopt)) + ")");
  app.add_option_function<std::string>(
         "--speeds",
         [&s](const std::string& v) {
           s.speeds.clear();
           for (const auto part : split_list(v, ','))
             s.speeds.push_back(parse_number<double>("--speeds", part, {0.0, 1.0, true, false}));
         },
         "relative learner speeds in (0, 1], one per learner, e.g. 1,1,0.7,0.5 (all 1)")
      ->type_name("S1,S2,...");
}

/// --partial-rounds, --absent-half-life: how the syncer sizes partial rounds.
inline void add_partial_rounds(CLI::App& app, run_settings& s) {
  add_number<double>(app, "--absent-half-life", s.membership.absent_half_life, {0.0, 1e4, true, false},
                     "a departed learner's weight in partial rounds halves every N periods (" +
                         shown(s.membership.absent_half_life) + ")",
                     "N");
  add_choice(app, "--partial-rounds", s.partial,
             {{"all", diloco::partial_rounds::all_share},
              {"live", diloco::partial_rounds::live_share},
              {"full", diloco::partial_rounds::full_step}},
             "partial-round rule",
             "size of partial rounds: share of all learners' weight (all), of the live learners' weight (live), or a "
             "full step (full)");
}

/// --transport threads|sim.
inline void add_transport(CLI::App& app, run_settings& s) {
  add_choice(app, "--transport", s.via, {{"threads", transport::threads}, {"sim", transport::simulated}}, "transport",
             "learner threads in this process, or the deterministic simulator (threads)");
}

/// --codec, --update-codec, --codec-block, --error-feedback.
inline void add_codecs(CLI::App& app, run_settings& s) {
  const std::vector<std::pair<std::string, diloco::codec_id>> formats{{"fp32", diloco::codec_id::f32},
                                                                      {"bf16", diloco::codec_id::bf16},
                                                                      {"int8", diloco::codec_id::int8},
                                                                      {"fp8", diloco::codec_id::fp8},
                                                                      {"int4", diloco::codec_id::int4}};
  add_choice(app, "--codec", s.codecs.contributions, formats, "codec",
             "outer gradients, learners to syncer: fp32, or compressed: bf16, int8, fp8 (E4M3), int4 (fp32)");
  add_choice(app, "--update-codec", s.codecs.updates, formats, "codec",
             "global fragments, syncer to learners (fp32; learners adopt the decoded values)");
  add_number<std::uint32_t>(app, "--codec-block", s.codecs.block, {1, diloco::max_codec_block},
                            "values per scaled block of int8, fp8 and int4 (" + std::to_string(s.codecs.block) + ")",
                            "B");
  app.add_flag("--error-feedback", s.error_feedback,
               "learners add each fragment's encoding error to its next outer gradient");
}

/// --outer-lr, --outer-momentum: the Nesterov outer step of DiLoCo and
/// Decoupled DiLoCo.
inline void add_outer(CLI::App& app, run_settings& s) {
  const auto decoupled = diloco::presets::decoupled_outer_options(), diloco = diloco::presets::diloco_outer_options();
  // The default shown: the trainer's own, else each mode's.
  auto shown_default = [&](double mine, double in_decoupled, double in_diloco) {
    return s.outer_default ? shown(mine) : "decoupled: " + shown(in_decoupled) + "; diloco: " + shown(in_diloco);
  };
  const auto own = s.outer_default.value_or(decoupled);
  app.add_option_function<std::string>(
         "--outer-lr",
         [&s](const std::string& v) {
           s.outer_lr = parse_number<double>("--outer-lr", v, {0.0, std::numeric_limits<double>::max()});
         },
         "Nesterov outer learning rate (" +
             shown_default(own.learning_rate, decoupled.learning_rate, diloco.learning_rate) + ")")
      ->type_name("ETA");
  app.add_option_function<std::string>(
         "--outer-momentum",
         [&s](const std::string& v) {
           s.outer_momentum = parse_number<double>("--outer-momentum", v, {0.0, 1.0, false, true});
         },
         "Nesterov outer momentum, in [0, 1) (" + shown_default(own.momentum, decoupled.momentum, diloco.momentum) +
             ")")
      ->type_name("MU");
}

/// --role, --endpoint, --learner-id, --incarnation, --curve-secret,
/// --curve-peer, --insecure: one syncer and M learner processes over
/// ZeroMQ. `endpoint_help` says what --endpoint takes.
inline void add_processes(CLI::App& app, run_settings& s, parsed_run& p,
                          const std::string& endpoint_help =
                              "the syncer's ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 (all: a free loopback port)",
                          const std::string& endpoint_type = "URL") {
  app.add_option_function<std::string>(
         "--role",
         [&s, &p](const std::string& v) {
           if (v == "all")
             p.launch_all = true;
           else if (v == "syncer")
             s.part = role::syncer;
           else if (v == "learner")
             s.part = role::learner;
           else
             throw CLI::ValidationError("unknown role '" + v + "' (syncer, learner or all)");
         },
         "run as separate processes over ZeroMQ: this process is the syncer, one learner, or starts 1 syncer + M "
         "learner processes (all)")
      ->type_name("syncer|learner|all");
  // A launcher or scheduler (diloco_launch, a Slurm or Kubernetes recipe,
  // docs/launch.md) may say who this process is in DILOCO_* variables
  // instead; a flag given wins over its variable.
  app.add_option("--endpoint", s.endpoint, endpoint_help + " (or DILOCO_ENDPOINT)")
      ->type_name(endpoint_type)
      ->envname("DILOCO_ENDPOINT");
  add_number<std::uint32_t>(app, "--learner-id", s.learner_id, {0},
                            "role learner: which learner (0..M-1; or DILOCO_LEARNER_ID, which implies --role learner)",
                            "N")
      ->envname("DILOCO_LEARNER_ID");
  add_number<std::uint32_t>(app, "--incarnation", s.incarnation, {0},
                            "role learner: bump when restarting learner N (1; or DILOCO_INCARNATION)", "I")
      ->envname("DILOCO_INCARNATION");
  app.add_option("--curve-secret", s.curve_secret, "CURVE key pair of this process (diloco_keygen)")->type_name("FILE");
  app.add_option("--curve-peer", s.curve_peer, "syncer: the learners' public key; learner: the syncer's")
      ->type_name("FILE");
  app.add_flag("--insecure", s.insecure, "syncer: serve a non-loopback endpoint without CURVE");
}

/// --progress SECONDS.
inline void add_progress(CLI::App& app, run_settings& s) {
  add_number<double>(app, "--progress", s.progress_seconds, {0.0, std::numeric_limits<double>::max()},
                     "seconds between progress lines on stderr, 0 for none (2)", "SECONDS");
}

/// Refuses what CLI11 let through: an argument no option took. Call first
/// in the app's final callback.
inline void refuse_extras(const CLI::App& app) {
  if (const auto extra = app.remaining(); !extra.empty())
    throw CLI::ValidationError((extra.front().starts_with("-") ? "unknown option '" : "unexpected argument '") +
                               extra.front() + "'");
}

/// Refuses run settings that contradict each other and fills in the
/// defaults that depend on the mode (fragments). Call from the app's final
/// callback, where a refusal ends the parse with exit status 2.
inline void check_run_settings(run_settings& s, const parsed_run& p) {
  auto refuse = [](const std::string& why) { throw CLI::ValidationError(why); };
  if (!s.speeds.empty() && s.speeds.size() != s.learners)
    refuse("--speeds needs one value per learner (" + std::to_string(s.learners) + ")");
  s.fragments = p.fragments.value_or(s.run_mode == mode::decoupled ? 8u : 1u);
  // Given an endpoint, a process is part of a distributed run: it never
  // trains alone on threads instead (a launcher that set DILOCO_ENDPOINT
  // and forgot the role would otherwise see a local run end with 0).
  if (s.part == role::in_process && !p.launch_all) {
    if (std::getenv("DILOCO_LEARNER_ID"))
      s.part = role::learner;
    else if (!s.endpoint.empty())
      refuse(
          "an endpoint is given (--endpoint or DILOCO_ENDPOINT) but no role: pass --role syncer, --role learner "
          "or --role all, or set DILOCO_LEARNER_ID for a learner (a run with an endpoint never trains locally)");
  }
  if (s.overlap && *s.overlap >= s.sync_period) refuse("--overlap must be smaller than --H");
  if (s.part != role::in_process && s.endpoint.empty()) refuse("--role syncer and --role learner need --endpoint");
  if (s.part == role::learner && s.learner_id >= s.learners) refuse("--learner-id must be below --learners");
  if (s.curve_secret.empty() != s.curve_peer.empty()) refuse("--curve-secret and --curve-peer go together");
}

}  // namespace example_trainer
