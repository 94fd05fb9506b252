// What a run of an example trainer reports whatever its model (a trainer's
// outcome derives from `run_outcome` and adds its model's figures), and the
// JSON line a learner process prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <diloco/diloco.hpp>
#include <diloco_tools/json.hpp>
#include <diloco_tools/trainer/settings.hpp>
#include <nlohmann/json.hpp>

namespace diloco_tools::trainer {

struct run_outcome {
  std::optional<double> train_loss;  ///< the learners' training loss as of the last outer update (heartbeats)
  std::uint64_t outer_updates = 0;
  std::uint64_t inner_steps = 0;
  std::uint64_t contributions_merged = 0;
  std::uint64_t rejected = 0;
  std::uint64_t partial_rounds = 0;  ///< rounds merged without every learner (0 in a healthy synchronous run)
  std::uint64_t bytes_sent = 0;      ///< payload bytes learners → syncer (contributions, and states)
  std::uint64_t bytes_received = 0;  ///< payload bytes syncer → learners (updates)
  double seconds = 0.0;              ///< wall time of training
  double virtual_seconds = 0.0;      ///< simulated time (simulator only)
  bool completed = true;
  std::string error;

  /// The syncer's counters this outcome reports. The payload bytes are what
  /// the syncer saw; a run with the learners in this process may count them
  /// at the learners instead (`take_learner_bytes`).
  void take(const diloco::syncer_metrics& m) {
    outer_updates = m.outer_updates;
    contributions_merged = m.contributions_merged;
    rejected = m.rejected_total();
    partial_rounds = m.partial_rounds;
    bytes_sent = m.payload_bytes_received;
    bytes_received = m.payload_bytes_sent;
  }

  /// The payload bytes every learner (pointers to) sent and received, as
  /// they counted them.
  template <class Learners>
  void take_learner_bytes(const Learners& learners) {
    bytes_sent = bytes_received = 0;
    for (const auto& l : learners) {
      bytes_sent += l->metrics().bytes_sent;
      bytes_received += l->metrics().bytes_received;
    }
  }
};

/// The result line of a learner process (role learner): which learner, its
/// inner steps, the payload bytes it sent and received, its wall time.
inline nlohmann::ordered_json learner_line(const run_settings& s, const run_outcome& r) {
  return {{"role", "learner"},
          {"learner", s.learner_id},
          {"inner_steps", r.inner_steps},
          {"bytes_sent", r.bytes_sent},
          {"bytes_received", r.bytes_received},
          {"seconds", six_digits(r.seconds)}};
}

}  // namespace diloco_tools::trainer
