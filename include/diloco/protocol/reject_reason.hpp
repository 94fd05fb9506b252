// Why a syncer refuses a message: the `reason` codes of `reject` messages on
// the wire (docs/protocol.md, "Reason codes"), each with its own counter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace diloco {

/// Why the syncer refused a message. Each has its own counter. The values are
/// the `reason` codes of `reject` messages on the wire: never renumber, and
/// add new reasons before `count_` (saved counters are kept by code).
enum class reject_reason : std::uint8_t {
  truncated = 0,             ///< wire: a frame of the wrong length, or missing frames
  bad_magic = 1,             ///< wire: not a diloco message
  bad_version = 2,           ///< wire: an unsupported protocol version
  bad_checksum = 3,          ///< wire: header or payload CRC-32C mismatch
  bad_header = 4,            ///< wire: unknown kind, codec, status or flag, reserved field set
  oversized = 5,             ///< wire: payload beyond the receiver's limit
  unexpected_kind = 6,       ///< a kind the syncer does not accept (e.g. an update)
  unknown_learner = 7,       ///< a learner that never joined
  wrong_peer = 8,            ///< sent from another endpoint than the learner joined from
  dead_incarnation = 9,      ///< an older incarnation, or one that has left
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

}  // namespace diloco
