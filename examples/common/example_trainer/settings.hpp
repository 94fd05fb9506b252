// What the example trainers (fashion_mnist, char_lm) share: the shape of a
// run — data parallel, DiLoCo or Decoupled DiLoCo; in one process, on the
// simulator or as ZeroMQ processes — and the syncer and learner options it
// maps to. A trainer's own settings derive from `run_settings` and add its
// model's and data's. Example code, not the library: a user's trainer picks
// from diloco::presets directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

namespace example_trainer {

enum class mode { data_parallel, diloco, decoupled };
enum class transport { threads, simulated };
/// `in_process`: everything in this process; otherwise this process is the
/// syncer or one learner, over ZeroMQ.
enum class role { in_process, syncer, learner };

struct run_settings {
  mode run_mode = mode::decoupled;
  transport via = transport::threads;
  role part = role::in_process;
  std::uint32_t learners = 4;
  std::uint64_t steps = 1000;            ///< inner steps per learner
  std::uint32_t sync_period = 50;        ///< H: inner steps between two sends of a fragment
  std::uint32_t fragments = 8;           ///< P (`check_run_settings` sets the mode's default unless given)
  std::optional<std::uint32_t> quorum;   ///< K; default: 1 for decoupled, every learner otherwise
  std::optional<std::uint32_t> overlap;  ///< τ; default: H/10 for decoupled, 0 otherwise
  double alpha = 0.0;                    ///< mixing on adoption, 0 overwrites
  std::uint64_t seed = 1;
  std::vector<double> speeds;            ///< relative learner speeds; empty: all 1
  std::optional<double> outer_lr;        ///< η; default: the mode's preset (`nesterov_options_of`)
  std::optional<double> outer_momentum;  ///< μ; idem
  /// The trainer's own outer defaults in every mode, where its task was
  /// measured to want others than the presets' (`nesterov_options_of`).
  std::optional<diloco::outer::nesterov_options> outer_default;
  diloco::codec_options codecs{};  ///< how outer gradients (`--codec`) and updates (`--update-codec`) travel
  bool error_feedback = false;     ///< learners carry each fragment's encoding error into its next send
  diloco::adoption_rule adopt =
      diloco::learner_options{}.adopt;  ///< how learners take in global fragments (not lock-step)
  diloco::partial_rounds partial = diloco::partial_rounds::all_share;  ///< how partial rounds are sized
  diloco::membership_options membership{};                             ///< how departed learners count in them
  std::string endpoint;           ///< the syncer's ZeroMQ endpoint (roles syncer and learner)
  std::uint32_t learner_id = 0;   ///< role learner
  std::uint32_t incarnation = 1;  ///< role learner
  std::string curve_secret;       ///< this process's CURVE key pair (diloco_keygen)
  std::string curve_peer;         ///< syncer: the learners' public key; learner: the syncer's
  bool insecure = false;          ///< syncer: bind a non-loopback endpoint without CURVE
  double progress_seconds = 2.0;  ///< between two progress lines; 0: none

  /// Learner `i`'s relative speed (1 unless `--speeds` says otherwise).
  double speed_of(std::uint32_t i) const { return i < speeds.size() ? speeds[i] : 1.0; }
};

inline const char* name(mode m) {
  switch (m) {
    case mode::data_parallel: return "dp";
    case mode::diloco: return "diloco";
    case mode::decoupled: return "decoupled";
  }
  return "?";
}

/// How this process's run travels, as the result line names it: "zmq" for
/// the syncer of learner processes, "threads" or "sim" in one process.
inline const char* transport_name(const run_settings& s) {
  if (s.part != role::in_process) return "zmq";
  return s.via == transport::threads ? "threads" : "sim";
}

/// How the start line names the run: "ZeroMQ processes" (the syncer of
/// learner processes), "threads" or "simulator".
inline const char* run_description(const run_settings& s) {
  if (s.part == role::syncer) return "ZeroMQ processes";
  return s.via == transport::threads ? "threads" : "simulator";
}

/// The syncer options of the settings' mode (diloco::presets), with the
/// command line's fragments, quorum, overlap, mixing, codecs and partial
/// rounds.
inline diloco::syncer_options syncer_options_for(const run_settings& s) {
  diloco::syncer_options o;
  switch (s.run_mode) {
    case mode::data_parallel: o = diloco::presets::data_parallel(s.learners); break;
    case mode::diloco: o = diloco::presets::diloco(s.learners, s.sync_period); break;
    case mode::decoupled:
      o = diloco::presets::decoupled_diloco(s.sync_period, s.fragments, s.quorum.value_or(1),
                                            s.overlap.value_or(s.sync_period / 10));
      break;
  }
  if (s.run_mode != mode::data_parallel) {
    o.training.fragments = s.fragments;
    if (s.quorum) o.quorum = *s.quorum;
    if (s.overlap) o.training.overlap = *s.overlap;
  }
  o.training.mixing = s.alpha;
  o.training.codecs = s.codecs;
  o.scaling = s.partial;
  o.membership = s.membership;
  return o;
}

/// Learner `id`'s options: its incarnation (role learner), error feedback
/// and adoption rule.
inline diloco::learner_options learner_options_for(const run_settings& s, std::uint32_t id) {
  return {.id = id,
          .incarnation = s.part == role::learner ? s.incarnation : 1,
          .error_feedback = s.error_feedback,
          .adopt = s.adopt};
}

/// The outer Nesterov settings of the run: the trainer's `outer_default`
/// if it has one, else the mode's preset (`presets::decoupled_outer_options`
/// for Decoupled DiLoCo, `presets::diloco_outer_options` otherwise), with
/// the command line's rate and momentum where given.
inline diloco::outer::nesterov_options nesterov_options_of(const run_settings& s) {
  auto o = s.outer_default                 ? *s.outer_default
           : s.run_mode == mode::decoupled ? diloco::presets::decoupled_outer_options()
                                           : diloco::presets::diloco_outer_options();
  if (s.outer_lr) o.learning_rate = *s.outer_lr;
  if (s.outer_momentum) o.momentum = *s.outer_momentum;
  return o;
}

/// The outer optimizer of DiLoCo and Decoupled DiLoCo: Nesterov momentum
/// (DiLoCo, arXiv 2311.08105), as `nesterov_options_of` says.
inline diloco::outer::nesterov<float> nesterov_of(const run_settings& s) {
  return diloco::outer::nesterov<float>(nesterov_options_of(s));
}

}  // namespace example_trainer
