// The decode fuzzer's input format and the syncer it drives, shared by the
// fuzz target (decode_fuzzer.cpp) and the seed-corpus generator
// (make_corpus.cpp), which replays every seed through the same harness.
//
// One fuzz input is a short session: a configuration byte, then messages,
// each a ZeroMQ multipart message as the ROUTER socket delivers it (without
// the routing-id frame: the sender is chosen from a fixed set of peers).
//
//   input    := config message*
//   config   := 1 byte. Bits 0-1: partial-round scaling (0 full_step,
//               1 live_share, 2 and 3 all_share); bit 2: update recipients
//               (0 live learners, 1 contributors); bits 3-4: quorum K − 1;
//               bit 5: key binding — like the ZeroMQ server with CURVE, a
//               decoded message from learner endpoint p that names a learner
//               other than p arrives as `wire_error::unauthorized`.
//   message  := control advance frame*        (frame count from control)
//   control  := 1 byte. Bits 0-2: number of frames, value mod 5 (0 to 4);
//               bit 3: repair the checksums first (only when frame 0 is 144
//               bytes: the payload CRC of frame 1, or of nothing, then the
//               header CRC), so that mutated fields get past the CRC check
//               and reach the syncer's validation; bits 4-6: the sender,
//               an index into `peers`; bit 7: `flush` the syncer afterwards.
//   advance  := 1 byte: the clock moves forward by this many × 50 ms before
//               the message arrives.
//   frame    := u32 little-endian length, then that many bytes (cut short at
//               the end of the input).
//
// A message is decoded as `zeromq::detail::inbox` decodes a whole one (frame
// count, then `wire::decode_header`, then the payload's size and checksum;
// the inbox takes libzmq's frames, and the fuzzer does without libzmq; its
// reassembly of payloads in parts has its own tests,
// tests/transport/zeromq_chunks.cpp) and the envelope, decoded or refused,
// goes to the syncer, which is then polled. Each input starts from a fresh
// syncer, so a crashing input reproduces on its own. After every
// message the harness checks, and traps on a violation:
//   - a decoded header re-encodes (`wire::encode_header`) to the same bytes;
//   - a message is refused at most once, an undecodable one or one of a kind
//     the syncer does not accept exactly once, and a refusal changes nothing
//     but counters (of refusals, liveness and messages sent);
//   - contributions_accepted == contributions_merged + contributions_pending,
//     and the fragments' revisions add up to outer_updates;
//   - every outer update merged at least one contribution, at a scale in
//     [0, 1], and was reported once;
//   - contributions_accepted == merged + pending + dropped, and every
//     dropped round was reported once;
//   - every global fragment, and every update the syncer sends, is finite;
//   - a contribution is accepted only from the endpoint its learner was last
//     welcomed on (a join that added, revived or moved it);
//   - every message the syncer sends encodes to bytes its own decoder accepts
//     and re-encodes identically.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "diloco/merge/weighted_mean.hpp"
#include "diloco/outer/nesterov.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/syncer.hpp"
#include "diloco/transport/inproc.hpp"

namespace diloco::fuzz {

using fuzz_syncer = syncer<outer::nesterov<float>, merge::token_weighted, inproc::endpoint>;

/// Largest payload a message may announce (the ZeroMQ transport's limit is 1 GiB).
inline constexpr std::uint64_t max_payload_bytes = std::uint64_t{1} << 20;
/// One unit of the `advance` byte.
inline constexpr std::chrono::milliseconds clock_unit{50};

/// Senders, by index (control bits 4-6). Peers 0 to 4 are attached to the
/// hub as learner endpoints; 9 and 0xfffffffe are not (sends to them fail);
/// the last is the syncer's own endpoint.
inline constexpr std::array<peer_id, 8> peers{1, 2, 3, 4, 0, 9, 0xfffffffe, syncer_peer};

namespace control {
inline constexpr std::uint8_t frame_mask = 0x07, repair_checksums = 0x08, peer_shift = 4, peer_mask = 0x70,
                              flush = 0x80;
}

/// Three small tensors, 14 parameters.
inline parameter_layout make_layout() {
  parameter_layout l;
  l.add("embed", 6, tensor_role::embedding);
  l.add("w", 5);
  l.add("b", 3);
  return l;
}

inline constexpr std::uint32_t fragment_count = 2;

/// The end rule the fuzzed syncer runs under: 2^40 tokens merged per
/// fragment, within reach of forged counts (2^24 tokens per step).
inline constexpr std::uint64_t max_tokens = std::uint64_t{1} << 40;

/// The syncer's settings for configuration byte `config` (see the format).
inline syncer_options make_options(std::uint8_t config) {
  syncer_options o;
  o.training =
      training_config{.fragments = fragment_count, .sync_period = 4, .overlap = 1, .mixing = 0.5, .lock_step = false};
  switch (config & 0x03) {
    case 0: o.scaling = partial_rounds::full_step; break;
    case 1: o.scaling = partial_rounds::live_share; break;
    default: o.scaling = partial_rounds::all_share; break;
  }
  o.recipients = (config & 0x04) ? update_recipients::contributors : update_recipients::live_learners;
  o.quorum = 1u + ((config >> 3) & 0x03);
  o.max_staleness = 2;
  o.heartbeat_timeout = std::chrono::seconds(10);
  o.max_grace = std::chrono::seconds(1);
  o.grace_factor = 0.5;
  o.end.max_tokens = max_tokens;
  o.log = [](const std::string&) {};
  return o;
}

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "decode_fuzzer: invariant violated: %s\n", what);
  std::fflush(stderr);
  __builtin_trap();
}

inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

/// Reads a fuzz input and feeds its messages to a fresh syncer.
class harness {
 public:
  explicit harness(std::uint8_t config)
      : key_binding_((config & 0x20) != 0),
        layout_(make_layout()),
        initial_(make_initial(layout_.size())),
        self_(hub_.attach(syncer_peer)),
        syncer_(layout_, initial_, self_, with_checks(make_options(config))) {
    for (peer_id p = 0; p <= 4; ++p) learners_.push_back(&hub_.attach(p));
  }

  /// Runs one whole fuzz input; returns the syncer's final counters.
  static syncer_metrics run(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return {};
    harness h(data[0]);
    std::span<const std::uint8_t> rest(data + 1, size - 1);
    while (rest.size() >= 2) h.step(rest);
    return h.syncer_.metrics();
  }

 private:
  static std::vector<float> make_initial(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = 0.25f * float(i) - 1.0f;
    return v;
  }

  syncer_options with_checks(syncer_options o) {
    o.on_update = [this](const update_event& u) {
      check(u.contributors >= 1, "an update event merged no contribution");
      check(u.scale >= 0.0 && u.scale <= 1.0, "an update event's scale is outside [0, 1]");
      ++events_;
    };
    o.on_drop = [this](const drop_event& d) {
      check(!d.contributions.empty(), "a dropped round held no contribution");
      ++drops_;
    };
    return o;
  }

  /// Consumes one message from `in` and handles it.
  void step(std::span<const std::uint8_t>& in) {
    const std::uint8_t ctl = in[0];
    now_ += clock_unit * in[1];
    in = in.subspan(2);

    const std::size_t count = (ctl & control::frame_mask) % 5;
    std::vector<std::vector<std::byte>> frames;  // one allocation each, so ASan sees reads past a frame
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t length = 0;
      const std::size_t have = std::min<std::size_t>(4, in.size());
      std::memcpy(&length, in.data(), have);  // little-endian host (wire.hpp asserts it)
      in = in.subspan(have);
      const std::size_t n = std::min<std::size_t>(length, in.size());
      const auto* bytes = reinterpret_cast<const std::byte*>(in.data());
      frames.emplace_back(bytes, bytes + n);
      in = in.subspan(n);
    }
    if ((ctl & control::repair_checksums) && !frames.empty() && frames[0].size() == wire::header_size) repair(frames);

    const peer_id from = peers[(ctl & control::peer_mask) >> control::peer_shift];
    envelope e = decode(frames, from);
    if (key_binding_ && e.error == wire_error::none && from <= 4 && e.msg.header.learner != from) {
      e.error = wire_error::unauthorized;
      e.msg.payload = byte_buffer();
    }
    const auto before = syncer_.metrics();
    const bool undecodable = e.error != wire_error::none;
    const auto kind = e.msg.header.kind;
    const auto learner = e.msg.header.learner;
    const auto claimed_tokens = e.msg.header.tokens, claimed_steps = e.msg.header.steps;
    syncer_.handle(std::move(e), now_);
    if (syncer_.metrics().contributions_accepted > before.contributions_accepted) {
      claimed_tokens_ = detail::saturating_add(claimed_tokens_, claimed_tokens);
      claimed_steps_ = detail::saturating_add(claimed_steps_, claimed_steps);
    }
    check_refusal(before, undecodable, kind);
    check_binding(before, kind, learner, from);
    (void)syncer_.poll(now_);
    if (ctl & control::flush) syncer_.flush(now_);
    drain();
    check_metrics();
  }

  /// Writes the payload CRC (of frame 1, or of nothing) and the header CRC
  /// into frame 0.
  static void repair(std::vector<std::vector<std::byte>>& frames) {
    auto& h = frames[0];
    const std::span<const std::byte> payload =
        frames.size() >= 2 ? std::span<const std::byte>(frames[1]) : std::span<const std::byte>();
    const std::uint32_t payload_crc = crc32c(payload);
    std::memcpy(h.data() + wire::offset::payload_crc, &payload_crc, 4);
    const std::uint32_t header_crc = crc32c(std::span<const std::byte>(h.data(), wire::offset::header_crc));
    std::memcpy(h.data() + wire::offset::header_crc, &header_crc, 4);
  }

  /// What `zeromq::detail::inbox` does with the frames of a whole message
  /// (after the routing id), plus the round-trip check of a decoded header.
  envelope decode(const std::vector<std::vector<std::byte>>& frames, peer_id from) {
    envelope e;
    e.from = from;
    if (frames.empty() || frames.size() > 2) {
      e.error = wire_error::truncated;
      return e;
    }
    const auto d = wire::decode_header(frames[0], max_payload_bytes);
    if (d.error != wire_error::none) {
      e.error = d.error;
      return e;
    }
    const std::span<const std::byte> payload =
        frames.size() == 2 ? std::span<const std::byte>(frames[1]) : std::span<const std::byte>();
    if (auto bad = wire::check_payload(d, payload); bad != wire_error::none) {
      e.error = bad;
      return e;
    }
    const auto again = wire::encode_header(d.header, payload);
    check(std::memcmp(again.data(), frames[0].data(), wire::header_size) == 0,
          "a decoded header does not re-encode to the same bytes");
    e.msg.header = d.header;
    if (!payload.empty()) {
      e.msg.payload = pool_.acquire(payload.size());
      std::memcpy(e.msg.payload.data(), payload.data(), payload.size());
    }
    return e;
  }

  /// Empties every mailbox, checking that each message the syncer sent goes
  /// through the wire encoder and decoder unchanged.
  void drain() {
    auto check_sent = [](const message& m) {
      if (m.header.kind == message_kind::update) {
        const auto values = m.payload.as<const float>();
        check(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }),
              "the syncer sent a non-finite fragment");
      }
      const auto bytes = wire::encode_header(m.header, m.payload.bytes());
      const auto d = wire::decode_header(bytes, std::uint64_t{1} << 40);
      check(d.error == wire_error::none, "the syncer sent a header its decoder refuses");
      check(wire::check_payload(d, m.payload.bytes()) == wire_error::none,
            "the syncer sent a payload that does not match its header");
      const auto again = wire::encode_header(d.header, m.payload.bytes());
      check(again == bytes, "a header the syncer sent does not survive encode, decode, encode");
    };
    for (auto* l : learners_)
      while (auto e = l->try_receive()) check_sent(e->msg);
    while (auto e = self_.try_receive()) check_sent(e->msg);
  }

  /// Whom each learner was last welcomed as (the endpoint of a join that
  /// added, revived, moved or re-welcomed it: a join not refused whose state
  /// was sent, or failed to send); a contribution accepted from any other
  /// endpoint breaks the identity binding. A refused join binds nothing,
  /// even when sending its reject failed (to a peer that is gone).
  void check_binding(const syncer_metrics& before, message_kind kind, std::uint32_t learner, peer_id from) {
    const auto& after = syncer_.metrics();
    if (kind == message_kind::join && after.rejected_total() == before.rejected_total() &&
        after.updates_sent + after.send_failures > before.updates_sent + before.send_failures)
      bound_[learner] = from;
    if (after.contributions_accepted != before.contributions_accepted) {
      const auto it = bound_.find(learner);
      check(it != bound_.end() && it->second == from,
            "a contribution was accepted from another endpoint than its learner was welcomed on");
    }
  }

  /// A message is refused at most once; an undecodable one, or one of a kind
  /// the syncer does not accept, exactly once. A refusal changes nothing but
  /// counters of refusals, liveness and messages sent (docs/protocol.md: "it
  /// changes no other state"); an undecodable envelope not even those.
  void check_refusal(const syncer_metrics& before, bool undecodable, message_kind kind) const {
    const auto& after = syncer_.metrics();
    const std::uint64_t refused = after.rejected_total() - before.rejected_total();
    check(refused <= 1, "one message was counted as several refusals");
    const bool foreign = kind != message_kind::join && kind != message_kind::contribution &&
                         kind != message_kind::heartbeat && kind != message_kind::leave;
    if (undecodable || foreign) check(refused == 1, "an undecodable or unexpected message was not refused");
    if (refused == 0) return;
    check(after.outer_updates == before.outer_updates &&
              after.contributions_accepted == before.contributions_accepted &&
              after.contributions_merged == before.contributions_merged &&
              after.contributions_pending == before.contributions_pending && after.joins == before.joins &&
              after.rejoins == before.rejoins && after.leaves == before.leaves &&
              after.staleness_sum == before.staleness_sum && after.staleness_max == before.staleness_max,
          "a refused message changed the syncer's state");
    if (undecodable)
      check(after.revived == before.revived && after.declared_dead == before.declared_dead &&
                after.updates_sent == before.updates_sent && after.verdicts_sent == before.verdicts_sent &&
                after.send_failures == before.send_failures,
            "an undecodable message changed more than its refusal counter");
  }

  void check_metrics() const {
    const auto& m = syncer_.metrics();
    check(m.contributions_accepted == m.contributions_merged + m.contributions_pending + m.contributions_dropped,
          "contributions_accepted != contributions_merged + contributions_pending + contributions_dropped");
    check(drops_ == m.rounds_dropped, "rounds_dropped differs from the drop events reported");
    for (std::uint32_t p = 0; p < fragment_count; ++p) {
      const auto values = syncer_.fragment_values(p);
      check(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }),
            "a global fragment is not finite");
    }
    std::uint64_t revisions = 0;
    for (std::uint32_t p = 0; p < fragment_count; ++p) revisions += syncer_.revision(p);
    check(revisions == m.outer_updates, "the fragments' revisions do not add up to outer_updates");
    check(events_ == m.outer_updates, "outer_updates differs from the update events reported");
    // Counts: what is merged is at most what accepted contributions claimed
    // (the syncer credits no more than a learner claims, and less when its
    // history does not allow it); an end rule fires only on merged counts.
    check(m.tokens_merged <= claimed_tokens_, "more tokens merged than accepted contributions claimed");
    check(m.steps_merged <= claimed_steps_, "more steps merged than accepted contributions claimed");
    if (const auto& why = syncer_.ended(); why && why->find("max_tokens") != std::string::npos)
      check(m.tokens_merged / fragment_count >= max_tokens, "the run ended on max_tokens before they were merged");
    if (const auto loss = syncer_.training_loss()) check(std::isfinite(*loss), "the training loss is not finite");
  }

  bool key_binding_;
  parameter_layout layout_;
  std::vector<float> initial_;
  inproc::hub hub_;
  inproc::endpoint& self_;
  std::vector<inproc::endpoint*> learners_;
  buffer_pool pool_;
  std::uint64_t events_ = 0;
  std::uint64_t drops_ = 0;
  std::uint64_t claimed_tokens_ = 0, claimed_steps_ = 0;  ///< by accepted contributions, saturating
  std::map<std::uint32_t, peer_id> bound_;
  fuzz_syncer syncer_;
  time_point now_ = time_point{} + std::chrono::hours(1);
};

}  // namespace diloco::fuzz
