// What a learner is told: who it is, its timeouts, and how it takes in the
// global fragments the syncer sends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "diloco/metrics/events.hpp"
#include "diloco/runtime/config.hpp"

namespace diloco {

/// How a learner of a run that is not lock-step takes in the global
/// fragments the syncer sends it (docs/design.md, "Keeping every step").
/// Lock-step runs (synchronous DiLoCo, Streaming DiLoCo, data parallel)
/// ignore it: every learner adopts every answer with the welcome's mixing
/// factor α, as those methods define.
///
/// Notation: θ_p is the learner's fragment p, base_p its reference copy,
/// Θ_p the global fragment that arrived.
enum class adoption_rule : std::uint8_t {
  /// No step is lost. A send moves the learner's work out of its account:
  /// base_p ← θ_p and the fragment's counters restart, so the next outer
  /// gradient `base_p − θ_p` holds only work not sent yet. Every revision
  /// Θ_p is taken in as `θ_p ← θ_p + (1−α)·(Θ_p − base_p)`, `base_p ← Θ_p`,
  /// counters kept (α from the welcome). With α = 0, θ_p is always the
  /// latest global value plus the work not sent yet, and what was sent comes
  /// back only inside a revision that merged it; with α > 0 the learner
  /// follows only 1 − α of the global value's move, and its next outer
  /// gradient carries the rest back (an elastic pull, as Streaming DiLoCo's
  /// mixing) besides all its work. An answer to the learner's latest send,
  /// and another learner's revision, are taken in τ steps after that send
  /// (the answer, newer, holds both; a lost one delays nothing longer), else
  /// at the next step boundary. The default.
  rebase,
  /// As `rebase`, but a revision produced without this learner's latest
  /// contribution waits until just before the fragment's next send: fewer
  /// passes over θ, a staler local model between sends.
  lazy,
  /// `θ_p ← α·θ_p + (1−α)·Θ_p` (α = 0 overwrites) for every revision, at
  /// the next step boundary (an answer no earlier than τ steps after its
  /// send); the base becomes Θ_p and the counters restart. The work
  /// done since the learner's last send — all of it when other learners'
  /// rounds bring a revision — is thrown away: with 4 learners and K = 1
  /// only a quarter to a third of the steps reach the model. Kept to compare
  /// against.
  overwrite,
};

/// The name of `r` as the trainers' `--adopt` option spells it.
constexpr const char* name(adoption_rule r) noexcept {
  switch (r) {
    case adoption_rule::rebase: return "rebase";
    case adoption_rule::lazy: return "lazy";
    case adoption_rule::overwrite: return "overwrite";
  }
  return "?";
}

/// Which fragments a learner speaks for: all of them (the default), or,
/// for one rank of a learner unit of `count` ranks (docs/units.md), those p
/// with p mod count = index. Such a learner keeps the outer state (base,
/// error-feedback residual) of its own fragments only, contributes and
/// adopts only those, and talks to the syncer shards that own them: the
/// syncer has S shards, S a multiple of `count`, and rank `index` connects
/// to the shards s with s mod count = index. Runs that are not lock-step only.
struct fragment_share {
  std::uint32_t index = 0;
  std::uint32_t count = 1;

  bool owns(std::uint32_t p) const noexcept { return p % count == index; }
};

/// Settings of one learner process or thread. The training schedule itself
/// (P, H, τ, α, lock-step) comes from the syncer's welcome.
struct learner_options {
  std::uint32_t id = 0;           ///< unique per learner unit, stable across restarts
  std::uint32_t incarnation = 1;  ///< bump on every restart of learner `id`
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(1);
  std::chrono::nanoseconds join_retry = std::chrono::seconds(1);       ///< re-send `join` until welcomed
  std::chrono::nanoseconds join_timeout = std::chrono::seconds(60);    ///< `step()` gives up joining after this
  std::chrono::nanoseconds answer_timeout = std::chrono::seconds(60);  ///< give up waiting for an answer after this
  /// Join again (same incarnation) when a contribution has had no verdict
  /// (ack or reject) for this long, or — runs that are not lock-step, rules
  /// that keep work — no answer: the connection changed under us or the
  /// syncer restarted, and it no longer knows this learner at this address.
  std::chrono::nanoseconds rejoin_after = std::chrono::seconds(10);
  std::size_t max_outbox = 64;  ///< messages kept for retry while the transport refuses them
  /// With a compressed contribution codec: add each fragment's encoding
  /// error to its next outer gradient (error feedback, Seide et al. 2014;
  /// Karimireddy et al. 2019), so that what the codec rounds away is sent
  /// later instead of lost. Costs one buffer of the fragment's size per
  /// fragment and one more pass over the encoded bytes per send.
  bool error_feedback = false;
  /// How global fragments are taken in when the run is not lock-step.
  adoption_rule adopt = adoption_rule::rebase;
  /// The fragments this learner speaks for (all, unless it is one rank of a
  /// learner unit).
  fragment_share share{};
  /// Called on the learner's thread for each join, contribution sent,
  /// verdict, adoption and wait (never per inner step).
  std::function<void(const learner_event&)> on_event{};

  /// These options with the learner's timeouts taken from `t` (checked).
  learner_options with(const timeouts& t) const {
    t.check();
    learner_options o = *this;
    o.heartbeat_interval = t.heartbeat;
    o.join_retry = t.join_retry;
    o.rejoin_after = t.rejoin_after;
    o.answer_timeout = t.answer_timeout;
    return o;
  }
};

}  // namespace diloco
