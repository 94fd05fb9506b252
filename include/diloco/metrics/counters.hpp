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

#include "diloco/serialize.hpp"

namespace diloco {

/// Why the syncer refused a message. Each has its own counter. The values are
/// the `reason` codes of `reject` messages on the wire: never renumber, and
/// add new reasons before `count_` (saved counters are kept by code).
enum class reject_reason : std::uint8_t {
  truncated = 0,            ///< wire: a frame of the wrong length, or missing frames
  bad_magic = 1,            ///< wire: not a diloco message
  bad_version = 2,          ///< wire: an unsupported protocol version
  bad_checksum = 3,         ///< wire: header or payload CRC-32C mismatch
  bad_header = 4,           ///< wire: unknown kind, codec, status or flag, reserved field set
  oversized = 5,            ///< wire: payload beyond the receiver's limit
  unexpected_kind = 6,      ///< a kind the syncer does not accept (e.g. an update)
  unknown_learner = 7,      ///< a learner that never joined
  wrong_peer = 8,           ///< sent from another endpoint than the learner joined from
  dead_incarnation = 9,     ///< an older incarnation, or one that has left
  unknown_incarnation = 10,  ///< a newer incarnation that has not joined
  layout_mismatch = 11,      ///< a join for a different model
  bad_fragment = 12,         ///< fragment index out of range
  bad_size = 13,             ///< element count or payload size does not match the fragment
  bad_codec = 14,            ///< a codec the syncer does not decode
  no_work = 15,              ///< a contribution with zero inner steps
  future_base = 16,          ///< base revision newer than the fragment's
  stale = 17,                ///< base revision more than S revisions old
  duplicate = 18,            ///< the idempotency key (learner, incarnation, fragment, base) was seen
  non_finite = 19,           ///< a payload value that is NaN or infinite
  too_many_learners = 20,    ///< a join beyond `max_learners` learners in the table
  peer_conflict = 21,        ///< a second connection claims a learner that is live on another one
  unauthorized = 22,         ///< the sender's authenticated key does not own the learner id it names
  bad_counts = 23,           ///< tokens or steps a contribution cannot have (see `syncer_options`)
  quarantined = 24,          ///< from a learner refused until it rejoins (repeatedly clipped or refused)
  over_budget = 25,          ///< wire: unfinished when the transport's memory budget was spent, and stalled longest
  count_,
  /// Not a refusal: the reason carried by a verdict that accepts. Never on
  /// the wire (a reject's reason is below `count_`) and never counted.
  none = 255,
};

inline constexpr std::size_t reject_reason_count = static_cast<std::size_t>(reject_reason::count_);

constexpr std::string_view to_string(reject_reason r) noexcept {
  switch (r) {
    case reject_reason::truncated: return "truncated";
    case reject_reason::bad_magic: return "bad_magic";
    case reject_reason::bad_version: return "bad_version";
    case reject_reason::bad_checksum: return "bad_checksum";
    case reject_reason::bad_header: return "bad_header";
    case reject_reason::oversized: return "oversized";
    case reject_reason::unexpected_kind: return "unexpected_kind";
    case reject_reason::unknown_learner: return "unknown_learner";
    case reject_reason::wrong_peer: return "wrong_peer";
    case reject_reason::dead_incarnation: return "dead_incarnation";
    case reject_reason::unknown_incarnation: return "unknown_incarnation";
    case reject_reason::layout_mismatch: return "layout_mismatch";
    case reject_reason::bad_fragment: return "bad_fragment";
    case reject_reason::bad_size: return "bad_size";
    case reject_reason::bad_codec: return "bad_codec";
    case reject_reason::no_work: return "no_work";
    case reject_reason::future_base: return "future_base";
    case reject_reason::stale: return "stale";
    case reject_reason::duplicate: return "duplicate";
    case reject_reason::non_finite: return "non_finite";
    case reject_reason::too_many_learners: return "too_many_learners";
    case reject_reason::peer_conflict: return "peer_conflict";
    case reject_reason::unauthorized: return "unauthorized";
    case reject_reason::bad_counts: return "bad_counts";
    case reject_reason::quarantined: return "quarantined";
    case reject_reason::over_budget: return "over_budget";
    case reject_reason::none: return "none";
    case reject_reason::count_: break;
  }
  return "unknown";
}

namespace detail {
/// `a + b`, or 2^64 − 1 where that overflows: for sums of numbers a peer reported.
constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return b > ~std::uint64_t{0} - a ? ~std::uint64_t{0} : a + b;
}
}  // namespace detail

struct syncer_metrics {
  std::uint64_t outer_updates = 0;           ///< merges applied (revisions created), all fragments
  std::uint64_t contributions_accepted = 0;
  std::uint64_t contributions_merged = 0;
  std::uint64_t contributions_pending = 0;   ///< accepted, waiting in an open round
  std::uint64_t contributions_lost = 0;      ///< accepted, pending when the syncer stopped, restored from a checkpoint that kept no open rounds (before state version 5)
  std::uint64_t contributions_dropped = 0;   ///< accepted, in a round whose result was not published
  std::uint64_t rounds_dropped = 0;          ///< rounds not published (non-finite or too large a result)
  std::uint64_t contributions_clipped = 0;   ///< outer gradients scaled down to the clipping bound
  std::uint64_t weights_clipped = 0;         ///< merge weights cut to the clipping bound
  std::uint64_t quarantines = 0;             ///< learners quarantined
  std::uint64_t learners_forgotten = 0;      ///< table places freed (gone too long, or to make room)
  std::array<std::uint64_t, reject_reason_count> rejected{};
  std::uint64_t joins = 0;                   ///< first joins of a learner id
  std::uint64_t rejoins = 0;                 ///< joins of a new incarnation
  std::uint64_t reconnects = 0;              ///< joins of a known incarnation from a new peer
  std::uint64_t leaves = 0;
  std::uint64_t declared_dead = 0;           ///< heartbeat timeouts
  std::uint64_t revived = 0;                 ///< learners heard from again after a timeout
  std::uint64_t updates_sent = 0;
  std::uint64_t verdicts_sent = 0;           ///< acks and rejects
  std::uint64_t send_failures = 0;           ///< updates the transport refused
  std::uint64_t staleness_sum = 0;           ///< Σ (revision at merge − base revision) over merged contributions
  std::uint64_t staleness_max = 0;
  /// Rounds merged without every learner of the run: with a world size M,
  /// fewer than M distinct contributors; otherwise fewer than the learners
  /// live when the round closed. 0 in a healthy synchronous run.
  std::uint64_t partial_rounds = 0;
  std::uint64_t tokens_merged = 0;           ///< Σ tokens of merged contributions, every fragment (P × the tokens trained)
  std::uint64_t steps_merged = 0;            ///< Σ inner steps of merged contributions, every fragment
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
    &syncer_metrics::outer_updates,         &syncer_metrics::contributions_accepted,
    &syncer_metrics::contributions_merged,  &syncer_metrics::contributions_pending,
    &syncer_metrics::contributions_lost,    &syncer_metrics::contributions_dropped,
    &syncer_metrics::rounds_dropped,        &syncer_metrics::contributions_clipped,
    &syncer_metrics::weights_clipped,       &syncer_metrics::quarantines,
    &syncer_metrics::learners_forgotten,    &syncer_metrics::joins,
    &syncer_metrics::rejoins,               &syncer_metrics::reconnects,
    &syncer_metrics::leaves,                &syncer_metrics::declared_dead,
    &syncer_metrics::revived,               &syncer_metrics::updates_sent,
    &syncer_metrics::verdicts_sent,         &syncer_metrics::send_failures,
    &syncer_metrics::staleness_sum,         &syncer_metrics::staleness_max,
    &syncer_metrics::partial_rounds,        &syncer_metrics::tokens_merged,
    &syncer_metrics::steps_merged,          &syncer_metrics::contributions_replayed,
    &syncer_metrics::losses_ignored,        &syncer_metrics::payload_bytes_received,
    &syncer_metrics::payload_bytes_sent,    &syncer_metrics::steps_reported_earlier,
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
    throw corrupt_state("diloco: the saved counters hold " + std::to_string(counters) + " counters, this version knows " +
                        std::to_string(syncer_counter_count) + " (saved by a newer diloco?)");
  for (std::uint32_t i = 0; i < counters; ++i) m.*syncer_counter_fields[i] = serial::read_pod<std::uint64_t>(in, "counter");
  const auto reasons = serial::read_pod<std::uint32_t>(in, "refusal reason count");
  if (reasons > reject_reason_count)
    throw corrupt_state("diloco: the saved counters hold " + std::to_string(reasons) +
                        " refusal reasons, this version knows " + std::to_string(reject_reason_count) +
                        " (saved by a newer diloco?)");
  for (std::uint32_t r = 0; r < reasons; ++r) m.rejected[r] = serial::read_pod<std::uint64_t>(in, "refusal count");
  return m;
}

struct learner_metrics {
  std::uint64_t steps = 0;                   ///< inner steps taken (restored with a loaded state)
  std::uint64_t tokens = 0;
  std::uint64_t steps_computed = 0;          ///< inner steps this incarnation took (`steps` without a loaded state's)
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
  std::uint64_t sends_deferred = 0;          ///< messages queued for retry (refused, or behind refused ones)
  std::uint64_t sends_dropped = 0;           ///< queued messages discarded beyond `max_outbox`, oldest first
  std::uint64_t updates_received = 0;
  std::uint64_t updates_adopted = 0;
  std::uint64_t updates_ignored = 0;         ///< not newer than the adopted revision, or malformed
  std::uint64_t answers_timed_out = 0;       ///< answers given up after `answer_timeout` (lock-step waits, work in flight)
  std::uint64_t contributions_acked = 0;     ///< accepted by the syncer
  std::uint64_t contributions_refused = 0;   ///< refused by the syncer (a `reject` answered them)
  std::uint64_t heartbeats_sent = 0;
  std::uint64_t joins_sent = 0;
  std::uint64_t rejoins_sent = 0;            ///< joins repeated because contributions went unanswered
  std::uint64_t states_sent = 0;             ///< times it gave a model-less syncer its layout and parameters
  std::uint64_t fragments_resumed = 0;       ///< fragments whose loaded work it kept when it joined (`learner::load`)
  std::uint64_t identity_conflicts = 0;      ///< `peer_conflict` rejects: another connection claimed this learner
  std::uint64_t joins_refused = 0;           ///< `too_many_learners` rejects: the syncer's table was full (the join retry goes on)
  std::uint64_t messages_refused = 0;        ///< `unexpected_kind` and `unknown_incarnation` rejects
  std::uint64_t incarnations_skipped = 0;    ///< times it took a newer incarnation before starting (its own was over)
  std::uint64_t wait_ns = 0;                 ///< time `poll` kept it from stepping: joining, lock-step waits
  std::uint64_t bytes_sent = 0;              ///< payload bytes of its contributions and states, as sent (compressed)
  std::uint64_t bytes_received = 0;          ///< payload bytes of the updates it took in, as they came (compressed)
};

}  // namespace diloco
