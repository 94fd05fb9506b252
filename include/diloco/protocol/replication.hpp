// The replication stream's records (docs/protocol.md, "Replication"): what a
// primary syncer sends its standbys — every checkpoint it writes and every
// contribution it journals — and what they answer. The format only; the
// standby's side is `diloco::replica` (runtime/replication.hpp), the sockets
// `diloco::zeromq::replication_source` and `replication_follower`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "diloco/error.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/serialize.hpp"

namespace diloco {

/// The kinds of replication records (docs/protocol.md, "Replication").
enum class replication_kind : std::uint8_t {
  follow = 1,    ///< standby → primary: send me your state, then everything you write
  snapshot = 2,  ///< primary → standby: a checkpoint body (`checkpoint_body`); the journal starts empty
  journal = 3,   ///< primary → standby: one journal record (wire header and payload)
  ack = 4,       ///< standby → primary: every record up to `sequence` is written
  dropped = 5,   ///< primary → standby: you fell behind and were dropped; follow again
};

/// One record: a 40-byte header (little-endian) and a body.
///
/// | offset | type | field |
/// |--:|---|---|
/// | 0 | 4 bytes | magic `DLRS` |
/// | 4 | u16 | version (1) |
/// | 6 | u8 | kind |
/// | 7 | u8 | 0 |
/// | 8 | u64 | epoch of the primary's leadership |
/// | 16 | u64 | sequence |
/// | 24 | u64 | body bytes |
/// | 32 | u32 | CRC-32C of the body |
/// | 36 | u32 | CRC-32C of bytes 0–35 |
struct replication_record {
  static constexpr std::size_t header_bytes = 40;
  static constexpr std::uint16_t version = 1;

  replication_kind kind = replication_kind::follow;
  std::uint64_t epoch = 0;
  std::uint64_t sequence = 0;
  std::string body;

  /// The record as it travels.
  std::string encode() const {
    std::string out(header_bytes, '\0');
    out += body;
    seal(out, kind, epoch, sequence);
    return out;
  }

  /// The journal record of contribution `m` as it travels, built in place
  /// (one copy of the payload): what `encode` gives for a record of kind
  /// `journal` whose body is `journal_body(m)`.
  static std::string encode_journal(const message& m, std::uint64_t epoch, std::uint64_t sequence) {
    const std::span<const std::byte> payload = m.payload.bytes();
    std::string out;
    out.reserve(header_bytes + wire::header_size + payload.size());
    out.resize(header_bytes);
    const auto header = wire::encode_header(m.header, payload);
    out.append(reinterpret_cast<const char*>(header.data()), header.size());
    out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
    seal(out, replication_kind::journal, epoch, sequence);
    return out;
  }

  /// The record in `bytes`, or a `corrupt_state` naming why it is not one:
  /// shorter than its header, wrong magic, version or header CRC, an unknown
  /// kind, a body over `max_body_bytes`, a body of another length than the
  /// header says, or a wrong body CRC.
  static replication_record decode(std::string_view bytes, std::uint64_t max_body_bytes) {
    const auto v = decode_view(bytes, max_body_bytes);
    return {v.kind, v.epoch, v.sequence, std::string(v.body)};
  }

  /// A record read in place: its body still in the bytes it came in.
  struct view {
    replication_kind kind;
    std::uint64_t epoch, sequence;
    std::string_view body;
  };

  /// The record seen as a view of itself.
  operator view() const noexcept { return {kind, epoch, sequence, body}; }  // NOLINT: a record is a view's source

  /// As `decode`, without copying the body.
  static view decode_view(std::string_view bytes, std::uint64_t max_body_bytes) {
    if (bytes.size() < header_bytes) refuse("shorter than its header");
    if (bytes.substr(0, 4) != "DLRS") refuse("wrong magic");
    if (crc32c(as_bytes(bytes.substr(0, 36))) != get<std::uint32_t>(bytes, 36)) refuse("wrong header CRC");
    if (get<std::uint16_t>(bytes, 4) != version) refuse("unknown version");
    const auto kind = static_cast<std::uint8_t>(bytes[6]);
    if (kind < 1 || kind > 5 || bytes[7] != 0) refuse("unknown kind");
    const auto size = get<std::uint64_t>(bytes, 24);
    if (size > max_body_bytes) refuse("body of " + std::to_string(size) + " bytes over the limit");
    if (size != bytes.size() - header_bytes) refuse("body length differs from its header");
    const auto body = bytes.substr(header_bytes);
    if (crc32c(as_bytes(body)) != get<std::uint32_t>(bytes, 32)) refuse("wrong body CRC");
    return {static_cast<replication_kind>(kind), get<std::uint64_t>(bytes, 8), get<std::uint64_t>(bytes, 16), body};
  }

  /// A journal record's body: the message as the journal stores it.
  static std::string journal_body(const message& m) {
    const std::span<const std::byte> payload = m.payload.bytes();
    const auto header = wire::encode_header(m.header, payload);
    std::string out(reinterpret_cast<const char*>(header.data()), header.size());
    out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
    return out;
  }

 private:
  /// Writes the header into the first `header_bytes` of `out`, the body after them.
  static void seal(std::string& out, replication_kind kind, std::uint64_t epoch, std::uint64_t sequence) {
    const auto body = std::string_view(out).substr(header_bytes);
    std::memcpy(out.data(), "DLRS", 4);
    put<std::uint16_t>(out, 4, version);
    out[6] = static_cast<char>(kind);
    out[7] = 0;
    put<std::uint64_t>(out, 8, epoch);
    put<std::uint64_t>(out, 16, sequence);
    put<std::uint64_t>(out, 24, body.size());
    put<std::uint32_t>(out, 32, crc32c(as_bytes(body)));
    put<std::uint32_t>(out, 36, crc32c(as_bytes(std::string_view(out).substr(0, 36))));
  }

  static std::span<const std::byte> as_bytes(std::string_view s) noexcept {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
  }
  template <class U>
  static void put(std::string& s, std::size_t at, U v) noexcept {
    std::memcpy(s.data() + at, &v, sizeof v);  // little-endian hosts (docs/protocol.md)
  }
  template <class U>
  static U get(std::string_view s, std::size_t at) noexcept {
    U v;
    std::memcpy(&v, s.data() + at, sizeof v);
    return v;
  }
  [[noreturn]] static void refuse(const std::string& why) {
    throw corrupt_state("diloco: replication record refused: " + why);
  }
};

}  // namespace diloco
