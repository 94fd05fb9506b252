// The wire format of diloco messages, shared by every network transport and
// specified in docs/protocol.md: a fixed 144-byte little-endian header, then
// (for contributions and updates) the payload. Decoding trusts nothing: every
// field is range-checked and both header and payload carry a CRC-32C.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diloco/codec/blocks.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/reject_reason.hpp"

namespace diloco::wire {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; a big-endian host needs byte swaps in wire.hpp");

inline constexpr std::array<std::byte, 4> magic{std::byte{'D'}, std::byte{'L'}, std::byte{'C'}, std::byte{'O'}};
inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t header_size = 144;

/// Byte offsets of the header fields (docs/protocol.md has the table).
namespace offset {
inline constexpr std::size_t magic = 0, version = 4, kind = 6, codec = 7, status = 8, flags = 9, lock_step = 10,
                             reason = 11, learner = 12, incarnation = 16, fragment = 20, fragment_count = 24,
                             sync_period = 28, overlap = 32, block = 36, sequence = 40, answers = 48,
                             base_revision = 56, revision = 64, tokens = 72, steps = 80, element_count = 88,
                             layout = 96, step_time_ns = 104, transfer_ns = 112, hold_ns = 120, mixing = 128,
                             payload_crc = 136, header_crc = 140;
/// A heartbeat's training loss (f64) takes the bytes an update's `hold_ns` has.
inline constexpr std::size_t loss = hold_ns;
/// The syncer's epoch takes the bytes `tokens` has in a learner's messages.
inline constexpr std::size_t epoch = tokens;
}  // namespace offset

/// The largest element count a header may announce (2^56): far beyond any
/// receiver's payload limit, and small enough that no payload size overflows.
inline constexpr std::uint64_t max_element_count = std::uint64_t{1} << 56;

/// Bytes of a payload of `n` elements in codec `c` with blocks of `block`
/// (block-scaled codecs only, ≥ 1); 0 for `none`. Precondition:
/// `n ≤ max_element_count`.
constexpr std::uint64_t payload_size(codec_id c, std::uint64_t n, std::uint32_t block) noexcept {
  return codec::encoded_size(c, n, block);
}

/// Whether messages of this kind go from a syncer to a learner (and carry
/// the syncer's epoch).
constexpr bool from_syncer(message_kind k) noexcept {
  return k == message_kind::welcome || k == message_kind::update || k == message_kind::ack ||
         k == message_kind::reject || k == message_kind::end;
}

/// Whether messages of this kind carry a payload frame.
constexpr bool carries_payload(message_kind k) noexcept {
  return k == message_kind::contribution || k == message_kind::update || k == message_kind::layout ||
         k == message_kind::state;
}

namespace detail {

template <class T>
void put(std::span<std::byte, header_size> out, std::size_t at, T value) noexcept {
  std::memcpy(out.data() + at, &value, sizeof(T));
}

template <class T>
T get(std::span<const std::byte> in, std::size_t at) noexcept {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

/// A heartbeat's loss as it travels: the bits of the f64, all zero for no
/// loss. A loss of +0.0 travels as −0.0, whose bits are not all zero.
inline std::uint64_t loss_bits(std::optional<double> loss) noexcept {
  if (!loss) return 0;
  return std::bit_cast<std::uint64_t>(*loss == 0.0 ? -0.0 : *loss);
}

/// The loss in those bits, as sent: NaN, infinite and negative values are
/// the receiver's to judge (the syncer ignores and counts non-finite ones).
inline std::optional<double> loss_of(std::uint64_t bits) noexcept {
  if (bits == 0) return std::nullopt;
  return std::bit_cast<double>(bits);
}

}  // namespace detail

/// Writes the header of `h` into `out`, with the CRC-32C of `payload`.
/// Cost: one pass over the payload for its checksum.
inline void encode_header(const message_header& h, std::span<const std::byte> payload,
                          std::span<std::byte, header_size> out) noexcept {
  using detail::put;
  std::memset(out.data(), 0, header_size);
  std::memcpy(out.data() + offset::magic, magic.data(), magic.size());
  put<std::uint16_t>(out, offset::version, protocol_version);
  put<std::uint8_t>(out, offset::kind, static_cast<std::uint8_t>(h.kind));
  put<std::uint8_t>(out, offset::codec, static_cast<std::uint8_t>(h.codec));
  put<std::uint8_t>(out, offset::status, static_cast<std::uint8_t>(h.status));
  put<std::uint8_t>(out, offset::flags, h.flags);
  put<std::uint8_t>(out, offset::lock_step, h.lock_step);
  put<std::uint8_t>(out, offset::reason, h.reason);
  put<std::uint32_t>(out, offset::learner, h.learner);
  put<std::uint32_t>(out, offset::incarnation, h.incarnation);
  put<std::uint32_t>(out, offset::fragment, h.fragment);
  put<std::uint32_t>(out, offset::fragment_count, h.fragment_count);
  put<std::uint32_t>(out, offset::sync_period, h.sync_period);
  put<std::uint32_t>(out, offset::overlap, h.overlap);
  put<std::uint32_t>(out, offset::block, h.block);
  put<std::uint64_t>(out, offset::sequence, h.sequence);
  put<std::uint64_t>(out, offset::answers, h.answers);
  put<std::uint64_t>(out, offset::base_revision, h.base_revision);
  put<std::uint64_t>(out, offset::revision, h.revision);
  put<std::uint64_t>(out, offset::tokens, from_syncer(h.kind) ? h.epoch : h.tokens);
  put<std::uint64_t>(out, offset::steps, h.steps);
  put<std::uint64_t>(out, offset::element_count, h.element_count);
  put<std::uint64_t>(out, offset::layout, h.layout);
  put<std::int64_t>(out, offset::step_time_ns, h.step_time_ns);
  put<std::int64_t>(out, offset::transfer_ns, h.transfer_ns);
  if (h.kind == message_kind::heartbeat)
    put<std::uint64_t>(out, offset::loss, detail::loss_bits(h.loss));
  else
    put<std::int64_t>(out, offset::hold_ns, h.hold_ns);
  put<double>(out, offset::mixing, h.mixing);
  put<std::uint32_t>(out, offset::payload_crc, crc32c(payload));
  put<std::uint32_t>(out, offset::header_crc, crc32c(std::span<const std::byte>(out.data(), offset::header_crc)));
}

inline std::array<std::byte, header_size> encode_header(const message_header& h,
                                                        std::span<const std::byte> payload) noexcept {
  std::array<std::byte, header_size> out;
  encode_header(h, payload, out);
  return out;
}

/// A decoded header, or why it was refused.
struct decoded_header {
  wire_error error = wire_error::none;
  message_header header;
  std::uint32_t payload_crc = 0;
  std::uint64_t payload_bytes = 0;  ///< what the payload frame must hold
};

/// Decodes and validates a header frame. `max_payload_bytes` bounds what a
/// payload may announce. Checks, in order: length (`truncated`), magic,
/// version, header CRC (`bad_checksum`), every enumerated field, status (0
/// except on updates), flags (only those of the kind), reason, codec (one
/// the kind carries) and block (in [1, `max_codec_block`] with a
/// block-scaled codec, else 0), mixing finite in [0, 1) (`bad_header`), and
/// the payload size the header implies (`oversized`). A heartbeat's loss is passed on unchecked:
/// a bad value costs the learner its loss report, not its heartbeat.
inline decoded_header decode_header(std::span<const std::byte> frame, std::uint64_t max_payload_bytes) noexcept {
  using detail::get;
  decoded_header d;
  if (frame.size() != header_size) return d.error = wire_error::truncated, d;
  if (std::memcmp(frame.data(), magic.data(), magic.size()) != 0) return d.error = wire_error::bad_magic, d;
  if (get<std::uint16_t>(frame, offset::version) != protocol_version) return d.error = wire_error::bad_version, d;
  if (get<std::uint32_t>(frame, offset::header_crc) != crc32c(frame.first(offset::header_crc)))
    return d.error = wire_error::bad_checksum, d;

  const auto kind = get<std::uint8_t>(frame, offset::kind);
  const auto codec = get<std::uint8_t>(frame, offset::codec);
  const auto status = get<std::uint8_t>(frame, offset::status);
  auto& h = d.header;
  h.flags = get<std::uint8_t>(frame, offset::flags);
  h.lock_step = get<std::uint8_t>(frame, offset::lock_step);
  h.reason = get<std::uint8_t>(frame, offset::reason);
  h.mixing = get<double>(frame, offset::mixing);
  const bool known_kind =
      kind >= static_cast<std::uint8_t>(message_kind::join) && kind <= static_cast<std::uint8_t>(message_kind::end);
  const bool reason_ok =
      kind == static_cast<std::uint8_t>(message_kind::reject) ? h.reason < reject_reason_count : h.reason == 0;
  // Status only on updates, each flag only on the kind it belongs to.
  const bool status_ok = kind == static_cast<std::uint8_t>(message_kind::update)
                             ? status <= static_cast<std::uint8_t>(update_status::resync)
                             : status == 0;
  const std::uint8_t allowed_flags = kind == static_cast<std::uint8_t>(message_kind::contribution) ? final_contribution
                                     : kind == static_cast<std::uint8_t>(message_kind::welcome)    ? state_wanted
                                                                                                   : 0;
  if (!known_kind || codec > static_cast<std::uint8_t>(last_codec) || !status_ok || (h.flags & ~allowed_flags) != 0 ||
      h.lock_step > 1 || !reason_ok || !std::isfinite(h.mixing) || h.mixing < 0.0 || h.mixing >= 1.0)
    return d.error = wire_error::bad_header, d;
  h.kind = static_cast<message_kind>(kind);
  h.codec = static_cast<codec_id>(codec);
  h.status = static_cast<update_status>(status);
  h.block = get<std::uint32_t>(frame, offset::block);
  // Layouts are bytes; a model's initial state is full precision; outer
  // gradients and global fragments are numbers in any codec; a welcome names
  // the codec the syncer asks contributions to use; other kinds carry none.
  const bool full = h.codec == codec_id::f32 || h.codec == codec_id::f64;
  const bool numbers = full || h.codec >= codec_id::bf16;
  const bool codec_fits = h.kind == message_kind::layout    ? h.codec == codec_id::bytes
                          : h.kind == message_kind::state   ? full
                          : carries_payload(h.kind)         ? numbers
                          : h.kind == message_kind::welcome ? numbers || h.codec == codec_id::none
                                                            : h.codec == codec_id::none;
  const bool block_fits = block_scaled(h.codec) ? h.block >= 1 && h.block <= max_codec_block : h.block == 0;
  if (!codec_fits || !block_fits) return d.error = wire_error::bad_header, d;

  h.learner = get<std::uint32_t>(frame, offset::learner);
  h.incarnation = get<std::uint32_t>(frame, offset::incarnation);
  h.fragment = get<std::uint32_t>(frame, offset::fragment);
  h.fragment_count = get<std::uint32_t>(frame, offset::fragment_count);
  h.sync_period = get<std::uint32_t>(frame, offset::sync_period);
  h.overlap = get<std::uint32_t>(frame, offset::overlap);
  h.sequence = get<std::uint64_t>(frame, offset::sequence);
  h.answers = get<std::uint64_t>(frame, offset::answers);
  h.base_revision = get<std::uint64_t>(frame, offset::base_revision);
  h.revision = get<std::uint64_t>(frame, offset::revision);
  (from_syncer(h.kind) ? h.epoch : h.tokens) = get<std::uint64_t>(frame, offset::tokens);
  h.steps = get<std::uint64_t>(frame, offset::steps);
  h.element_count = get<std::uint64_t>(frame, offset::element_count);
  h.layout = get<std::uint64_t>(frame, offset::layout);
  h.step_time_ns = get<std::int64_t>(frame, offset::step_time_ns);
  h.transfer_ns = get<std::int64_t>(frame, offset::transfer_ns);
  if (h.kind == message_kind::heartbeat)
    h.loss = detail::loss_of(get<std::uint64_t>(frame, offset::loss));
  else
    h.hold_ns = get<std::int64_t>(frame, offset::hold_ns);
  d.payload_crc = get<std::uint32_t>(frame, offset::payload_crc);

  if (carries_payload(h.kind)) {
    if (h.element_count > max_element_count) return d.error = wire_error::oversized, d;
    d.payload_bytes = payload_size(h.codec, h.element_count, h.block);
    if (d.payload_bytes > max_payload_bytes) return d.error = wire_error::oversized, d;
  }
  return d;
}

/// The payload of a `layout` message: for each tensor in order, its name's
/// length (u16) and bytes, its element count (u64) and role (u8).
inline std::vector<std::byte> encode_layout(const parameter_layout& layout) {
  std::vector<std::byte> out;
  auto put_bytes = [&out](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  for (const auto& t : layout.tensors()) {
    const auto length = static_cast<std::uint16_t>(t.name.size());
    const auto size = static_cast<std::uint64_t>(t.size);
    const auto role = static_cast<std::uint8_t>(t.role);
    put_bytes(&length, 2);
    put_bytes(t.name.data(), t.name.size());
    put_bytes(&size, 8);
    put_bytes(&role, 1);
  }
  return out;
}

/// Parses a `layout` payload; nothing if it is malformed (truncated, an empty
/// or duplicate name, a zero size, an unknown role, more than
/// `max_elements` elements in all, or names longer than 1024 bytes).
inline std::optional<parameter_layout> decode_layout(std::span<const std::byte> in, std::uint64_t max_elements) {
  parameter_layout layout;
  std::uint64_t total = 0;
  std::size_t at = 0;
  auto take = [&](void* out, std::size_t n) {
    if (in.size() - at < n) return false;
    std::memcpy(out, in.data() + at, n);
    at += n;
    return true;
  };
  while (at < in.size()) {
    std::uint16_t length = 0;
    if (!take(&length, 2) || length == 0 || length > 1024) return std::nullopt;
    std::string name(length, '\0');
    std::uint64_t size = 0;
    std::uint8_t role = 0;
    if (!take(name.data(), length) || !take(&size, 8) || !take(&role, 1)) return std::nullopt;
    if (size == 0 || size > max_elements - total || role > static_cast<std::uint8_t>(tensor_role::embedding) ||
        layout.find(name) != nullptr)
      return std::nullopt;
    total += size;
    layout.add(std::move(name), static_cast<std::size_t>(size), static_cast<tensor_role>(role));
  }
  if (layout.tensor_count() == 0) return std::nullopt;
  return layout;
}

/// Checks a payload frame against its decoded header: exact size
/// (`truncated`), then CRC-32C (`bad_checksum`).
inline wire_error check_payload(const decoded_header& d, std::span<const std::byte> payload) noexcept {
  if (payload.size() != d.payload_bytes) return wire_error::truncated;
  if (crc32c(payload) != d.payload_crc) return wire_error::bad_checksum;
  return wire_error::none;
}

}  // namespace diloco::wire
