// Run-wide configuration: what the syncer decides and every learner adopts.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "diloco/clock.hpp"
#include "diloco/codec/blocks.hpp"
#include "diloco/detail/bad_option.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco {

/// How fragments travel (docs/protocol.md, "Codecs"; docs/design.md,
/// "Compression"). `fp32` is full precision: the model's own scalar type.
struct codec_options {
  /// Outer gradients, learners → syncer. The welcome names it; learners
  /// encode their outer gradients in it.
  codec_id contributions = codec_id::f32;
  /// Global fragments, syncer → learners. The syncer keeps its global
  /// parameters at full precision and sends their encoding; learners take
  /// the decoded values as their base, bit for bit the same on every learner.
  codec_id updates = codec_id::f32;
  /// Values per block of the block-scaled formats (int8, fp8, int4), in
  /// [1, 65536].
  std::uint32_t block = codec::default_block;

  /// Throws `std::invalid_argument` naming a codec that is not one of
  /// `codec::float_codecs` or a block out of range.
  void check() const {
    for (const auto& [name, c] : {std::pair{"contributions", contributions}, std::pair{"updates", updates}})
      if (!codec::float_codec(c))
        detail::bad_option("diloco::codec_options", name, std::string(codec::name(c)),
                           "must be one of fp32, bf16, int8, fp8, int4");
    if (block < 1 || block > max_codec_block)
      detail::bad_option("diloco::codec_options", "block", block, "must be in [1, 65536]");
  }
};

/// The schedule every learner follows. The syncer owns it and sends it in its
/// welcome, so learners cannot disagree.
struct training_config {
  std::uint32_t fragments = 1;     ///< P, fragments of the model (Streaming DiLoCo)
  std::uint32_t sync_period = 50;  ///< H, inner steps between two sends of a fragment
  std::uint32_t overlap = 0;       ///< τ, inner steps between a send and the earliest use of its answer
  double mixing = 0.0;             ///< α: on adoption θ ← α·θ + (1−α)·Θ (0 overwrites)
  bool lock_step = false;          ///< wait for the answer τ steps after each send (synchronous modes)
  codec_options codecs{};          ///< how outer gradients and global fragments travel
};

/// Every timeout of a run, derived from one setting: how often a learner
/// shows a sign of life. `from(h)` gives: join retried every h; a learner
/// declared dead after 10 h of silence; a contribution without a verdict
/// makes its learner rejoin after 10 h; a lock-step wait gives up after
/// 60 h. `check` refuses sets that contradict each other.
struct timeouts {
  std::chrono::nanoseconds heartbeat = std::chrono::seconds(1);
  std::chrono::nanoseconds join_retry = std::chrono::seconds(1);
  std::chrono::nanoseconds dead_after = std::chrono::seconds(10);
  std::chrono::nanoseconds rejoin_after = std::chrono::seconds(10);
  std::chrono::nanoseconds answer_timeout = std::chrono::seconds(60);

  static timeouts from(std::chrono::nanoseconds heartbeat) {
    return {heartbeat, heartbeat, 10 * heartbeat, 10 * heartbeat, 60 * heartbeat};
  }

  /// Throws `std::invalid_argument` naming the first contradiction:
  /// - every timeout is positive;
  /// - a learner is declared dead only after missing at least two heartbeats
  ///   (`dead_after ≥ 3 × heartbeat`);
  /// - it retries its join at least as often as it would rejoin
  ///   (`join_retry ≤ rejoin_after`), and rejoins only after heartbeats could
  ///   have shown it alive (`rejoin_after ≥ 2 × heartbeat`);
  /// - a lock-step wait outlasts a rejoin (`answer_timeout ≥ rejoin_after`),
  ///   else the learner gives up on an answer its rejoin would have brought.
  void check() const {
    using detail::bad_option, detail::show_option;
    using std::chrono::nanoseconds;
    constexpr std::string_view self = "diloco::timeouts";
    const std::pair<const char*, nanoseconds> all[] = {{"heartbeat", heartbeat},
                                                       {"join_retry", join_retry},
                                                       {"dead_after", dead_after},
                                                       {"rejoin_after", rejoin_after},
                                                       {"answer_timeout", answer_timeout}};
    for (const auto& [name, value] : all)
      if (value <= nanoseconds::zero()) bad_option(self, name, value, "every timeout must be positive");
    if (dead_after < 3 * heartbeat)
      bad_option(
          self, "dead_after", dead_after,
          "must be at least 3 heartbeats (3 x " + show_option(heartbeat) + "), so that one lost heartbeat is no death");
    if (join_retry > rejoin_after)
      bad_option(self, "join_retry", join_retry, "must not exceed rejoin_after (" + show_option(rejoin_after) + ")");
    if (rejoin_after < 2 * heartbeat)
      bad_option(self, "rejoin_after", rejoin_after,
                 "must be at least 2 heartbeats (2 x " + show_option(heartbeat) + ")");
    if (answer_timeout < rejoin_after)
      bad_option(self, "answer_timeout", answer_timeout,
                 "must not be shorter than rejoin_after (" + show_option(rejoin_after) + ")");
  }
};

/// The welcome that hands `config` to learner (`learner`, `incarnation`) of a
/// model of `T`s with this layout fingerprint and size. Its codec and block
/// are those contributions use; `flags` may ask for the model
/// (`state_wanted`), which the learner sends at full precision: that welcome
/// names `codec_of<T>`, so that a learner of another scalar type refuses it.
template <scalar T>
message welcome_message(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t layout, std::uint64_t elements,
                        const training_config& config, std::uint8_t flags = 0) {
  message m;
  auto& h = m.header;
  h.kind = message_kind::welcome;
  h.codec = flags & state_wanted ? codec_of<T> : payload_codec<T>(config.codecs.contributions);
  h.block = block_scaled(h.codec) ? config.codecs.block : 0;
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
