// Run-wide configuration: what the syncer decides and every learner adopts.
#pragma once

#include <chrono>
#include <cstdint>

#include "diloco/transport/message.hpp"

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

/// The welcome that hands `config` to learner (`learner`, `incarnation`) of a
/// model with this layout fingerprint and size, whose parameters travel as
/// `codec`; `flags` may ask for the model (`state_wanted`).
inline message welcome_message(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t layout,
                               std::uint64_t elements, codec_id codec, const training_config& config,
                               std::uint8_t flags = 0) {
  message m;
  auto& h = m.header;
  h.kind = message_kind::welcome;
  h.codec = codec;
  h.flags = flags;
  h.learner = learner;
  h.incarnation = incarnation;
  h.layout = layout;
  h.element_count = elements;
  h.fragment_count = config.fragments;
  h.sync_period = config.sync_period;
  h.overlap = config.overlap;
  h.mixing = config.mixing;
  h.lock_step = config.lock_step ? 1 : 0;
  return m;
}

}  // namespace diloco
