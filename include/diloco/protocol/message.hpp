// The messages learners and the syncer exchange.
//
// Every transport moves `message`s: a fixed header of plain fields and an
// optional payload (a packed fragment, encoded as the header's codec says).
// Network transports serialize exactly these fields; the in-process transport
// moves them as they are.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "diloco/codec/codec_id.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// Identifies an endpoint on a transport. Learners use their learner id.
using peer_id = std::uint32_t;

/// The peer id of the syncer.
inline constexpr peer_id syncer_peer = std::numeric_limits<peer_id>::max();

enum class message_kind : std::uint8_t {
  join = 1,          ///< learner → syncer: "I am learner L, incarnation I, with this layout"
  welcome = 2,       ///< syncer → learner: the training configuration; P `update`s follow
  contribution = 3,  ///< learner → syncer: an outer gradient Δ_p against `base_revision`
  update = 4,        ///< syncer → learner: global fragment Θ_p at `revision`
  heartbeat = 5,     ///< learner → syncer: liveness, progress and timing
  leave = 6,         ///< learner → syncer: finished, stop counting me as live
  ack = 7,           ///< syncer → learner: contribution `answers` was accepted into a round
  reject = 8,        ///< syncer → learner: message `answers` was refused for `reason`
  layout = 9,        ///< learner → syncer: its parameter layout (asked for by a `state_wanted` welcome)
  state = 10,        ///< learner → syncer: its initial values of fragment `fragment` (idem)
  end = 11,          ///< syncer → learner: the run is over (its end rule was met); stop training
};

/// The largest block a header may announce: beyond it a block's 4-byte
/// scale costs nothing worth saving, and a bound keeps sizes in range.
inline constexpr std::uint32_t max_codec_block = 1u << 16;

/// The codec of a payload of `T`s: `f32` for `float`, `f64` for `double`. Any
/// other type has no codec and is refused at compile time.
template <scalar T>
inline constexpr codec_id codec_of = std::is_same_v<T, float> ? codec_id::f32 : codec_id::f64;

/// The codec of a model of `T`s' payloads when the configuration names
/// `configured` (a float codec): `f32` means full precision, `codec_of<T>`
/// (`f64` for a `double` model); the compressed codecs stay as they are.
template <scalar T>
constexpr codec_id payload_codec(codec_id configured) noexcept {
  return configured == codec_id::f32 ? codec_of<T> : configured;
}

/// Why an update was sent.
enum class update_status : std::uint8_t {
  merged = 0,  ///< a new revision after a merge
  resync = 1,  ///< the current revision, sent on join or after a rejected contribution
};

/// Bits of `message_header::flags`.
enum message_flags : std::uint8_t {
  final_contribution = 1,  ///< contribution: the learner's last before it leaves
  state_wanted = 2,        ///< welcome: the syncer has no model yet; send `layout` and `state`s
};

/// All header fields; each message kind uses the ones its comment names.
struct message_header {
  message_kind kind = message_kind::heartbeat;
  codec_id codec = codec_id::none;               ///< contribution, update
  update_status status = update_status::merged;  ///< update
  std::uint8_t flags = 0;                        ///< contribution, welcome (`message_flags`)
  std::uint8_t reason = 0;                       ///< reject: a `reject_reason` code (metrics/counters.hpp)
  /// contribution, update: values per block of a block-scaled codec;
  /// welcome: the block the syncer asks contributions to use; else 0.
  std::uint32_t block = 0;
  std::uint32_t learner = 0;        ///< all kinds: the learner concerned
  std::uint32_t incarnation = 0;    ///< all kinds: bumps each time learner L restarts
  std::uint32_t fragment = 0;       ///< contribution, update, ack, state
  std::uint64_t sequence = 0;       ///< learner → syncer: per-incarnation message counter
  std::uint64_t answers = 0;        ///< update, ack, reject: sequence of the recipient's message it answers
  std::uint64_t base_revision = 0;  ///< contribution, ack: revision Δ is computed against
  std::uint64_t revision = 0;       ///< update: revision of the fragment carried
  std::uint64_t tokens = 0;         ///< contribution: c_tokens; heartbeat: tokens so far
  /// welcome, update, ack, reject, end: the epoch of the sending syncer's
  /// leadership (0: none; docs/protocol.md, "Epochs"). On the wire it takes
  /// the 8 bytes `tokens` has in the learner's messages.
  std::uint64_t epoch = 0;
  std::uint64_t steps = 0;  ///< contribution: c_steps; heartbeat: local step
  std::uint64_t element_count =
      0;                          ///< contribution, update, state, layout: payload elements; join, welcome: model size
  std::uint64_t layout = 0;       ///< join, welcome: parameter layout fingerprint
  std::int64_t step_time_ns = 0;  ///< heartbeat, contribution: smoothed duration of one inner step
  std::int64_t transfer_ns = 0;   ///< heartbeat, contribution: smoothed network time of a round trip
  std::int64_t hold_ns = 0;       ///< update: how long the syncer held the answered contribution
  /// heartbeat: the learner's mean training loss (`step_stats::loss`) over
  /// its inner steps since its previous heartbeat; none when it took no step
  /// since then. On the wire it takes the 8 bytes `hold_ns` has in updates
  /// (docs/protocol.md), so a receiver that predates it ignores it.
  std::optional<double> loss{};
  // welcome: the training configuration every learner adopts
  std::uint32_t fragment_count = 0;  ///< P
  std::uint32_t sync_period = 0;     ///< H, inner steps
  std::uint32_t overlap = 0;         ///< τ, inner steps
  std::uint8_t lock_step = 0;        ///< 1: wait for the answer τ steps after each send
  double mixing = 0.0;               ///< α
};

struct message {
  message_header header;
  byte_buffer payload;
};

/// What a network transport found wrong with bytes it could not turn into a
/// message (see `wire::decode`).
enum class wire_error : std::uint8_t {
  none = 0,
  truncated,     ///< a frame shorter or longer than the protocol allows, or missing frames
  bad_magic,     ///< not a diloco message
  bad_version,   ///< a protocol version this build does not speak
  bad_checksum,  ///< header or payload CRC-32C mismatch
  bad_header,    ///< an unknown kind, codec, status or flag, or a reserved field not zero
  oversized,     ///< more payload than the receiver's limit
  /// Decoded, but the sender's authenticated identity (a CURVE key) does not
  /// own the learner id the header names; the envelope keeps the header.
  unauthorized,
  /// Unfinished when the receiver's memory budget was spent, and its parts
  /// had arrived least recently: freed and dropped (`memory_bytes` of the
  /// transport's `socket_options`).
  over_budget,
};

/// A received message and the peer it came from (as the transport saw it, not
/// as the header claims). A network transport that received bytes it could
/// not decode delivers an envelope with `error` set and an empty message, so
/// the receiver counts it.
struct envelope {
  peer_id from = 0;
  message msg;
  wire_error error = wire_error::none;
};

}  // namespace diloco
