// What learners and the syncer count, and how the syncer's counters are
// saved. Every accepted contribution is merged, still pending in an open
// round, dropped with a round whose result the syncer refused to publish, or
// known lost with a syncer that stopped without flushing (accepted = merged +
// pending + dropped + lost); every refused message is counted by reason.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>

#include "diloco/protocol/reject_reason.hpp"
#include "diloco/serialize.hpp"

namespace diloco {

namespace detail {
/// `a + b`, or 2^64 − 1 where that overflows: for sums of numbers a peer reported.
constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return b > ~std::uint64_t{0} - a ? ~std::uint64_t{0} : a + b;
}
}  // namespace detail

struct syncer_metrics {
  std::uint64_t outer_updates = 0;  ///< merges applied (revisions created), all fragments
  std::uint64_t contributions_accepted = 0;
  std::uint64_t contributions_merged = 0;
  std::uint64_t contributions_pending = 0;  ///< accepted, waiting in an open round
  std::uint64_t contributions_lost = 0;  ///< accepted, pending when the syncer stopped, restored from a checkpoint that
                                         ///< kept no open rounds (before state version 5)
  std::uint64_t contributions_dropped = 0;  ///< accepted, in a round whose result was not published
  std::uint64_t rounds_dropped = 0;         ///< rounds not published (non-finite or too large a result)
  std::uint64_t contributions_clipped = 0;  ///< outer gradients scaled down to the clipping bound
  std::uint64_t weights_clipped = 0;        ///< merge weights cut to the clipping bound
  std::uint64_t quarantines = 0;            ///< learners quarantined
  std::uint64_t learners_forgotten = 0;     ///< table places freed (gone too long, or to make room)
  std::array<std::uint64_t, reject_reason_count> rejected{};
  std::uint64_t joins = 0;       ///< first joins of a learner id
  std::uint64_t rejoins = 0;     ///< joins of a new incarnation
  std::uint64_t reconnects = 0;  ///< joins of a known incarnation from a new peer
  std::uint64_t leaves = 0;
  std::uint64_t declared_dead = 0;  ///< heartbeat timeouts
  std::uint64_t revived = 0;        ///< learners heard from again after a timeout
  std::uint64_t updates_sent = 0;
  std::uint64_t verdicts_sent = 0;  ///< acks and rejects
  std::uint64_t send_failures = 0;  ///< updates the transport refused
  std::uint64_t staleness_sum = 0;  ///< Σ (revision at merge − base revision) over merged contributions
  std::uint64_t staleness_max = 0;
  /// Rounds merged without every learner of the run: with a world size M,
  /// fewer than M distinct contributors; otherwise fewer than the learners
  /// live when the round closed. 0 in a healthy synchronous run.
  std::uint64_t partial_rounds = 0;
  std::uint64_t tokens_merged = 0;  ///< Σ tokens of merged contributions, every fragment (P × the tokens trained)
  std::uint64_t steps_merged = 0;   ///< Σ inner steps of merged contributions, every fragment
  /// Accepted contributions a restarted syncer took back from a journal
  /// (`syncer::replay`): acknowledged by the syncer that crashed, after its
  /// last checkpoint. They count as accepted and pending again.
  std::uint64_t contributions_replayed = 0;
  std::uint64_t losses_ignored = 0;          ///< heartbeat losses left out of the training loss: NaN or infinite
  std::uint64_t payload_bytes_received = 0;  ///< payload bytes of accepted contributions, as they came (compressed)
  std::uint64_t payload_bytes_sent = 0;      ///< payload bytes of the updates sent, as they went (compressed)
  /// Inner steps reported computed by learner incarnations that are over
  /// (replaced by a newer one, or forgotten); `syncer::steps_computed` adds
  /// the current ones.
  std::uint64_t steps_reported_earlier = 0;
  /// Contributions whose reported tokens or steps were more than the
  /// learner's history allows, credited only up to that bound.
  std::uint64_t counts_capped = 0;

  std::uint64_t rejected_total() const noexcept {
    std::uint64_t n = 0;
    for (auto v : rejected) n += v;
    return n;
  }
  /// The refusals for reason `r` (0 for `none`).
  std::uint64_t rejected_for(reject_reason r) const noexcept {
    const auto i = static_cast<std::size_t>(r);
    return i < rejected.size() ? rejected[i] : 0;
  }
};

/// The syncer's counters other than `rejected`, in the order they are saved.
/// A new counter is appended at the end: a state saved before it existed is
/// then read with the new counter at 0.
using syncer_counter = std::uint64_t syncer_metrics::*;  ///< one counter of `syncer_metrics`
inline constexpr syncer_counter syncer_counter_fields[] = {
    &syncer_metrics::outer_updates,
    &syncer_metrics::contributions_accepted,
    &syncer_metrics::contributions_merged,
    &syncer_metrics::contributions_pending,
    &syncer_metrics::contributions_lost,
    &syncer_metrics::contributions_dropped,
    &syncer_metrics::rounds_dropped,
    &syncer_metrics::contributions_clipped,
    &syncer_metrics::weights_clipped,
    &syncer_metrics::quarantines,
    &syncer_metrics::learners_forgotten,
    &syncer_metrics::joins,
    &syncer_metrics::rejoins,
    &syncer_metrics::reconnects,
    &syncer_metrics::leaves,
    &syncer_metrics::declared_dead,
    &syncer_metrics::revived,
    &syncer_metrics::updates_sent,
    &syncer_metrics::verdicts_sent,
    &syncer_metrics::send_failures,
    &syncer_metrics::staleness_sum,
    &syncer_metrics::staleness_max,
    &syncer_metrics::partial_rounds,
    &syncer_metrics::tokens_merged,
    &syncer_metrics::steps_merged,
    &syncer_metrics::contributions_replayed,
    &syncer_metrics::losses_ignored,
    &syncer_metrics::payload_bytes_received,
    &syncer_metrics::payload_bytes_sent,
    &syncer_metrics::steps_reported_earlier,
    &syncer_metrics::counts_capped,
};
inline constexpr std::size_t syncer_counter_count = std::size(syncer_counter_fields);
static_assert(syncer_counter_count * sizeof(std::uint64_t) + sizeof(syncer_metrics::rejected) == sizeof(syncer_metrics),
              "diloco: a syncer_metrics counter is missing from syncer_counter_fields, so it would not be saved");

/// Writes `m` field by field: tag `SMET` version 1, u32 number of counters,
/// each as u64 in `syncer_counter_fields` order, u32 number of refusal
/// reasons, each count as u64 in code order. 8 bytes per counter.
inline void write_syncer_metrics(std::ostream& out, const syncer_metrics& m) {
  serial::write_tag(out, "SMET", 1);
  serial::write_pod(out, static_cast<std::uint32_t>(syncer_counter_count));
  for (const auto field : syncer_counter_fields) serial::write_pod(out, m.*field);
  serial::write_pod(out, static_cast<std::uint32_t>(reject_reason_count));
  for (const auto n : m.rejected) serial::write_pod(out, n);
}

/// Reads what `write_syncer_metrics` wrote, also by an older diloco that knew
/// fewer counters or reasons (those missing read as 0). Throws
/// `corrupt_state` on a truncated block or one with more counters or reasons
/// than this version knows (written by a newer diloco).
inline syncer_metrics read_syncer_metrics(std::istream& in) {
  serial::expect_tag(in, "SMET", 1);
  syncer_metrics m;
  const auto counters = serial::read_pod<std::uint32_t>(in, "counter count");
  if (counters > syncer_counter_count)
    throw corrupt_state("diloco: the saved counters hold " + std::to_string(counters) +
                        " counters, this version knows " + std::to_string(syncer_counter_count) +
                        " (saved by a newer diloco?)");
  for (std::uint32_t i = 0; i < counters; ++i)
    m.*syncer_counter_fields[i] = serial::read_pod<std::uint64_t>(in, "counter");
  const auto reasons = serial::read_pod<std::uint32_t>(in, "refusal reason count");
  if (reasons > reject_reason_count)
    throw corrupt_state("diloco: the saved counters hold " + std::to_string(reasons) +
                        " refusal reasons, this version knows " + std::to_string(reject_reason_count) +
                        " (saved by a newer diloco?)");
  for (std::uint32_t r = 0; r < reasons; ++r) m.rejected[r] = serial::read_pod<std::uint64_t>(in, "refusal count");
  return m;
}

struct learner_metrics {
  std::uint64_t steps = 0;  ///< inner steps taken (restored with a loaded state)
  std::uint64_t tokens = 0;
  std::uint64_t steps_computed = 0;  ///< inner steps this incarnation took (`steps` without a loaded state's)
  /// Where this incarnation's work went, in fragment-steps (each inner step
  /// counts once per fragment, P per step; docs/design.md, "Keeping every
  /// step"): carried by contributions sent, thrown away by an adoption that
  /// restarted the counters (`adoption_rule::overwrite`, lock-step runs), in
  /// contributions the syncer refused, and still unsent when the learner
  /// finished.
  std::uint64_t steps_sent = 0;
  std::uint64_t steps_overwritten = 0;
  std::uint64_t steps_refused = 0;
  std::uint64_t steps_unsent = 0;
  std::uint64_t contributions_sent = 0;
  std::uint64_t sends_deferred = 0;  ///< messages queued for retry (refused, or behind refused ones)
  std::uint64_t sends_dropped = 0;   ///< queued messages discarded beyond `max_outbox`, oldest first
  std::uint64_t updates_received = 0;
  std::uint64_t updates_adopted = 0;
  std::uint64_t updates_ignored = 0;  ///< not newer than the adopted revision, or malformed
  /// Messages dropped unread: stamped with an older epoch than their syncer
  /// shard had been heard with (a replaced syncer's; docs/protocol.md, "Epochs").
  std::uint64_t stale_epochs = 0;
  std::uint64_t answers_timed_out = 0;    ///< answers given up after `answer_timeout` (lock-step waits, work in flight)
  std::uint64_t contributions_acked = 0;  ///< accepted by the syncer
  std::uint64_t contributions_refused = 0;  ///< refused by the syncer (a `reject` answered them)
  std::uint64_t heartbeats_sent = 0;
  std::uint64_t joins_sent = 0;
  std::uint64_t rejoins_sent = 0;        ///< joins repeated because contributions went unanswered
  std::uint64_t states_sent = 0;         ///< times it gave a model-less syncer its layout and parameters
  std::uint64_t fragments_resumed = 0;   ///< fragments whose loaded work it kept when it joined (`learner::load`)
  std::uint64_t identity_conflicts = 0;  ///< `peer_conflict` rejects: another connection claimed this learner
  std::uint64_t joins_refused =
      0;  ///< `too_many_learners` rejects: the syncer's table was full (the join retry goes on)
  std::uint64_t messages_refused = 0;      ///< `unexpected_kind` and `unknown_incarnation` rejects
  std::uint64_t incarnations_skipped = 0;  ///< times it took a newer incarnation before starting (its own was over)
  std::uint64_t wait_ns = 0;               ///< time `poll` kept it from stepping: joining, lock-step waits
  std::uint64_t bytes_sent = 0;            ///< payload bytes of its contributions and states, as sent (compressed)
  std::uint64_t bytes_received = 0;        ///< payload bytes of the updates it took in, as they came (compressed)
};

}  // namespace diloco
