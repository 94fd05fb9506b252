// What a syncer says to learners: welcomes, fragments, acknowledgements and
// ends, and its refusals, each counted and logged, answered when the sender
// can be told.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "diloco/concepts/transport.hpp"
#include "diloco/error.hpp"
#include "diloco/metrics/counters.hpp"
#include "diloco/metrics/events.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/protocol/reject_reason.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/runtime/syncer/log.hpp"
#include "diloco/runtime/syncer/membership.hpp"
#include "diloco/runtime/syncer/options.hpp"
#include "diloco/runtime/syncer/state.hpp"

namespace diloco::detail {

/// A transport's `try_send` without the transport's type: a reference to
/// the transport and a function that calls it. The syncer's parts above the
/// transport are then the same code whatever carries the messages, so that
/// a program may compile them once (diloco/separate_compilation.hpp).
class message_sender {
 public:
  /// Refers to `t`, which outlives this.
  template <transport Transport>
  explicit message_sender(Transport& t) noexcept
      : transport_(std::addressof(t)), try_send_([](void* object, peer_id to, message& m) -> std::error_code {
          return static_cast<Transport*>(object)->try_send(to, m);
        }) {}

  std::error_code try_send(peer_id to, message& m) const { return try_send_(transport_, to, m); }

 private:
  void* transport_;
  std::error_code (*try_send_)(void*, peer_id, message&);
};

/// Sends a syncer's messages through its transport without ever blocking
/// (`try_send`; a failed send is counted in `send_failures`), and keeps the
/// pool the payloads of its updates come from.
template <class T>
class syncer_outbox {
 public:
  /// The arguments are the syncer's and outlive this.
  syncer_outbox(message_sender transport, const syncer_options& options, syncer_metrics& metrics, syncer_log& log)
      : transport_(transport),
        options_(options),
        metrics_(metrics),
        log_(log),
        update_codec_(payload_codec<T>(options.training.codecs.updates)) {}

  /// A payload buffer of `bytes` from the pool.
  byte_buffer acquire(std::size_t bytes) { return pool_.acquire(bytes); }

  /// Counts and logs a refused message; answers it with a `reject` when it
  /// came from learner `to`, authenticated by its peer and incarnation.
  void reject(reject_reason why, const message_header& h, const learner_entry* to = nullptr) {
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    if (options_.on_contribution && to && h.kind == message_kind::contribution)
      options_.on_contribution(
          contribution_event{h.learner, h.incarnation, h.sequence, h.fragment, h.base_revision, false, why});
    log_(why, [&] { return "refused message " + syncer_log::describe(h) + ": " + std::string(to_string(why)); });
    if (to) send_reject(to->peer, h, why);
  }

  /// Counts and logs a message refused for who sent it, and answers the
  /// connection it came from; `current` is the learner's live incarnation
  /// (sent back in a `dead_incarnation` reject's `revision`).
  void reject_sender(reject_reason why, peer_id from, const message_header& h, std::uint32_t current = 0) {
    reject(why, h);
    send_reject(from, h, why, current);
  }

  /// Counts and logs a message from `from` that could not be decoded.
  void reject_undecodable(peer_id from, wire_error error) {
    // `none` never comes here (`syncer::handle` takes those); counted as
    // truncated rather than left out of the counters if it did.
    reject_reason why = reject_reason::truncated;
    switch (error) {
      case wire_error::none:
      case wire_error::truncated: why = reject_reason::truncated; break;
      case wire_error::bad_magic: why = reject_reason::bad_magic; break;
      case wire_error::bad_version: why = reject_reason::bad_version; break;
      case wire_error::bad_checksum: why = reject_reason::bad_checksum; break;
      case wire_error::bad_header: why = reject_reason::bad_header; break;
      case wire_error::oversized: why = reject_reason::oversized; break;
      case wire_error::unauthorized: why = reject_reason::unauthorized; break;
      case wire_error::over_budget: why = reject_reason::over_budget; break;
    }
    ++metrics_.rejected[static_cast<std::size_t>(why)];
    log_(why, [&] {
      return "refused undecodable message from peer " + std::to_string(from) + ": " + std::string(to_string(why));
    });
  }

  /// Acknowledges message `about` of learner `to`.
  void ack(const learner_entry& to, const message_header& about) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::ack;
    h.learner = about.learner;
    h.incarnation = to.incarnation;
    // A leave's ack names this shard, as every answer that concerns no fragment (docs/protocol.md, "Epochs").
    h.fragment = about.kind == message_kind::contribution ? about.fragment : options_.shard.index;
    h.base_revision = about.base_revision;
    h.answers = about.sequence;
    if (send(to.peer, m))
      ++metrics_.send_failures;
    else
      ++metrics_.verdicts_sent;
  }

  /// Tells learner (`learner`, `incarnation`) on connection `to` that the run is over.
  void end(peer_id to, std::uint32_t learner, std::uint32_t incarnation) {
    message m;
    m.header.kind = message_kind::end;
    m.header.learner = learner;
    m.header.incarnation = incarnation;
    m.header.fragment = options_.shard.index;
    if (send(to, m)) ++metrics_.send_failures;
  }

  /// After the end: a learner's message is answered with `end` and changes
  /// nothing (a learner that restarts or rejoins then learns it is over).
  void tell_ended(const envelope& e) {
    const auto& h = e.msg.header;
    if (e.error != wire_error::none || h.learner == syncer_peer) return;
    if (h.kind == message_kind::join || h.kind == message_kind::contribution || h.kind == message_kind::heartbeat)
      end(e.from, h.learner, h.incarnation);
  }

  /// The welcome of learner (`learner`, `incarnation`) on connection `to`
  /// to a run of the model `layout`.
  void welcome(peer_id to, std::uint32_t learner, std::uint32_t incarnation, const parameter_layout& layout) {
    message m = welcome_message<T>(learner, incarnation, layout.fingerprint(), layout.size(), options_.training);
    if (options_.shard.count > 1) {
      // Which shard this is, for the learner's `sharded` transport (docs/protocol.md, "Sharded syncers").
      m.header.fragment = options_.shard.index;
      m.header.steps = options_.shard.count;
    }
    if (send(to, m)) ++metrics_.send_failures;
  }

  /// Fragment p's global values `f`, in the update codec, to learner `id`;
  /// `answers` names the contribution it answers (0: none) and `hold_ns`
  /// how long that contribution waited here.
  void fragment(std::uint32_t id, const learner_entry& l, std::uint32_t p, const fragment_record<T>& f,
                std::uint64_t answers, update_status status, std::int64_t hold_ns) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::update;
    h.status = status;
    h.learner = id;
    h.incarnation = l.incarnation;
    h.fragment = p;
    h.revision = f.revision;
    h.answers = answers;
    h.hold_ns = hold_ns;
    h.element_count = f.global.size();
    h.codec = update_codec_;
    h.block = block_scaled(h.codec) ? options_.training.codecs.block : 0;
    m.payload = pool_.acquire(payload::size(h.codec, f.global.size(), h.block));
    // The global values are finite (every outer step is checked), and a
    // compressed codec saturates rather than overflow: this cannot fail.
    [[maybe_unused]] const bool encoded = payload::encode<T>(
        h.codec, h.block, f.global.size(), [&](std::size_t i) { return f.global[i]; }, m.payload.bytes());
    assert(encoded);
    const std::size_t bytes = m.payload.size();  // the transport may take the payload
    if (send(l.peer, m)) {
      ++metrics_.send_failures;
    } else {
      ++metrics_.updates_sent;
      metrics_.payload_bytes_sent += bytes;
    }
  }

  /// Whether `peer` is still connected: a `peer_conflict` reject about the
  /// claiming message is sent to it, and a transport that knows the peer is
  /// gone refuses the send (`errc::unknown_peer`, `errc::closed`).
  bool reachable(peer_id peer, const message_header& claim) {
    message m;
    m.header.kind = message_kind::reject;
    m.header.learner = claim.learner;
    m.header.incarnation = claim.incarnation;
    m.header.answers = 0;  // not an answer to anything the learner sent
    m.header.reason = static_cast<std::uint8_t>(reject_reason::peer_conflict);
    const auto e = send(peer, m);
    return !e || e == make_error_code(errc::queue_full);
  }

 private:
  /// Every message leaves through here, stamped with this syncer's epoch.
  std::error_code send(peer_id to, message& m) {
    m.header.epoch = options_.epoch;
    return transport_.try_send(to, m);
  }

  void send_reject(peer_id to, const message_header& about, reject_reason why, std::uint64_t revision = 0) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::reject;
    h.learner = about.learner;
    h.incarnation = about.incarnation;
    h.fragment = about.kind == message_kind::contribution ? about.fragment : options_.shard.index;
    h.base_revision = about.kind == message_kind::contribution ? about.base_revision : 0;
    h.answers = about.sequence;
    h.revision = revision;
    h.reason = static_cast<std::uint8_t>(why);
    if (send(to, m))
      ++metrics_.send_failures;
    else
      ++metrics_.verdicts_sent;
  }

  message_sender transport_;
  const syncer_options& options_;
  syncer_metrics& metrics_;
  syncer_log& log_;
  buffer_pool pool_;
  codec_id update_codec_;
};

}  // namespace diloco::detail
