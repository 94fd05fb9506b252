// What learners and the syncer count. Every accepted contribution is merged,
// still pending in an open round, dropped with a round whose result the
// syncer refused to publish, or known lost with a syncer that stopped without
// flushing (accepted = merged + pending + dropped + lost); every refused
// message is counted by reason.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace diloco {

/// Why the syncer refused a message. Each has its own counter. The values are
/// the `reason` codes of `reject` messages on the wire: never renumber.
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
  count_
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
    case reject_reason::count_: break;
  }
  return "unknown";
}

struct syncer_metrics {
  std::uint64_t outer_updates = 0;           ///< merges applied (revisions created), all fragments
  std::uint64_t contributions_accepted = 0;
  std::uint64_t contributions_merged = 0;
  std::uint64_t contributions_pending = 0;   ///< accepted, waiting in an open round
  std::uint64_t contributions_lost = 0;      ///< accepted, pending when the syncer stopped without flushing (restored from a checkpoint)
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

  std::uint64_t rejected_total() const noexcept {
    std::uint64_t n = 0;
    for (auto v : rejected) n += v;
    return n;
  }
  std::uint64_t rejected_for(reject_reason r) const noexcept { return rejected[static_cast<std::size_t>(r)]; }
};

struct learner_metrics {
  std::uint64_t steps = 0;                   ///< inner steps taken
  std::uint64_t tokens = 0;
  std::uint64_t contributions_sent = 0;
  std::uint64_t sends_deferred = 0;          ///< messages queued for retry (refused, or behind refused ones)
  std::uint64_t sends_dropped = 0;           ///< queued messages discarded beyond `max_outbox`, oldest first
  std::uint64_t updates_received = 0;
  std::uint64_t updates_adopted = 0;
  std::uint64_t updates_ignored = 0;         ///< not newer than the adopted revision, or malformed
  std::uint64_t answers_timed_out = 0;       ///< lock-step waits given up after `answer_timeout`
  std::uint64_t contributions_acked = 0;     ///< accepted by the syncer
  std::uint64_t contributions_refused = 0;   ///< refused by the syncer (a `reject` answered them)
  std::uint64_t heartbeats_sent = 0;
  std::uint64_t joins_sent = 0;
  std::uint64_t rejoins_sent = 0;            ///< joins repeated because contributions went unanswered
  std::uint64_t states_sent = 0;             ///< times it gave a model-less syncer its layout and parameters
  std::uint64_t identity_conflicts = 0;      ///< `peer_conflict` rejects: another connection claimed this learner
  std::uint64_t incarnations_skipped = 0;    ///< times it took a newer incarnation before starting (its own was over)
  std::uint64_t wait_ns = 0;                 ///< time `poll` kept it from stepping: joining, lock-step waits
};

}  // namespace diloco
