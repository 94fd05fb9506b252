// Run-wide configuration: what the syncer decides and every learner adopts.
#pragma once

#include <chrono>
#include <cstdint>

namespace diloco {

using clock = std::chrono::steady_clock;
using time_point = clock::time_point;

/// The schedule every learner follows. The syncer owns it and sends it in its
/// welcome, so learners cannot disagree.
struct training_config {
  std::uint32_t fragments = 1;     ///< P, fragments of the model (Streaming DiLoCo)
  std::uint32_t sync_period = 50;  ///< H, inner steps between two sends of a fragment
  std::uint32_t overlap = 0;       ///< τ, inner steps between a send and the earliest use of its answer
  double mixing = 0.0;             ///< α: on adoption θ ← α·θ + (1−α)·Θ (0 overwrites)
  bool lock_step = false;          ///< wait for the answer τ steps after each send (synchronous modes)
};

}  // namespace diloco
